package app

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"meshtray/a2a/delegate"
	"meshtray/files"
	"meshtray/mesh"
	"meshtray/nodes"
)

// The typed methods of Client: one per route of the control API (the route
// table is controlRoutes, delegationRoutes, pairRoutes, uiRoutes and the
// node surface in routes), each with the request and answer types of its
// handler. The CLI (app/cli) and the tray use these and nothing else; a
// new route gets its method here. Errors: ErrNotRunning when no node
// answers, *APIError for an answer other than 2xx.

// Status is GET /status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	return st, c.Do(ctx, http.MethodGet, "/status", nil, &st)
}

// A2AStatus is GET /a2a/status: whether the Agent Card is published.
func (c *Client) A2AStatus(ctx context.Context) (A2AStatus, error) {
	var st A2AStatus
	return st, c.Do(ctx, http.MethodGet, "/a2a/status", nil, &st)
}

// SetA2A is POST /a2a/status {enabled}: publish or withdraw the Agent Card.
func (c *Client) SetA2A(ctx context.Context, enabled bool) (A2AStatus, error) {
	var st A2AStatus
	return st, c.Do(ctx, http.MethodPost, "/a2a/status", A2AUpdate{Enabled: &enabled, Where: c.Where}, &st)
}

// Config is GET /config: the runtime settings.
func (c *Client) Config(ctx context.Context) (Settings, error) {
	var st Settings
	return st, c.Do(ctx, http.MethodGet, "/config", nil, &st)
}

// UpdateConfig is POST /config (owner only): LAN reachability and
// capability policies; it returns the settings as now kept.
func (c *Client) UpdateConfig(ctx context.Context, u ConfigUpdate) (Settings, error) {
	if u.Where == "" {
		u.Where = c.Where
	}
	var st Settings
	return st, c.Do(ctx, http.MethodPost, "/config", u, &st)
}

// Approvals is GET /approvals: the requests waiting for the owner.
func (c *Client) Approvals(ctx context.Context) ([]Approval, error) {
	var as []Approval
	return as, c.Do(ctx, http.MethodGet, "/approvals", nil, &as)
}

// Decide is POST /approvals/{id} (owner only): the owner's decision.
func (c *Client) Decide(ctx context.Context, id string, d ApprovalDecision) error {
	if d.Where == "" {
		d.Where = c.Where // the audit trail says where the owner decided
	}
	return c.Do(ctx, http.MethodPost, "/approvals/"+url.PathEscape(id), d, nil)
}

// ApprovalsOn is GET /approvals/on/{device} (owner only): the requests
// waiting on a paired device that gave this one a grant with the approve
// scope (device: its name, a device ID prefix of 7+ characters, or its ID).
func (c *Client) ApprovalsOn(ctx context.Context, device string) (RemoteApprovals, error) {
	var ra RemoteApprovals
	return ra, c.Do(ctx, http.MethodGet, "/approvals/on/"+url.PathEscape(device), nil, &ra)
}

// DecideOn is POST /approvals/on/{device}/{id} (owner only): decide a
// request waiting on that device, recorded there as decided on this one.
func (c *Client) DecideOn(ctx context.Context, device, id string, d RemoteDecision) error {
	return c.Do(ctx, http.MethodPost, "/approvals/on/"+url.PathEscape(device)+"/"+url.PathEscape(id), d, nil)
}

// Devices is GET /nodes/devices: the grants this device issued and holds.
func (c *Client) Devices(ctx context.Context) (Devices, error) {
	var d Devices
	return d, c.Do(ctx, http.MethodGet, "/nodes/devices", nil, &d)
}

// CreateGrant is POST /nodes/devices (owner only): mint a grant; its token
// is in the answer, once.
func (c *Client) CreateGrant(ctx context.Context, req GrantRequest) (GrantToken, error) {
	if req.Where == "" {
		req.Where = c.Where
	}
	var tok GrantToken
	return tok, c.Do(ctx, http.MethodPost, "/nodes/devices", req, &tok)
}

// UpdateGrant is POST /nodes/devices/{id} (owner only): pause, resume,
// revoke or rotate a grant, or set its approval policy. Only rotate
// answers a token.
func (c *Client) UpdateGrant(ctx context.Context, id string, u GrantUpdate) (GrantToken, error) {
	if u.Where == "" {
		u.Where = c.Where
	}
	var tok GrantToken
	return tok, c.Do(ctx, http.MethodPost, "/nodes/devices/"+url.PathEscape(id), u, &tok)
}

// Peers is GET /mesh/peers: the devices discovery knows.
func (c *Client) Peers(ctx context.Context) ([]mesh.Peer, error) {
	var ps []mesh.Peer
	return ps, c.Do(ctx, http.MethodGet, "/mesh/peers", nil, &ps)
}

// AddPeer is POST /mesh/peers {url}: a device added by address, probed
// first.
func (c *Client) AddPeer(ctx context.Context, rawURL string) (mesh.Peer, error) {
	var p mesh.Peer
	return p, c.Do(ctx, http.MethodPost, "/mesh/peers", map[string]string{"url": rawURL}, &p)
}

// RemovePeer is DELETE /mesh/peers/{id}: forget a device added by hand.
func (c *Client) RemovePeer(ctx context.Context, id string) error {
	return c.Do(ctx, http.MethodDelete, "/mesh/peers/"+url.PathEscape(id), nil, nil)
}

// Manifest is GET /nodes/manifest: this node's capabilities.
func (c *Client) Manifest(ctx context.Context) (nodes.Manifest, error) {
	var m nodes.Manifest
	return m, c.Do(ctx, http.MethodGet, "/nodes/manifest", nil, &m)
}

// PeerManifest is GET /ui/peers/{id}/manifest: a paired peer's manifest,
// fetched by the node with the grant the peer gave it.
func (c *Client) PeerManifest(ctx context.Context, id string) (nodes.Manifest, error) {
	var m nodes.Manifest
	return m, c.Do(ctx, http.MethodGet, "/ui/peers/"+url.PathEscape(id)+"/manifest", nil, &m)
}

// OpenUI is POST /ui/open: queue a window for the UI process.
func (c *Client) OpenUI(ctx context.Context, r UIRequest) error {
	return c.Do(ctx, http.MethodPost, "/ui/open", r, nil)
}

// PendingUI is GET /ui/open: the window requests not taken yet.
func (c *Client) PendingUI(ctx context.Context) ([]UIRequest, error) {
	var rs []UIRequest
	return rs, c.Do(ctx, http.MethodGet, "/ui/open", nil, &rs)
}

// TakeUI is POST /ui/take: the pending window requests, and the queue
// emptied.
func (c *Client) TakeUI(ctx context.Context) ([]UIRequest, error) {
	var rs []UIRequest
	return rs, c.Do(ctx, http.MethodPost, "/ui/take", nil, &rs)
}

// StartPairing is POST /pair/sessions (owner only): a one-time code and the
// URLs a device claims it at.
func (c *Client) StartPairing(ctx context.Context) (PairingSession, error) {
	var ps PairingSession
	return ps, c.Do(ctx, http.MethodPost, "/pair/sessions", nil, &ps)
}

// PairingBases is GET /pair/bases (owner only): the base URLs a pairing
// code can be claimed at now.
func (c *Client) PairingBases(ctx context.Context) (PairingBases, error) {
	var b PairingBases
	return b, c.Do(ctx, http.MethodGet, "/pair/bases", nil, &b)
}

// Join is POST /pair/join (owner only): claim another device's code. The
// stream carries the SAS as soon as the claim is accepted, then the
// outcome or an error (JoinEvent).
func (c *Client) Join(ctx context.Context, req JoinRequest) (*Stream[JoinEvent], error) {
	return openStream[JoinEvent](ctx, c, http.MethodPost, "/pair/join", req)
}

// Agents is GET /a2a/agents[?refresh=1]: the agents this device delegates
// to; refresh fetches and verifies every card first.
func (c *Client) Agents(ctx context.Context, refresh bool) ([]delegate.Agent, error) {
	path := "/a2a/agents"
	if refresh {
		path += "?refresh=1"
	}
	var as []delegate.Agent
	return as, c.Do(ctx, http.MethodGet, path, nil, &as)
}

// AddAgent is POST /a2a/agents: an agent added by URL (its card verified
// first).
func (c *Client) AddAgent(ctx context.Context, req AgentRequest) (delegate.Agent, error) {
	var a delegate.Agent
	return a, c.Do(ctx, http.MethodPost, "/a2a/agents", req, &a)
}

// UpdateAgent is POST /a2a/agents/{id}: enable, disable or refresh.
func (c *Client) UpdateAgent(ctx context.Context, id string, u AgentUpdate) (delegate.Agent, error) {
	var a delegate.Agent
	return a, c.Do(ctx, http.MethodPost, "/a2a/agents/"+url.PathEscape(id), u, &a)
}

// RemoveAgent is DELETE /a2a/agents/{id}.
func (c *Client) RemoveAgent(ctx context.Context, id string) error {
	return c.Do(ctx, http.MethodDelete, "/a2a/agents/"+url.PathEscape(id), nil, nil)
}

// Outbound is GET /a2a/outbound: the tasks this device delegated.
func (c *Client) Outbound(ctx context.Context) ([]delegate.OutboundTask, error) {
	var ts []delegate.OutboundTask
	return ts, c.Do(ctx, http.MethodGet, "/a2a/outbound", nil, &ts)
}

// OutboundTask is GET /a2a/outbound/{id}: one delegated task, whole.
func (c *Client) OutboundTask(ctx context.Context, id string) (delegate.OutboundTask, error) {
	var t delegate.OutboundTask
	return t, c.Do(ctx, http.MethodGet, "/a2a/outbound/"+url.PathEscape(id), nil, &t)
}

// Watch is GET /a2a/outbound/{id}?watch=1: a delegated task's events until
// it settles.
func (c *Client) Watch(ctx context.Context, id string) (*Stream[delegate.OutboundEvent], error) {
	return openStream[delegate.OutboundEvent](ctx, c, http.MethodGet, "/a2a/outbound/"+url.PathEscape(id)+"?watch=1", nil)
}

// Delegate is POST /a2a/outbound detached: the task once the agent took it
// (req.Detach is set); the node goes on following it.
func (c *Client) Delegate(ctx context.Context, req DelegateRequest) (delegate.OutboundTask, error) {
	req.Detach = true
	var t delegate.OutboundTask
	return t, c.Do(ctx, http.MethodPost, "/a2a/outbound", req, &t)
}

// DelegateWatch is POST /a2a/outbound followed: the task's events until it
// settles (req.Detach is cleared).
func (c *Client) DelegateWatch(ctx context.Context, req DelegateRequest) (*Stream[delegate.OutboundEvent], error) {
	req.Detach = false
	return openStream[delegate.OutboundEvent](ctx, c, http.MethodPost, "/a2a/outbound", req)
}

// Answer is POST /a2a/outbound/{id}/answer detached: the task once the
// agent took the answer (req.Detach is set).
func (c *Client) Answer(ctx context.Context, id string, req AnswerRequest) (delegate.OutboundTask, error) {
	req.Detach = true
	var t delegate.OutboundTask
	return t, c.Do(ctx, http.MethodPost, "/a2a/outbound/"+url.PathEscape(id)+"/answer", req, &t)
}

// AnswerWatch is POST /a2a/outbound/{id}/answer followed: the task's
// events until it settles again (req.Detach is cleared).
func (c *Client) AnswerWatch(ctx context.Context, id string, req AnswerRequest) (*Stream[delegate.OutboundEvent], error) {
	req.Detach = false
	return openStream[delegate.OutboundEvent](ctx, c, http.MethodPost, "/a2a/outbound/"+url.PathEscape(id)+"/answer", req)
}

// Cancel is POST /a2a/outbound/{id}/cancel: cancel a delegated task at its
// agent.
func (c *Client) Cancel(ctx context.Context, id string) (delegate.OutboundTask, error) {
	var t delegate.OutboundTask
	return t, c.Do(ctx, http.MethodPost, "/a2a/outbound/"+url.PathEscape(id)+"/cancel", nil, &t)
}

// Forward is GET /a2a/forward: the forward executor's configuration.
func (c *Client) Forward(ctx context.Context) (ForwardView, error) {
	var v ForwardView
	return v, c.Do(ctx, http.MethodGet, "/a2a/forward", nil, &v)
}

// CheckForward is POST /a2a/forward/check: the forward agent's card
// fetched and verified now.
func (c *Client) CheckForward(ctx context.Context) (ForwardView, error) {
	var v ForwardView
	return v, c.Do(ctx, http.MethodPost, "/a2a/forward/check", nil, &v)
}

// SetForwardToken is POST /a2a/forward {token} (owner only): the forward
// agent's bearer token, kept in the keychain.
func (c *Client) SetForwardToken(ctx context.Context, token string) error {
	return c.Do(ctx, http.MethodPost, "/a2a/forward", map[string]string{"token": token}, nil)
}

// ClearForwardToken is DELETE /a2a/forward (owner only).
func (c *Client) ClearForwardToken(ctx context.Context) error {
	return c.Do(ctx, http.MethodDelete, "/a2a/forward", nil, nil)
}

// AuditEntries is GET /audit (owner only): the audit entries q selects,
// oldest first.
func (c *Client) AuditEntries(ctx context.Context, q AuditQuery) ([]AuditEntry, error) {
	var es []AuditEntry
	return es, c.Do(ctx, http.MethodGet, "/audit"+q.values(), nil, &es)
}

// FollowAudit is GET /audit/follow (owner only): the entries q selects,
// then each new one as it is written, as an NDJSON stream until ctx ends
// or the node stops (io.EOF from Next).
func (c *Client) FollowAudit(ctx context.Context, q AuditQuery) (*Stream[AuditEntry], error) {
	return openStream[AuditEntry](ctx, c, http.MethodGet, "/audit/follow"+q.values(), nil)
}

// VerifyAudit is GET /audit/verify (owner only): the audit trail's hash
// chain recomputed; OK false names the first broken entry.
func (c *Client) VerifyAudit(ctx context.Context) (AuditVerify, error) {
	var v AuditVerify
	return v, c.Do(ctx, http.MethodGet, "/audit/verify", nil, &v)
}

// Events streams change notices from GET /events (server-sent events)
// until ctx ends or the connection drops; each call of fn gets the changed
// types.
func (c *Client) Events(ctx context.Context, fn func([]EventType)) error {
	body, err := c.stream(ctx, http.MethodGet, "/events", nil, "text/event-stream")
	if err != nil {
		return err
	}
	defer body.Close()
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Types []EventType `json:"types"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return fmt.Errorf("events: %w", err)
		}
		fn(ev.Types)
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return err
	}
	return ctx.Err()
}

// stream is the one helper of the streaming routes (NDJSON progress
// streams, the server-sent events of /events): the request sent with
// accept, the open body of a 2xx answer. Another transport failure than a
// refused connection (a reset, a node that stopped) while ctx lives is
// ErrNotRunning too: nothing else makes a stream of the local node fail
// before it starts.
func (c *Client) stream(ctx context.Context, method, path string, in any, accept string) (io.ReadCloser, error) {
	resp, err := c.send(ctx, method, path, in, accept)
	if err != nil {
		var api *APIError
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.As(err, &api), errors.Is(err, ErrNotRunning):
			return nil, err
		}
		return nil, fmt.Errorf("%w (%v; state dir %s)", ErrNotRunning, err, c.StateDir)
	}
	return resp.Body, nil
}

// Stream reads the JSON values of an NDJSON answer (application/x-ndjson,
// one value a line) one at a time. Close it when done.
type Stream[T any] struct {
	body io.ReadCloser
	dec  *json.Decoder
}

func openStream[T any](ctx context.Context, c *Client, method, path string, in any) (*Stream[T], error) {
	body, err := c.stream(ctx, method, path, in, "application/x-ndjson")
	if err != nil {
		return nil, err
	}
	return &Stream[T]{body: body, dec: json.NewDecoder(body)}, nil
}

// Next returns the next value; io.EOF when the node ended the stream, the
// read error when it stopped answering or ctx ended.
func (s *Stream[T]) Next() (T, error) {
	var v T
	err := s.dec.Decode(&v)
	return v, err
}

// Close ends the stream.
func (s *Stream[T]) Close() error { return s.body.Close() }

// ErrNodeLost: the local node stopped answering in the middle of a send
// (killed, crashed, stopped): the transfer did not finish.
var ErrNodeLost = errors.New("the local meshtray node stopped during the transfer")

// SendFiles is POST /files/send (owner only): the files and folders at
// paths (absolute; the node reads them) to the paired device named device
// (its name, or its short or full device ID), followed to the end. onEvent
// (may be nil) gets every state and progress line; the result line is
// returned. An error is a refusal before anything was sent
// (*NothingToSendError: no file left to send, with what was left out;
// *APIError: 404 no such device, 400 a path that cannot be read, 409 a device reached
// only through its browser page, 502 the device unreachable), or
// ErrNodeLost when the stream is cut before its result; a transfer that ended otherwise than
// completed is a SendResult with that State and no error.
func (c *Client) SendFiles(ctx context.Context, device string, paths []string, onEvent func(SendEvent)) (SendResult, error) {
	s, err := openStream[SendEvent](ctx, c, http.MethodPost, "/files/send", SendRequest{Device: device, Paths: paths})
	if err != nil {
		var ae *APIError
		if errors.As(err, &ae) && ae.Status == http.StatusBadRequest {
			var nothing NothingToSendError
			var body struct {
				Skipped *files.NotSent `json:"skipped"`
				Refused *files.NotSent `json:"refused"`
			}
			if json.Unmarshal(ae.body, &body) == nil && (body.Skipped != nil || body.Refused != nil) {
				nothing.Msg, nothing.Skipped, nothing.Refused = ae.Message, body.Skipped, body.Refused
				return SendResult{}, &nothing
			}
		}
		return SendResult{}, err
	}
	defer s.Close()
	for {
		ev, err := s.Next()
		if err != nil {
			if ctx.Err() == nil {
				// The stream opened, so the node took the send: losing
				// it now is the node stopping under it.
				err = fmt.Errorf("%w (%v)", ErrNodeLost, err)
			}
			return SendResult{}, err
		}
		if ev.Type == SendEventResult && ev.Result != nil {
			return *ev.Result, nil
		}
		if onEvent != nil {
			onEvent(ev)
		}
	}
}

// ReceivedFiles is GET /files/received: the transfers this device received
// recently (at most 32, newest first), each with what was saved where.
func (c *Client) ReceivedFiles(ctx context.Context) ([]ReceivedTransfer, error) {
	var rs []ReceivedTransfer
	return rs, c.Do(ctx, http.MethodGet, "/files/received", nil, &rs)
}

// IncomingFiles is GET /files/incoming: the transfers this device is
// receiving now.
func (c *Client) IncomingFiles(ctx context.Context) ([]IncomingTransfer, error) {
	var ts []IncomingTransfer
	return ts, c.Do(ctx, http.MethodGet, "/files/incoming", nil, &ts)
}

// CancelIncoming is POST /files/incoming/{task}/cancel: end a transfer
// being received (its partial files removed).
func (c *Client) CancelIncoming(ctx context.Context, task string) error {
	return c.Do(ctx, http.MethodPost, "/files/incoming/"+url.PathEscape(task)+"/cancel", nil, nil)
}
