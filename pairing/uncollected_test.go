package pairing

import (
	"errors"
	"testing"

	"meshtray/keychain"
)

// TestUncollectedGrant: a grant issued Uncollected refuses its token until
// Collected; a store opened again before that (the node died) revokes it,
// and one collected survives.
func TestUncollectedGrant(t *testing.T) {
	t.Parallel()
	ks := keychain.NewMemory()
	g := newGrants(t, ks)
	orphan, tok, err := g.Issue(IssueRequest{Name: "phone", Scopes: Scopes{ScopeNode}, Uncollected: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Authenticate(tok); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("uncollected token: %v, want ErrUnknownToken", err)
	}
	if l := g.List(); len(l) != 1 || !l[0].Uncollected {
		t.Fatalf("List %+v: want the grant, marked uncollected", l)
	}
	kept, tok2, err := g.Issue(IssueRequest{Name: "tablet", Scopes: Scopes{ScopeNode}, Uncollected: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Collected(kept.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := g.Authenticate(tok2); err != nil || got.ID != kept.ID || got.Uncollected {
		t.Fatalf("collected token: %+v, %v", got, err)
	}
	g2 := newGrants(t, ks) // no Close of g: the node died
	if _, err := g2.Get(orphan.ID); !errors.Is(err, ErrNoGrant) {
		t.Errorf("uncollected grant after a restart: %v, want ErrNoGrant", err)
	}
	if _, err := ks.Get(grantKeyPrefix + orphan.ID); !errors.Is(err, keychain.ErrNotFound) {
		t.Errorf("uncollected grant's keychain item after a restart: %v", err)
	}
	if _, err := g2.Authenticate(tok2); err != nil {
		t.Errorf("collected grant after a restart: %v", err)
	}
}
