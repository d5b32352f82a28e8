package pairing

import (
	"sync"
	"testing"
	"time"

	"meshtray/keychain"
)

// TestObserverOutsideWriterLock: an observer that stalls (an audit append
// on a stuck disk) holds up the call whose change it is told of, but not
// the next change: that one takes effect at once, and the observer is told
// of both in the order they happened.
func TestObserverOutsideWriterLock(t *testing.T) {
	t.Parallel()
	g := newGrants(t, keychain.NewMemory())
	a, _ := mustIssue(t, g, "a", ScopeAgent)
	b, _ := mustIssue(t, g, "b", ScopeAgent)
	release := make(chan struct{})
	stalled := make(chan struct{})
	var mu sync.Mutex
	var got []Change
	g.Observe(func(c Change) {
		if c.Op == ChangeRevoked {
			close(stalled)
			<-release
		}
		mu.Lock()
		got = append(got, c)
		mu.Unlock()
	})
	revoked := make(chan error, 1)
	go func() { revoked <- g.Revoke(a.ID) }()
	<-stalled
	paused := make(chan error, 1)
	go func() { paused <- g.Pause(b.ID) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if gr, err := g.Get(b.ID); err == nil && gr.Status == StatusPaused {
			break
		}
		if time.Now().After(deadline) {
			close(release)
			t.Fatal("a change waited for the observer of an earlier one (it ran under the writer lock)")
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	if err := <-revoked; err != nil {
		t.Fatal(err)
	}
	if err := <-paused; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0].Op != ChangeRevoked || got[0].GrantID != a.ID || got[1].Op != ChangePaused || got[1].GrantID != b.ID {
		t.Fatalf("observer told %+v, want a's revocation then b's pause", got)
	}
}

// TestOpenGrantsObservesStartRevocations: the pairing grants a start
// revokes (uncollected: the node stopped before the device took its
// token) reach an observer given to OpenGrants.
func TestOpenGrantsObservesStartRevocations(t *testing.T) {
	t.Parallel()
	ks := keychain.NewMemory()
	g := newGrants(t, ks)
	orphan, _, err := g.Issue(IssueRequest{PeerID: testDeviceID(3).String(), Name: "phone", Scopes: Scopes{ScopeNode}, Uncollected: true})
	if err != nil {
		t.Fatal(err)
	}
	kept, _ := mustIssue(t, g, "kept", ScopeAgent)
	g.Close()
	var got []Change
	g2, err := OpenGrants(ks, GrantsOptions{Observer: func(c Change) { got = append(got, c) }})
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close()
	if len(got) != 1 || got[0].Op != ChangeRevoked || got[0].GrantID != orphan.ID || got[0].Name != "phone" || got[0].Cause == "" {
		t.Fatalf("observer told %+v, want the revocation of %s with its cause", got, orphan.ID)
	}
	if _, err := g2.Get(kept.ID); err != nil {
		t.Fatal(err)
	}
}
