package app_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"meshtray/app"
	"meshtray/app/apptest"
)

// TestPairingClaimantAtIssuerShutdown: when the issuer stops while a claim
// waits for its owner, the claimant must not be told the owner declined.
func TestPairingClaimantAtIssuerShutdown(t *testing.T) {
	a := apptest.StartNode(t, apptest.Options{Keychain: "file", Name: "alpha"})
	b := apptest.StartNode(t, apptest.Options{Keychain: "file", Name: "bravo"})
	r := a.CLI("pair", "--json")
	var ps struct{ URL string }
	if err := json.Unmarshal([]byte(r.Stdout), &ps); err != nil || ps.URL == "" {
		t.Fatalf("pair --json: %q %v", r.Stdout, err)
	}
	done := make(chan apptest.Result, 1)
	go func() { done <- b.CLI("pair", "--join", ps.URL, "--give", "none") }()
	waitApproval(t, a, app.KindPairing)
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	var res apptest.Result
	select {
	case res = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("pair --join still waiting after the issuer stopped")
	}
	out := strings.ToLower(res.Stdout + res.Stderr)
	if res.Code == 0 || strings.Contains(out, "denied") || strings.Contains(out, "declined") {
		t.Fatalf("claimant after the issuer stopped: exit %d, %q; want a failure that does not say the owner declined", res.Code, out)
	}
	_ = context.Background
}
