package pairing

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"meshtray/keychain"
)

// TestObserveChanges: every change of trust made through Grants reaches the
// observer once, after it took effect, with the grant and why; no token.
func TestObserveChanges(t *testing.T) {
	t.Parallel()
	g := newGrants(t, keychain.NewMemory())
	var mu sync.Mutex
	var got []Change
	g.Observe(func(c Change) { mu.Lock(); got = append(got, c); mu.Unlock() })
	peer := testDeviceID(9)

	gr, tok := mustIssue(t, g, "agent", ScopeAgent)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(g.Pause(gr.ID))
	must(g.Pause(gr.ID)) // no change: nothing told
	must(g.Resume(gr.ID))
	must(g.SetPolicy(gr.ID, PolicyAllow))
	rotated, err := g.Rotate(gr.ID)
	must(err)
	must(g.Revoke(gr.ID))
	old, _, err := g.Issue(IssueRequest{PeerID: peer.String(), Name: "desk", Scopes: Scopes{ScopeNode}})
	must(err)
	paired, _, err := g.Issue(IssueRequest{PeerID: peer.String(), Name: "desk", Scopes: Scopes{ScopeNode}, Uncollected: true})
	must(err)
	must(g.Collected(paired.ID))
	if _, err := g.RevokeOlder(peer.String(), paired.ID); err != nil {
		t.Fatal(err)
	}
	_, heldTok := mustIssue(t, g, "held-src", ScopeAgent)
	must(g.PutHeld(Held{PeerID: peer.String(), Name: "desk", Token: heldTok, Scopes: Scopes{ScopeAgent}}))
	if dropped, err := g.Refused(peer.String(), heldTok, &http.Response{StatusCode: 401, Header: http.Header{}}); err != nil || !dropped {
		t.Fatalf("Refused = %v, %v", dropped, err)
	}

	mu.Lock()
	defer mu.Unlock()
	type want struct {
		op    ChangeOp
		id    string
		cause string
	}
	wants := []want{
		{ChangeIssued, gr.ID, ""},
		{ChangePaused, gr.ID, ""},
		{ChangeResumed, gr.ID, ""},
		{ChangePolicy, gr.ID, ""},
		{ChangeRotated, gr.ID, ""},
		{ChangeRevoked, gr.ID, ""},
		{ChangeIssued, old.ID, ""},
		{ChangeIssued, paired.ID, "valid once the device collects its token"},
		{ChangePaired, paired.ID, ""},
		{ChangeRevoked, old.ID, "replaced by a new pairing of the device"},
		{ChangeIssued, "", ""}, // held-src
		{ChangeHeld, "", ""},
		{ChangeHeldDropped, "", "the device refused its token: it revoked the grant"},
	}
	if len(got) != len(wants) {
		t.Fatalf("%d changes, want %d: %+v", len(got), len(wants), got)
	}
	for i, w := range wants {
		c := got[i]
		if c.Op != w.op || (w.id != "" && c.GrantID != w.id) || c.Cause != w.cause {
			t.Errorf("change %d = %+v, want %+v", i, c, w)
		}
		for _, secret := range []string{tok, rotated, heldTok} {
			if strings.Contains(c.Cause+c.Name+c.GrantID, secret) {
				t.Errorf("change %d carries a token", i)
			}
		}
	}
	if got[3].Policy != PolicyAllow || got[1].Status != StatusPaused {
		t.Errorf("policy/status not carried: %+v %+v", got[3], got[1])
	}
	if got[11].PeerID != peer.String() || got[11].Name != "desk" {
		t.Errorf("held change %+v", got[11])
	}
}

// TestObservePairingOutcomes: a Pairer over observed grants tells of a
// request that expired undecided, one denied, and the grant of an approval
// whose token nobody collected, revoked saying so.
func TestObservePairingOutcomes(t *testing.T) {
	t.Parallel()
	f := newPairerFixture(t)
	var mu sync.Mutex
	var got []Change
	f.g.Observe(func(c Change) { mu.Lock(); got = append(got, c); mu.Unlock() })
	ops := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, c := range got {
			out = append(out, string(c.Op)+":"+c.Name+":"+c.Cause)
		}
		return out
	}

	f.claim(t)
	f.clock.Advance(DefaultRequestTTL)
	f.p.Pending() // sweeps
	denied := f.claim(t)
	if _, err := f.p.Decide(denied.RequestID, false, nil); err != nil {
		t.Fatal(err)
	}
	approved := f.claim(t)
	gr, err := f.p.Decide(approved.RequestID, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(DefaultRequestTTL)
	f.p.revokeOrphans(false)
	want := []string{
		"expired:" + claimFor("").Name + ":undecided",
		"denied:" + claimFor("").Name + ":",
		"issued:" + claimFor("").Name + ":valid once the device collects its token",
		"revoked:" + claimFor("").Name + ":its token was never collected",
	}
	if g := ops(); strings.Join(g, "|") != strings.Join(want, "|") {
		t.Fatalf("changes\n got %q\nwant %q", g, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if got[3].GrantID != gr.ID || got[2].GrantID != gr.ID {
		t.Errorf("issue/revoke changes %+v %+v, want grant %s", got[2], got[3], gr.ID)
	}
}
