package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	agent "meshtray/a2a"
	"meshtray/a2a/delegate"
	"meshtray/jsonout"
	"meshtray/keychain"
	"meshtray/pairing"
)

// Delegating out: the agents this device delegates to, the
// outbound view, and the forward executor, wired into the node.

// EventAgents: the agents list changed (added, removed, enabled, a card
// verified or not, a peer's grant revoked).
const EventAgents EventType = "agents"

// Files and keychain keys of this part.
const (
	agentsFile      = "agents.json"   // external agents' records (0600, no secrets)
	forwardTokenKey = "forward/token" // the forward executor's upstream token (ARCHITECTURE.md key table)
	// maxDelegateBody bounds POST /a2a/outbound and answers: a file of
	// delegate.MaxFileBytes in base64 plus text and data.
	maxDelegateBody = delegate.MaxFileBytes*4/3 + delegate.MaxMessageText + 64<<10
)

// delegation holds the node's outbound pieces; set by Start.
type delegation struct {
	agents  *delegate.Agents
	out     *delegate.Outbound
	forward *delegate.ForwardExecutor // nil unless a2a.forward.url is set
}

// startDelegation builds the agent registry, the outbound view and, when
// cfg.A2A.Forward.URL is set, the forward executor; it returns the executor
// the A2A server runs approved tasks on (the forward executor, else the
// node executor).
func (n *Node) startDelegation() (agent.Executor, error) {
	d := &delegation{}
	var err error
	d.agents, err = delegate.NewAgents(delegate.AgentsOptions{
		Path:          filepath.Join(n.cfg.StateDir, agentsFile),
		Secrets:       n.ks,
		Peers:         nodePeers{n},
		IsTailnetAddr: n.isTailnetPeer,
		OnChange:      func() { n.events.Publish(EventAgents) },
		Logger:        n.log.With("pkg", "a2a"),
	})
	if err != nil {
		return nil, err
	}
	d.out = delegate.NewOutbound(delegate.OutboundOptions{
		Agents:   d.agents,
		Store:    n.db, // the view survives a restart (restoreDelegation)
		OnChange: func() { n.events.Publish(EventTasks) },
		Logger:   n.log.With("pkg", "a2a"),
	})
	n.deleg = d
	fc := n.cfg.A2A.Forward
	if fc.URL == "" {
		return agent.NewNodeExecutor(n.registry, n.log.With("pkg", "a2a")), nil
	}
	if fc.Token != "" {
		n.log.Warn("a2a.forward.token is in the config file in clear; `meshtray forward token` keeps it in the keychain instead")
	}
	d.forward, err = delegate.NewForwardExecutor(delegate.ForwardOptions{
		URL:           fc.URL,
		Token:         n.forwardToken,
		IsTailnetAddr: n.isTailnetPeer,
		Store:         n.db, // the context map; forwarded tasks reattach after a restart
		Logger:        n.log.With("pkg", "a2a"),
	})
	if err != nil {
		return nil, err
	}
	n.log.Info("approved A2A tasks are forwarded", "to", fc.URL)
	return d.forward, nil
}

// attachDelegation lets the forward executor see the engine's tasks.
func (n *Node) attachDelegation() {
	if n.deleg != nil && n.deleg.forward != nil {
		n.deleg.forward.Attach(n.agent)
	}
}

// restoreDelegation reads the outbound view back from the database and
// follows up its live tasks at their agents; in Start, once the mesh
// table exists (paired agents' addresses) and before the control API
// serves.
func (n *Node) restoreDelegation() error {
	if n.deleg == nil || n.deleg.out == nil {
		return nil
	}
	k, err := n.deleg.out.Restore(n.ctx)
	if err != nil {
		return fmt.Errorf("outbound tasks: %w", err)
	}
	if k > 0 {
		n.log.Info("outbound tasks restored; following up the live ones at their agents", "tasks", k, "live", n.deleg.out.Live())
	}
	return nil
}

// closeDelegation stops following delegated tasks and forwards the cancel
// of upstream tasks still waiting; after the A2A server's shutdown.
func (n *Node) closeDelegation() {
	d := n.deleg
	if d == nil {
		return
	}
	if d.forward != nil {
		d.forward.Close()
	}
	if d.out != nil {
		d.out.Close()
	}
	if d.agents != nil {
		d.agents.Close()
	}
}

// forwardToken is the upstream token: the config file's, else the
// keychain's forward/token, else none.
func (n *Node) forwardToken() string {
	if t := n.cfg.A2A.Forward.Token; t != "" {
		return t
	}
	b, err := n.ks.Get(forwardTokenKey)
	if err != nil {
		if !errors.Is(err, keychain.ErrNotFound) {
			n.log.Warn("cannot read the forward token from the keychain", "err", err)
		}
		return ""
	}
	return string(b)
}

// isTailnetPeer reports whether a is a tailnet peer's address (plain http
// to it rides WireGuard). Discovery starts after the delegation pieces are
// built, so this is read at call time.
func (n *Node) isTailnetPeer(a netip.Addr) bool {
	return n.disc != nil && n.disc.IsTailnetPeer(a)
}

// nodePeers is the registry's view of paired peers: held grants with scope
// agent (or full), at the mesh table's current addresses (online sources
// first), then the address the peer gave when pairing.
type nodePeers struct{ n *Node }

func (p nodePeers) PeerAgents() []delegate.PeerAgent {
	n := p.n
	var out []delegate.PeerAgent
	for _, h := range n.grants.ListHeld() {
		if !h.Scopes.Has(pairing.ScopeAgent) {
			continue
		}
		out = append(out, delegate.PeerAgent{DeviceID: h.PeerID, Name: h.Name, OS: h.OS, URLs: n.peerURLs(h)})
	}
	return out
}

func (p nodePeers) PeerTransport(id string) (http.RoundTripper, error) {
	return p.n.grants.PeerTransport(id)
}

func (p nodePeers) Subscribe() (<-chan struct{}, func()) { return p.n.grants.Subscribe() }

// peerURLs are the base URLs to call a paired peer at: its current
// addresses in the mesh table while it is online, then the URL it gave at
// pairing. Always https: every call to a peer is pinned to its certificate,
// loopback included (the loopback port speaks TLS to peers).
func (n *Node) peerURLs(h pairing.Held) []string {
	var urls []string
	if n.disc != nil {
		if peer, ok := n.disc.Table().Get(h.PeerID); ok && peer.Online {
			for _, src := range peer.Sources {
				for _, hp := range peer.Addrs[src] {
					if _, _, err := net.SplitHostPort(hp); err != nil {
						continue
					}
					if u := "https://" + hp; !slices.Contains(urls, u) {
						urls = append(urls, u)
					}
				}
			}
		}
	}
	if h.URL != "" && !slices.Contains(urls, h.URL) {
		urls = append(urls, h.URL)
	}
	return urls
}

// AgentRequest is POST /a2a/agents.
type AgentRequest struct {
	URL   string `json:"url"`
	Token string `json:"token,omitempty"` // kept in the keychain, never shown again
}

// LogValue keeps the token out of logs.
func (r AgentRequest) LogValue() slog.Value {
	return slog.GroupValue(slog.String("url", r.URL), slog.Bool("token", r.Token != ""))
}

// AgentUpdate is POST /a2a/agents/{id}.
type AgentUpdate struct {
	Action string `json:"action"` // enable | disable | refresh
}

// DelegateRequest is POST /a2a/outbound: a delegation, followed as NDJSON
// (delegate.OutboundEvent lines) unless Detach.
type DelegateRequest struct {
	delegate.DelegateRequest
	Detach bool `json:"detach,omitempty"` // answer the task once the agent took it, without following
}

// AnswerRequest is POST /a2a/outbound/{id}/answer.
type AnswerRequest struct {
	delegate.MessageInput
	Detach bool `json:"detach,omitempty"`
}

// ForwardView is GET /a2a/forward.
type ForwardView struct {
	Configured  bool                    `json:"configured"` // a2a.forward.url is set
	URL         string                  `json:"url,omitempty"`
	TokenSource string                  `json:"token_source"` // config, keychain or none
	Status      *delegate.ForwardStatus `json:"status,omitempty"`
}

// UpdateAgent enables, disables or refreshes an agent.
func (n *Node) UpdateAgent(ctx context.Context, id string, u AgentUpdate) (delegate.Agent, error) {
	switch u.Action {
	case "enable", "disable":
		return n.deleg.agents.SetEnabled(id, u.Action == "enable")
	case "refresh":
		as, err := n.deleg.agents.Refresh(ctx, id)
		if len(as) == 1 {
			return as[0], err
		}
		return delegate.Agent{}, err
	}
	return delegate.Agent{}, badRequest(`action %q: want "enable", "disable" or "refresh"`, u.Action)
}

// Delegate sends a delegation; see delegate.Outbound.Delegate.
func (n *Node) Delegate(ctx context.Context, req delegate.DelegateRequest) (delegate.OutboundTask, error) {
	t, err := n.deleg.out.Delegate(ctx, req)
	if err == nil {
		n.log.Info("delegated", "task", t.ID, "agent", t.Agent, "state", t.State)
	}
	return t, err
}

// Forward reports the forward executor.
func (n *Node) Forward() ForwardView {
	v := ForwardView{URL: n.cfg.A2A.Forward.URL, Configured: n.cfg.A2A.Forward.URL != "", TokenSource: "none"}
	switch {
	case n.cfg.A2A.Forward.Token != "":
		v.TokenSource = "config"
	default:
		if _, err := n.ks.Get(forwardTokenKey); err == nil {
			v.TokenSource = "keychain"
		}
	}
	if f := n.deleg.forward; f != nil {
		st := f.Status()
		v.Status = &st
	}
	return v
}

// SetForwardToken keeps the forward executor's upstream token in the
// keychain ("" deletes it); the next forwarded task uses it.
func (n *Node) SetForwardToken(tok string) error {
	tok = strings.TrimSpace(tok)
	if tok == "" {
		if err := n.ks.Delete(forwardTokenKey); err != nil && !errors.Is(err, keychain.ErrNotFound) {
			return err
		}
		n.log.Info("forward token removed from the keychain")
		return nil
	}
	if len(tok) > delegate.MaxTokenLen || strings.ContainsFunc(tok, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		return badRequest("the token must be at most %d visible ASCII characters", delegate.MaxTokenLen)
	}
	if err := n.ks.Set(forwardTokenKey, []byte(tok)); err != nil {
		return err
	}
	n.log.Info("forward token stored in the keychain")
	return nil
}

// agentStatus maps the errors of this part to HTTP statuses.
func agentStatus(err error) int {
	switch {
	case errors.Is(err, delegate.ErrInvalidInput):
		return http.StatusBadRequest
	case errors.Is(err, delegate.ErrAgentUnknown), errors.Is(err, delegate.ErrOutboundNotFound):
		return http.StatusNotFound
	case errors.Is(err, delegate.ErrAgentDisabled), errors.Is(err, delegate.ErrCardInvalid),
		errors.Is(err, delegate.ErrCardUnpublished), errors.Is(err, delegate.ErrOutboundState):
		return http.StatusConflict
	case errors.Is(err, delegate.ErrOutboundFull):
		return http.StatusTooManyRequests
	case errors.Is(err, delegate.ErrAgentUnauthorized), errors.Is(err, delegate.ErrAgentUnreachable),
		errors.Is(err, delegate.ErrAgentRefused), errors.Is(err, delegate.ErrAgentMalformed),
		errors.Is(err, pairing.ErrPinMismatch):
		return http.StatusBadGateway
	case errors.Is(err, agent.ErrUnavailable):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.Canceled):
		return 499 // the client went away; nobody reads this
	}
	return statusFor(err)
}

// delegationRoutes mounts this part's local control API (auth.Local: the
// local owner or scope full; the forward routes, which choose where
// approved work goes, auth.Owner: the local owner only):
//
//	GET    /a2a/agents[?refresh=1]      -> [delegate.Agent]
//	POST   /a2a/agents                  {url, token?} -> delegate.Agent (201)
//	POST   /a2a/agents/{id}             {action: enable|disable|refresh} -> delegate.Agent
//	DELETE /a2a/agents/{id}             -> 204
//	GET    /a2a/outbound                -> [delegate.OutboundTask]
//	POST   /a2a/outbound                DelegateRequest -> NDJSON delegate.OutboundEvent lines (detach: delegate.OutboundTask)
//	GET    /a2a/outbound/{id}[?watch=1] -> delegate.OutboundTask (watch: NDJSON)
//	POST   /a2a/outbound/{id}/answer    AnswerRequest -> NDJSON (detach: delegate.OutboundTask)
//	POST   /a2a/outbound/{id}/cancel    -> delegate.OutboundTask
//	GET    /a2a/forward                 -> ForwardView
//	POST   /a2a/forward                 {token} -> 204 (kept in the keychain)
//	DELETE /a2a/forward                 -> 204 (token removed)
//	POST   /a2a/forward/check           -> ForwardView (card fetched and verified now)
func (n *Node) delegationRoutes(mux *http.ServeMux) {
	local, owner := n.localRoutes(mux), n.ownerRoutes(mux)
	fail := func(w http.ResponseWriter, err error) { writeError(w, agentStatus(err), err) }

	local("GET /a2a/agents", func(w http.ResponseWriter, r *http.Request) {
		var as []delegate.Agent
		var err error
		if r.URL.Query().Get("refresh") == "1" {
			as, err = n.deleg.agents.Refresh(r.Context(), "")
		} else {
			as = n.deleg.agents.List(r.Context())
		}
		if err != nil {
			fail(w, err)
			return
		}
		jsonout.Write(w, http.StatusOK, as)
	})
	local("POST /a2a/agents", func(w http.ResponseWriter, r *http.Request) {
		var req AgentRequest
		if !readJSON(w, r, &req) {
			return
		}
		a, err := n.deleg.agents.Add(r.Context(), req.URL, req.Token)
		if err != nil {
			fail(w, err)
			return
		}
		jsonout.Write(w, http.StatusCreated, a)
	})
	local("POST /a2a/agents/{id}", func(w http.ResponseWriter, r *http.Request) {
		var u AgentUpdate
		if !readJSON(w, r, &u) {
			return
		}
		a, err := n.UpdateAgent(r.Context(), r.PathValue("id"), u)
		if err != nil && a.ID == "" {
			fail(w, err)
			return
		}
		jsonout.Write(w, http.StatusOK, a) // a refresh that failed returns the agent as now marked
	})
	local("DELETE /a2a/agents/{id}", func(w http.ResponseWriter, r *http.Request) {
		if err := n.deleg.agents.Remove(r.PathValue("id")); err != nil {
			fail(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	local("GET /a2a/outbound", func(w http.ResponseWriter, r *http.Request) {
		jsonout.Write(w, http.StatusOK, n.deleg.out.List())
	})
	local("POST /a2a/outbound", func(w http.ResponseWriter, r *http.Request) {
		var req DelegateRequest
		if !readJSONLimit(w, r, maxDelegateBody, &req) {
			return
		}
		t, err := n.Delegate(r.Context(), req.DelegateRequest)
		if err != nil {
			fail(w, err)
			return
		}
		if req.Detach {
			jsonout.Write(w, http.StatusCreated, t)
			return
		}
		n.serveWatch(w, r, t.ID)
	})
	local("GET /a2a/outbound/{id}", func(w http.ResponseWriter, r *http.Request) {
		t, err := n.deleg.out.Get(r.PathValue("id"))
		if err != nil {
			fail(w, err)
			return
		}
		if r.URL.Query().Get("watch") == "1" {
			n.serveWatch(w, r, t.ID)
			return
		}
		jsonout.Write(w, http.StatusOK, t)
	})
	local("POST /a2a/outbound/{id}/answer", func(w http.ResponseWriter, r *http.Request) {
		var req AnswerRequest
		if !readJSONLimit(w, r, maxDelegateBody, &req) {
			return
		}
		t, err := n.deleg.out.Answer(r.Context(), r.PathValue("id"), req.MessageInput)
		if err != nil {
			fail(w, err)
			return
		}
		if req.Detach {
			jsonout.Write(w, http.StatusOK, t)
			return
		}
		n.serveWatch(w, r, t.ID)
	})
	local("POST /a2a/outbound/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		t, err := n.deleg.out.Cancel(r.Context(), r.PathValue("id"))
		if err != nil {
			fail(w, err)
			return
		}
		jsonout.Write(w, http.StatusOK, t)
	})
	local("GET /a2a/forward", func(w http.ResponseWriter, r *http.Request) {
		jsonout.Write(w, http.StatusOK, n.Forward())
	})
	owner("POST /a2a/forward", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Token string `json:"token"`
		}
		if !readJSON(w, r, &req) {
			return
		}
		if strings.TrimSpace(req.Token) == "" {
			writeError(w, http.StatusBadRequest, errors.New(`body must be {"token": "..."}; DELETE /a2a/forward removes it`))
			return
		}
		if err := n.SetForwardToken(req.Token); err != nil {
			writeError(w, statusFor(err), err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	owner("DELETE /a2a/forward", func(w http.ResponseWriter, r *http.Request) {
		if err := n.SetForwardToken(""); err != nil {
			writeError(w, statusFor(err), err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	local("POST /a2a/forward/check", func(w http.ResponseWriter, r *http.Request) {
		if n.deleg.forward == nil {
			writeError(w, http.StatusConflict, errors.New("no forward agent configured (a2a.forward.url in config.toml)"))
			return
		}
		_, err := n.deleg.forward.Check(r.Context())
		v := n.Forward()
		if err != nil {
			writeError(w, agentStatus(err), err)
			return
		}
		jsonout.Write(w, http.StatusOK, v)
	})
}

// serveWatch streams a delegated task's events as NDJSON until it settles
// (terminal, waiting for input, contact lost), the client leaves, or the
// node stops.
func (n *Node) serveWatch(w http.ResponseWriter, r *http.Request, id string) {
	stream := jsonout.NewStream(w)
	err := n.deleg.out.Watch(r.Context(), id, func(ev delegate.OutboundEvent) error { return stream.Send(ev) })
	if err != nil && r.Context().Err() == nil {
		_ = stream.Send(delegate.OutboundEvent{Error: err.Error()})
	}
}
