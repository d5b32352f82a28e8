package app

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"time"

	"meshtray/jsonout"
	"meshtray/pairing"
)

// PairingSession is a pairing code the owner started (POST /pair/sessions):
// what the pairing window and `meshtray pair` show.
type PairingSession struct {
	// URL is the best pairing URL for a phone: HTTPS on a tailnet or LAN
	// address, code and fingerprint in the fragment. Empty when this device
	// is not reachable from the network (then see Hint).
	URL string `json:"url"`
	// URLs are every pairing URL, the loopback one included (for a second
	// node on this machine: https://127.0.0.1:PORT, pinned like any peer).
	URLs        []string  `json:"urls"`
	Code        string    `json:"code"`
	Fingerprint string    `json:"fingerprint"`
	DeviceID    string    `json:"device_id"`
	Expires     time.Time `json:"expires"`
	// Hint says how to become reachable when URL is empty.
	Hint string `json:"hint,omitempty"`
}

// LogValue implements slog.LogValuer without the code (the URLs carry it
// in their fragment).
func (ps PairingSession) LogValue() slog.Value {
	return slog.GroupValue(slog.String("device_id", ps.DeviceID), slog.Time("expires", ps.Expires), slog.Int("urls", len(ps.URLs)))
}

// JoinRequest is POST /pair/join: claim another device's pairing code.
type JoinRequest struct {
	URL  string         `json:"url"`            // the pairing URL the other device shows, or its base URL
	Code string         `json:"code,omitempty"` // when URL has no fragment
	FP   string         `json:"fp,omitempty"`   // certificate fingerprint, when URL has none
	Ask  pairing.Scopes `json:"ask,omitempty"`  // scopes to ask for (default agent,node)
	Give pairing.Scopes `json:"give,omitempty"` // scopes to give the other device back (mutual pairing)
}

// LogValue implements slog.LogValuer without the code: the URL's host only
// (its fragment carries the code), the scopes.
func (r JoinRequest) LogValue() slog.Value {
	host := ""
	if u, err := url.Parse(r.URL); err == nil {
		host = u.Host
	}
	return slog.GroupValue(slog.String("host", host), slog.String("ask", r.Ask.String()), slog.String("give", r.Give.String()))
}

// JoinEvent is one line of the POST /pair/join answer (NDJSON): first the
// SAS to compare, then the result or an error.
type JoinEvent struct {
	SAS    string            `json:"sas,omitempty"`
	Peer   *pairing.PeerInfo `json:"peer,omitempty"`
	Result *JoinOutcome      `json:"result,omitempty"`
	Error  string            `json:"error,omitempty"`
}

// LogValue implements slog.LogValuer without the SAS.
func (e JoinEvent) LogValue() slog.Value {
	attrs := []slog.Attr{slog.Bool("sas_shown", e.SAS != ""), slog.Bool("done", e.Result != nil)}
	if e.Peer != nil {
		attrs = append(attrs, slog.String("peer", pairing.ShortID(e.Peer.ID)))
	}
	if e.Error != "" {
		attrs = append(attrs, slog.String("error", e.Error))
	}
	return slog.GroupValue(attrs...)
}

// JoinOutcome is what a completed join did.
type JoinOutcome struct {
	Peer         HeldView `json:"peer"`
	Gave         string   `json:"gave,omitempty"`    // grant id given back, when mutual
	Revoked      []string `json:"revoked,omitempty"` // grants given that device before, revoked by a one-way pairing
	FirstContact bool     `json:"first_contact,omitempty"`
}

// StartPairing starts a pairing code (10 minutes, single use).
func (n *Node) StartPairing() (PairingSession, error) {
	s, err := n.pairer.Start()
	if err != nil {
		return PairingSession{}, err
	}
	ps := PairingSession{Code: s.Code, Fingerprint: s.Fingerprint, DeviceID: s.DeviceID, Expires: s.Expires}
	ps.SetURLs(n.PairingBases())
	n.events.Publish(EventPairing)
	return ps, nil
}

// PairingBases are the base URLs a pairing URL can start with, best first
// (GET /pair/bases): HTTPS on the LAN addresses (on only when the owner
// chose it), then the tailnet ones, then loopback over TLS (a second node
// on this machine). They follow the listeners: a window showing a code
// re-reads them when the status changes.
type PairingBases struct {
	Bases    []string `json:"bases"`
	Loopback string   `json:"loopback"`
}

// PairingBases lists this node's pairing bases now.
func (n *Node) PairingBases() PairingBases {
	var b PairingBases
	for _, kind := range []pairing.Listener{pairing.ListenerLAN, pairing.ListenerTailnet} {
		for _, l := range n.listeners.Remote() {
			if l.Kind == kind {
				b.Bases = append(b.Bases, l.URL)
			}
		}
	}
	b.Loopback = n.loopbackTLS
	return b
}

// SetURLs fills URL, URLs and Hint of ps from b.
func (ps *PairingSession) SetURLs(b PairingBases) {
	s := pairing.Session{Code: ps.Code, Fingerprint: ps.Fingerprint}
	ps.URL, ps.URLs, ps.Hint = "", nil, ""
	for _, base := range b.Bases {
		ps.URLs = append(ps.URLs, s.URL(base))
	}
	if len(ps.URLs) > 0 {
		ps.URL = ps.URLs[0]
	}
	ps.URLs = append(ps.URLs, s.URL(b.Loopback))
	if ps.URL == "" {
		ps.Hint = "this device is not reachable from other devices yet: turn on \"Reachable on local network\" (meshtray lan on) or Tailscale; the loopback URL works for a second meshtray on this machine only"
	}
}

// selfURLFor is this device's base URL as seen from the network peer is on:
// loopback (over TLS) for a loopback peer, else the listener of the same kind.
func (n *Node) selfURLFor(peer string) string {
	u, err := url.Parse(peer)
	if err != nil {
		return n.selfURL()
	}
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		if a.IsLoopback() {
			return n.loopbackTLS
		}
		if a.Is4() && a.As4()[0] == 100 {
			for _, l := range n.listeners.Remote() {
				if l.Kind == pairing.ListenerTailnet {
					return l.URL
				}
			}
		}
	}
	return n.selfURL()
}

// Join claims another device's pairing code (the claimant side of the
// flow); onSAS is called with the code both screens must show.
func (n *Node) Join(ctx context.Context, req JoinRequest, onSAS func(string, pairing.PeerInfo)) (JoinOutcome, error) {
	if req.URL == "" {
		return JoinOutcome{}, badRequest("url is required")
	}
	opts := pairing.JoinOptions{
		URL: req.URL, Code: req.Code, FP: req.FP,
		Identity: n.identity, Grants: n.grants,
		Name: n.cfg.Name, OS: n.osEnv,
		Scopes: req.Ask, Give: req.Give,
		OnSAS:  onSAS,
		Logger: n.log.With("pkg", "pairing"),
	}
	if len(req.Give) > 0 {
		opts.SelfURL = n.selfURLFor(req.URL)
		if opts.SelfURL == "" {
			return JoinOutcome{}, badRequest("cannot give a grant back: this device has no address the other device can reach (turn on LAN reachability or Tailscale)")
		}
	}
	res, err := pairing.Join(ctx, opts)
	if err != nil {
		return JoinOutcome{}, err
	}
	out := JoinOutcome{
		Peer: HeldView{PeerID: res.Held.PeerID, Name: res.Held.Name, OS: res.Held.OS, URL: res.Held.URL,
			Fingerprint: res.Held.Fingerprint, Scopes: res.Held.Scopes, Created: res.Held.Created},
		FirstContact: res.FirstContact,
	}
	if res.Given != nil {
		out.Gave = res.Given.ID
	}
	for _, g := range res.Revoked {
		out.Revoked = append(out.Revoked, g.ID)
	}
	n.log.Info("paired as claimant", "peer", res.Held)
	return out, nil
}

// pairRoutes mounts the owner's pairing endpoints on the local surface.
func (n *Node) pairRoutes(mux *http.ServeMux) {
	mux.Handle("POST /pair/sessions", n.auth.Owner(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ps, err := n.StartPairing()
		if err != nil {
			writeError(w, pairing.HTTPStatus(err), err)
			return
		}
		jsonout.Write(w, http.StatusCreated, ps)
	})))
	mux.Handle("POST /pair/join", n.auth.Owner(http.HandlerFunc(n.serveJoin)))
	mux.Handle("GET /pair/bases", n.auth.Owner(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		jsonout.Write(w, http.StatusOK, n.PairingBases())
	})))
}

// serveJoin runs a join and streams its progress as NDJSON: the SAS as soon
// as the claim is accepted (the CLI shows it while the other owner decides),
// then the outcome.
func (n *Node) serveJoin(w http.ResponseWriter, r *http.Request) {
	var req JoinRequest
	if !readJSON(w, r, &req) {
		return
	}
	stream := jsonout.NewStream(w)
	send := func(ev JoinEvent) { _ = stream.Send(ev) }
	out, err := n.Join(r.Context(), req, func(sas string, peer pairing.PeerInfo) {
		send(JoinEvent{SAS: sas, Peer: &peer})
	})
	if err != nil {
		send(JoinEvent{Error: err.Error()})
		return
	}
	send(JoinEvent{Result: &out})
}
