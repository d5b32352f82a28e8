package app

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	agent "meshtray/a2a"
	"meshtray/files"
	"meshtray/pairing"
	"meshtray/store"
)

// openTestDB opens a real SQLite database in a temp dir (closed at the end).
func openTestDB(t *testing.T, path string) *store.Store {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), store.DefaultFile)
	}
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// dbQueue is a queue with a database, as Node.Start attaches it.
func dbQueue(t *testing.T, db *store.Store, timeout time.Duration, waiting func(string) bool) (*Approvals, []store.Approval) {
	t.Helper()
	q := newApprovals(timeout, nil)
	if waiting == nil {
		waiting = func(string) bool { return false }
	}
	pairs, err := q.restore(context.Background(), db, slog.New(slog.DiscardHandler), waiting)
	if err != nil {
		t.Fatal(err)
	}
	return q, pairs
}

func approvalEntries(t *testing.T, db *store.Store) []store.Entry {
	t.Helper()
	es, err := db.Query(context.Background(), store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Entry
	for _, e := range es {
		if e.Kind == store.KindApproval {
			out = append(out, e)
		}
	}
	return out
}

func rows(t *testing.T, db *store.Store) []store.Approval {
	t.Helper()
	rs, err := db.Approvals(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestApprovalDecisionOnDiskFirst: a pending approval is a row before it is
// listed; the owner's decision removes it and appends its audit entry
// (who, where, what) before the requester learns it and before Decide
// returns.
func TestApprovalDecisionOnDiskFirst(t *testing.T) {
	t.Parallel()
	db := openTestDB(t, "")
	q, _ := dbQueue(t, db, time.Minute, nil)
	type seen struct {
		rows    int
		entries []store.Entry
		d       ApprovalDecision
	}
	got := make(chan seen, 1)
	id, err := q.Post(Approval{Kind: KindDelegation, GrantID: "g1", Peer: "phone", Via: "lan", Summary: "summarize the notes", TaskID: "t1"},
		func(d ApprovalDecision) { got <- seen{len(rows(t, db)), approvalEntries(t, db), d} })
	if err != nil {
		t.Fatal(err)
	}
	if rs := rows(t, db); len(rs) != 1 || rs[0].ID != id || rs[0].TaskID != "t1" || rs[0].Summary != "summarize the notes" {
		t.Fatalf("rows after Post = %+v", rs)
	}
	if err := q.Decide(id, ApprovalDecision{Decision: DecisionApprove, Where: store.WhereTray}); err != nil {
		t.Fatal(err)
	}
	s := <-got
	if s.rows != 0 || len(s.entries) != 1 {
		t.Fatalf("when the requester learnt the decision: %d rows, %d entries; want 0 and 1", s.rows, len(s.entries))
	}
	e := s.entries[0]
	if e.Result != "approved" || e.DecidedBy != "owner" || e.DecidedVia != store.WhereTray || e.GrantID != "g1" ||
		e.Peer != "phone" || e.Via != "lan" || e.TaskID != "t1" || !strings.Contains(e.Subject, "summarize the notes") {
		t.Fatalf("audit entry = %+v", e)
	}
	if !s.d.Approved() || !s.d.ByOwner {
		t.Fatalf("decision = %+v", s.d)
	}
	if v, err := db.Verify(context.Background()); err != nil || v.Entries != 1 {
		t.Fatalf("Verify = %+v, %v", v, err)
	}
}

// TestApprovalRefusalsAudited: a timeout, a withdrawal and a denial each
// leave one entry saying who (or what) ended the request and why.
func TestApprovalRefusalsAudited(t *testing.T) {
	t.Parallel()
	db := openTestDB(t, "")
	q, _ := dbQueue(t, db, 50*time.Millisecond, nil)
	if d, err := q.Ask(context.Background(), Approval{Kind: KindCapability, Peer: "laptop", Summary: "system.notify"}); err != nil || d.Approved() {
		t.Fatalf("timeout: %+v, %v", d, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan ApprovalDecision, 1)
	go func() {
		d, _ := q.Ask(ctx, Approval{Kind: KindDelegation, Peer: "phone", Summary: "go away", Expires: time.Now().Add(time.Minute)})
		done <- d
	}()
	waitList(t, q, 1)
	cancel()
	if d := <-done; d.Approved() || !strings.HasPrefix(d.Reason, "withdrawn") {
		t.Fatalf("withdrawn: %+v", d)
	}
	id, _ := q.Post(Approval{Kind: KindDelegation, Peer: "phone", Summary: "no", Expires: time.Now().Add(time.Minute)}, func(ApprovalDecision) {})
	if err := q.Decide(id, ApprovalDecision{Decision: DecisionDeny}); err != nil {
		t.Fatal(err)
	}
	es := approvalEntries(t, db)
	if len(es) != 3 {
		t.Fatalf("%d entries, want 3: %+v", len(es), es)
	}
	want := []struct{ result, by, via, params string }{
		{"denied", decidedByNode, store.WhereTimeout, "no answer within"},
		{"withdrawn", decidedByNode, "", "withdrawn: the caller went away"},
		{"denied", "owner", store.WhereCLI, "denied by the owner"},
	}
	for i, w := range want {
		if e := es[i]; e.Result != w.result || e.DecidedBy != w.by || e.DecidedVia != w.via || !strings.HasPrefix(e.Params, w.params) {
			t.Errorf("entry %d = %+v; want %s by %q via %q params %q…", i, e, w.result, w.by, w.via, w.params)
		}
	}
	if len(rows(t, db)) != 0 {
		t.Fatal("rows left after every request ended")
	}
}

// TestApprovalNotRecordedNotTaken: a decision the database cannot write is
// refused and the request stays pending (the owner was not told it was
// decided, so nothing was).
func TestApprovalNotRecordedNotTaken(t *testing.T) {
	t.Parallel()
	db := openTestDB(t, "")
	q, _ := dbQueue(t, db, time.Minute, nil)
	decided := make(chan ApprovalDecision, 1)
	id, err := q.Post(Approval{Kind: KindDelegation, Peer: "phone", Summary: "x"}, func(d ApprovalDecision) { decided <- d })
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if err := q.Decide(id, ApprovalDecision{Decision: DecisionApprove}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Decide with the database gone: %v, want store.ErrClosed", err)
	}
	if l := q.List(); len(l) != 1 || l[0].ID != id {
		t.Fatalf("after a failed write the request is not pending: %+v", l)
	}
	select {
	case d := <-decided:
		t.Fatalf("the requester learnt an unrecorded decision: %+v", d)
	default:
	}
	if _, err := q.Post(Approval{Kind: KindDelegation, Peer: "phone"}, func(ApprovalDecision) {}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Post with the database gone: %v", err)
	}
	q.Close()
}

// TestApprovalsGracefulCloseKeepsRows: Close ends the waits but writes no
// decision: the rows stay for the next start, which ends a capability
// request as restarted, refuses one past its deadline as a timeout, and
// gives a delegation whose task waits again back to the engine's re-ask
// with its id, Created and deadline.
func TestApprovalsGracefulCloseKeepsRows(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), store.DefaultFile)
	db := openTestDB(t, path)
	q, _ := dbQueue(t, db, time.Minute, nil)
	ends := make(chan ApprovalDecision, 4)
	end := func(d ApprovalDecision) { ends <- d }
	deadline := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	del, _ := q.Post(Approval{Kind: KindDelegation, GrantID: "g1", Peer: "phone", Summary: "d", TaskID: "t1", Expires: deadline}, end)
	q.Post(Approval{Kind: KindDelegation, GrantID: "g1", Peer: "phone", Summary: "gone", TaskID: "t2"}, end)
	q.Post(Approval{Kind: KindCapability, Peer: "phone", Summary: "system.notify"}, end)
	soon, _ := q.Post(Approval{Kind: KindDelegation, Peer: "phone", Summary: "soon", TaskID: "t3", Expires: time.Now().Add(300 * time.Millisecond)}, end)
	before, _ := q.Get(del)
	q.beginClose()
	if err := q.Decide(del, ApprovalDecision{Decision: DecisionApprove}); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("Decide while closing: %v", err)
	}
	q.Close()
	for range 4 {
		if d := <-ends; d.Approved() || d.Reason != reasonShutdown {
			t.Fatalf("wait ended at Close: %+v", d)
		}
	}
	if n := len(rows(t, db)); n != 4 {
		t.Fatalf("%d rows after a graceful close, want 4", n)
	}
	if es := approvalEntries(t, db); len(es) != 0 {
		t.Fatalf("a graceful close audited decisions: %+v", es)
	}
	db.Close()
	time.Sleep(350 * time.Millisecond) // "soon" expires while the node is down

	db2 := openTestDB(t, path)
	q2, _ := dbQueue(t, db2, time.Minute, func(task string) bool { return task == "t1" || task == "t3" })
	defer q2.Close()
	if l := q2.List(); len(l) != 0 {
		t.Fatalf("restored delegations listed before their task asked again: %+v", l)
	}
	es := approvalEntries(t, db2)
	if len(es) != 3 {
		t.Fatalf("entries after the restart: %+v", es)
	}
	var restarted, expired int
	for _, e := range es {
		switch {
		case e.Params == reasonRestarted && e.DecidedBy == decidedByNode:
			restarted++
		case e.DecidedVia == store.WhereTimeout && strings.Contains(e.Params, "while the node was down") && strings.Contains(e.Subject, "soon"):
			expired++
		}
	}
	if restarted != 2 || expired != 1 {
		t.Fatalf("after the restart: %d restarted (want the capability call and the gone task), %d expired (want 1): %+v", restarted, expired, es)
	}
	_ = soon

	// The engine asks again for t1 with the stored deadline.
	got := make(chan ApprovalDecision, 1)
	id, err := q2.Post(Approval{Kind: KindDelegation, GrantID: "g1", Peer: "phone", Summary: "d", TaskID: "t1", Expires: deadline},
		func(d ApprovalDecision) { got <- d })
	if err != nil {
		t.Fatal(err)
	}
	a, ok := q2.Get(id)
	if id != del || !ok || !a.Created.Equal(before.Created) || !a.Expires.Equal(deadline) || !a.Restored {
		t.Fatalf("re-asked approval = %s %+v; want id %s, created %v, expires %v", id, a, del, before.Created, deadline)
	}
	if err := q2.Decide(id, ApprovalDecision{Decision: DecisionApprove, Where: store.WhereCLI}); err != nil {
		t.Fatal(err)
	}
	if d := <-got; !d.Approved() {
		t.Fatalf("decision = %+v", d)
	}
	if len(rows(t, db2)) != 0 {
		t.Fatalf("rows left: %+v", rows(t, db2))
	}
	if v, err := db2.Verify(context.Background()); err != nil || v.Entries != 4 {
		t.Fatalf("Verify = %+v, %v", v, err)
	}
}

// TestRestoredDelegationNobodyAsksFor: a restored delegation row the engine
// never asks for again ends at its deadline as a timeout.
func TestRestoredDelegationNobodyAsksFor(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), store.DefaultFile)
	db := openTestDB(t, path)
	if err := db.PutApproval(context.Background(), store.Approval{ID: "A1", Kind: store.ApprovalDelegation, Peer: "phone",
		Summary: "late", TaskID: "t9", Created: time.Now(), Expires: time.Now().Add(200 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	q, _ := dbQueue(t, db, time.Minute, func(string) bool { return true })
	defer q.Close()
	for deadline := time.Now().Add(10 * time.Second); len(rows(t, db)) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the unclaimed row never ended")
		}
	}
	es := approvalEntries(t, db)
	if len(es) != 1 || es[0].DecidedVia != store.WhereTimeout || es[0].TaskID != "t9" {
		t.Fatalf("entries = %+v", es)
	}
}

// TestPolicyDecisionAudited: a delegation decided by the grant's policy
// (allow or deny) is audited as decided by policy, before it runs.
func TestPolicyDecisionAudited(t *testing.T) {
	t.Parallel()
	n, gr := approverNode(t)
	db := openTestDB(t, "")
	n.approvals, _ = dbQueue(t, db, time.Minute, nil)
	p := &pairing.Principal{Grant: gr, Listener: pairing.ListenerTailnet}
	for _, pol := range []pairing.Policy{pairing.PolicyAllow, pairing.PolicyDeny} {
		if err := n.grants.SetPolicy(gr.ID, pol); err != nil {
			t.Fatal(err)
		}
		d := taskApprover{n}.ApproveTask(context.Background(), agent.TaskApproval{TaskID: a2a.TaskID("t-" + string(pol)), Caller: p, Summary: "device.info", Queued: func() {}})
		if d.Approved != (pol == pairing.PolicyAllow) || d.ByOwner {
			t.Fatalf("policy %s: %+v", pol, d)
		}
	}
	es := approvalEntries(t, db)
	if len(es) != 2 {
		t.Fatalf("entries = %+v", es)
	}
	for i, want := range []string{"approved", "denied"} {
		e := es[i]
		if e.Result != want || e.DecidedBy != decidedByPolicy || e.DecidedVia != store.WherePolicy || e.GrantID != gr.ID || e.Via != "tailnet" {
			t.Fatalf("entry %d = %+v", i, e)
		}
	}
}

func waitList(t *testing.T, q *Approvals, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(q.List()) != n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d approvals listed, want %d", len(q.List()), n)
		}
	}
}

// TestRestoredFilesApprovalReclaimed: a file transfer's approval is kept
// across a restart like a delegation's and taken back by its task's re-ask
// with the same id (the files list comes from the re-asked request).
func TestRestoredFilesApprovalReclaimed(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), store.DefaultFile)
	db := openTestDB(t, path)
	q, _ := dbQueue(t, db, time.Minute, nil)
	id, err := q.Post(Approval{Kind: KindFiles, GrantID: "g", Peer: "phone", Summary: "2 files", TaskID: "tf",
		Files: []ApprovalFile{{Path: "a.txt", Size: 3}}}, func(ApprovalDecision) {})
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	db.Close()

	db2 := openTestDB(t, path)
	q2, _ := dbQueue(t, db2, time.Minute, func(task string) bool { return task == "tf" })
	defer q2.Close()
	got := make(chan ApprovalDecision, 1)
	id2, err := q2.Post(Approval{Kind: KindFiles, GrantID: "g", Peer: "phone", Summary: "2 files", TaskID: "tf",
		Files: []ApprovalFile{{Path: "a.txt", Size: 3}}}, func(d ApprovalDecision) { got <- d })
	if err != nil || id2 != id {
		t.Fatalf("re-asked files approval: %s %v; want id %s", id2, err, id)
	}
	if a, _ := q2.Get(id2); a.Kind != KindFiles || len(a.Files) != 1 || !a.Restored {
		t.Fatalf("re-asked files approval = %+v", a)
	}
	if err := q2.Decide(id2, ApprovalDecision{Decision: DecisionDeny, Where: store.WhereTray}); err != nil {
		t.Fatal(err)
	}
	<-got
	if es := approvalEntries(t, db2); len(es) != 1 || es[0].TaskID != "tf" || !strings.HasPrefix(es[0].Subject, "files: ") {
		t.Fatalf("entries = %+v", es)
	}
}

// TestRestoredFilesDecisionNotDecidedTwice: the owner approved a file
// transfer with "always allow files from this device" (its grant's files
// policy became allow), and the node was killed before the task's own
// write: at the start the task is asked again. The decision recorded
// before the kill answers it, as for a delegation: the files policy does
// not decide it a second time (one audit entry, by the owner).
func TestRestoredFilesDecisionNotDecidedTwice(t *testing.T) {
	t.Parallel()
	n, gr := approverNode(t)
	n.cfg.Files = FilesConfig{Dir: t.TempDir(), KeepFree: 1}
	n.startFiles()
	path := filepath.Join(t.TempDir(), store.DefaultFile)
	db := openTestDB(t, path)
	ctx := context.Background()
	sum := strings.Repeat("ab", 32)
	msg := a2a.NewMessage(a2a.MessageRoleUser, announceParts(files.Manifest{Files: []files.Entry{{Name: "a.txt", Path: "a.txt", Size: 5, SHA256: sum, MediaType: "text/plain"}}})...)
	if err := db.CreateTask(ctx, store.Task{ID: "tf", Owner: "grant:" + gr.ID, State: store.StateSubmitted, Created: time.Now(), Updated: time.Now(),
		ApprovalDeadline: time.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	// The decision before the kill: the owner approved (always), the
	// policy became allow; the task was still submitted on disk.
	q, _ := dbQueue(t, db, time.Minute, nil)
	id, err := q.Post(Approval{Kind: KindFiles, GrantID: gr.ID, Peer: gr.Name, Summary: "send 1 file", TaskID: "tf"}, func(ApprovalDecision) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Decide(id, ApprovalDecision{Decision: DecisionApprove, Always: true, Where: store.WhereTray}); err != nil {
		t.Fatal(err)
	}
	q.Close()
	if err := n.grants.SetFilesPolicy(gr.ID, pairing.PolicyAllow); err != nil {
		t.Fatal(err)
	}

	// The restart: the queue restores, the engine asks again.
	n.approvals.Close()
	n.approvals, _ = dbQueue(t, db, time.Minute, func(task string) bool { return task == "tf" })
	p := &pairing.Principal{Grant: gr, Listener: pairing.ListenerTailnet}
	d := taskApprover{n}.ApproveTask(ctx, agent.TaskApproval{TaskID: "tf", Caller: p, Message: msg, Summary: "send 1 file",
		Deadline: time.Now().Add(time.Minute), Queued: func() {}})
	if !d.Approved || !d.ByOwner {
		t.Fatalf("the re-asked transfer: %+v; want the owner's approval recorded before the restart", d)
	}
	es := approvalEntries(t, db)
	if len(es) != 1 || es[0].DecidedBy != "owner" || es[0].DecidedVia != store.WhereTray {
		t.Fatalf("audit entries of the transfer: %+v; want the owner's one decision", es)
	}
	if len(n.approvals.List()) != 0 {
		t.Fatalf("asked again: %+v", n.approvals.List())
	}
}

// TestRestoredFilesRunUnderTheGrant: a file transfer restored from the
// database (its caller only the grant's id and name) and decided by the
// files policy runs under the grant as it is now, as a delegation does:
// the receiver tells a meshtray sender, by the grant's device, where the
// files went.
func TestRestoredFilesRunUnderTheGrant(t *testing.T) {
	t.Parallel()
	n, gr := approverNode(t)
	n.cfg.Files = FilesConfig{Dir: t.TempDir(), KeepFree: 1}
	n.startFiles()
	db := openTestDB(t, "")
	n.approvals.Close()
	n.approvals, _ = dbQueue(t, db, time.Minute, nil)
	if err := n.grants.SetFilesPolicy(gr.ID, pairing.PolicyAllow); err != nil {
		t.Fatal(err)
	}
	sum := strings.Repeat("ab", 32)
	msg := a2a.NewMessage(a2a.MessageRoleUser, announceParts(files.Manifest{Files: []files.Entry{{Name: "a.txt", Path: "a.txt", Size: 5, SHA256: sum, MediaType: "text/plain"}}})...)
	restored := &pairing.Principal{Grant: pairing.Grant{ID: gr.ID, Name: gr.Name}}
	d := taskApprover{n}.ApproveTask(context.Background(), agent.TaskApproval{TaskID: "tf", Caller: restored, Message: msg, Summary: "send 1 file",
		Deadline: time.Now().Add(time.Minute), Queued: func() {}})
	if !d.Approved || d.Caller == nil || !d.Caller.Grant.Scopes.Has(pairing.ScopeAgent) {
		t.Fatalf("the restored transfer approved by policy: %+v (caller %+v)", d, d.Caller)
	}
}

// TestWithdrawalWords: a request whose requester's ctx ends is audited
// "withdrawn", saying why in words from the ctx's cause, never Go's error
// text.
func TestWithdrawalWords(t *testing.T) {
	t.Parallel()
	db := openTestDB(t, "")
	q, _ := dbQueue(t, db, time.Minute, nil)
	for _, c := range []struct {
		cause error
		want  string
	}{
		{agent.ErrSwitchedOff, "withdrawn: A2A was switched off"},
		{agent.ErrCanceledByCaller, "withdrawn: the caller canceled it"},
		{nil, "withdrawn: the caller went away"},
		{errors.New("the grant was paused"), "withdrawn: the grant was paused"},
	} {
		ctx, cancel := context.WithCancelCause(context.Background())
		done := make(chan ApprovalDecision, 1)
		go func() {
			d, _ := q.Ask(ctx, Approval{Kind: KindDelegation, Peer: "phone", Summary: c.want, Expires: time.Now().Add(time.Minute)})
			done <- d
		}()
		waitList(t, q, 1)
		cancel(c.cause)
		if d := <-done; d.Approved() || d.Reason != c.want || !d.Withdrawn {
			t.Errorf("%v: %+v, want %q", c.cause, d, c.want)
		}
	}
	es := approvalEntries(t, db)
	if len(es) != 4 {
		t.Fatalf("%d entries: %+v", len(es), es)
	}
	for _, e := range es {
		if e.Result != "withdrawn" || e.Params != strings.TrimPrefix(e.Subject, "delegation: ") || e.DecidedBy != decidedByNode {
			t.Errorf("entry %+v", e)
		}
	}
}
