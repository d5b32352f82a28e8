package app_test

// Audit entries for what the first audit tests left out: grants the start
// revokes, one entry per pairing decision, capability and files policy
// changes with who and where.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/pairing"
)

// countEntries is how many of es match want (as findEntry).
func countEntries(es []app.AuditEntry, want app.AuditEntry) int {
	n := 0
	for i := range es {
		if _, ok := findEntry(es[i:i+1], want); ok {
			n++
		}
	}
	return n
}

// TestAuditUncollectedRevokedAtStart: a pairing approved, the node killed
// before the device collected its token; the next start revokes that
// grant and the audit trail says so (by the node, and why).
func TestAuditUncollectedRevokedAtStart(t *testing.T) {
	dir := t.TempDir()
	n := apptest.StartNode(t, apptest.Options{StateDir: dir, Keychain: "file", Name: "laptop", Config: "tailscale = false\n"})
	var sess struct{ Code string }
	ptJSON(t, n, &sess, "pair")
	a := phoneClaim(t, n, sess.Code, "pixel")
	ptCLI(t, n, "approve", a.ID)
	var d app.Devices
	ptJSON(t, n, &d, "devices")
	if len(d.Issued) != 1 || !d.Issued[0].Uncollected {
		t.Fatalf("after the approval: %+v, want one uncollected grant", d.Issued)
	}
	orphan := d.Issued[0].ID
	kill9(t, n)

	n = apptest.StartNode(t, apptest.Options{StateDir: dir, Keychain: "file", Name: "laptop", Config: "tailscale = false\n"})
	ptJSON(t, n, &d, "devices")
	if len(d.Issued) != 0 {
		t.Fatalf("after the restart: %+v, want the uncollected grant revoked", d.Issued)
	}
	es := auditEntries(t, n, "--grant", orphan)
	mustEntry(t, es, app.AuditEntry{Kind: "grant", Subject: "revoke", GrantID: orphan, Peer: "pixel", Result: "revoked",
		DecidedBy: "node", Params: "never collected"})
	if out := ptCLI(t, n, "audit", "verify").Stdout; !strings.Contains(out, "chain intact") {
		t.Fatalf("verify: %q", out)
	}
}

// TestAuditPairingDecisionOnce: a denied pairing is one entry (the
// approval's, with who and where); an approved one is the approval, the
// grant it issued and the collection, each once.
func TestAuditPairingDecisionOnce(t *testing.T) {
	a := ptStart(t, "alpha")
	b := ptStart(t, "bravo")

	var sess struct{ Code string }
	ptJSON(t, a, &sess, "pair")
	denied := phoneClaim(t, a, sess.Code, "pixel")
	a.Client.Where = app.WhereTray
	if err := a.Client.Decide(context.Background(), denied.ID, app.ApprovalDecision{Decision: app.DecisionDeny}); err != nil {
		t.Fatal(err)
	}
	a.Client.Where = ""

	ptPairByCLI(t, a, b, "agent", "agent")
	idb := ptIdentity(t, b)
	var d app.Devices
	ptJSON(t, a, &d, "devices")
	if len(d.Issued) != 1 {
		t.Fatalf("alpha issued %+v", d.Issued)
	}
	gid := d.Issued[0].ID

	es := auditEntries(t, a)
	about := func(name string) []app.AuditEntry {
		var out []app.AuditEntry
		for _, e := range es {
			if (e.Kind == "approval" || e.Kind == "pairing" || e.Kind == "grant") && strings.HasPrefix(e.Peer, name) {
				out = append(out, e)
			}
		}
		return out
	}
	pixel := about("pixel")
	if len(pixel) != 1 || pixel[0].Kind != "approval" || pixel[0].Result != "denied" || pixel[0].DecidedBy != "owner" || pixel[0].DecidedVia != "tray" {
		t.Fatalf("the denied pairing's entries: %+v, want its one approval entry (denied by the owner in the tray)", pixel)
	}
	bravo := about("bravo")
	for _, want := range []app.AuditEntry{
		{Kind: "approval", Result: "approved", DecidedBy: "owner", DecidedVia: "cli", Params: "scopes agent"},
		{Kind: "grant", Subject: "issue", GrantID: gid, Params: "valid once the device collects its token"},
		{Kind: "pairing", Subject: "grant collected", GrantID: gid, Result: "paired", Params: "device " + idb.ID[:7]},
	} {
		if c := countEntries(bravo, want); c != 1 {
			t.Errorf("%d entries like %+v, want 1, among %+v", c, want, bravo)
		}
	}
}

// TestAuditPolicyChanges: a capability's policy (meshtray manifest set,
// the tray's POST /config) and a grant's files policy are recorded as
// changes of trust with who and where; setting the same policy again
// records nothing.
func TestAuditPolicyChanges(t *testing.T) {
	n := ptStart(t, "alpha")
	ptCLI(t, n, "manifest", "set", "system.notify", "ask")
	ptCLI(t, n, "manifest", "set", "system.notify", "ask") // no change
	n.Client.Where = app.WhereTray
	if _, err := n.Client.UpdateConfig(context.Background(), app.ConfigUpdate{CapabilityPolicies: map[string]pairing.Policy{"system.notify": pairing.PolicyDeny}}); err != nil {
		t.Fatal(err)
	}
	n.Client.Where = ""
	var tok app.GrantToken
	ptJSON(t, n, &tok, "grant", "create", "--name", "phone", "--scope", "agent")
	ptCLI(t, n, "grant", "set", tok.ID, "--files", "allow")
	ptCLI(t, n, "grant", "set", tok.ID, "--approval", "deny")

	es := auditEntries(t, n, "--kind", "grant")
	mustEntry(t, es, app.AuditEntry{Kind: "grant", Subject: "capability policy", Result: "ask", DecidedBy: "owner", DecidedVia: "cli", Params: "capability system.notify; was allow"})
	mustEntry(t, es, app.AuditEntry{Kind: "grant", Subject: "capability policy", Result: "deny", DecidedBy: "owner", DecidedVia: "tray", Params: "capability system.notify"})
	if c := countEntries(es, app.AuditEntry{Kind: "grant", Subject: "capability policy"}); c != 2 {
		t.Errorf("%d capability policy entries, want 2 (the repeated set changed nothing): %+v", c, es)
	}
	mustEntry(t, es, app.AuditEntry{Kind: "grant", Subject: "files policy", GrantID: tok.ID, Result: "allow", DecidedBy: "owner", DecidedVia: "cli"})
	mustEntry(t, es, app.AuditEntry{Kind: "grant", Subject: "policy", GrantID: tok.ID, Result: "deny", DecidedBy: "owner", DecidedVia: "cli"})
	if c := countEntries(es, app.AuditEntry{Kind: "grant", GrantID: tok.ID}); c != 3 {
		t.Errorf("%d entries of grant %s, want its issue, files policy and policy: %+v", c, tok.ID, es)
	}
}

// TestAuditAlwaysAllowByItsDecider: "always allow" given with an approval
// in the tray is the grant's policy change by the owner in the tray.
func TestAuditAlwaysAllowByItsDecider(t *testing.T) {
	n := ptStart(t, "alpha")
	var tok app.GrantToken
	ptJSON(t, n, &tok, "grant", "create", "--name", "script", "--scope", "agent", "--approval", "ask")
	ptCLI(t, n, "a2a", "on")
	ctx := context.Background()
	sent := make(chan error, 1)
	go func() {
		_, err := apptest.A2AClient(t, n.BaseURL, tok.Token).SendMessage(ctx, &a2a.MessageSendParams{Message: deviceInfoMessage()})
		sent <- err
	}()
	var ap app.Approval
	apptest.WaitFor(t, 30*time.Second, "the delegation's approval", func() bool {
		for _, a := range pendingApprovals(t, n) {
			if a.Kind == app.KindDelegation && a.GrantID == tok.ID {
				ap = a
				return true
			}
		}
		return false
	})
	n.Client.Where = app.WhereTray
	if err := n.Client.Decide(ctx, ap.ID, app.ApprovalDecision{Decision: app.DecisionApprove, Always: true}); err != nil {
		t.Fatal(err)
	}
	n.Client.Where = ""
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	es := auditEntries(t, n, "--grant", tok.ID)
	mustEntry(t, es, app.AuditEntry{Kind: "approval", Result: "approved", DecidedBy: "owner", DecidedVia: "tray"})
	mustEntry(t, es, app.AuditEntry{Kind: "grant", Subject: "policy", Result: "allow", DecidedBy: "owner", DecidedVia: "tray"})
}
