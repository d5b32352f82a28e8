package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"meshtray/egress"
	"meshtray/jsonout"
	"meshtray/pairing"
	"meshtray/store"
	"meshtray/textsafe"
)

// Approving from another device: a grant with pairing.ScopeApprove lists the
// requests waiting for this device's owner and decides them, on the peer
// listeners (the phone page; another meshtray's `approve --on`):
//
//	GET  /remote/approvals         -> RemoteApprovals
//	GET  /remote/approvals/events  -> SSE: `event: approvals` / `data: RemoteApprovals`,
//	                                  at once and after every change
//	POST /remote/approvals/{id}    RemoteDecision -> 204
//
// The rules, checked here for every decision:
//   - no device decides a request its own grant made (or any grant of the
//     same device ID): 403;
//   - a pairing request may be denied but not approved remotely: 403. An
//     approval mints a grant for a new device, and a phone that is lost or
//     stolen (or whose token leaked) could otherwise pair the thief's
//     devices, which would keep their access after the phone's grant is
//     revoked. Adding a device stays at the device, where the owner also
//     compares the verification code on both screens;
//   - "always allow" only where the owner's popup offers it (a delegation
//     or files from a grant): 400 elsewhere;
//   - the decision is Node.Decide's, recorded as made on that device:
//     Where store.WhereDevice (a grant with a device identity, i.e. a
//     meshtray) or store.WherePhone (a grant without one: the phone page),
//     By the device's short ID, or the grant's ID when it has none.
//
// The feed is bounded: at most maxFeedsPerGrant streams per grant (a new
// one ends the grant's oldest) and maxFeeds in all (then 503), each ended
// after feedLifetime (the page reconnects), with a keep-alive comment every
// feedKeepAlive.

// RemoteApprovals is what a device holding the approve scope reads: the
// device it approves for, the server's clock (the countdown to each
// Expires is counted from Now, whatever the phone's clock says), and the
// pending requests.
type RemoteApprovals struct {
	Device    string           `json:"device"`    // this device's name
	DeviceID  string           `json:"device_id"` // this device's ID
	Now       time.Time        `json:"now"`
	Approvals []RemoteApproval `json:"approvals"`
}

// RemoteApproval is one pending request as a remote approver sees it: the
// popup's details (who, via what, summary and detail, the requested scopes,
// Created and Expires) without the pairing verification code, and what the
// caller may do with it.
type RemoteApproval struct {
	Approval
	// Own: the caller's own grant (or device) made this request; it cannot
	// decide it.
	Own bool `json:"own"`
	// CanApprove and CanDeny: what the caller may decide. A pairing can be
	// denied but not approved remotely; an own request neither.
	CanApprove bool `json:"can_approve"`
	CanDeny    bool `json:"can_deny"`
	// CanAlways: "always allow from this device" is offered (a delegation
	// or files from a grant, as in the owner's popup).
	CanAlways bool `json:"can_always"`
	// Note says why something is not offered, for a person.
	Note string `json:"note,omitempty"`
}

// RemoteDecision is the body of POST /remote/approvals/{id} (and of the
// owner's POST /approvals/on/{device}/{id}).
type RemoteDecision struct {
	Decision string `json:"decision"`         // approve | deny
	Always   bool   `json:"always,omitempty"` // delegations: always allow from that device
}

// Bounds of the remote approvals feed.
const (
	maxFeedsPerGrant = 4
	maxFeeds         = 32
	feedLifetime     = 10 * time.Minute
	feedKeepAlive    = 20 * time.Second
	maxRemoteAnswer  = 1 << 20 // bytes of a peer's RemoteApprovals
	remoteCallLimit  = 15 * time.Second
)

// Errors of the remote approval rules (403 at the edge).
var (
	// ErrOwnRequest: the deciding device made the request itself.
	ErrOwnRequest = errors.New("this device made that request itself: it is decided by the owner of the device it was sent to, or by another device holding the approve scope")
	// ErrPairingRemote: a pairing request approved from another device.
	ErrPairingRemote = errors.New("a pairing is approved only at the device itself, where its owner compares the verification code; another device may deny it")
)

// remoteRoutes mounts the routes a grant with the approve scope uses, and
// the owner's routes that call them on another device.
func (n *Node) remoteRoutes(mux *http.ServeMux) {
	a := n.auth
	feeds := &feedSet{}
	mux.Handle("GET /remote/approvals", a.Require(pairing.ScopeApprove, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := pairing.PrincipalFrom(r.Context())
		jsonout.Write(w, http.StatusOK, n.remoteApprovals(p))
	})))
	mux.Handle("GET /remote/approvals/events", a.Require(pairing.ScopeApprove, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := pairing.PrincipalFrom(r.Context())
		n.serveRemoteFeed(w, r, p, feeds)
	})))
	mux.Handle("POST /remote/approvals/{id}", a.Require(pairing.ScopeApprove, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := pairing.PrincipalFrom(r.Context())
		var d RemoteDecision
		if !readJSON(w, r, &d) {
			return
		}
		if err := n.decideRemote(p, r.PathValue("id"), d); err != nil {
			writeError(w, remoteStatus(err), err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})))

	owner := n.ownerRoutes(mux)
	owner("GET /approvals/on/{device}", func(w http.ResponseWriter, r *http.Request) {
		ra, err := n.ApprovalsOn(r.Context(), r.PathValue("device"))
		if err != nil {
			writeError(w, remoteStatus(err), err)
			return
		}
		jsonout.Write(w, http.StatusOK, ra)
	})
	owner("POST /approvals/on/{device}/{id}", func(w http.ResponseWriter, r *http.Request) {
		var d RemoteDecision
		if !readJSON(w, r, &d) {
			return
		}
		if err := n.DecideOn(r.Context(), r.PathValue("device"), r.PathValue("id"), d); err != nil {
			writeError(w, remoteStatus(err), err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// remoteStatus maps the errors of the remote approval routes to statuses.
func remoteStatus(err error) int {
	var pe *peerAnswerError
	switch {
	case errors.As(err, &pe):
		if pe.status >= 400 && pe.status < 500 && pe.status != http.StatusUnauthorized {
			return pe.status
		}
		return http.StatusBadGateway
	case errors.Is(err, ErrOwnRequest), errors.Is(err, ErrPairingRemote), errors.Is(err, pairing.ErrScope):
		return http.StatusForbidden
	case errors.Is(err, pairing.ErrNoHeld):
		return http.StatusNotFound
	case errors.Is(err, errPeerUnreachable):
		return http.StatusBadGateway
	}
	return statusFor(err)
}

// ownRequest reports whether p's grant (or another grant of p's device)
// made a.
func ownRequest(p *pairing.Principal, a Approval) bool {
	if a.GrantID != "" && a.GrantID == p.Grant.ID {
		return true
	}
	return p.Grant.PeerID != "" && a.DeviceID == p.Grant.PeerID
}

// remoteView is a as p may see and decide it.
func remoteView(p *pairing.Principal, a Approval) RemoteApproval {
	a.SAS = "" // compared on the claimant's and this device's screens only
	// Shown as it is, invisible runes visible (the popup and the CLI do the
	// same): a page or a terminal of another device shows these words.
	for _, f := range []*string{&a.Peer, &a.OS, &a.Summary, &a.Addr, &a.TailnetUser, &a.TailnetNode} {
		*f = textsafe.EscapeInvisible(*f)
	}
	a.Detail = textsafe.EscapeInvisibleText(a.Detail)
	if a.Dir != "" {
		a.Dir = dirFor(p, a.Dir) // a phone reads the folder's name, not its path
	}
	v := RemoteApproval{Approval: a, CanApprove: true, CanDeny: true, CanAlways: offersAlways(a)}
	switch {
	case ownRequest(p, a):
		v.Own, v.CanApprove, v.CanDeny, v.CanAlways = true, false, false, false
		v.Note = "Your own request: it waits for the owner, or another approving device."
	case a.Kind == KindPairing:
		v.CanApprove = false
		v.Note = "A new device is approved only at the computer itself; you may deny it from here."
	}
	return v
}

// offersAlways reports whether "always allow from this device" applies to
// a, exactly where the owner's popup offers it: a delegation from a grant
// (the grant's policy becomes allow) or files from one (its files policy).
func offersAlways(a Approval) bool {
	return (a.Kind == KindDelegation || a.Kind == KindFiles) && a.GrantID != ""
}

// remoteApprovals is the pending queue as p sees it.
func (n *Node) remoteApprovals(p *pairing.Principal) RemoteApprovals {
	as := n.approvals.List()
	out := RemoteApprovals{Device: n.cfg.Name, DeviceID: n.identity.ID.String(), Now: time.Now(), Approvals: make([]RemoteApproval, 0, len(as))}
	for _, a := range as {
		out.Approvals = append(out.Approvals, remoteView(p, a))
	}
	return out
}

// decideRemote applies p's decision on approval id under the rules above.
func (n *Node) decideRemote(p *pairing.Principal, id string, rd RemoteDecision) error {
	a, ok := n.approvals.Get(id)
	if !ok {
		return fmt.Errorf("%w: %s (it was decided, withdrawn or expired meanwhile)", ErrNoApproval, clipID(id))
	}
	v := remoteView(p, a)
	d := ApprovalDecision{Decision: rd.Decision, Always: rd.Always, Where: store.WherePhone, By: p.Grant.ID}
	on := fmt.Sprintf("%s (grant %s)", p.Grant.Name, p.Grant.ID)
	if p.Grant.PeerID != "" {
		d.Where, d.By = store.WhereDevice, pairing.ShortID(p.Grant.PeerID)
		on = fmt.Sprintf("%s (%s)", p.Grant.Name, d.By)
	}
	if d.Decision == DecisionDeny {
		// What the requester reads, and the audit trail: where it was
		// denied, by the name this device knows it under.
		d.Reason = "denied on " + on
	}
	switch {
	case d.Decision != DecisionApprove && d.Decision != DecisionDeny:
		return ErrBadDecision
	case v.Own:
		return ErrOwnRequest
	case d.Approved() && !v.CanApprove:
		return ErrPairingRemote
	case !d.Approved() && d.Always:
		return badRequest(`"always" goes with an approval`)
	case d.Always && !v.CanAlways:
		return badRequest(`"always allow" is offered only for a delegation or files from a grant; %s is a %s request`, clipID(id), a.Kind)
	}
	if err := n.Decide(id, d); err != nil {
		return err
	}
	n.log.Info("approval decided on another device", "id", a.ID, "kind", a.Kind, "decision", d.Decision, "where", d.Where, "by", d.By, "grant", p.Grant.ID)
	return nil
}

// feedSet bounds the open remote approval feeds.
type feedSet struct {
	mu    sync.Mutex
	feeds []*feed // guarded by mu; oldest first
}

type feed struct {
	grant string
	stop  context.CancelFunc
}

// add admits a feed for grant (ending the grant's oldest beyond
// maxFeedsPerGrant); false when maxFeeds are open.
func (s *feedSet) add(f *feed) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	var mine []*feed
	for _, x := range s.feeds {
		if x.grant == f.grant {
			mine = append(mine, x)
		}
	}
	if len(mine) >= maxFeedsPerGrant {
		mine[0].stop()
		s.feeds = slices.DeleteFunc(s.feeds, func(x *feed) bool { return x == mine[0] })
	}
	if len(s.feeds) >= maxFeeds {
		return false
	}
	s.feeds = append(s.feeds, f)
	return true
}

func (s *feedSet) remove(f *feed) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.feeds = slices.DeleteFunc(s.feeds, func(x *feed) bool { return x == f })
}

// serveRemoteFeed streams p's view of the queue as server-sent events: one
// `approvals` event at once and one after every change, until the client
// leaves, the grant stops being active (its requests' contexts end), the
// feed is displaced or feedLifetime passes.
func (n *Node) serveRemoteFeed(w http.ResponseWriter, r *http.Request, p *pairing.Principal, feeds *feedSet) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, errors.New("streaming unsupported"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), feedLifetime)
	defer cancel()
	f := &feed{grant: p.Grant.ID, stop: cancel}
	if !feeds.add(f) {
		w.Header().Set("Retry-After", "30")
		writeError(w, http.StatusServiceUnavailable, errors.New("too many approval feeds are open; try again later"))
		return
	}
	defer feeds.remove(f)
	sub := n.events.Subscribe()
	defer sub.Close()
	jsonout.SetHeaders(w.Header())
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	send := func() error {
		b, err := jsonout.Marshal(n.remoteApprovals(p))
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "event: approvals\ndata: %s\n\n", b)
		fl.Flush()
		return err
	}
	if send() != nil {
		return
	}
	for {
		wait, stop := context.WithTimeout(ctx, feedKeepAlive)
		ts, err := sub.Next(wait)
		stop()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			fl.Flush()
			continue
		}
		if slices.Contains(ts, EventApprovals) && send() != nil {
			return
		}
	}
}

// errPeerUnreachable: no address of the peer answered (or its answer
// was cut or unusable). Errors that are it say so in a sentence
// (peerUnreachableError), never with this word in front.
var errPeerUnreachable = errors.New("unreachable")

// peerUnreachableError is errPeerUnreachable with the sentence a person
// reads, e.g. "laptop is not reachable (connection refused); is meshtray
// running there?" (the cause in egress.Cause's words). It unwraps to the
// transport errors.
type peerUnreachableError struct {
	msg string
	err error
}

func (e *peerUnreachableError) Error() string        { return e.msg }
func (e *peerUnreachableError) Unwrap() error        { return e.err }
func (e *peerUnreachableError) Is(target error) bool { return target == errPeerUnreachable }

// unreachablePeer says that no address of the device named name answered:
// each distinct cause of errs (egress.Cause), once.
func unreachablePeer(name string, errs ...error) error {
	var causes []string
	for _, err := range errs {
		if c := egress.Cause(err); !slices.Contains(causes, c) {
			causes = append(causes, c)
		}
	}
	return &peerUnreachableError{
		msg: fmt.Sprintf("%s is not reachable (%s); is meshtray running there?", name, strings.Join(causes, "; ")),
		err: errors.Join(errs...),
	}
}

// peerAnswerError is a peer's refusal, kept with its status.
type peerAnswerError struct {
	status int
	msg    string
}

func (e *peerAnswerError) Error() string { return e.msg }

// heldApprover finds the paired device ref names among the grants other
// devices gave this one (its name, or its short or full device ID:
// sendTarget, the one lookup of a device by name), and checks that its
// grant has the approve scope.
func (n *Node) heldApprover(ref string) (pairing.Held, error) {
	h, issued, err := n.sendTarget(ref)
	switch {
	case err != nil:
		return pairing.Held{}, err
	case h == nil:
		return pairing.Held{}, fmt.Errorf("%w: %s gave this device no grant (it only calls this one)", pairing.ErrNoHeld, issued.Name)
	case !h.Scopes.Has(pairing.ScopeApprove):
		return *h, fmt.Errorf("%w: %s gave this device %s, not approve (its owner grants it at pairing)", pairing.ErrScope, h.Name, h.Scopes.Describe())
	}
	return *h, nil
}

// ApprovalsOn lists the requests waiting on the paired device ref names,
// with the approve grant it gave this device (pinned HTTPS, the peer
// table's addresses first, then the URL it gave at pairing).
func (n *Node) ApprovalsOn(ctx context.Context, ref string) (RemoteApprovals, error) {
	var out RemoteApprovals
	h, err := n.heldApprover(ref)
	if err != nil {
		return out, err
	}
	b, err := n.callPeer(ctx, h, http.MethodGet, "/remote/approvals", nil)
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return out, &peerUnreachableError{msg: fmt.Sprintf("%s answered something else than its approvals: %v", h.Name, err), err: err}
	}
	return out, nil
}

// DecideOn decides approval id on the paired device ref names (see
// ApprovalsOn). The peer records it as decided on this device.
func (n *Node) DecideOn(ctx context.Context, ref, id string, d RemoteDecision) error {
	if d.Decision != DecisionApprove && d.Decision != DecisionDeny {
		return ErrBadDecision
	}
	h, err := n.heldApprover(ref)
	if err != nil {
		return err
	}
	body, _ := json.Marshal(d)
	_, err = n.callPeer(ctx, h, http.MethodPost, "/remote/approvals/"+url.PathEscape(id), body)
	if err == nil {
		n.log.Info("approval decided on a paired device", "device", pairing.ShortID(h.PeerID), "id", clipID(id), "decision", d.Decision)
	}
	return err
}

// callPeer sends one request to the held grant's device and returns the
// answer's body (at most maxRemoteAnswer bytes). It tries the next address
// only when no answer came (a connection error), so a decision is never
// sent twice. A refusal is a *peerAnswerError with the peer's status and
// words.
func (n *Node) callPeer(ctx context.Context, h pairing.Held, method, path string, body []byte) ([]byte, error) {
	rt, err := n.grants.PeerTransport(h.PeerID)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer hc.CloseIdleConnections()
	bases := n.peerURLs(h)
	if len(bases) == 0 {
		return nil, &peerUnreachableError{msg: fmt.Sprintf("%s is not reachable: no address of it is known (it is not seen on the LAN or the tailnet, and gave none at pairing)", h.Name)}
	}
	ctx, cancel := context.WithTimeout(ctx, remoteCallLimit)
	defer cancel()
	var errs []error
	for _, base := range bases {
		var rd io.Reader
		if body != nil {
			rd = strings.NewReader(string(body))
		}
		req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(base, "/")+path, rd)
		if err != nil {
			return nil, err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := hc.Do(req)
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxRemoteAnswer+1))
		resp.Body.Close()
		switch {
		case err != nil:
			return nil, unreachablePeer(h.Name, err)
		case len(b) > maxRemoteAnswer:
			return nil, &peerUnreachableError{msg: fmt.Sprintf("%s answered over %d bytes", h.Name, maxRemoteAnswer)}
		case resp.StatusCode/100 == 2:
			return b, nil
		}
		var e struct {
			Error string `json:"error"`
		}
		json.Unmarshal(b, &e)
		msg := strings.TrimSpace(e.Error)
		switch {
		case resp.StatusCode == http.StatusUnauthorized:
			msg = "it no longer accepts this device's grant (revoked or paused there)"
		case msg == "":
			msg = resp.Status
		}
		return nil, &peerAnswerError{status: resp.StatusCode, msg: fmt.Sprintf("%s refused: %s", h.Name, truncate(msg, 300))}
	}
	return nil, unreachablePeer(h.Name, errs...)
}
