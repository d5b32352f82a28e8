package pairing

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"meshtray/keychain"
)

// fakeClock is a settable clock for expiry tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type pairerFixture struct {
	id    *Identity
	g     *Grants
	p     *Pairer
	clock *fakeClock
	reqs  chan Request
}

func newPairerFixture(t *testing.T, mod ...func(*PairerOptions)) *pairerFixture {
	t.Helper()
	f := &pairerFixture{id: newIdentity(t, "laptop"), g: newGrants(t, keychain.NewMemory()), clock: newFakeClock(), reqs: make(chan Request, 64)}
	o := PairerOptions{
		Grants: f.g, Identity: f.id, Name: "laptop", OS: "Debian GNU/Linux 12 (x86_64)",
		Now:       f.clock.Now,
		OnRequest: func(r Request) { f.reqs <- r },
	}
	for _, m := range mod {
		m(&o)
	}
	p, err := NewPairer(o)
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	t.Cleanup(func() { p.Close() })
	return f
}

// src returns distinct source addresses, so tests of the code logic are
// not throttled by the per-source rate limit.
func src(i int) ClaimSource {
	return ClaimSource{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 40000), Listener: ListenerLAN}
}

func claimFor(code string) ClaimRequest {
	return ClaimRequest{Code: code, Name: "phone", OS: "Android 15", Nonce: randomString(16), RequestedScopes: Scopes{ScopeNode, ScopeAgent}}
}

func (f *pairerFixture) start(t *testing.T) Session {
	t.Helper()
	s, err := f.p.Start()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// claim starts a code and claims it from src(1), which must succeed.
func (f *pairerFixture) claim(t *testing.T) ClaimResponse {
	t.Helper()
	s := f.start(t)
	resp, err := f.p.Claim(context.Background(), claimFor(s.Code), src(1))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestCodeShape(t *testing.T) {
	t.Parallel()
	counts := map[rune]int{}
	seen := map[string]bool{}
	const n = 2000
	for range n {
		c := newCode()
		if len(c) != CodeLen || seen[c] {
			t.Fatalf("code %q (len %d, repeat %v)", c, len(c), seen[c])
		}
		seen[c] = true
		for _, r := range c {
			if strings.ContainsRune("01OILU", r) || !strings.ContainsRune(CodeAlphabet, r) {
				t.Fatalf("code %q has %q", c, r)
			}
			counts[r]++
		}
	}
	if len(CodeAlphabet) != 30 || len(counts) != 30 {
		t.Fatalf("alphabet %d symbols, %d used", len(CodeAlphabet), len(counts))
	}
	// Uniform: 16000 draws over 30 symbols, mean 533, sd 23; allow 6 sd.
	for r, c := range counts {
		if c < 533-140 || c > 533+140 {
			t.Errorf("symbol %q drawn %d times of %d", r, c, n*CodeLen)
		}
	}
}

func TestClaimApproveCollect(t *testing.T) {
	t.Parallel()
	f := newPairerFixture(t)
	s := f.start(t)
	if s.DeviceID != f.id.ID.String() || s.Fingerprint != f.id.Fingerprint || !s.Expires.Equal(f.clock.Now().Add(DefaultCodeTTL)) {
		t.Fatalf("session %+v", s)
	}
	claimant := newIdentity(t, "desk")
	c := claimFor(strings.ToLower(s.Code[:4] + "-" + s.Code[4:])) // typed: lower case with a dash
	c.DeviceID = strings.ToLower(strings.ReplaceAll(claimant.ID.String(), "-", ""))
	c.FP = claimant.Fingerprint
	c.RequestedScopes = Scopes{ScopeFull, ScopeAgent}
	if err := c.signClaim(claimant, f.id.Fingerprint); err != nil {
		t.Fatal(err)
	}
	resp, err := f.p.Claim(context.Background(), c, src(1))
	if err != nil {
		t.Fatal(err)
	}
	if want := SAS(f.id.Fingerprint, claimant.ID.String(), c.Nonce, resp.ServerNonce, resp.RequestID); resp.SAS != want || len(resp.SAS) != 6 {
		t.Fatalf("SAS %q, want %q", resp.SAS, want)
	}
	if resp.Issuer != f.p.Issuer() || resp.Issuer.Name != "laptop" {
		t.Errorf("issuer %+v", resp.Issuer)
	}
	r := <-f.reqs
	pend := f.p.Pending()
	if len(pend) != 1 || pend[0].ID != r.ID || r.ID != resp.RequestID {
		t.Fatalf("Pending %+v, OnRequest %+v", pend, r)
	}
	if r.Name != "phone" || r.DeviceID != claimant.ID.String() || r.Fingerprint != claimant.Fingerprint || r.SAS != resp.SAS ||
		r.Source != src(1).Addr || r.Listener != ListenerLAN || r.RequestedScopes.String() != "agent,full" || len(r.Replaces) != 0 ||
		!r.Expires.Equal(r.Created.Add(DefaultRequestTTL)) {
		t.Errorf("request %+v", r)
	}
	gr, err := f.p.Decide(r.ID, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if gr.Scopes.String() != "agent" || gr.PeerID != claimant.ID.String() || gr.Name != "phone" || gr.Policy != PolicyAsk {
		t.Errorf("grant %+v: default scopes must be the requested minus full", gr)
	}
	if len(f.p.Pending()) != 0 {
		t.Error("decided request still pending")
	}
	if _, err := f.p.Status(context.Background(), r.ID, "wrong"+resp.PollToken); !errors.Is(err, ErrNoRequest) {
		t.Errorf("status with a wrong poll token: %v", err)
	}
	st, err := f.p.Status(context.Background(), r.ID, resp.PollToken)
	if err != nil || st.Status != StatusApproved || st.GrantID != gr.ID || st.Scopes.String() != "agent" {
		t.Fatalf("status %+v, %v", st, err)
	}
	if got, err := f.g.Authenticate(st.Token); err != nil || got.ID != gr.ID {
		t.Fatalf("collected token: %v", err)
	}
	if _, err := f.p.Status(context.Background(), r.ID, resp.PollToken); !errors.Is(err, ErrNoRequest) {
		t.Fatalf("second collection: %v, want ErrNoRequest (token exactly once)", err)
	}
	if _, err := f.p.Decide(r.ID, false, nil); !errors.Is(err, ErrNoRequest) {
		t.Errorf("Decide after collection: %v", err)
	}
}

func TestWrongCodesKillTheCode(t *testing.T) {
	t.Parallel()
	for _, wrongs := range []int{MaxWrongAttempts - 1, MaxWrongAttempts} {
		t.Run(fmt.Sprint(wrongs), func(t *testing.T) {
			t.Parallel()
			f := newPairerFixture(t)
			s := f.start(t)
			other := f.start(t) // every live code pays for a wrong guess
			for i := range wrongs {
				if _, err := f.p.Claim(context.Background(), claimFor(newCode()), src(i)); !errors.Is(err, ErrBadCode) {
					t.Fatalf("wrong code %d: %v", i, err)
				}
			}
			for _, code := range []string{s.Code, other.Code} {
				_, err := f.p.Claim(context.Background(), claimFor(code), src(100))
				if dead := wrongs >= MaxWrongAttempts; dead != errors.Is(err, ErrBadCode) {
					t.Fatalf("after %d wrong codes the right one gave %v", wrongs, err)
				}
			}
		})
	}
}

// TestRandomClaimsNeverPair: 1,000 random claims, against codes restarted
// whenever guessing killed them, never pair.
func TestRandomClaimsNeverPair(t *testing.T) {
	t.Parallel()
	f := newPairerFixture(t)
	restarts := 0
	for i := range 1000 {
		if i%MaxWrongAttempts == 0 {
			f.start(t)
			restarts++
		}
		c := claimFor(newCode())
		if i%3 == 0 {
			c.Code = strings.ToLower(c.Code)
		}
		if resp, err := f.p.Claim(context.Background(), c, src(i)); !errors.Is(err, ErrBadCode) {
			t.Fatalf("random claim %d: %+v, %v", i, resp, err)
		}
		f.clock.Advance(100 * time.Millisecond) // keep the global rate limit fed
	}
	if n := len(f.p.Pending()); n != 0 || len(f.g.List()) != 0 {
		t.Fatalf("%d pending, %d grants after random claims", n, len(f.g.List()))
	}
	t.Logf("1000 random claims over %d codes: none paired", restarts)
}

func TestUsedAndExpiredCodes(t *testing.T) {
	t.Parallel()
	f := newPairerFixture(t)
	s := f.start(t)
	if _, err := f.p.Claim(context.Background(), claimFor(s.Code), src(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.p.Claim(context.Background(), claimFor(s.Code), src(2)); !errors.Is(err, ErrBadCode) {
		t.Fatalf("used code: %v", err)
	}
	s = f.start(t)
	f.clock.Advance(DefaultCodeTTL - time.Second)
	if _, err := f.p.Claim(context.Background(), claimFor(s.Code), src(3)); err != nil {
		t.Fatalf("code 1 s before expiry: %v", err)
	}
	s = f.start(t)
	f.clock.Advance(DefaultCodeTTL)
	if _, err := f.p.Claim(context.Background(), claimFor(s.Code), src(4)); !errors.Is(err, ErrBadCode) {
		t.Fatalf("expired code: %v", err)
	}
	s = f.start(t)
	f.p.EndSessions()
	if _, err := f.p.Claim(context.Background(), claimFor(s.Code), src(5)); !errors.Is(err, ErrBadCode) {
		t.Fatalf("ended code: %v", err)
	}
	// At most maxSessions codes live: a ninth ends the oldest.
	first := f.start(t)
	for range maxSessions {
		f.start(t)
	}
	if _, err := f.p.Claim(context.Background(), claimFor(first.Code), src(6)); !errors.Is(err, ErrBadCode) {
		t.Fatalf("code pushed out by newer ones: %v", err)
	}
}

func TestClaimValidation(t *testing.T) {
	t.Parallel()
	f := newPairerFixture(t)
	s := f.start(t)
	a, b := newIdentity(t, "a"), newIdentity(t, "b")
	signed := func(c *ClaimRequest, id *Identity, issuerFP string) {
		c.DeviceID = id.ID.String()
		if err := c.signClaim(id, issuerFP); err != nil {
			t.Fatal(err)
		}
	}
	for i, mod := range []func(*ClaimRequest){
		// Proof of the key behind device_id.
		func(c *ClaimRequest) { c.DeviceID = a.ID.String() }, // no proof at all
		func(c *ClaimRequest) { signed(c, a, f.id.Fingerprint); c.DeviceID = b.ID.String() },
		func(c *ClaimRequest) { signed(c, a, f.id.Fingerprint); c.FP = b.Fingerprint; c.DeviceID = "" },
		func(c *ClaimRequest) { signed(c, a, b.Fingerprint) }, // signed for another issuer
		func(c *ClaimRequest) { signed(c, a, f.id.Fingerprint); c.Nonce = randomString(16) },
		func(c *ClaimRequest) { signed(c, a, f.id.Fingerprint); c.Sig = c.Sig[:len(c.Sig)-4] + "AAA=" },
		func(c *ClaimRequest) { signed(c, a, f.id.Fingerprint); c.Cert = "!!" },
		func(c *ClaimRequest) { signed(c, a, f.id.Fingerprint); c.Cert = strings.Repeat("A", 4000) },
		func(c *ClaimRequest) { c.Name = "" },
		func(c *ClaimRequest) { c.Name = "\u202e\x00" },
		func(c *ClaimRequest) { c.Nonce = "short" },
		func(c *ClaimRequest) { c.Nonce = strings.Repeat("a", 129) },
		func(c *ClaimRequest) { c.Nonce = strings.Repeat("é", 20) },
		func(c *ClaimRequest) { c.DeviceID = "nope" },
		func(c *ClaimRequest) { c.FP = "12" },
		func(c *ClaimRequest) { c.DeviceID, c.FP = a.ID.String(), b.Fingerprint },
		func(c *ClaimRequest) { c.RequestedScopes = Scopes{"root"} },
	} {
		c := claimFor(s.Code)
		mod(&c)
		if _, err := f.p.Claim(context.Background(), c, src(i)); !errors.Is(err, ErrInvalid) {
			t.Errorf("claim %d: %v, want ErrInvalid", i, err)
		}
	}
	// Invalid bodies never test the code: it is neither used nor wounded.
	c := claimFor(s.Code)
	c.FP = a.Fingerprint // the device ID follows from the fingerprint
	if err := c.signClaim(a, f.id.Fingerprint); err != nil {
		t.Fatal(err)
	}
	if _, err := f.p.Claim(context.Background(), c, src(99)); err != nil {
		t.Fatalf("valid claim after invalid ones: %v", err)
	}
	if r := <-f.reqs; r.DeviceID != a.ID.String() {
		t.Errorf("device ID from fp: %q", r.DeviceID)
	}
}

func TestRateLimitPerSource(t *testing.T) {
	t.Parallel()
	f := newPairerFixture(t)
	one := src(1)
	for i := range sourceBurst {
		if _, err := f.p.Claim(context.Background(), claimFor("XXXXXXXX"), one); errors.Is(err, ErrRateLimited) {
			t.Fatalf("claim %d rate-limited inside the burst", i)
		}
	}
	if _, err := f.p.Claim(context.Background(), claimFor("XXXXXXXX"), one); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("claim over the burst: %v", err)
	}
	if _, err := f.p.Claim(context.Background(), claimFor("XXXXXXXX"), src(2)); errors.Is(err, ErrRateLimited) {
		t.Fatal("another source throttled")
	}
	f.clock.Advance(sourceEvery)
	if _, err := f.p.Claim(context.Background(), claimFor("XXXXXXXX"), one); errors.Is(err, ErrRateLimited) {
		t.Fatal("no refill after the interval")
	}
	// IPv6: one /64 is one source.
	for i := range sourceBurst {
		a := netip.MustParseAddr(fmt.Sprintf("2001:db8:1:2::%x", i+1))
		f.p.Claim(context.Background(), claimFor("XXXXXXXX"), ClaimSource{Addr: netip.AddrPortFrom(a, 1)})
	}
	v6 := ClaimSource{Addr: netip.AddrPortFrom(netip.MustParseAddr("2001:db8:1:2:ffff::9"), 1)}
	if _, err := f.p.Claim(context.Background(), claimFor("XXXXXXXX"), v6); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("same /64, new address: %v", err)
	}
}

func TestSourceTableBounded(t *testing.T) {
	t.Parallel()
	l := newSourceLimiter(1, 2, 1e9, 1e9, 100)
	now := time.Now()
	for i := range 10000 {
		l.allow(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), now)
		if n := l.size(); n > 100 {
			t.Fatalf("%d sources remembered, cap 100", n)
		}
	}
	// The newest sources are kept: their spent tokens are not forgotten.
	last := netip.AddrFrom4([4]byte{10, 0, byte(9999 >> 8), byte(9999 & 255)})
	l.allow(last, now)
	if l.allow(last, now) {
		t.Error("the most recent source's bucket was reset by eviction")
	}
}

func TestRequestIDsUnguessable(t *testing.T) {
	t.Parallel()
	f := newPairerFixture(t)
	ids, polls := map[string]bool{}, map[string]bool{}
	for i := range 200 {
		s := f.start(t)
		resp, err := f.p.Claim(context.Background(), claimFor(s.Code), src(i))
		if err != nil {
			t.Fatal(err)
		}
		<-f.reqs
		for _, v := range []struct {
			s     string
			bytes int
			set   map[string]bool
		}{{resp.RequestID, 16, ids}, {resp.PollToken, 32, polls}, {resp.ServerNonce, 16, nil}} {
			raw, err := base64.RawURLEncoding.DecodeString(v.s)
			if err != nil || len(raw) != v.bytes {
				t.Fatalf("%q: %d random bytes, want %d", v.s, len(raw), v.bytes)
			}
			if v.set != nil {
				if v.set[v.s] {
					t.Fatalf("repeated %q", v.s)
				}
				v.set[v.s] = true
			}
		}
		if _, err := f.p.Decide(resp.RequestID, false, nil); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(time.Second)
	}
	// Guessing: neither a made-up ID nor a real ID with a made-up poll token answers.
	for id := range ids {
		if _, err := f.p.Status(context.Background(), id, randomString(32)); !errors.Is(err, ErrNoRequest) {
			t.Fatalf("status with a guessed poll token: %v", err)
		}
		break
	}
	if _, err := f.p.Status(context.Background(), randomString(16), randomString(32)); !errors.Is(err, ErrNoRequest) {
		t.Fatal("a guessed request ID answered")
	}
}

func TestPendingRequestExpires(t *testing.T) {
	t.Parallel()
	f := newPairerFixture(t)
	resp := f.claim(t)
	ch, cancel := f.p.Subscribe()
	defer cancel()
	f.clock.Advance(DefaultRequestTTL)
	if n := len(f.p.Pending()); n != 0 {
		t.Fatalf("%d pending after the TTL", n)
	}
	select {
	case <-ch:
	default:
		t.Error("no change notice when the request expired")
	}
	st, err := f.p.Status(context.Background(), resp.RequestID, resp.PollToken)
	if err != nil || st.Status != StatusExpired {
		t.Fatalf("status %+v, %v", st, err)
	}
	if _, err := f.p.Decide(resp.RequestID, true, Scopes{ScopeAgent}); !errors.Is(err, ErrExpired) {
		t.Fatalf("Decide after expiry: %v", err)
	}
	f.clock.Advance(DefaultRequestTTL)
	if _, err := f.p.Status(context.Background(), resp.RequestID, resp.PollToken); !errors.Is(err, ErrNoRequest) {
		t.Fatalf("expired request not forgotten: %v", err)
	}
	if len(f.g.List()) != 0 {
		t.Fatal("an expired request left a grant")
	}
}

func TestDecideRules(t *testing.T) {
	t.Parallel()
	f := newPairerFixture(t)
	claim := func(scopes ...Scope) ClaimResponse {
		t.Helper()
		s := f.start(t)
		c := claimFor(s.Code)
		c.RequestedScopes = scopes
		resp, err := f.p.Claim(context.Background(), c, src(len(f.g.List())+int(f.clock.Now().Unix()%1000)))
		if err != nil {
			t.Fatal(err)
		}
		<-f.reqs
		f.clock.Advance(time.Second)
		return resp
	}
	r := claim(ScopeFull)
	if _, err := f.p.Decide(r.RequestID, true, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("default scopes of a full-only request: %v (full is never a default)", err)
	}
	ra := claim(ScopeApprove, ScopeAgent)
	if gr, err := f.p.Decide(ra.RequestID, true, nil); err != nil || gr.Scopes.String() != "agent" {
		t.Errorf("default scopes of an agent,approve request: %v, %v (approve is never a default)", gr.Scopes, err)
	}
	if _, err := f.p.Decide(r.RequestID, true, Scopes{"admin"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown scope: %v", err)
	}
	gr, err := f.p.Decide(r.RequestID, true, Scopes{ScopeFull})
	if err != nil || gr.Scopes.String() != "full" {
		t.Fatalf("explicit full: %+v, %v", gr, err)
	}
	if _, err := f.p.Decide(r.RequestID, false, nil); !errors.Is(err, ErrDecided) {
		t.Errorf("second decision: %v", err)
	}
	r = claim()
	if _, err := f.p.Decide(r.RequestID, false, nil); err != nil {
		t.Fatal(err)
	}
	if st, err := f.p.Status(context.Background(), r.RequestID, r.PollToken); err != nil || st.Status != StatusDenied || st.Token != "" {
		t.Fatalf("denied status %+v, %v", st, err)
	}
	if _, err := f.p.Decide("nope", true, nil); !errors.Is(err, ErrNoRequest) {
		t.Errorf("unknown request: %v", err)
	}
}

// An approved token nobody collects does not leave a live grant behind.
func TestUncollectedGrantRevoked(t *testing.T) {
	t.Parallel()
	f := newPairerFixture(t)
	s := f.start(t)
	resp, err := f.p.Claim(context.Background(), claimFor(s.Code), src(1))
	if err != nil {
		t.Fatal(err)
	}
	gr, err := f.p.Decide(resp.RequestID, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(DefaultRequestTTL)
	f.p.revokeOrphans(false) // one janitor round
	if _, err := f.g.Get(gr.ID); !errors.Is(err, ErrNoGrant) {
		t.Fatalf("uncollected grant still there: %v", err)
	}
	if st, err := f.p.Status(context.Background(), resp.RequestID, resp.PollToken); err != nil || st.Status != StatusExpired || st.Token != "" {
		t.Fatalf("late collection: %+v, %v", st, err)
	}

	// Close revokes those still waiting for collection.
	s = f.start(t)
	resp, err = f.p.Claim(context.Background(), claimFor(s.Code), src(2))
	if err != nil {
		t.Fatal(err)
	}
	gr, err = f.p.Decide(resp.RequestID, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.g.Get(gr.ID); !errors.Is(err, ErrNoGrant) {
		t.Fatalf("grant waiting for collection survived Close: %v", err)
	}
	if err := f.p.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	if _, err := f.p.Start(); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close: %v", err)
	}
}

func TestLongPoll(t *testing.T) {
	t.Parallel()
	f := newPairerFixture(t, func(o *PairerOptions) { o.MaxWait = time.Minute })
	s := f.start(t)
	resp, err := f.p.Claim(context.Background(), claimFor(s.Code), src(1))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		st  StatusResponse
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := f.p.Status(context.Background(), resp.RequestID, resp.PollToken)
		done <- result{st, err}
	}()
	waitFor(t, "the poll to wait", func() bool {
		f.p.mu.Lock()
		defer f.p.mu.Unlock()
		return f.p.reqs[resp.RequestID].waiters == 1
	})
	start := time.Now()
	if _, err := f.p.Decide(resp.RequestID, true, nil); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil || res.st.Status != StatusApproved || res.st.Token == "" {
		t.Fatalf("woken poll: %+v, %v", res.st, res.err)
	}
	t.Logf("poll woke %v after the decision", time.Since(start))

	// An undecided poll returns pending after MaxWait; a cancelled one at once.
	g := newPairerFixture(t, func(o *PairerOptions) { o.MaxWait = 50 * time.Millisecond })
	s = g.start(t)
	resp, _ = g.p.Claim(context.Background(), claimFor(s.Code), src(1))
	if st, err := g.p.Status(context.Background(), resp.RequestID, resp.PollToken); err != nil || st.Status != StatusPending {
		t.Fatalf("undecided poll: %+v, %v", st, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.p.Status(ctx, resp.RequestID, resp.PollToken); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled poll: %v", err)
	}
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSASKnownAnswer(t *testing.T) {
	t.Parallel()
	// Computed independently with Python's hashlib from the formula in the
	// SAS docstring.
	for _, tc := range []struct {
		in   [5]string
		want string
	}{
		{[5]string{strings.Repeat("ab", 32), syncthingID, "claimant-nonce-0123456789abcdef", "server-nonce-xyz", "request-id-42"}, "707104"},
		{[5]string{strings.Repeat("00", 32), "", strings.Repeat("n", 22), "s", "r"}, "289839"},
	} {
		if got := SAS(tc.in[0], tc.in[1], tc.in[2], tc.in[3], tc.in[4]); got != tc.want {
			t.Errorf("SAS(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	// Every input matters.
	base := [5]string{"f", "d", "n", "s", "r"}
	ref := SAS(base[0], base[1], base[2], base[3], base[4])
	for i := range base {
		in := base
		in[i] += "x"
		if SAS(in[0], in[1], in[2], in[3], in[4]) == ref {
			t.Errorf("changing input %d kept the SAS (1 in 10^6: check)", i)
		}
	}
	// Field boundaries are not ambiguous.
	if SAS("ab", "c", "n", "s", "r") == SAS("a", "bc", "n", "s", "r") {
		t.Error("moving a byte between fields kept the SAS")
	}
}

func FuzzDecodeClaim(f *testing.F) {
	f.Add([]byte(`{"code":"ABCD2345","name":"phone","nonce":"aaaaaaaaaaaaaaaaaaaaaaaa","requested_scopes":["agent"]}`))
	f.Add([]byte(`{"code":"x","name":"\u202e","device_id":"P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2","nonce":"` + strings.Repeat("b", 40) + `"}`))
	f.Add([]byte(`{} {}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeClaim(strings.NewReader(string(b)))
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("decode error %v does not wrap ErrInvalid", err)
			}
			return
		}
		v, err := c.validate()
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrBadDeviceID) {
				t.Fatalf("validate error %v", err)
			}
			return
		}
		if v.Name == "" || len([]rune(v.Name)) > MaxNameLen || len([]rune(v.OS)) > MaxOSLen || len(v.Nonce) < minNonceLen || len(v.Nonce) > maxNonceLen {
			t.Fatalf("accepted out-of-bounds claim %+v", v)
		}
		for _, r := range v.Name + v.OS {
			if r < 0x20 || isBidiControl(r) {
				t.Fatalf("accepted control character %U", r)
			}
		}
		if v.DeviceID != "" {
			id, err := ParseDeviceID(v.DeviceID)
			if err != nil || id.String() != v.DeviceID || id.Fingerprint() != v.FP {
				t.Fatalf("device ID %q / fp %q not canonical and consistent", v.DeviceID, v.FP)
			}
		}
	})
}

// sasJS is the browser snippet of the SAS docstring, wrapped to read its
// inputs from argv. Node's WebCrypto is the browser's API.
const sasJS = `
const [fp, deviceID, nonce, serverNonce, requestID] = process.argv.slice(2);
(async () => {
  const enc = new TextEncoder(), z = "\u0000";
  const d = await crypto.subtle.digest("SHA-256", enc.encode(
    ["meshtray-sas-v1", fp, deviceID, nonce, serverNonce, requestID].join(z)));
  const sas = String(new DataView(d).getUint32(0) % 1000000).padStart(6, "0");
  console.log(sas);
})();
`

// TestSASInJavaScript runs the documented WebCrypto formula in Node and
// checks it against SAS, as the phone page will compute it.
func TestSASInJavaScript(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is needed to check the SAS formula the phone page uses: apt-get install -y nodejs")
	}
	script := filepath.Join(t.TempDir(), "sas.js")
	if err := os.WriteFile(script, []byte(sasJS), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		id := testDeviceID(byte(i))
		in := []string{id.Fingerprint(), id.String(), randomString(16), randomString(16), randomString(16)}
		if i == 0 {
			in[1] = "" // a phone claimant
		}
		out, err := exec.Command(node, append([]string{script}, in...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("node: %v\n%s", err, out)
		}
		if got, want := strings.TrimSpace(string(out)), SAS(in[0], in[1], in[2], in[3], in[4]); got != want {
			t.Fatalf("JavaScript SAS %q, Go %q for %q", got, want, in)
		}
	}
}

// TestRepairReplacesOnCollection: a device that pairs again sees its old
// grant listed in Replaces; the old grant keeps working until the new token
// is collected, then it is revoked.
func TestRepairReplacesOnCollection(t *testing.T) {
	t.Parallel()
	f := newPairerFixture(t)
	dev := newIdentity(t, "desk")
	pair := func(i int) (ClaimResponse, Request) {
		t.Helper()
		s := f.start(t)
		c := claimFor(s.Code)
		c.DeviceID = dev.ID.String()
		if err := c.signClaim(dev, f.id.Fingerprint); err != nil {
			t.Fatal(err)
		}
		resp, err := f.p.Claim(context.Background(), c, src(i))
		if err != nil {
			t.Fatal(err)
		}
		r := <-f.reqs
		if _, err := f.p.Decide(r.ID, true, nil); err != nil {
			t.Fatal(err)
		}
		return resp, r
	}
	first, r1 := pair(1)
	st1, err := f.p.Status(context.Background(), first.RequestID, first.PollToken)
	if err != nil || len(r1.Replaces) != 0 {
		t.Fatalf("first pairing: %v, replaces %v", err, r1.Replaces)
	}
	second, r2 := pair(2)
	if len(r2.Replaces) != 1 || r2.Replaces[0] != st1.GrantID {
		t.Fatalf("Replaces = %v, want [%s]", r2.Replaces, st1.GrantID)
	}
	if _, err := f.g.Authenticate(st1.Token); err != nil {
		t.Fatalf("old grant refused before the new token was collected: %v", err)
	}
	st2, err := f.p.Status(context.Background(), second.RequestID, second.PollToken)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.g.Authenticate(st1.Token); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("old grant after re-pairing: %v", err)
	}
	if _, err := f.g.Authenticate(st2.Token); err != nil {
		t.Fatal(err)
	}
}

// TestStatusHandlerAtShutdown: a status long-poll cut by the server's
// shutdown (the request's context ends) answers 503, never an empty 200 a
// claimant cannot read.
func TestStatusHandlerAtShutdown(t *testing.T) {
	t.Parallel()
	f := newPairerFixture(t)
	cr := f.claim(t)
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest(http.MethodGet, "/pair/status/"+cr.RequestID, nil).WithContext(ctx)
	req.SetPathValue("id", cr.RequestID)
	req.Header.Set("Authorization", "Bearer "+cr.PollToken)
	req.RemoteAddr = "10.0.0.9:40000"
	rec := httptest.NewRecorder()
	cancel() // the server is shutting down: BaseContext ended
	f.p.StatusHandler().ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "error") {
		t.Fatalf("status poll at shutdown: HTTP %d %q, want 503 with an error", rec.Code, rec.Body.String())
	}
}

// TestStatusAfterClose: a closing pairer answers a pending request's poll
// with ErrClosed (HTTP 503: try again), never denied nor expired: nobody
// declined it, and the node's queue restores it at the next start.
func TestStatusAfterClose(t *testing.T) {
	t.Parallel()
	f := newPairerFixture(t)
	cr := f.claim(t)
	type result struct {
		st  StatusResponse
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := f.p.Status(context.Background(), cr.RequestID, cr.PollToken)
		done <- result{st, err}
	}()
	f.p.Close()
	if r := <-done; !errors.Is(r.err, ErrClosed) || r.st.Status != "" || HTTPStatus(r.err) != http.StatusServiceUnavailable {
		t.Fatalf("status of a pending request at Close = %q, %v; want ErrClosed (503)", r.st.Status, r.err)
	}
}

// TestRestoreAfterRestart: a pending request put back into a new pairer
// (the node restarted) answers its claimant's poll token, not another; it
// has no SAS; it is approved only once the claimant polled again, and then
// the claimant collects its token; a denial is delivered at once.
func TestRestoreAfterRestart(t *testing.T) {
	t.Parallel()
	f := newPairerFixture(t)
	cr := f.claim(t)
	req := <-f.reqs
	if req.PollHash != sha256.Sum256([]byte(cr.PollToken)) || req.Restored {
		t.Fatalf("OnRequest's request: poll hash %x, restored %v", req.PollHash, req.Restored)
	}
	// The next run: a new pairer on the same identity and grants.
	f2 := newPairerFixture(t, func(o *PairerOptions) { o.Grants, o.Identity = f.g, f.id })
	if err := f2.p.Restore(Request{ID: req.ID, Name: req.Name}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Restore without a poll hash: %v", err)
	}
	if err := f2.p.Restore(req); err != nil {
		t.Fatal(err)
	}
	if err := f2.p.Restore(req); !errors.Is(err, ErrDecided) {
		t.Fatalf("second Restore: %v", err)
	}
	pend := f2.p.Pending()
	if len(pend) != 1 || pend[0].ID != req.ID || pend[0].SAS != "" || !pend[0].Restored {
		t.Fatalf("Pending after Restore = %+v", pend)
	}
	if _, err := f2.p.Decide(req.ID, true, nil); !errors.Is(err, ErrClaimantAway) || HTTPStatus(err) != http.StatusConflict {
		t.Fatalf("approval before the claimant polled: %v, want ErrClaimantAway (409)", err)
	}
	if _, err := f2.p.Status(context.Background(), req.ID, "not the poll token"); !errors.Is(err, ErrNoRequest) {
		t.Fatalf("poll with another token: %v", err)
	}
	changes, stop := f2.p.Subscribe()
	defer stop()
	type result struct {
		st  StatusResponse
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := f2.p.Status(context.Background(), req.ID, cr.PollToken)
		done <- result{st, err}
	}()
	var g Grant
	for deadline := time.After(10 * time.Second); ; {
		var err error
		if g, err = f2.p.Decide(req.ID, true, Scopes{ScopeAgent}); err == nil {
			break
		} else if !errors.Is(err, ErrClaimantAway) {
			t.Fatal(err)
		}
		select {
		case <-changes:
		case <-deadline:
			t.Fatal("the claimant's poll never reached the restored request")
		}
	}
	r := <-done
	if r.err != nil || r.st.Status != StatusApproved || !ValidToken(r.st.Token) || r.st.GrantID != g.ID {
		t.Fatalf("claimant's poll after the approval: %+v, %v", r.st, r.err)
	}
	if ag, err := f.g.Authenticate(r.st.Token); err != nil || ag.ID != g.ID {
		t.Fatalf("the collected token: %+v, %v", ag, err)
	}

	// A denial needs no poll first.
	cr2 := f.claim(t)
	req2 := <-f.reqs
	if err := f2.p.Restore(req2); err != nil {
		t.Fatal(err)
	}
	if _, err := f2.p.Decide(req2.ID, false, nil); err != nil {
		t.Fatal(err)
	}
	if st, err := f2.p.Status(context.Background(), req2.ID, cr2.PollToken); err != nil || st.Status != StatusDenied {
		t.Fatalf("claimant's poll after the denial: %+v, %v", st, err)
	}

	// Past its expiry a request is not restored.
	f.claim(t)
	req3 := <-f.reqs
	f2.clock.Advance(DefaultRequestTTL)
	if err := f2.p.Restore(req3); !errors.Is(err, ErrExpired) {
		t.Fatalf("Restore past the expiry: %v", err)
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
	cr := f.claim(t)
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
