package app_test

// The audit trail on real nodes: what each action records, the CLI's
// filters, --follow, verify against a tampered database file, and no secret
// in any entry or in the database's bytes.

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	_ "modernc.org/sqlite"

	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/app/cli"
	"meshtray/store"
)

// auditEntries is `meshtray audit --json args...` on n.
func auditEntries(t *testing.T, n *apptest.Node, args ...string) []app.AuditEntry {
	t.Helper()
	var es []app.AuditEntry
	ptJSON(t, n, &es, append([]string{"audit", "--limit", "10000"}, args...)...)
	return es
}

// findEntry is the newest entry of es matching all of want's non-empty
// fields (Seq ignored).
func findEntry(es []app.AuditEntry, want app.AuditEntry) (app.AuditEntry, bool) {
	for i := len(es) - 1; i >= 0; i-- {
		e := es[i]
		if e.Kind == want.Kind && (want.GrantID == "" || e.GrantID == want.GrantID) && (want.Peer == "" || e.Peer == want.Peer) &&
			(want.Via == "" || e.Via == want.Via) && (want.Subject == "" || e.Subject == want.Subject) &&
			(want.Result == "" || e.Result == want.Result) && (want.DecidedBy == "" || e.DecidedBy == want.DecidedBy) &&
			(want.DecidedVia == "" || e.DecidedVia == want.DecidedVia) && (want.Params == "" || strings.Contains(e.Params, want.Params)) &&
			(want.TaskID == "" || e.TaskID == want.TaskID) {
			return e, true
		}
	}
	return app.AuditEntry{}, false
}

func mustEntry(t *testing.T, es []app.AuditEntry, want app.AuditEntry) app.AuditEntry {
	t.Helper()
	e, ok := findEntry(es, want)
	if !ok {
		var b strings.Builder
		for _, e := range es {
			j, _ := json.Marshal(e)
			b.Write(append(j, '\n'))
		}
		t.Fatalf("no audit entry like %+v among:\n%s", want, b.String())
	}
	return e
}

// TestAuditTrail runs two real nodes through every kind of event and reads
// the trail back with the CLI.
func TestAuditTrail(t *testing.T) {
	a := ptStart(t, "alpha")
	b := ptStart(t, "bravo")
	ctx := context.Background()

	// A2A on from the CLI, off from the tray (the tray's client says so).
	ptCLI(t, a, "a2a", "on")
	a.Client.Where = app.WhereTray
	if _, err := a.Client.SetA2A(ctx, false); err != nil {
		t.Fatal(err)
	}
	a.Client.Where = ""

	// Grants: created, re-policied, paused, resumed, rotated, revoked.
	var tok app.GrantToken
	ptJSON(t, a, &tok, "grant", "create", "--name", "script", "--scope", "agent,node", "--approval", "ask")
	ptCLI(t, a, "grant", "set", tok.ID, "--approval", "allow")
	ptCLI(t, a, "grant", "pause", tok.ID)
	ptCLI(t, a, "grant", "resume", tok.ID)
	rotated := strings.TrimSpace(ptCLI(t, a, "grant", "rotate", tok.ID).Stdout)
	if !strings.HasPrefix(rotated, "mt1_") {
		t.Fatalf("rotate printed %q", rotated)
	}
	var gone app.GrantToken
	ptJSON(t, a, &gone, "grant", "create", "--name", "short-lived", "--scope", "agent")
	ptCLI(t, a, "grant", "revoke", gone.ID)

	// Capability runs by that grant: one that runs, one refused by the schema.
	for _, body := range []string{`{"capability":"device.info"}`, `{"capability":"system.notify","params":{"title":7}}`, `{"capability":"x\u001b[2J\u202e"}`} {
		ptDo(t, a.BaseURL, ptReq{method: "POST", path: "/nodes/invoke", body: body, token: rotated})
	}
	// The same capability run as an A2A task of that grant (policy allow:
	// no approval), recorded with its task.
	ptCLI(t, a, "a2a", "on")
	res, err := apptest.A2AClient(t, a.BaseURL, rotated).SendMessage(ctx, &a2a.MessageSendParams{Message: deviceInfoMessage()})
	task, ok := res.(*a2a.Task)
	if err != nil || !ok || task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("the A2A task: %#v, %v", res, err)
	}
	ptCLI(t, a, "a2a", "off")
	sinceCaps := time.Now()

	// A mutual pairing by CLI (alpha issues, bravo joins and gives back).
	p := ptPairByCLI(t, a, b, "agent,node", "agent")
	ida, idb := ptIdentity(t, a), ptIdentity(t, b)
	tokAB := ptHeldToken(t, b, ida.ID)
	tokBA := ptHeldToken(t, a, idb.ID)

	// A phone's pairing request, denied.
	var sess struct{ Code string }
	ptJSON(t, a, &sess, "pair")
	denied := phoneClaim(t, a, sess.Code, "pixel")
	ptCLI(t, a, "deny", denied.ID)

	// Bravo revokes the grant it gave alpha: alpha is told, re-checks, and
	// drops it ("a device revoked us").
	var db app.Devices
	ptJSON(t, b, &db, "devices")
	if len(db.Issued) != 1 {
		t.Fatalf("bravo issued %+v", db.Issued)
	}
	ptCLI(t, b, "grant", "revoke", db.Issued[0].ID)
	apptest.WaitFor(t, 30*time.Second, "alpha to drop the grant bravo revoked", func() bool {
		_, ok := findEntry(auditEntries(t, a, "--kind", "pairing"), app.AuditEntry{Kind: "pairing", Result: "revoked by the device"})
		return ok
	})

	es := auditEntries(t, a)
	mustEntry(t, es, app.AuditEntry{Kind: "a2a", Result: "on", DecidedBy: "owner", DecidedVia: "cli"})
	mustEntry(t, es, app.AuditEntry{Kind: "a2a", Result: "off", DecidedBy: "owner", DecidedVia: "tray"})
	mustEntry(t, es, app.AuditEntry{Kind: "grant", Subject: "issue", GrantID: tok.ID, Peer: "script", Result: "active", DecidedBy: "owner", DecidedVia: "cli", Params: "scopes agent,node"})
	mustEntry(t, es, app.AuditEntry{Kind: "grant", Subject: "policy", GrantID: tok.ID, Result: "allow", DecidedBy: "owner", DecidedVia: "cli"})
	mustEntry(t, es, app.AuditEntry{Kind: "grant", Subject: "pause", GrantID: tok.ID, Result: "paused", DecidedBy: "owner", DecidedVia: "cli"})
	mustEntry(t, es, app.AuditEntry{Kind: "grant", Subject: "resume", GrantID: tok.ID, Result: "active", DecidedBy: "owner", DecidedVia: "cli"})
	mustEntry(t, es, app.AuditEntry{Kind: "grant", Subject: "rotate", GrantID: tok.ID, DecidedBy: "owner", DecidedVia: "cli"})
	mustEntry(t, es, app.AuditEntry{Kind: "grant", Subject: "revoke", GrantID: gone.ID, Result: "revoked", DecidedBy: "owner", DecidedVia: "cli"})
	run := mustEntry(t, es, app.AuditEntry{Kind: "capability", Subject: "device.info", GrantID: tok.ID, Peer: "script", Via: "loopback", Result: "completed"})
	if run.DurationMS <= 0 {
		t.Errorf("capability run without a duration: %+v", run)
	}
	mustEntry(t, es, app.AuditEntry{Kind: "capability", Subject: "system.notify", GrantID: tok.ID, Result: "invalid", Params: `{"title":7}`})
	mustEntry(t, es, app.AuditEntry{Kind: "approval", GrantID: tok.ID, Result: "approved", DecidedVia: "policy"})
	if e, ok := findEntry(es, app.AuditEntry{Kind: "capability", Subject: "device.info", TaskID: string(task.ID)}); !ok || e.TaskID != string(task.ID) || e.GrantID != tok.ID {
		t.Errorf("the A2A task's capability run: %+v (task %s)", e, task.ID)
	}
	// Alpha's side of the pairing: the grant issued on approval (valid
	// once collected), collected, and the grant bravo gave back.
	mustEntry(t, es, app.AuditEntry{Kind: "grant", Subject: "issue", Peer: "bravo", Params: "valid once the device collects its token"})
	mustEntry(t, es, app.AuditEntry{Kind: "pairing", Result: "paired", Peer: "bravo", Subject: "grant collected", Params: "device " + idb.ID[:7]})
	mustEntry(t, es, app.AuditEntry{Kind: "pairing", Result: "paired", Peer: "bravo", Subject: "grant received", Params: "offered by the device"})
	// The denial is one entry, the approval's (the pairer's report of it
	// is the same event).
	mustEntry(t, es, app.AuditEntry{Kind: "approval", Result: "denied", Peer: "pixel", DecidedBy: "owner", DecidedVia: "cli"})
	if e, ok := findEntry(es, app.AuditEntry{Kind: "pairing", Peer: "pixel"}); ok {
		t.Errorf("the denied pairing recorded twice: %+v", e)
	}
	mustEntry(t, es, app.AuditEntry{Kind: "pairing", Result: "revoked by the device", Peer: "bravo", DecidedBy: "device " + idb.ID[:7]})
	// Bravo's side: the grant it holds from alpha, the grant it gave, and
	// the revocation it made.
	esb := auditEntries(t, b)
	mustEntry(t, esb, app.AuditEntry{Kind: "pairing", Result: "paired", Peer: "alpha", Subject: "grant received"})
	mustEntry(t, esb, app.AuditEntry{Kind: "grant", Subject: "issue", Peer: "alpha", Params: "scopes agent"})
	mustEntry(t, esb, app.AuditEntry{Kind: "grant", Subject: "revoke", GrantID: db.Issued[0].ID, DecidedBy: "owner", DecidedVia: "cli"})

	// Sequence and hash chain as served.
	for i := 1; i < len(es); i++ {
		if es[i].Seq != es[i-1].Seq+1 || len(es[i].Hash) != 64 || es[i].Time.Before(es[i-1].Time) {
			t.Fatalf("entries %d and %d out of order or without hash: %+v %+v", i-1, i, es[i-1], es[i])
		}
	}

	t.Run("grant filter", func(t *testing.T) {
		got := auditEntries(t, a, "--grant", tok.ID)
		if len(got) != 10 {
			t.Fatalf("%d entries for grant %s, want its issue, policy, pause, resume, rotate, four runs and the A2A task's approval by policy: %+v", len(got), tok.ID, got)
		}
		for _, e := range got {
			if e.GrantID != tok.ID {
				t.Fatalf("--grant %s gave an entry of %q", tok.ID, e.GrantID)
			}
		}
	})
	t.Run("since filter", func(t *testing.T) {
		got := auditEntries(t, a, "--since", sinceCaps.UTC().Format(time.RFC3339Nano))
		if len(got) == 0 || len(got) >= len(es) {
			t.Fatalf("--since gave %d of %d entries", len(got), len(es))
		}
		for _, e := range got {
			if e.Time.Before(sinceCaps) {
				t.Fatalf("--since %v gave an entry of %v", sinceCaps, e.Time)
			}
		}
		if _, ok := findEntry(got, app.AuditEntry{Kind: "a2a"}); ok {
			t.Fatal("--since kept the A2A switch made before it")
		}
		if n := len(auditEntries(t, a, "--since", "1h")); n != len(es) {
			t.Fatalf("--since 1h gave %d of %d entries", n, len(es))
		}
		if r := a.CLI("audit", "--since", "yesterday-ish"); r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, "--since") {
			t.Fatalf("a bad --since: exit %d %s", r.Code, r.Stderr)
		}
	})
	t.Run("human table", func(t *testing.T) {
		r := apptest.RunCLI(t, []string{"LANG=C.UTF-8", "LC_ALL="}, "audit", "--kind", "grant", "--state-dir", a.StateDir)
		out := r.Stdout
		if r.Code != 0 {
			t.Fatalf("audit: exit %d %s", r.Code, r.Stderr)
		}
		for _, want := range []string{"TIME", "KIND", "WHO", "WHAT", "RESULT", "WHERE", "pause \"script\" " + tok.ID, "owner"} {
			if !strings.Contains(out, want) {
				t.Fatalf("audit table lacks %q:\n%s", want, out)
			}
		}
		caps := ptCLI(t, a, "audit", "--kind", "capability").Stdout
		if strings.ContainsAny(caps, "\x1b\u202e") || !strings.Contains(caps, `x\u001B[2J\u202E`) {
			t.Fatalf("a capability name with control runes, not escaped:\n%q", caps)
		}
	})
	t.Run("follow", func(t *testing.T) {
		f := startCLI(t, a, "audit", "--follow", "--json", "--kind", "a2a", "--limit", "1")
		apptest.WaitFor(t, 20*time.Second, "the newest a2a entry on --follow", func() bool {
			return strings.Count(f.stdout.String(), "\n") >= 1
		})
		ptCLI(t, a, "a2a", "on")
		apptest.WaitFor(t, 20*time.Second, "the new entry on --follow", func() bool {
			return strings.Count(f.stdout.String(), "\n") >= 2
		})
		lines := strings.Split(strings.TrimSpace(f.stdout.String()), "\n")
		var last app.AuditEntry
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Kind != "a2a" || last.Result != "on" || last.DecidedVia != "cli" {
			t.Fatalf("--follow printed %q (%v)", lines[len(lines)-1], err)
		}
		f.cmd.Process.Signal(syscall.SIGINT)
		if r := f.wait(t, 20*time.Second); r.Code != 0 {
			t.Fatalf("--follow ended by Ctrl-C: exit %d %s", r.Code, r.Stderr)
		}
	})

	if os.Getenv("AUDIT_PEEK") != "" {
		t.Logf("audit:\n%s\nverify:\n%s", ptCLI(t, a, "audit").Stdout, ptCLI(t, a, "audit", "verify").Stdout)
	}
	// The trail is the owner's: a grant, even with scope full, is refused.
	var full app.GrantToken
	ptJSON(t, a, &full, "grant", "create", "--name", "admin-tool", "--scope", "full")
	for _, path := range []string{"/audit", "/audit/verify", "/audit/follow"} {
		if st, _, body := ptDo(t, a.BaseURL, ptReq{method: "GET", path: path, token: full.Token}); st != 403 {
			t.Errorf("GET %s with a full grant: %d %s, want 403", path, st, body)
		}
	}
	secretsExtra := full.Token

	// Verify: intact, then a copy of the database with one entry edited.
	if out := ptCLI(t, a, "audit", "verify").Stdout; !strings.Contains(out, "entries, chain intact") {
		t.Fatalf("verify: %q", out)
	}
	jsonOut := ptCLI(t, a, "audit", "--json", "--limit", "10000").Stdout
	a.Stop()
	b.Stop()

	dbFile := filepath.Join(a.StateDir, store.DefaultFile)
	secrets := map[string]string{"the created grant's token": tok.Token, "the rotated token": rotated,
		"the revoked grant's token": gone.Token, "alpha's grant held by bravo": tokAB, "bravo's grant held by alpha": tokBA,
		"the pairing code": p.Code, "the phone pairing code": sess.Code, "the full grant's token": secretsExtra}
	for _, dir := range []string{a.StateDir, b.StateDir} {
		files, _ := filepath.Glob(filepath.Join(dir, store.DefaultFile+"*"))
		if len(files) == 0 {
			t.Fatalf("no database in %s", dir)
		}
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for what, s := range secrets {
				_, secret, _ := strings.Cut(strings.TrimPrefix(s, "mt1_"), "_") // the random part alone
				if secret == "" {
					secret = s
				}
				if bytes.Contains(raw, []byte(secret)) {
					t.Errorf("%s holds %s", f, what)
				}
			}
		}
	}
	for what, s := range secrets {
		if strings.Contains(jsonOut, s) {
			t.Errorf("audit --json shows %s", what)
		}
	}

	// Tamper with a copy: edit the subject of one entry in the middle.
	copyDir := t.TempDir()
	raw, err := os.ReadFile(dbFile)
	if err != nil {
		t.Fatal(err)
	}
	copyDB := filepath.Join(copyDir, store.DefaultFile)
	if err := os.WriteFile(copyDB, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	victim := es[len(es)/2].Seq
	sdb, err := sql.Open("sqlite", copyDB)
	if err != nil {
		t.Fatal(err)
	}
	upd, err := sdb.Exec("UPDATE audit SET result = 'approved' WHERE seq = ?", victim)
	if err != nil {
		t.Fatalf("tamper: %v", err)
	}
	if n, _ := upd.RowsAffected(); n != 1 {
		t.Fatalf("tamper: %d rows changed", n)
	}
	sdb.Close()
	apptest.StartNode(t, apptest.Options{Name: "tampered", StateDir: copyDir, Config: "tailscale = false\n"})
	r := apptest.RunCLI(t, []string{"LANG=C.UTF-8"}, "audit", "verify", "--state-dir", copyDir)
	if r.Code == 0 || !strings.Contains(r.Stderr, fmt.Sprintf("broken at entry %d", victim)) {
		t.Fatalf("verify of an edited entry %d: exit %d\n%s%s", victim, r.Code, r.Stdout, r.Stderr)
	}
}

// TestAuditRetention: with [audit] max_entries = 5 the trail keeps the
// newest 5 entries, never a sixth (pruned as entries come and at start), and verify checks
// the chain from the newest pruned entry.
func TestAuditRetention(t *testing.T) {
	dir := t.TempDir()
	n := apptest.StartNode(t, apptest.Options{Name: "small", StateDir: dir, Config: "tailscale = false\n[audit]\nmax_entries = 5\nmax_age = \"48h\"\n"})
	for i := range 9 {
		ptCLI(t, n, "grant", "create", "--name", fmt.Sprintf("g%d", i), "--scope", "agent")
	}
	if es := auditEntries(t, n); len(es) != 5 {
		t.Fatalf("%d entries kept with max_entries 5: it is a maximum", len(es))
	}
	n.Stop()
	n = apptest.StartNode(t, apptest.Options{Name: "small", StateDir: dir})
	es := auditEntries(t, n)
	if len(es) != 5 || es[4].Peer != "g8" || es[0].Peer != "g4" {
		t.Fatalf("after a restart: %d entries %+v, want g4..g8", len(es), es)
	}
	out := ptCLI(t, n, "audit", "verify").Stdout
	if !strings.Contains(out, "5 entries, chain intact (from entry 5: older entries were pruned") {
		t.Fatalf("verify after pruning: %q", out)
	}

	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, "config.toml"), []byte("[audit]\nmax_age = \"0s\"\n"), 0o600)
	if r := apptest.RunCLI(t, nil, "serve", "--state-dir", bad, "--keychain", "file"); r.Code == 0 || !strings.Contains(r.Stderr, "audit.max_entries and audit.max_age must be positive") {
		t.Fatalf("max_age 0: exit %d %s", r.Code, r.Stderr)
	}
}

// TestAuditBadKindIsAUsageError: an unknown --kind is a usage error (exit
// 2, naming the kinds), like a bad --since or --limit, not a failure of
// the node.
func TestAuditBadKindIsAUsageError(t *testing.T) {
	n := apptest.StartNode(t, apptest.Options{Keychain: "file"})
	r := n.CLI("audit", "--kind", "bogus")
	if r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, "approval, capability, grant, pairing, a2a, lan or database") {
		t.Fatalf("audit --kind bogus: exit %d %s", r.Code, r.Stderr)
	}
	if r := n.CLI("audit", "--kind", "grant"); r.Code != 0 {
		t.Fatalf("audit --kind grant: exit %d %s", r.Code, r.Stderr)
	}
}
