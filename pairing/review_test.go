package pairing

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"meshtray/keychain"
)

// Tests of the review findings on pairing; each failed before its fix.

// gateStore blocks the first Set after arm until release, then fails every
// later Set: a keychain that is slow for one writer and broken for the next.
type gateStore struct {
	keychain.Store
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
	sets    atomic.Int64
}

func (s *gateStore) Set(k string, v []byte) error {
	if !s.armed.Load() {
		return s.Store.Set(k, v)
	}
	if s.sets.Add(1) == 1 {
		close(s.entered)
		<-s.release
		return s.Store.Set(k, v)
	}
	return errFlaky
}

// waitingOnWriterLock reports whether some goroutine is blocked on the
// store's writer mutex inside Grants.update.
func waitingOnWriterLock() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "sync.(*Mutex).Lock") && strings.Contains(g, "pairing.(*Grants).update") {
			return true
		}
	}
	return false
}

// TestSetPolicyStricterDecidedUnderLock: whether a policy change is
// stricter must be judged against the policy it replaces, under the writer
// lock. Here the grant is deny; one writer loosens it to allow (slow
// keychain), another then asks for ask, which is stricter than allow: it
// must bite in memory even though its keychain write fails. Judged before
// the lock (against deny) it looked looser and was dropped with the write.
func TestSetPolicyStricterDecidedUnderLock(t *testing.T) {
	t.Parallel()
	ks := &gateStore{Store: keychain.NewMemory(), entered: make(chan struct{}), release: make(chan struct{})}
	g := newGrants(t, ks)
	gr, tok := mustIssue(t, g, "desk", ScopeAgent)
	if err := g.SetPolicy(gr.ID, PolicyDeny); err != nil {
		t.Fatal(err)
	}
	ks.armed.Store(true)
	loosen := make(chan error, 1)
	go func() { loosen <- g.SetPolicy(gr.ID, PolicyAllow) }()
	<-ks.entered // the loosening writer holds the lock, its write in flight
	tighten := make(chan error, 1)
	go func() { tighten <- g.SetPolicy(gr.ID, PolicyAsk) }()
	waitFor(t, "the second writer to wait for the lock", waitingOnWriterLock)
	close(ks.release)
	if err := <-loosen; err != nil {
		t.Fatalf("SetPolicy(allow): %v", err)
	}
	if err := <-tighten; !errors.Is(err, errFlaky) {
		t.Fatalf("SetPolicy(ask) with a failing keychain = %v, want the failure", err)
	}
	got, err := g.Authenticate(tok)
	if err != nil || got.Policy != PolicyAsk {
		t.Fatalf("policy after allow then ask (ask unsaved) = %q (%v), want ask: a stricter change must bite at once", got.Policy, err)
	}
}

// TestGlobalRefusalKeepsSourceTokens: when the global bucket is empty, a
// source's own bucket is not charged for a call that was refused anyway.
func TestGlobalRefusalKeepsSourceTokens(t *testing.T) {
	t.Parallel()
	l := newSourceLimiter(rate.Every(time.Hour), 3, rate.Every(time.Hour), 1, 100)
	now := time.Now()
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	if !l.allow(a, now) {
		t.Fatal("first call refused")
	}
	for range 5 {
		if l.allow(b, now) {
			t.Fatal("allowed with the global bucket empty")
		}
	}
	l.mu.Lock()
	left := l.sources[sourceKey(b)].lim.TokensAt(now)
	l.mu.Unlock()
	if left != 3 {
		t.Fatalf("source b has %.0f of 3 tokens after 5 calls the global bucket refused", left)
	}
}

// TestOneHostCannotKillCodes: wrong codes from one host (its IPv4 address
// and its IPv6 /64: two sources) never kill a live code, so one LAN host
// cannot stop the owner from pairing; a source past MaxWrongPerSource is
// refused that code even when it then guesses right, so the guesses a code
// can receive stay bounded (MaxWrongAttempts from the sources together).
func TestOneHostCannotKillCodes(t *testing.T) {
	t.Parallel()
	f := newPairerFixture(t)
	s := f.start(t)
	v4 := ClaimSource{Addr: netip.MustParseAddrPort("192.0.2.7:5000"), Listener: ListenerLAN}
	v6 := ClaimSource{Addr: netip.MustParseAddrPort("[2001:db8:5:6::7]:5000"), Listener: ListenerLAN}
	for i := range 3 * MaxWrongAttempts {
		for _, from := range []ClaimSource{v4, v6} {
			if _, err := f.p.Claim(context.Background(), claimFor(newCode()), from); !errors.Is(err, ErrBadCode) {
				t.Fatalf("wrong code %d from %v: %v", i, from.Addr, err)
			}
		}
		f.clock.Advance(sourceEvery) // stay under the rate limit
	}
	// The host guessed right at last: it is refused this code...
	if _, err := f.p.Claim(context.Background(), claimFor(s.Code), v4); !errors.Is(err, ErrBadCode) {
		t.Fatalf("the right code from a source past %d wrong ones: %v, want ErrBadCode", MaxWrongPerSource, err)
	}
	// ...which still pairs anyone else.
	if _, err := f.p.Claim(context.Background(), claimFor(s.Code), src(1)); err != nil {
		t.Fatalf("after one host's wrong codes, the owner's code is dead: %v", err)
	}
	// A new code gives the host a fresh allowance.
	s2 := f.start(t)
	if _, err := f.p.Claim(context.Background(), claimFor(s2.Code), v6); err != nil {
		t.Fatalf("a new code from a source that erred on the old one: %v", err)
	}
}

// TestCanceledCollectorKeepsToken: a status poll whose caller is gone must
// not consume the approved token; the next poll collects it.
func TestCanceledCollectorKeepsToken(t *testing.T) {
	t.Parallel()
	f := newPairerFixture(t)
	s := f.start(t)
	cr, err := f.p.Claim(context.Background(), claimFor(s.Code), src(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.p.Decide(cr.RequestID, true, Scopes{ScopeNode}); err != nil {
		t.Fatal(err)
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if st, err := f.p.Status(gone, cr.RequestID, cr.PollToken); err == nil || st.Token != "" {
		t.Fatalf("Status for a departed caller = %+v, %v; want its context error and no token", st.Status, err)
	}
	st, err := f.p.Status(context.Background(), cr.RequestID, cr.PollToken)
	if err != nil || st.Status != StatusApproved || !ValidToken(st.Token) {
		t.Fatalf("the next poll = %+v, %v; want the token", st.Status, err)
	}
}

// silentPeer accepts TLS connections as identity id and never answers a
// request. Close ends the connections.
func silentPeer(t *testing.T, id *Identity) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", id.ServerTLSConfig())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go c.(*tls.Conn).Handshake() // then silence
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "https://" + ln.Addr().String()
}

// TestRotateGivesUpOnASilentPeer: offering a rotated token to a peer that
// accepts the connection and never answers ends after the call timeout,
// even with a context that never ends (the node's lifetime context).
func TestRotateGivesUpOnASilentPeer(t *testing.T) {
	t.Parallel()
	peer := newIdentity(t, "silent")
	f := newPairerFixture(t, func(o *PairerOptions) { o.CallTimeout = 300 * time.Millisecond })
	gr, _, err := f.g.Issue(IssueRequest{PeerID: peer.ID.String(), Name: "silent", Scopes: Scopes{ScopeAgent}})
	if err != nil {
		t.Fatal(err)
	}
	heldTok, _ := newToken(newGrantID())
	if err := f.g.PutHeld(Held{PeerID: peer.ID.String(), Name: "silent", URL: silentPeer(t, peer), Token: heldTok}); err != nil {
		t.Fatal(err)
	}
	type result struct {
		tok       string
		delivered bool
		err       error
	}
	done := make(chan result, 1)
	go func() {
		tok, delivered, err := f.p.Rotate(context.Background(), gr.ID)
		done <- result{tok, delivered, err}
	}()
	select {
	case r := <-done:
		if r.err != nil || r.delivered || !ValidToken(r.tok) {
			t.Fatalf("Rotate = delivered %v, %v; want a new token, not delivered", r.delivered, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Rotate still waiting for a silent peer after 20s")
	}
}

// TestPlainHTTPPeerURLsRefused: a held grant's token and a join's code go
// only over HTTPS pinned to the peer, loopback included: plain http to
// 127.0.0.1 reaches whoever holds the port.
func TestPlainHTTPPeerURLsRefused(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	plain := taggedServer(t, ListenerLoopback, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusTeapot)
	}))
	for _, u := range []string{plain.URL, "http://localhost:47654", "http://[::1]:47654", "https://0.0.0.0:47654", "https://[::]:47654"} {
		if _, err := CheckPeerURL(u); !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckPeerURL(%s) = %v, want ErrInvalid", u, err)
		}
	}
	if got, err := CheckPeerURL("https://127.0.0.1:47654/"); err != nil || got != "https://127.0.0.1:47654" {
		t.Errorf("CheckPeerURL(https loopback) = %q, %v", got, err)
	}

	b := newNode(t, "desktop", nodeOpts{})
	peer := newIdentity(t, "laptop")
	tok, _ := newToken(newGrantID())
	if err := b.g.PutHeld(Held{PeerID: peer.ID.String(), Name: "laptop", URL: plain.URL, Token: tok}); !errors.Is(err, ErrInvalid) {
		t.Errorf("PutHeld with a plain http URL = %v, want ErrInvalid", err)
	}
	if err := b.g.PutHeld(Held{PeerID: peer.ID.String(), Name: "laptop", Token: tok}); err != nil {
		t.Fatal(err)
	}
	tr, err := b.g.PeerTransport(peer.ID.String())
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: tr}
	defer c.CloseIdleConnections()
	if resp, err := c.Get(plain.URL + "/nodes/manifest"); err == nil {
		resp.Body.Close()
		t.Errorf("a held token went over plain http to %s", plain.URL)
	}
	s := Session{Code: newCode(), Fingerprint: peer.Fingerprint}
	for _, u := range []string{s.URL(plain.URL), plain.URL + "/pair#c=" + s.Code} {
		if _, err := Join(context.Background(), JoinOptions{URL: u, Identity: b.id, Grants: b.g, Name: "desktop"}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Join(%s) = %v, want ErrInvalid", u, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the plain http server got %d requests", n)
	}
}

// TestLoopbackOfferOnlyFromLoopback: a peer on the network cannot make this
// device call a service on its own loopback (Offer.URL 127.0.0.1: our held
// token would go there), in whatever spelling, nor a link-local or metadata
// address; an offer arriving on the loopback listener, from a second node
// on this machine, may.
func TestLoopbackOfferOnlyFromLoopback(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		lan  bool
		url  string
		want int
	}{
		{"lan, loopback url", true, "https://127.0.0.1:9", http.StatusBadRequest},
		{"lan, localhost url", true, "https://localhost:9", http.StatusBadRequest},
		{"lan, v6 loopback url", true, "https://[::1]:9", http.StatusBadRequest},
		{"lan, absolute localhost url", true, "https://localhost.:9", http.StatusBadRequest},
		{"lan, hex loopback url", true, "https://0x7f000001:9", http.StatusBadRequest},
		{"lan, mapped loopback url", true, "https://[::ffff:127.0.0.1]:9", http.StatusBadRequest},
		{"lan, metadata url", true, "https://169.254.169.254:9", http.StatusBadRequest},
		{"lan, this-network url", true, "https://0.0.0.0:9", http.StatusBadRequest},
		{"lan, lan url", true, "https://192.0.2.7:47654", http.StatusOK},
		{"lan, no url", true, "", http.StatusOK},
		{"loopback, loopback url", false, "https://127.0.0.1:9", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newNode(t, "laptop", nodeOpts{lan: tc.lan})
			b := newIdentity(t, "desktop")
			_, tok, err := a.g.Issue(IssueRequest{PeerID: b.ID.String(), Name: "desktop", Scopes: Scopes{ScopeAgent}})
			if err != nil {
				t.Fatal(err)
			}
			give, _ := newToken(newGrantID())
			body, _ := json.Marshal(Offer{Token: give, URL: tc.url, FP: b.Fingerprint, Name: "desktop", Scopes: Scopes{ScopeAgent}})
			req, _ := http.NewRequest("POST", a.url+"/pair/reciprocate", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("Content-Type", "application/json")
			c := &http.Client{Transport: &http.Transport{TLSClientConfig: PinnedTLSConfig(a.id.Fingerprint)}}
			defer c.CloseIdleConnections()
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("offer with URL %q on the %s listener: %s, want %d", tc.url, map[bool]string{true: "lan", false: "loopback"}[tc.lan], resp.Status, tc.want)
			}
			h, err := a.g.Held(b.ID.String())
			if stored := err == nil; stored != (tc.want == http.StatusOK) {
				t.Fatalf("held grant stored = %v (%+v)", stored, h)
			}
		})
	}
}

// TestLegacyLoopbackHeldURLUpgraded: held grants stored with the old plain
// http loopback URL (before the loopback listener spoke TLS) load as the
// same address over https, so two nodes on one machine stay paired.
func TestLegacyLoopbackHeldURLUpgraded(t *testing.T) {
	t.Parallel()
	ks := keychain.NewMemory()
	peer := newIdentity(t, "laptop")
	tok, _ := newToken(newGrantID())
	rec, _ := json.Marshal(heldRecord{Held: Held{PeerID: peer.ID.String(), GrantID: TokenGrantID(tok), Name: "laptop", URL: "http://127.0.0.1:5555", Fingerprint: peer.Fingerprint, Scopes: Scopes{ScopeAgent}}, Token: tok})
	if err := ks.Set(heldKeyPrefix+peer.ID.String(), rec); err != nil {
		t.Fatal(err)
	}
	g := newGrants(t, ks)
	h, err := g.Held(peer.ID.String())
	if err != nil || h.URL != "https://127.0.0.1:5555" {
		t.Fatalf("held grant after load: URL %q, %v; want https://127.0.0.1:5555", h.URL, err)
	}
}
