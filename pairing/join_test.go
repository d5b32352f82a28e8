package pairing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"meshtray/keychain"
)

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testNode is one meshtray's pairing side on a real server on 127.0.0.1:
// HTTPS with its identity, tagged as the loopback listener (like the
// node's loopback listener, which speaks TLS to peers) or, with lan, as a
// LAN listener; or, with plain, plain HTTP tagged loopback (the local
// owner's side of the loopback listener, for raw server-side tests).
type testNode struct {
	name string
	id   *Identity
	ks   keychain.Store
	g    *Grants
	p    *Pairer
	auth *Auth
	srv  *httptest.Server
	url  string
	reqs chan Request
}

type nodeOpts struct {
	plain  bool
	lan    bool
	logger *slog.Logger
	ks     keychain.Store
}

func newNode(t *testing.T, name string, o nodeOpts) *testNode {
	t.Helper()
	n := &testNode{name: name, reqs: make(chan Request, 8), ks: o.ks}
	if n.ks == nil {
		n.ks = keychain.NewMemory()
	}
	var err error
	if n.id, err = LoadOrCreateIdentity(n.ks, name); err != nil {
		t.Fatal(err)
	}
	if n.g, err = NewGrants(n.ks, o.logger); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.g.Close() })
	n.p, err = NewPairer(PairerOptions{
		Grants: n.g, Identity: n.id, Name: name, OS: "Debian GNU/Linux 12 (x86_64)",
		OnRequest: func(r Request) { n.reqs <- r },
		SelfURL:   func() string { return n.url },
		Logger:    o.logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	n.auth = &Auth{Grants: n.g, Logger: o.logger}
	mux := http.NewServeMux()
	n.p.Mount(mux, n.auth)
	mux.Handle("POST /a2a/v1", n.auth.Require(ScopeAgent, whoAmI))
	n.srv = httptest.NewUnstartedServer(mux)
	n.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	listener := ListenerLoopback
	if o.lan {
		listener = ListenerLAN
	}
	n.srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context { return WithListener(ctx, listener) }
	if o.plain {
		n.srv.Start()
	} else {
		n.srv.TLS = n.id.ServerTLSConfig()
		n.srv.StartTLS()
	}
	n.url = n.srv.URL
	t.Cleanup(n.srv.Close)
	t.Cleanup(func() { n.p.Close() }) // runs first: wakes long polls
	return n
}

// approveNext plays the owner of n: it waits for the next pairing request,
// checks its SAS against the one the claimant shows, and decides.
func (n *testNode) approveNext(t *testing.T, claimantSAS <-chan string, approve bool, scopes Scopes) <-chan error {
	done := make(chan error, 1)
	go func() {
		var r Request
		select {
		case r = <-n.reqs:
		case <-time.After(20 * time.Second):
			done <- errors.New("no pairing request arrived")
			return
		}
		select {
		case sas := <-claimantSAS:
			if sas != r.SAS {
				done <- errors.New("the two screens show different SAS: " + sas + " vs " + r.SAS)
				return
			}
		case <-time.After(20 * time.Second):
			done <- errors.New("the claimant showed no SAS")
			return
		}
		_, err := n.p.Decide(r.ID, approve, scopes)
		done <- err
	}()
	return done
}

func (n *testNode) join(ctx context.Context, issuer *testNode, s Session, give Scopes, sasOut chan<- string, logger *slog.Logger) (JoinResult, error) {
	return Join(ctx, JoinOptions{
		URL: s.URL(issuer.url), Identity: n.id, Grants: n.g, Name: n.name, OS: "macOS 15.1 (arm64)",
		Scopes: Scopes{ScopeAgent, ScopeNode}, Give: give, SelfURL: n.url,
		OnSAS:  func(sas string, _ PeerInfo) { sasOut <- sas },
		Logger: logger,
	})
}

// callPeer posts to a peer's /a2a/v1 with the grant held from it.
func callPeer(t *testing.T, from *testNode, to *testNode, url string) (*http.Response, map[string]any) {
	t.Helper()
	tr, err := from.g.PeerTransport(to.id.ID.String())
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: tr}
	defer c.CloseIdleConnections()
	resp, err := c.Post(url+"/a2a/v1", "application/json", strings.NewReader("{}"))
	if err != nil {
		return nil, map[string]any{"err": err}
	}
	defer resp.Body.Close()
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	return resp, body
}

// TestMutualPairingOverPinnedTLS is the whole flow between two meshtrays on
// real HTTPS servers: claim, SAS on both screens, approval, token collected
// once, held grant stored, reciprocal grant handed back, both tokens used,
// pause kept, revocation noticed and the dead token dropped; and no secret
// in any log line of either side.
func TestMutualPairingOverPinnedTLS(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a := newNode(t, "laptop", nodeOpts{logger: logger.With("node", "a")})
	b := newNode(t, "desktop", nodeOpts{logger: logger.With("node", "b")})

	s, err := a.p.Start()
	if err != nil {
		t.Fatal(err)
	}
	sas := make(chan string, 1)
	decided := a.approveNext(t, sas, true, Scopes{ScopeAgent, ScopeNode})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := b.join(ctx, a, s, Scopes{ScopeAgent}, sas, logger.With("node", "b-join"))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-decided; err != nil {
		t.Fatal(err)
	}

	// B holds A's grant, pinned to A.
	if res.Held.PeerID != a.id.ID.String() || res.Held.Fingerprint != a.id.Fingerprint || res.Held.URL != a.url || res.Held.Scopes.String() != "agent,node" || res.Held.Name != "laptop" {
		t.Fatalf("B holds %+v", res.Held)
	}
	// A issued one grant, bound to B's device ID, and holds B's.
	issued := a.g.ByPeer(b.id.ID.String())
	if len(issued) != 1 || issued[0].ID != res.Held.GrantID {
		t.Fatalf("A issued %+v", issued)
	}
	ah, err := a.g.Held(b.id.ID.String())
	if err != nil || ah.URL != b.url || ah.Fingerprint != b.id.Fingerprint || ah.Scopes.String() != "agent" || res.Given == nil || ah.GrantID != res.Given.ID {
		t.Fatalf("A holds %+v, %v (given %+v)", ah, err, res.Given)
	}
	// Both tokens work, each against the other's agent surface.
	if resp, body := callPeer(t, b, a, a.url); resp == nil || resp.StatusCode != 200 || body["grant"] != res.Held.GrantID {
		t.Fatalf("B → A: %v", body)
	}
	if resp, body := callPeer(t, a, b, b.url); resp == nil || resp.StatusCode != 200 || body["grant"] != ah.GrantID {
		t.Fatalf("A → B: %v", body)
	}

	// A pauses B's grant: B's call gets 401, and B keeps the token.
	if err := a.g.Pause(issued[0].ID); err != nil {
		t.Fatal(err)
	}
	if resp, _ := callPeer(t, b, a, a.url); resp == nil || resp.StatusCode != 401 {
		t.Fatalf("paused: %v", resp)
	}
	if _, err := b.g.Held(a.id.ID.String()); err != nil {
		t.Fatalf("B dropped a paused grant: %v", err)
	}
	a.g.Resume(issued[0].ID)

	// A rotates it: the new token reaches B, which keeps working.
	_, delivered, err := a.p.Rotate(ctx, issued[0].ID)
	if err != nil || !delivered {
		t.Fatalf("rotate: delivered %v, %v", delivered, err)
	}
	if resp, _ := callPeer(t, b, a, a.url); resp == nil || resp.StatusCode != 200 {
		t.Fatalf("after rotation: %v", resp)
	}

	// A revokes it: the notice makes B re-check and drop the dead token.
	if err := a.p.Revoke(issued[0].ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B to drop the revoked grant", func() bool {
		_, err := b.g.Held(a.id.ID.String())
		return errors.Is(err, ErrNoHeld)
	})
	// A still holds B's grant: revocation is per direction.
	if _, err := a.g.Held(b.id.ID.String()); err != nil {
		t.Fatalf("A lost its own held grant: %v", err)
	}

	// Nothing secret in the logs of either side.
	out := logs.String()
	secrets := map[string]string{"code": s.Code, "A's held token": ah.Token, "B's held token": res.Held.Token}
	for name, v := range secrets {
		if v == "" || strings.Contains(out, v) {
			t.Errorf("%s (%q) in the logs", name, v)
		}
	}
	if strings.Contains(out, `"`+res.SAS+`"`) || strings.Contains(out, "="+res.SAS) {
		t.Errorf("the SAS %s is in the logs", res.SAS)
	}
	for _, key := range []string{"poll_token", "nonce", `"token"`, `"sig"`, "Bearer"} {
		if strings.Contains(out, key) {
			t.Errorf("the logs mention %s", key)
		}
	}
	for _, want := range []string{"pairing request approved", "paired both ways", "held grant dropped", "grant revoked"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %q, so the grep above may have looked at nothing", want)
		}
	}
}

// TestStrangerNoticeDropsNothing: POST /pair/revoked from anyone only
// triggers a re-check; a grant the issuer still honours stays.
func TestStrangerNoticeDropsNothing(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	a := newNode(t, "laptop", nodeOpts{})
	b := newNode(t, "desktop", nodeOpts{logger: slog.New(slog.NewTextHandler(logs, nil))})
	s, _ := a.p.Start()
	sas := make(chan string, 1)
	decided := a.approveNext(t, sas, true, nil)
	res, err := b.join(context.Background(), a, s, nil, sas, nil)
	if err != nil || <-decided != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: PinnedTLSConfig(b.id.Fingerprint)}}
	defer c.CloseIdleConnections()
	for _, n := range []RevokedNotice{
		{IssuerID: a.id.ID.String(), GrantID: "0000000000000000"}, // not the grant we hold: ignored
		{IssuerID: a.id.ID.String(), GrantID: res.Held.GrantID},   // re-checked, still honoured
		{IssuerID: a.id.ID.String(), GrantID: res.Held.GrantID},   // within recheckEvery: ignored
	} {
		body, _ := json.Marshal(n)
		resp, err := c.Post(b.url+"/pair/revoked", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("notice: %s", resp.Status)
		}
	}
	waitFor(t, "the re-check", func() bool { return strings.Contains(logs.String(), "re-checked a held grant") })
	if n := strings.Count(logs.String(), "re-checked a held grant"); n != 1 {
		t.Errorf("%d re-checks for 3 notices, want 1", n)
	}
	if !strings.Contains(logs.String(), "dropped=false") {
		t.Errorf("re-check log: %s", logs.String())
	}
	if _, err := b.g.Held(a.id.ID.String()); err != nil {
		t.Fatalf("a stranger's notice dropped a live grant: %v", err)
	}
}

func TestJoinDenied(t *testing.T) {
	t.Parallel()
	a := newNode(t, "laptop", nodeOpts{})
	b := newNode(t, "desktop", nodeOpts{})
	s, _ := a.p.Start()
	sas := make(chan string, 1)
	decided := a.approveNext(t, sas, false, nil)
	_, err := b.join(context.Background(), a, s, Scopes{ScopeAgent}, sas, nil)
	if !errors.Is(err, ErrDenied) || <-decided != nil {
		t.Fatalf("Join = %v, want ErrDenied", err)
	}
	if len(b.g.ListHeld()) != 0 || len(b.g.List()) != 0 || len(a.g.List()) != 0 {
		t.Fatal("a denied pairing left grants")
	}
}

// TestJoinPinMismatch: the URL's fingerprint is C's, the server is A: the
// TLS handshake fails before any byte of the claim leaves.
func TestJoinPinMismatch(t *testing.T) {
	t.Parallel()
	a := newNode(t, "laptop", nodeOpts{})
	b := newNode(t, "desktop", nodeOpts{})
	c := newIdentity(t, "impostor")
	s, _ := a.p.Start()
	s.Fingerprint = c.Fingerprint
	_, err := b.join(context.Background(), a, s, nil, make(chan string, 1), nil)
	var pe *PinError
	if !errors.Is(err, ErrPinMismatch) || !errors.As(err, &pe) || pe.Got != a.id.Fingerprint || pe.Expected != c.Fingerprint {
		t.Fatalf("Join = %v, want a pin mismatch naming both", err)
	}
	if len(a.p.Pending()) != 0 {
		t.Fatal("the claim reached the server despite the pin mismatch")
	}
	// And the code still works for the right device.
	s.Fingerprint = a.id.Fingerprint
	sas := make(chan string, 1)
	decided := a.approveNext(t, sas, true, nil)
	if _, err := b.join(context.Background(), a, s, nil, sas, nil); err != nil || <-decided != nil {
		t.Fatalf("join with the right pin: %v", err)
	}
}

// TestJoinLoopback: two nodes on one machine pair through their loopback
// listeners, over TLS pinned like any peer (a plain http loopback URL
// would hand the code and the tokens to whoever holds the port).
func TestJoinLoopback(t *testing.T) {
	t.Parallel()
	a := newNode(t, "laptop", nodeOpts{})
	b := newNode(t, "desktop", nodeOpts{})
	for _, withFP := range []bool{true, false} {
		s, _ := a.p.Start()
		u := s.URL(a.url)
		if !withFP {
			u = a.url + "/pair#c=" + s.Code
		}
		sas := make(chan string, 1)
		decided := a.approveNext(t, sas, true, nil)
		res, err := Join(context.Background(), JoinOptions{URL: u, Identity: b.id, Grants: b.g, Name: "desktop", Give: Scopes{ScopeNode}, SelfURL: b.url,
			OnSAS: func(s string, _ PeerInfo) { sas <- s }})
		if err != nil || <-decided != nil {
			t.Fatalf("loopback join (fp in URL %v): %v", withFP, err)
		}
		if res.Held.Fingerprint != a.id.Fingerprint || !strings.HasPrefix(res.Held.URL, "https://127.0.0.1:") {
			t.Fatalf("held: URL %s, fp %s", res.Held.URL, res.Held.Fingerprint)
		}
		if h, err := a.g.Held(b.id.ID.String()); err != nil || h.URL != b.url {
			t.Fatalf("A holds B's grant back: URL %q, %v", h.URL, err)
		}
	}
	// Re-pairing replaced the first pair of grants on both sides.
	if n := len(a.g.ByPeer(b.id.ID.String())); n != 1 {
		t.Errorf("A has %d grants for B after pairing twice, want 1", n)
	}
	if n := len(b.g.ByPeer(a.id.ID.String())); n != 1 {
		t.Errorf("B has %d grants for A after pairing twice, want 1", n)
	}
	// Plain HTTP is refused before any packet, loopback or not.
	for _, u := range []string{"http://192.0.2.1:47654/pair#c=ABCDEFGH&fp=" + a.id.Fingerprint, "http://example.com/pair#c=ABCDEFGH", "http://127.0.0.1:1/pair#c=ABCDEFGH"} {
		if _, err := Join(context.Background(), JoinOptions{URL: u, Identity: b.id, Grants: b.g}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Join(%s) = %v, want ErrInvalid", u, err)
		}
	}
}

// TestJoinFirstContact: an address and a code, no fingerprint. The claimant
// pins what it sees first (GET /pair/issuer over TLS, the answer's fp must
// be the certificate's), says so, and the SAS still matches.
func TestJoinFirstContact(t *testing.T) {
	t.Parallel()
	a := newNode(t, "laptop", nodeOpts{})
	b := newNode(t, "desktop", nodeOpts{})
	s, _ := a.p.Start()
	sas := make(chan string, 1)
	decided := a.approveNext(t, sas, true, nil)
	res, err := Join(context.Background(), JoinOptions{URL: a.url, Code: s.Code, Identity: b.id, Grants: b.g, Name: "desktop",
		OnSAS: func(s string, _ PeerInfo) { sas <- s }})
	if err != nil || <-decided != nil {
		t.Fatal(err)
	}
	if !res.FirstContact || res.Held.Fingerprint != a.id.Fingerprint {
		t.Fatalf("first contact: %+v", res)
	}
}

// A middleman with its own certificate that relays a claim cannot make it
// verify at the real device: the proof binds the fingerprint the claimant
// saw (the middleman's).
func TestRelayedClaimFails(t *testing.T) {
	t.Parallel()
	a := newNode(t, "laptop", nodeOpts{})
	b := newIdentity(t, "desktop")
	mitm := newIdentity(t, "middleman")
	s, _ := a.p.Start()
	c := claimFor(s.Code)
	c.DeviceID = b.ID.String()
	if err := c.signClaim(b, mitm.Fingerprint); err != nil { // B thinks it talks to the middleman's cert
		t.Fatal(err)
	}
	if _, err := a.p.Claim(context.Background(), c, src(1)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("relayed claim: %v", err)
	}
	// The code was not touched: B's honest claim still works.
	if err := c.signClaim(b, a.id.Fingerprint); err != nil {
		t.Fatal(err)
	}
	if _, err := a.p.Claim(context.Background(), c, src(2)); err != nil {
		t.Fatal(err)
	}
}

// TestIdentityChangeMeansPairAgain: a peer that re-created its identity is
// refused, with errors that say why, on both paths: the holder's pinned
// calls to it, and its offers to the issuer.
func TestIdentityChangeMeansPairAgain(t *testing.T) {
	t.Parallel()
	a := newNode(t, "laptop", nodeOpts{})
	b := newNode(t, "desktop", nodeOpts{})
	s, _ := a.p.Start()
	sas := make(chan string, 1)
	decided := a.approveNext(t, sas, true, nil)
	res, err := b.join(context.Background(), a, s, Scopes{ScopeAgent}, sas, nil)
	if err != nil || <-decided != nil {
		t.Fatal(err)
	}
	// B re-creates its identity (new keychain) and comes back on a new server.
	b2 := newNode(t, "desktop", nodeOpts{})
	// A's pinned call to "B" now meets B2's certificate.
	tr, err := a.g.PeerTransport(b.id.ID.String())
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: tr}
	defer c.CloseIdleConnections()
	_, err = c.Post(b2.url+"/a2a/v1", "application/json", strings.NewReader("{}"))
	if !errors.Is(err, ErrPinMismatch) || !strings.Contains(err.Error(), "pair again") {
		t.Fatalf("call to a re-created peer: %v", err)
	}
	// B2, with B's old token, offers a grant as itself: 409, identity changed.
	pc, _ := peerClient(a.url, a.id.Fingerprint, time.Minute)
	defer pc.CloseIdleConnections()
	_, tok := mustIssue(t, b2.g, "x", ScopeAgent)
	_, err = callJSON(context.Background(), pc, "reciprocate", "POST", a.url, "/pair/reciprocate", res.Held.Token,
		Offer{Token: tok, URL: b2.url, FP: b2.id.Fingerprint, Name: "desktop", Scopes: Scopes{ScopeAgent}}, nil)
	var pe *PeerError
	if !errors.Is(err, ErrIdentityChanged) || !errors.As(err, &pe) || pe.Status != http.StatusConflict || !strings.Contains(pe.Message, "pair again") {
		t.Fatalf("offer from a changed identity: %v", err)
	}
	if h, _ := a.g.Held(b.id.ID.String()); h.URL != b.url {
		t.Fatal("the refused offer changed A's held grant")
	}
	// B2 pairs again: a new request with an empty Replaces (a new device ID).
	s, _ = a.p.Start()
	sas = make(chan string, 1)
	decided = a.approveNext(t, sas, true, nil)
	if _, err := b2.join(context.Background(), a, s, nil, sas, nil); err != nil || <-decided != nil {
		t.Fatal(err)
	}
	if len(a.g.ByPeer(b2.id.ID.String())) != 1 || len(a.g.ByPeer(b.id.ID.String())) != 1 {
		t.Fatal("grants per device after re-pairing under a new identity")
	}
}

// TestPairingHTTPEdges drives the HTTP endpoints with raw requests: sizes,
// malformed bodies, status codes.
func TestPairingHTTPEdges(t *testing.T) {
	t.Parallel()
	a := newNode(t, "laptop", nodeOpts{plain: true})
	post := func(path, body string, hdr ...string) *http.Response {
		req, _ := http.NewRequest("POST", a.url+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	s, _ := a.p.Start()
	good := `{"code":"` + s.Code + `","name":"phone","nonce":"` + randomString(16) + `","requested_scopes":["node"]}`
	big := `{"code":"` + s.Code + `","name":"` + strings.Repeat("x", MaxClaimBody) + `","nonce":"` + randomString(16) + `"}`
	for _, tc := range []struct {
		name, body string
		hdr        []string
		want       int
	}{
		{"oversize", big, nil, http.StatusRequestEntityTooLarge},
		{"not json", "code=" + s.Code, nil, http.StatusBadRequest},
		{"two objects", good + good, nil, http.StatusBadRequest},
		{"wrong code", strings.Replace(good, s.Code, "ZZZZZZZZ", 1), nil, http.StatusForbidden},
		{"cross-site", good, []string{"Origin", "https://evil.example"}, http.StatusForbidden},
		{"ok", good, nil, http.StatusOK},
		{"used", good, nil, http.StatusForbidden},
	} {
		if resp := post("/pair/claim", tc.body, tc.hdr...); resp.StatusCode != tc.want {
			t.Errorf("%s: %s, want %d", tc.name, resp.Status, tc.want)
		}
	}
	// Every call above, even the malformed ones, spent one of the loopback
	// source's sourceBurst tokens; the rest run out within one more burst.
	var last *http.Response
	for range sourceBurst {
		last = post("/pair/claim", good)
	}
	if last.StatusCode != http.StatusTooManyRequests || last.Header.Get("Retry-After") == "" {
		t.Errorf("over the rate: %s, Retry-After %q", last.Status, last.Header.Get("Retry-After"))
	}
	// Status needs the poll token, in the header.
	req, _ := http.NewRequest("GET", a.url+"/pair/status/"+randomString(16), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("status of a made-up request: %s", resp.Status)
	}
	// Reciprocate and whoami need a grant.
	if resp := post("/pair/reciprocate", `{}`); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("reciprocate without a grant: %s", resp.Status)
	}
	// A phone grant (no device ID) cannot reciprocate.
	_, phoneTok := mustIssue(t, a.g, "phone", ScopeNode)
	if resp := post("/pair/reciprocate", `{}`, "Authorization", "Bearer "+phoneTok); resp.StatusCode != http.StatusForbidden {
		t.Errorf("reciprocate with a phone grant: %s", resp.Status)
	}
}

// TestJoinLoopbackStaleFingerprint: on loopback too the TLS pin catches a
// fingerprint that is not the peer's (it re-created its identity) before
// the claim, reported as a pin mismatch naming both, not as the peer's
// "signature does not verify".
func TestJoinLoopbackStaleFingerprint(t *testing.T) {
	t.Parallel()
	a := newNode(t, "laptop", nodeOpts{})
	b := newNode(t, "desktop", nodeOpts{})
	old := newIdentity(t, "laptop-before-reinstall")
	s, _ := a.p.Start()
	s.Fingerprint = old.Fingerprint
	_, err := Join(context.Background(), JoinOptions{URL: s.URL(a.url), Identity: b.id, Grants: b.g, Name: "desktop"})
	var pe *PinError
	if !errors.Is(err, ErrPinMismatch) || !errors.As(err, &pe) || pe.Expected != old.Fingerprint || pe.Got != a.id.Fingerprint {
		t.Fatalf("Join = %v, want a pin mismatch naming both fingerprints", err)
	}
	if len(a.p.Pending()) != 0 {
		t.Fatal("the claim reached the peer despite the stale fingerprint")
	}
}

// TestWhoAmIPolicy: a holder (the phone page) learns from whoami whether its
// calls will wait for the owner.
func TestWhoAmIPolicy(t *testing.T) {
	t.Parallel()
	a := newNode(t, "laptop", nodeOpts{plain: true})
	g, tok := mustIssue(t, a.g, "phone", ScopeNode)
	for _, want := range []Policy{PolicyAsk, PolicyAllow} {
		if err := a.g.SetPolicy(g.ID, want); err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("GET", a.url+"/pair/whoami", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var w WhoAmI
		err = json.NewDecoder(resp.Body).Decode(&w)
		resp.Body.Close()
		if err != nil || w.GrantID != g.ID || w.Policy != want {
			t.Fatalf("whoami = %+v (%v), want policy %q", w, err, want)
		}
	}
}

// TestOneWayRepairingRevokesWhatWasGiven: B pairs with A both ways, then
// again one way (gives nothing): the grant B gave A in the first pairing
// is revoked, as a mutual re-pairing replaces it, and reported.
func TestOneWayRepairingRevokesWhatWasGiven(t *testing.T) {
	t.Parallel()
	a := newNode(t, "laptop", nodeOpts{})
	b := newNode(t, "desktop", nodeOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pair := func(give Scopes) JoinResult {
		t.Helper()
		s, err := a.p.Start()
		if err != nil {
			t.Fatal(err)
		}
		sas := make(chan string, 1)
		decided := a.approveNext(t, sas, true, Scopes{ScopeAgent})
		res, err := b.join(ctx, a, s, give, sas, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := <-decided; err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := pair(Scopes{ScopeAgent})
	if first.Given == nil || len(b.g.ByPeer(a.id.ID.String())) != 1 {
		t.Fatalf("the mutual pairing gave nothing: %+v", first)
	}
	second := pair(nil)
	if second.Given != nil {
		t.Fatalf("a one-way pairing gave %+v", second.Given)
	}
	if left := b.g.ByPeer(a.id.ID.String()); len(left) != 0 {
		t.Fatalf("B still gives A %+v after a one-way re-pairing", left)
	}
	if len(second.Revoked) != 1 || second.Revoked[0].ID != first.Given.ID {
		t.Fatalf("revoked %+v, want the first pairing's grant %s", second.Revoked, first.Given.ID)
	}
	// A's grant to B is the second pairing's only.
	if got := a.g.ByPeer(b.id.ID.String()); len(got) != 1 || got[0].ID != second.Held.GrantID {
		t.Fatalf("A gives B %+v, want only %s", got, second.Held.GrantID)
	}
}
