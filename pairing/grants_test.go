package pairing

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"meshtray/keychain"
	"meshtray/keychain/keychaintest"
)

// TestMain starts a private Secret Service (keychaintest) for the tests on
// the real OS keychain, and checks for leaked goroutines (goleak) after.
// With childEnv set the binary is a child process of a restart test.
func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	keychaintest.Main(m)
}

// flakyStore wraps a real Store, counts writes and can be told to fail them.
type flakyStore struct {
	keychain.Store
	sets, deletes atomic.Int64
	failSet       atomic.Bool
	failDelete    atomic.Bool
}

var errFlaky = errors.New("keychain: injected failure")

func (f *flakyStore) Set(k string, v []byte) error {
	if f.failSet.Load() {
		return errFlaky
	}
	f.sets.Add(1)
	return f.Store.Set(k, v)
}

func (f *flakyStore) Delete(k string) error {
	if f.failDelete.Load() {
		return errFlaky
	}
	f.deletes.Add(1)
	return f.Store.Delete(k)
}

func newGrants(t testing.TB, ks keychain.Store) *Grants {
	t.Helper()
	g, err := NewGrants(ks, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func mustIssue(t testing.TB, g *Grants, name string, scopes ...Scope) (Grant, string) {
	t.Helper()
	gr, tok, err := g.Issue(IssueRequest{Name: name, Scopes: scopes})
	if err != nil {
		t.Fatal(err)
	}
	return gr, tok
}

// testDeviceID returns a distinct valid device ID per seed.
func testDeviceID(seed byte) DeviceID {
	var id DeviceID
	for i := range id {
		id[i] = seed ^ byte(i*7)
	}
	return id
}

func TestIssueStoresOnlyHash(t *testing.T) {
	t.Parallel()
	ks := keychain.NewMemory()
	g := newGrants(t, ks)
	peer := testDeviceID(1)
	gr, tok, err := g.Issue(IssueRequest{PeerID: strings.ToLower(peer.String()), Name: " Laptop\u202e\x07 ", OS: "Debian GNU/Linux 12 (x86_64)", Scopes: Scopes{ScopeNode, ScopeAgent, ScopeNode}})
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != TokenLen || !strings.HasPrefix(tok, "mt1_"+gr.ID+"_") {
		t.Fatalf("token shape: %d bytes, prefix %q", len(tok), tok[:min(len(tok), 21)])
	}
	if gr.PeerID != peer.String() {
		t.Errorf("PeerID = %q, want canonical %q", gr.PeerID, peer.String())
	}
	if gr.Name != "Laptop" {
		t.Errorf("Name = %q, want control and bidi characters dropped", gr.Name)
	}
	if got := gr.Scopes.String(); got != "agent,node" {
		t.Errorf("Scopes = %q, want sorted, deduplicated", got)
	}
	if gr.Policy != PolicyAsk || gr.Status != StatusActive {
		t.Errorf("Policy, Status = %q, %q", gr.Policy, gr.Status)
	}
	item, err := ks.Get("grant/" + gr.ID)
	if err != nil {
		t.Fatal(err)
	}
	secret := tok[len(tok)-tokenSecretLen:]
	if bytes.Contains(item, []byte(secret)) || bytes.Contains(item, []byte(tok)) {
		t.Fatal("the keychain item holds the token")
	}
	if len(item) > 1000 {
		t.Errorf("grant item is %d bytes", len(item))
	}
	got, err := g.Authenticate(tok)
	if err != nil || got.ID != gr.ID {
		t.Fatalf("Authenticate = %v, %v", got.ID, err)
	}
}

func TestIssueInvalid(t *testing.T) {
	t.Parallel()
	g := newGrants(t, keychain.NewMemory())
	for _, req := range []IssueRequest{
		{Name: "", Scopes: Scopes{ScopeAgent}},
		{Name: "\x00\x01", Scopes: Scopes{ScopeAgent}},
		{Name: "x"},
		{Name: "x", Scopes: Scopes{"admin"}},
		{Name: "x", Scopes: Scopes{ScopeAgent}, Policy: "sometimes"},
		{Name: "x", Scopes: Scopes{ScopeAgent}, PeerID: "not-a-device"},
	} {
		if _, _, err := g.Issue(req); !errors.Is(err, ErrInvalid) {
			t.Errorf("Issue(%+v) = %v, want ErrInvalid", req, err)
		}
	}
	if n := len(g.List()); n != 0 {
		t.Errorf("%d grants after invalid issues", n)
	}
}

func TestAuthenticateRefusals(t *testing.T) {
	t.Parallel()
	g := newGrants(t, keychain.NewMemory())
	active, activeTok := mustIssue(t, g, "active", ScopeAgent)
	paused, pausedTok := mustIssue(t, g, "paused", ScopeAgent)
	revoked, revokedTok := mustIssue(t, g, "revoked", ScopeAgent)
	rotated, rotatedTok := mustIssue(t, g, "rotated", ScopeAgent)
	if err := g.Pause(paused.ID); err != nil {
		t.Fatal(err)
	}
	if err := g.Revoke(revoked.ID); err != nil {
		t.Fatal(err)
	}
	newTok, err := g.Rotate(rotated.ID)
	if err != nil {
		t.Fatal(err)
	}
	flip := "A"
	if activeTok[len(activeTok)-1] == 'A' {
		flip = "B"
	}
	wrongSecret := activeTok[:len(activeTok)-1] + flip
	unknownID := "mt1_0123456789abcdef_" + activeTok[len(activeTok)-tokenSecretLen:]
	for _, tc := range []struct {
		name  string
		token string
		want  error
		id    string
	}{
		{"active", activeTok, nil, active.ID},
		{"rotated new", newTok, nil, rotated.ID},
		{"empty", "", ErrUnknownToken, ""},
		{"garbage", "hello", ErrUnknownToken, ""},
		{"wrong secret", wrongSecret, ErrUnknownToken, ""},
		{"unknown id", unknownID, ErrUnknownToken, ""},
		{"upper-case id", strings.ToUpper(activeTok[:20]) + activeTok[20:], ErrUnknownToken, ""},
		{"trailing space", activeTok + " ", ErrUnknownToken, ""},
		{"revoked", revokedTok, ErrUnknownToken, ""},
		{"rotated old", rotatedTok, ErrUnknownToken, ""},
		{"paused", pausedTok, ErrPaused, paused.ID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gr, err := g.Authenticate(tc.token)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Authenticate = %v, want %v", err, tc.want)
			}
			if gr.ID != tc.id {
				t.Errorf("grant ID = %q, want %q", gr.ID, tc.id)
			}
		})
	}
}

func TestChangesTakeEffectImmediately(t *testing.T) {
	t.Parallel()
	g := newGrants(t, keychain.NewMemory())
	gr, tok := mustIssue(t, g, "phone", ScopeNode)
	steps := []struct {
		do   func() error
		want error
	}{
		{func() error { return nil }, nil},
		{func() error { return g.Pause(gr.ID) }, ErrPaused},
		{func() error { return g.Pause(gr.ID) }, ErrPaused},
		{func() error { return g.Resume(gr.ID) }, nil},
		{func() error { return g.SetPolicy(gr.ID, PolicyAllow) }, nil},
		{func() error { return g.Revoke(gr.ID) }, ErrUnknownToken},
	}
	for i, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if _, err := g.Authenticate(tok); !errors.Is(err, s.want) || (s.want == nil) != (err == nil) {
			t.Fatalf("step %d: Authenticate = %v, want %v", i, err, s.want)
		}
	}
	for _, err := range []error{g.Pause(gr.ID), g.Resume(gr.ID), g.Revoke(gr.ID), g.SetPolicy(gr.ID, PolicyAsk)} {
		if !errors.Is(err, ErrNoGrant) {
			t.Errorf("change of a revoked grant = %v, want ErrNoGrant", err)
		}
	}
	if _, err := g.Rotate(gr.ID); !errors.Is(err, ErrNoGrant) {
		t.Errorf("Rotate of a revoked grant = %v", err)
	}
}

func TestPolicyVisibleToAuthenticate(t *testing.T) {
	t.Parallel()
	g := newGrants(t, keychain.NewMemory())
	gr, tok := mustIssue(t, g, "desk", ScopeAgent)
	for _, p := range []Policy{PolicyAllow, PolicyDeny, PolicyAsk} {
		if err := g.SetPolicy(gr.ID, p); err != nil {
			t.Fatal(err)
		}
		got, err := g.Authenticate(tok)
		if err != nil || got.Policy != p {
			t.Fatalf("after SetPolicy(%s): %v, %v", p, got.Policy, err)
		}
	}
	if err := g.SetPolicy(gr.ID, "maybe"); !errors.Is(err, ErrInvalid) {
		t.Errorf("SetPolicy(maybe) = %v", err)
	}
}

// Access-removing changes bite even when the keychain refuses the write;
// access-giving ones do not happen then.
func TestRestrictiveChangesSurviveKeychainFailure(t *testing.T) {
	t.Parallel()
	ks := &flakyStore{Store: keychain.NewMemory()}
	g := newGrants(t, ks)
	gr, tok := mustIssue(t, g, "laptop", ScopeAgent)
	other, otherTok := mustIssue(t, g, "desktop", ScopeAgent)
	ks.failSet.Store(true)
	ks.failDelete.Store(true)
	if err := g.Pause(gr.ID); !errors.Is(err, errFlaky) {
		t.Fatalf("Pause with a failing keychain = %v, want the failure", err)
	}
	if _, err := g.Authenticate(tok); !errors.Is(err, ErrPaused) {
		t.Fatalf("after a failed-to-save Pause, Authenticate = %v, want ErrPaused", err)
	}
	if err := g.Resume(gr.ID); !errors.Is(err, errFlaky) {
		t.Fatalf("Resume = %v", err)
	}
	if _, err := g.Authenticate(tok); !errors.Is(err, ErrPaused) {
		t.Fatalf("a Resume that was not saved re-activated the grant: %v", err)
	}
	if err := g.Revoke(other.ID); !errors.Is(err, errFlaky) {
		t.Fatalf("Revoke = %v", err)
	}
	if _, err := g.Authenticate(otherTok); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("after a failed-to-delete Revoke, Authenticate = %v", err)
	}
	if _, _, err := g.Issue(IssueRequest{Name: "x", Scopes: Scopes{ScopeAgent}}); !errors.Is(err, errFlaky) {
		t.Fatalf("Issue = %v", err)
	}
	if n := len(g.List()); n != 1 {
		t.Errorf("List has %d grants, want 1 (the unsaved issue must not exist)", n)
	}
	if _, err := g.Rotate(gr.ID); !errors.Is(err, errFlaky) {
		t.Fatalf("Rotate = %v", err)
	}
}

func TestRestartKeepsGrants(t *testing.T) {
	t.Parallel()
	ks := keychain.NewMemory()
	g1, err := NewGrants(ks, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, aTok := mustIssue(t, g1, "a", ScopeAgent)
	b, bTok := mustIssue(t, g1, "b", ScopeNode, ScopeAgent)
	if err := g1.Pause(b.ID); err != nil {
		t.Fatal(err)
	}
	if err := g1.SetPolicy(a.ID, PolicyAllow); err != nil {
		t.Fatal(err)
	}
	peer := testDeviceID(9)
	_, heldTok := mustIssue(t, g1, "held-source", ScopeAgent) // any well-formed token
	if err := g1.PutHeld(Held{PeerID: peer.String(), Name: "desk", URL: "https://192.0.2.1:47654", Scopes: Scopes{ScopeAgent}, Token: heldTok}); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if _, err := g1.Authenticate(aTok); err != nil {
		t.Fatal(err)
	}
	wantList := g1.List()
	if err := g1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g1.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close = %v, want ErrClosed", err)
	}
	if _, _, err := g1.Issue(IssueRequest{Name: "late", Scopes: Scopes{ScopeAgent}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Issue after Close = %v", err)
	}

	g2 := newGrants(t, ks)
	gotList := g2.List()
	if len(gotList) != len(wantList) {
		t.Fatalf("after restart %d grants, want %d", len(gotList), len(wantList))
	}
	for i := range wantList {
		w, gt := wantList[i], gotList[i]
		if w.ID != gt.ID || w.Status != gt.Status || w.Policy != gt.Policy || w.Scopes.String() != gt.Scopes.String() || !w.Created.Equal(gt.Created) {
			t.Errorf("grant %d: got %+v, want %+v", i, gt, w)
		}
	}
	ga, err := g2.Get(a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ga.LastUsed.Before(before.Truncate(time.Second)) {
		t.Errorf("LastUsed %v not saved on Close (used at %v)", ga.LastUsed, before)
	}
	if _, err := g2.Authenticate(aTok); err != nil {
		t.Errorf("token after restart: %v", err)
	}
	if _, err := g2.Authenticate(bTok); !errors.Is(err, ErrPaused) {
		t.Errorf("paused token after restart: %v", err)
	}
	h, err := g2.Held(strings.ToLower(peer.String()))
	if err != nil || h.Token != heldTok || h.URL != "https://192.0.2.1:47654" || h.Fingerprint != peer.Fingerprint() {
		t.Errorf("held after restart: %+v, %v", h, err)
	}
}

func TestLastUsedBatched(t *testing.T) {
	t.Parallel()
	ks := &flakyStore{Store: keychain.NewMemory()}
	g := newGrants(t, ks)
	_, tok := mustIssue(t, g, "busy", ScopeAgent)
	_, idleTok := mustIssue(t, g, "idle", ScopeAgent)
	_ = idleTok
	base := ks.sets.Load()
	for range 1000 {
		if _, err := g.Authenticate(tok); err != nil {
			t.Fatal(err)
		}
	}
	if n := ks.sets.Load() - base; n != 0 {
		t.Fatalf("%d keychain writes for 1000 authentications, want 0", n)
	}
	if err := g.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := ks.sets.Load() - base; n != 1 {
		t.Fatalf("Flush wrote %d items, want 1 (only the used grant)", n)
	}
	if err := g.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := ks.sets.Load() - base; n != 1 {
		t.Fatalf("a second Flush without use wrote %d more", n-1)
	}
}

func TestSubscribeCoalesces(t *testing.T) {
	t.Parallel()
	g := newGrants(t, keychain.NewMemory())
	ch, cancel := g.Subscribe()
	gr, _ := mustIssue(t, g, "a", ScopeAgent)
	g.Pause(gr.ID)
	g.Resume(gr.ID)
	g.Revoke(gr.ID)
	select {
	case <-ch:
	default:
		t.Fatal("no notification after changes")
	}
	select {
	case <-ch:
		t.Fatal("notifications did not coalesce")
	default:
	}
	// A no-op change does not notify.
	gr2, _ := mustIssue(t, g, "b", ScopeAgent)
	<-ch
	g.Resume(gr2.ID)
	select {
	case <-ch:
		t.Fatal("Resume of an active grant notified")
	default:
	}
	cancel()
	cancel()
	if _, ok := <-ch; ok {
		t.Fatal("channel open after cancel")
	}
	mustIssue(t, g, "c", ScopeAgent) // must not panic on the closed channel
}

func TestHeldValidation(t *testing.T) {
	t.Parallel()
	g := newGrants(t, keychain.NewMemory())
	_, tok := mustIssue(t, g, "src", ScopeAgent)
	peer, other := testDeviceID(3), testDeviceID(4)
	for _, tc := range []struct {
		name string
		h    Held
		want error
	}{
		{"ok https", Held{PeerID: peer.String(), Name: "d", URL: "https://100.64.0.2:47654/", Token: tok}, nil},
		{"ok loopback https", Held{PeerID: peer.String(), Name: "d", URL: "https://127.0.0.1:47655", Token: tok}, nil},
		{"plain http loopback", Held{PeerID: peer.String(), Name: "d", URL: "http://127.0.0.1:47655", Token: tok}, ErrInvalid},
		{"ok fp given", Held{PeerID: peer.String(), Fingerprint: strings.ToUpper(peer.Fingerprint()), Token: tok}, nil},
		{"fp of another device", Held{PeerID: peer.String(), Fingerprint: other.Fingerprint(), Token: tok}, ErrIdentityChanged},
		{"bad peer", Held{PeerID: "XYZ", Token: tok}, ErrInvalid},
		{"bad token", Held{PeerID: peer.String(), Token: "secret"}, ErrInvalid},
		{"plain http remote", Held{PeerID: peer.String(), URL: "http://192.168.1.2:47654", Token: tok}, ErrInvalid},
		{"url with path", Held{PeerID: peer.String(), URL: "https://h:1/a2a/v1", Token: tok}, ErrInvalid},
		{"url with user", Held{PeerID: peer.String(), URL: "https://u:p@h:1", Token: tok}, ErrInvalid},
		{"ftp", Held{PeerID: peer.String(), URL: "ftp://h:1", Token: tok}, ErrInvalid},
		{"long url", Held{PeerID: peer.String(), URL: "https://" + strings.Repeat("a", 300) + ":1", Token: tok}, ErrInvalid},
		{"bad scope", Held{PeerID: peer.String(), Token: tok, Scopes: Scopes{"root"}}, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := g.PutHeld(tc.h)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("PutHeld = %v, want %v", err, tc.want)
			}
		})
	}
	h, err := g.Held(peer.String())
	if err != nil {
		t.Fatal(err)
	}
	if h.GrantID != TokenGrantID(tok) || h.Fingerprint != peer.Fingerprint() {
		t.Errorf("held = %+v", h)
	}
	if _, err := g.Held(other.String()); !errors.Is(err, ErrNoHeld) {
		t.Errorf("Held(other) = %v", err)
	}
}

func TestRefusedDropsHeld(t *testing.T) {
	t.Parallel()
	g := newGrants(t, keychain.NewMemory())
	_, tok := mustIssue(t, g, "src", ScopeAgent)
	_, newer := mustIssue(t, g, "src2", ScopeAgent)
	peer := testDeviceID(5)
	put := func(token string) {
		t.Helper()
		if err := g.PutHeld(Held{PeerID: peer.String(), Name: "desk", Token: token}); err != nil {
			t.Fatal(err)
		}
	}
	resp := func(status int, challenge string) *http.Response {
		r := &http.Response{StatusCode: status, Header: http.Header{}}
		if challenge != "" {
			r.Header.Set("WWW-Authenticate", challenge)
		}
		return r
	}
	put(tok)
	for _, tc := range []struct {
		name  string
		token string
		resp  *http.Response
		drop  bool
	}{
		{"ok", tok, resp(200, ""), false},
		{"forbidden", tok, resp(403, `Bearer realm="meshtray", error="insufficient_scope"`), false},
		{"paused", tok, resp(401, `Bearer realm="meshtray", error="invalid_token", error_description="grant paused"`), false},
		{"server error", tok, resp(500, ""), false},
		{"nil", tok, nil, false},
		{"stale token", newer, resp(401, `Bearer realm="meshtray", error="invalid_token"`), false},
		{"revoked", tok, resp(401, `Bearer realm="meshtray", error="invalid_token"`), true},
	} {
		dropped, err := g.Refused(peer.String(), tc.token, tc.resp)
		if err != nil || dropped != tc.drop {
			t.Fatalf("%s: Refused = %v, %v, want %v", tc.name, dropped, err, tc.drop)
		}
		_, herr := g.Held(peer.String())
		if tc.drop != errors.Is(herr, ErrNoHeld) {
			t.Fatalf("%s: held present = %v after Refused", tc.name, herr == nil)
		}
	}
}

func TestChallengeParam(t *testing.T) {
	t.Parallel()
	h := `Bearer realm="meshtray", error="invalid_token", error_description="grant \"paused\"", scope=agent`
	for k, want := range map[string]string{"realm": "meshtray", "error": "invalid_token", "error_description": `grant "paused"`, "scope": "agent", "nope": ""} {
		if got := challengeParam(h, k); got != want {
			t.Errorf("challengeParam(%q) = %q, want %q", k, got, want)
		}
	}
}

func TestItemsStaySmall(t *testing.T) {
	t.Parallel()
	ks := keychain.NewMemory()
	g := newGrants(t, ks)
	long := strings.Repeat("\U0001F600", 500) // 4 bytes each in UTF-8: the worst case
	gr, tok, err := g.Issue(IssueRequest{PeerID: testDeviceID(6).String(), Name: long, OS: long, Scopes: Scopes{ScopeAgent, ScopeNode, ScopeFull}})
	if err != nil {
		t.Fatal(err)
	}
	g.Authenticate(tok)
	g.Flush()
	if err := g.PutHeld(Held{PeerID: testDeviceID(7).String(), Name: long, OS: long, URL: "https://" + strings.Repeat("h", 200) + ":47654", Scopes: Scopes{ScopeAgent, ScopeNode, ScopeFull}, Token: tok}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"grant/" + gr.ID, "held/" + testDeviceID(7).String()} {
		v, err := ks.Get(k)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d bytes (limit %d)", k, len(v), keychain.MaxItemSize)
		if len(v) > keychain.MaxItemSize*3/4 {
			t.Errorf("%s is %d bytes, want far below %d", k, len(v), keychain.MaxItemSize)
		}
	}
}

func TestLogValuesHaveNoSecrets(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g, err := NewGrants(keychain.NewMemory(), log)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	gr, tok := mustIssue(t, g, "a", ScopeAgent)
	h := Held{PeerID: testDeviceID(8).String(), Name: "peer", Token: tok}
	if err := g.PutHeld(h); err != nil {
		t.Fatal(err)
	}
	rot, _ := g.Rotate(gr.ID)
	log.Info("values", "grant", gr, "held", h, "heldv", &h)
	hj, _ := json.Marshal(h)
	buf.Write(hj)
	secret := tok[len(tok)-tokenSecretLen:]
	if bytes.Contains(buf.Bytes(), []byte(secret)) || bytes.Contains(buf.Bytes(), []byte(rot[len(rot)-tokenSecretLen:])) {
		t.Fatalf("a token secret reached the log or JSON:\n%s", buf.String())
	}
	if !bytes.Contains(buf.Bytes(), []byte(gr.ID)) {
		t.Fatalf("log lacks the grant ID, so the check above proves nothing:\n%s", buf.String())
	}
}

// TestConcurrentUse is for the race detector: authentications while the
// grant is paused, resumed, re-policied, flushed and joined by others.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	g := newGrants(t, keychain.NewMemory())
	gr, tok := mustIssue(t, g, "hot", ScopeAgent)
	var readers sync.WaitGroup
	done := make(chan struct{})
	for range 4 {
		readers.Go(func() {
			for range 2000 {
				if _, err := g.Authenticate(tok); err != nil && !errors.Is(err, ErrPaused) {
					t.Errorf("Authenticate: %v", err)
					return
				}
			}
		})
	}
	go func() { readers.Wait(); close(done) }()
	for i := 0; ; i++ {
		select {
		case <-done:
			if err := g.Resume(gr.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := g.Authenticate(tok); err != nil {
				t.Fatalf("after the storm: %v", err)
			}
			t.Logf("%d writer rounds", i)
			return
		default:
		}
		g.Pause(gr.ID)
		g.Resume(gr.ID)
		g.SetPolicy(gr.ID, PolicyAllow)
		g.SetPolicy(gr.ID, PolicyAsk)
		g.Flush()
		if i < 50 {
			mustIssue(t, g, "other", ScopeNode)
		}
		_ = g.List()
	}
}

func BenchmarkAuthenticate(b *testing.B) {
	g := newGrants(b, keychain.NewMemory())
	for i := range 100 {
		mustIssue(b, g, "filler"+string(rune('a'+i%26)), ScopeNode)
	}
	_, tok := mustIssue(b, g, "hot", ScopeAgent)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := g.Authenticate(tok); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestParseScopesAndPolicy: the one reader of scope lists and policy names
// (the CLI's flags, its pairing prompt; the node validates with it too)
// says which name is wrong and what is wanted, and wraps ErrInvalid.
func TestParseScopesAndPolicy(t *testing.T) {
	t.Parallel()
	if sc, err := ParseScopes(" node, agent,node "); err != nil || sc.String() != "agent,node" {
		t.Errorf("ParseScopes = %v, %v; want agent,node sorted without duplicates", sc, err)
	}
	if sc, err := ParseScopes(""); err != nil || len(sc) != 0 {
		t.Errorf("ParseScopes(\"\") = %v, %v; want the empty set", sc, err)
	}
	_, err := ParseScopes("agent,admin")
	if !errors.Is(err, ErrInvalid) || err.Error() != `scope "admin": want agent, node, full or approve` {
		t.Errorf("ParseScopes(agent,admin) error %q", err)
	}
	for _, p := range Policies {
		if got, err := ParsePolicy(string(p)); err != nil || got != p {
			t.Errorf("ParsePolicy(%q) = %q, %v", p, got, err)
		}
	}
	if p, err := ParsePolicy(""); err != nil || p != "" {
		t.Errorf("ParsePolicy(\"\") = %q, %v; want no policy", p, err)
	}
	_, err = ParsePolicy("maybe")
	if !errors.Is(err, ErrInvalid) || err.Error() != `approval "maybe": want ask, allow or deny` {
		t.Errorf("ParsePolicy(maybe) error %q", err)
	}
	if sc, err := ParseScopes("approve,agent"); err != nil || sc.String() != "agent,approve" {
		t.Errorf("ParseScopes(approve,agent) = %v, %v", sc, err)
	}
	// approve is never implied, not even by full, and never a default.
	for _, c := range []struct {
		s    Scopes
		want Scope
		has  bool
	}{
		{Scopes{ScopeFull}, ScopeApprove, false},
		{Scopes{ScopeAgent, ScopeNode, ScopeFull}, ScopeApprove, false},
		{Scopes{ScopeApprove}, ScopeApprove, true},
		{Scopes{ScopeApprove}, ScopeAgent, false},
		{Scopes{ScopeApprove}, ScopeFull, false},
		{Scopes{ScopeFull}, ScopeNode, true},
	} {
		if got := c.s.Has(c.want); got != c.has {
			t.Errorf("%s.Has(%s) = %v, want %v", c.s, c.want, got, c.has)
		}
	}
	for req, want := range map[string]string{"": "agent", "full": "agent", "node,full": "node", "agent,node,full": "agent,node",
		"approve": "agent", "agent,approve": "agent", "agent,approve,full,node": "agent,node"} {
		sc, _ := ParseScopes(req)
		if got := DefaultPairingScopes(sc).String(); got != want {
			t.Errorf("DefaultPairingScopes(%s) = %s, want %s", req, got, want)
		}
	}
	if got := (Scopes{}).Describe(); got != "no scopes" {
		t.Errorf("Describe of none = %q", got)
	}
}

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
