package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func ids(ts []Task) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return out
}

func TestTaskRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, tempDB(t), Options{})
	created := time.Date(2026, 12, 1, 8, 0, 0, 123456789, time.UTC)
	in := Task{
		ID: "t1", Owner: "g1", ContextID: "ctx-a", State: "TASK_STATE_SUBMITTED",
		Caller: "laptop", Via: "tailnet", Summary: "run device.info",
		Status:           []byte(`{"state":"submitted"}`),
		History:          []byte(`[{"role":"user","parts":[{"kind":"text","text":"hi"}]}]`),
		Created:          created,
		ApprovalDeadline: created.Add(2 * time.Minute),
	}
	if err := s.CreateTask(ctx, in); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTask(ctx, in); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate CreateTask = %v, want ErrExists", err)
	}
	got, err := s.Task(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateSubmitted || !got.Created.Equal(created) || !got.ApprovalDeadline.Equal(in.ApprovalDeadline) ||
		string(got.History) != string(in.History) || got.Caller != "laptop" || got.Via != "tailnet" {
		t.Fatalf("Task = %+v", got)
	}

	// The engine moves it on; another owner cannot touch it.
	up := got
	up.State = StateInputRequired
	up.ApprovalDeadline = time.Time{}
	up.ExecState = []byte(`{"capability":"device.info"}`)
	up.Turns = 1
	if err := s.UpdateTask(ctx, up); err != nil {
		t.Fatal(err)
	}
	other := up
	other.Owner = "g2"
	if err := s.UpdateTask(ctx, other); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update by another owner = %v, want ErrNotFound", err)
	}
	got, _ = s.Task(ctx, "t1")
	if got.State != StateInputRequired || string(got.ExecState) != `{"capability":"device.info"}` || got.Turns != 1 ||
		!got.ApprovalDeadline.IsZero() || !got.Created.Equal(created) || got.Updated.Before(created) {
		t.Fatalf("after update %+v", got)
	}

	up.State = StateCompleted
	up.Artifacts = []byte(`[{"artifactId":"a","parts":[]}]`)
	if err := s.UpdateTask(ctx, up); err != nil {
		t.Fatal(err)
	}
	up.State = StateWorking
	if err := s.UpdateTask(ctx, up); !errors.Is(err, ErrTerminal) {
		t.Fatalf("update out of completed = %v, want ErrTerminal", err)
	}
	if err := s.UpdateTask(ctx, Task{ID: "nope", Owner: "g1", State: StateWorking}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update of a missing task = %v", err)
	}
	if err := s.CreateTask(ctx, Task{ID: "x", Owner: "g1", State: "sleeping"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown state = %v", err)
	}
	if _, err := s.Task(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Task(nope) = %v", err)
	}

	s.CreateTask(ctx, Task{ID: "t2", Owner: "g1", ContextID: "ctx-b", State: StateWorking})
	s.CreateTask(ctx, Task{ID: "t3", Owner: "g2", ContextID: "ctx-a", State: StateWorking})
	live, _ := s.Tasks(ctx, TaskFilter{Live: true})
	mine, _ := s.Tasks(ctx, TaskFilter{Owner: "g1", ContextID: "ctx-a"})
	if !slices.Equal(ids(live), []string{"t2", "t3"}) || !slices.Equal(ids(mine), []string{"t1"}) {
		t.Fatalf("live %v, g1/ctx-a %v", ids(live), ids(mine))
	}
	if err := s.DeleteTask(ctx, "t2"); err != nil {
		t.Fatal(err)
	}
	if total, nlive, _ := s.TaskCount(ctx); total != 2 || nlive != 1 {
		t.Fatalf("count %d live %d", total, nlive)
	}
}

// The bound mirrors the in-memory store (a2a.Server.reserveLocked): a new
// task evicts the oldest task to have become terminal, never a live one;
// with only live tasks it is refused.
func TestTaskBoundEvictsOldestTerminal(t *testing.T) {
	ctx := context.Background()
	path := tempDB(t)
	s, err := Open(path, Options{MaxTasks: 4})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := s.CreateTask(ctx, Task{ID: fmt.Sprint("t", i), Owner: "g", State: StateWorking}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateTask(ctx, Task{ID: "t4", Owner: "g", State: StateWorking}); !errors.Is(err, ErrFull) {
		t.Fatalf("5th live task = %v, want ErrFull", err)
	}
	// t2 ends before t0: t2 is the oldest terminal, evicted first.
	for _, id := range []string{"t2", "t0"} {
		if err := s.UpdateTask(ctx, Task{ID: id, Owner: "g", State: StateCompleted}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateTask(ctx, Task{ID: "t4", Owner: "g", State: StateWorking}); err != nil {
		t.Fatal(err)
	}
	all, _ := s.Tasks(ctx, TaskFilter{})
	if !slices.Equal(ids(all), []string{"t0", "t1", "t3", "t4"}) {
		t.Fatalf("after eviction %v, want t2 gone", ids(all))
	}
	// The order of ending survives a restart.
	s.Close()
	s = openTest(t, path, Options{MaxTasks: 4})
	if err := s.CreateTask(ctx, Task{ID: "t5", Owner: "g", State: StateWorking}); err != nil {
		t.Fatal(err)
	}
	all, _ = s.Tasks(ctx, TaskFilter{})
	if !slices.Equal(ids(all), []string{"t1", "t3", "t4", "t5"}) {
		t.Fatalf("after restart and eviction %v", ids(all))
	}
	if err := s.CreateTask(ctx, Task{ID: "t6", Owner: "g", State: StateWorking}); !errors.Is(err, ErrFull) {
		t.Fatalf("all live again = %v", err)
	}
}

func TestTaskByteBounds(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, tempDB(t), Options{MaxTaskHistoryBytes: 100, MaxTaskArtifactBytes: 50, MaxStoredBytes: 240})
	big := []byte(strings.Repeat("h", 101))
	if err := s.CreateTask(ctx, Task{ID: "a", Owner: "g", State: StateWorking, History: big}); !errors.Is(err, ErrTooBig) {
		t.Fatalf("history over bound = %v", err)
	}
	if err := s.CreateTask(ctx, Task{ID: "a", Owner: "g", State: StateWorking, Artifacts: big[:51]}); !errors.Is(err, ErrTooBig) {
		t.Fatalf("artifacts over bound = %v", err)
	}
	long := strings.Repeat("s", MaxText+1)
	for name, err := range map[string]error{
		"task summary":    s.CreateTask(ctx, Task{ID: "a", Owner: "g", State: StateWorking, Summary: long}),
		"approval detail": s.PutApproval(ctx, Approval{ID: "a", Kind: ApprovalDelegation, Detail: long, Expires: time.Now()}),
		"outbound error":  s.PutOutbound(ctx, Outbound{ID: "a", Agent: "x", State: StateFailed, Error: long}),
		"peer name":       s.PutPeer(ctx, ManualPeer{URL: "https://x", Name: long}),
		"context":         s.PutContext(ctx, ContextLink{Owner: "g", ContextID: long, Upstream: "u"}),
	} {
		if !errors.Is(err, ErrTooBig) {
			t.Errorf("%s over MaxText = %v, want ErrTooBig", name, err)
		}
	}
	h := []byte(strings.Repeat("h", 100))
	for _, id := range []string{"a", "b"} {
		if err := s.CreateTask(ctx, Task{ID: id, Owner: "g", State: StateWorking, History: h}); err != nil {
			t.Fatal(err)
		}
	}
	// 200 of 240 bytes live: 100 more do not fit and nothing is terminal.
	if err := s.CreateTask(ctx, Task{ID: "c", Owner: "g", State: StateWorking, History: h}); !errors.Is(err, ErrFull) {
		t.Fatalf("over the total = %v, want ErrFull", err)
	}
	// A task growing is bounded the same way.
	if err := s.UpdateTask(ctx, Task{ID: "a", Owner: "g", State: StateWorking, History: h, Artifacts: []byte(strings.Repeat("a", 50))}); !errors.Is(err, ErrFull) {
		t.Fatalf("growing over the total = %v, want ErrFull", err)
	}
	if err := s.UpdateTask(ctx, Task{ID: "a", Owner: "g", State: StateCompleted, History: h}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTask(ctx, Task{ID: "c", Owner: "g", State: StateWorking, History: h}); err != nil {
		t.Fatalf("with a terminal task to evict = %v", err)
	}
	all, _ := s.Tasks(ctx, TaskFilter{})
	if !slices.Equal(ids(all), []string{"b", "c"}) {
		t.Fatalf("tasks %v, want a evicted", ids(all))
	}
}

// Refused writes in one group commit do not undo the others.
func TestGroupCommitIsolatesRefusedWrites(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, tempDB(t), Options{MaxTasks: 64})
	var wg sync.WaitGroup
	errs := make([]error, 128)
	for i := range 128 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.CreateTask(ctx, Task{ID: fmt.Sprint("t", i%96), Owner: "g", State: StateWorking})
		}()
	}
	wg.Wait()
	var ok, exists, full int
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrExists):
			exists++
		case errors.Is(err, ErrFull):
			full++
		default:
			t.Fatal(err)
		}
	}
	total, _, _ := s.TaskCount(ctx)
	if ok != 64 || total != 64 || ok+exists+full != 128 {
		t.Fatalf("ok %d exists %d full %d stored %d", ok, exists, full, total)
	}
	var rows int
	if err := s.db.QueryRow("SELECT count(*) FROM tasks").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if n := len(s.idx.byID); n != 64 || rows != 64 {
		t.Fatalf("the index counts %d tasks, the table %d", n, rows)
	}
}

// Evicted rows are deleted in chunks (evictChunk): reads never see them,
// the file holds fewer than evictChunk of them beyond the bound, a task
// created again under an evicted id replaces it, and Open deletes what a
// stop left, oldest ended first.
func TestTaskEvictionInChunks(t *testing.T) {
	ctx := context.Background()
	path := tempDB(t)
	const max = 8
	s, err := Open(path, Options{MaxTasks: max})
	if err != nil {
		t.Fatal(err)
	}
	rows := func(s *Store) int {
		t.Helper()
		var n int
		if err := s.db.QueryRow("SELECT count(*) FROM tasks").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	n := max + evictChunk + evictChunk/2
	for i := range n {
		if err := s.CreateTask(ctx, Task{ID: fmt.Sprint("t", i), Owner: "g", State: StateCompleted}); err != nil {
			t.Fatal(err)
		}
		all, err := s.Tasks(ctx, TaskFilter{})
		if err != nil {
			t.Fatal(err)
		}
		want := min(i+1, max)
		if total, _, _ := s.TaskCount(ctx); len(all) != want || total != want {
			t.Fatalf("after %d tasks: Tasks %d, TaskCount %d, want %d", i+1, len(all), total, want)
		}
		if all[len(all)-1].ID != fmt.Sprint("t", i) || all[0].ID != fmt.Sprint("t", i+1-want) {
			t.Fatalf("after %d tasks: %v", i+1, ids(all))
		}
		if r := rows(s); r < want || r >= max+evictChunk {
			t.Fatalf("after %d tasks the table has %d rows, want %d..%d", i+1, r, want, max+evictChunk-1)
		}
	}
	if r := rows(s); r != n-evictChunk {
		t.Fatalf("table rows %d, want %d (one chunk deleted)", r, n-evictChunk)
	}
	if _, err := s.Task(ctx, "t0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an evicted task read: %v", err)
	}
	// An id evicted with its row still in the file, created again: the new task.
	gone := fmt.Sprint("t", n-max-1)
	if err := s.CreateTask(ctx, Task{ID: gone, Owner: "h", State: StateCompleted, Summary: "again"}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Task(ctx, gone); err != nil || got.Owner != "h" || got.Summary != "again" {
		t.Fatalf("created again: %+v %v", got, err)
	}
	if r := rows(s); r != max {
		t.Fatalf("table rows %d after the chunk the new id forced, want %d", r, max)
	}
	if err := s.CreateTask(ctx, Task{ID: "last", Owner: "g", State: StateCompleted}); err != nil {
		t.Fatal(err)
	}
	before, _ := s.Tasks(ctx, TaskFilter{})
	s.Close()
	s = openTest(t, path, Options{MaxTasks: max})
	after, _ := s.Tasks(ctx, TaskFilter{})
	if r := rows(s); r != max || !slices.Equal(ids(before), ids(after)) {
		t.Fatalf("reopened: %d rows, tasks %v, want %d rows, %v", r, ids(after), max, ids(before))
	}
	// A lower bound at the next start trims the oldest ended.
	s.Close()
	s = openTest(t, path, Options{MaxTasks: 3})
	after, _ = s.Tasks(ctx, TaskFilter{})
	if r := rows(s); r != 3 || !slices.Equal(ids(after), ids(before)[max-3:]) {
		t.Fatalf("reopened with 3: %d rows, %v", r, ids(after))
	}
}

func TestContextsLRU(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, tempDB(t), Options{MaxContexts: 2})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	put := func(owner, c, up string, at int) {
		t.Helper()
		if err := s.PutContext(ctx, ContextLink{Owner: owner, ContextID: c, Upstream: up, Used: t0.Add(time.Duration(at) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	put("g1", "a", "up-a", 1)
	put("g2", "a", "up-b", 2)
	put("g1", "a", "up-a", 3) // refreshed: g2/a is now the least recently used
	put("g1", "c", "up-c", 4)
	got, _ := s.Contexts(ctx)
	if len(got) != 2 || got[0].Owner != "g1" || got[0].ContextID != "a" || got[1].ContextID != "c" {
		t.Fatalf("contexts %+v", got)
	}
	s.DeleteContexts(ctx, "g1")
	if got, _ := s.Contexts(ctx); len(got) != 0 {
		t.Fatalf("after DeleteContexts %+v", got)
	}
	if err := s.PutContext(ctx, ContextLink{Owner: "g"}); !errors.Is(err, ErrInvalid) {
		t.Fatal(err)
	}
}

func TestApprovals(t *testing.T) {
	ctx := context.Background()
	path := tempDB(t)
	s, _ := Open(path, Options{MaxApprovals: 2})
	exp := time.Now().Add(time.Minute).UTC().Truncate(time.Microsecond)
	poll := sha256.Sum256([]byte("the claimant's poll token"))
	a := Approval{ID: "ap1", Kind: ApprovalPairing, Peer: "phone", Via: "lan", Summary: "pair as phone",
		Scopes: []string{"agent", "node"}, RequestID: "req1", PollHash: poll[:], Expires: exp}
	if err := s.PutApproval(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := s.PutApproval(ctx, a); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate = %v", err)
	}
	if err := s.PutApproval(ctx, Approval{ID: "ap2", Kind: ApprovalDelegation, GrantID: "g1", TaskID: "t1", Expires: exp}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutApproval(ctx, Approval{ID: "ap3", Kind: ApprovalCapability, Expires: exp}); !errors.Is(err, ErrFull) {
		t.Fatalf("over MaxApprovals = %v", err)
	}
	if err := s.PutApproval(ctx, Approval{ID: "ap4", Kind: "bribe", Expires: exp}); !errors.Is(err, ErrInvalid) {
		t.Fatal(err)
	}
	if err := s.PutApproval(ctx, Approval{ID: "ap5", Kind: ApprovalPairing, PollHash: []byte("short"), Expires: exp}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a poll hash that is no SHA-256: %v", err)
	}
	s.Close()

	s = openTest(t, path, Options{MaxApprovals: 2})
	got, _ := s.Approvals(ctx)
	if len(got) != 2 || got[0].ID != "ap1" || !slices.Equal(got[0].Scopes, []string{"agent", "node"}) || !got[0].Expires.Equal(exp) ||
		got[0].RequestID != "req1" || !bytes.Equal(got[0].PollHash, poll[:]) || got[1].PollHash != nil {
		t.Fatalf("after restart %+v", got)
	}
	e, err := s.ResolveApproval(ctx, "ap2", Entry{Kind: KindApproval, GrantID: "g1", Subject: "run device.info",
		Result: "approved", DecidedBy: "owner", DecidedVia: WhereTray, TaskID: "t1"})
	if err != nil || e.Seq != 1 {
		t.Fatalf("ResolveApproval = %+v, %v", e, err)
	}
	if _, err := s.ResolveApproval(ctx, "ap2", Entry{Kind: KindApproval}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second decision = %v", err)
	}
	entries, _ := s.Query(ctx, Filter{})
	if len(entries) != 1 {
		t.Fatalf("a refused decision was audited: %d entries", len(entries))
	}
	if err := s.DeleteApproval(ctx, "ap1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Approvals(ctx); len(got) != 0 {
		t.Fatalf("left %+v", got)
	}
	if s.st.approvals != 0 {
		t.Fatalf("writer counts %d approvals", s.st.approvals)
	}
}

func TestOutboundBound(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, tempDB(t), Options{MaxOutbound: 3, MaxOutboundBytes: 10})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	put := func(id string, st State, following bool, at int) error {
		return s.PutOutbound(ctx, Outbound{ID: id, Agent: "ag", State: st, Following: following,
			Created: t0.Add(time.Duration(at) * time.Second)})
	}
	if err := put("a", StateWorking, true, 1); err != nil {
		t.Fatal(err)
	}
	put("b", StateWorking, false, 2)
	put("c", StateCompleted, false, 3)
	// Full: the oldest terminal one nobody follows goes first (c), ...
	if err := put("d", StateWorking, true, 4); err != nil {
		t.Fatal(err)
	}
	// ... then the oldest one nobody follows (b), ...
	if err := put("e", StateWorking, true, 5); err != nil {
		t.Fatal(err)
	}
	got, _ := s.OutboundTasks(ctx)
	var names []string
	for _, o := range got {
		names = append(names, o.ID)
	}
	if !slices.Equal(names, []string{"a", "d", "e"}) {
		t.Fatalf("outbound %v", names)
	}
	// ... and with every one followed, a new one is refused.
	if err := put("f", StateWorking, false, 6); !errors.Is(err, ErrFull) {
		t.Fatalf("all followed = %v", err)
	}
	if err := put("a", StateFailed, false, 1); err != nil {
		t.Fatal(err)
	}
	if err := put("a", StateWorking, false, 1); !errors.Is(err, ErrTerminal) {
		t.Fatalf("out of failed = %v", err)
	}
	if err := s.PutOutbound(ctx, Outbound{ID: "g", Agent: "ag", State: StateWorking, Artifacts: []byte("12345678901")}); !errors.Is(err, ErrTooBig) {
		t.Fatalf("artifacts over bound = %v", err)
	}
}

func TestPeers(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, tempDB(t), Options{MaxPeers: 1})
	p := ManualPeer{URL: "https://192.0.2.7:47654", DeviceID: "ABCDEFG-HIJKLMN", Name: "nas"}
	if err := s.PutPeer(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Name, p.OS, p.LastSeen = "nas2", "Debian GNU/Linux 12 (x86_64)", time.Unix(1_800_000_000, 0)
	if err := s.PutPeer(ctx, p); err != nil {
		t.Fatalf("update = %v", err)
	}
	// An update without a newer sighting keeps the last one known.
	p.LastSeen = time.Time{}
	if err := s.PutPeer(ctx, p); err != nil {
		t.Fatalf("update = %v", err)
	}
	if err := s.PutPeer(ctx, ManualPeer{URL: "https://198.51.100.1"}); !errors.Is(err, ErrFull) {
		t.Fatalf("over MaxPeers = %v", err)
	}
	if err := s.PutPeer(ctx, ManualPeer{URL: "http://x"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("http = %v", err)
	}
	got, _ := s.Peers(ctx)
	if len(got) != 1 || got[0].Name != "nas2" || got[0].OS != "Debian GNU/Linux 12 (x86_64)" || !got[0].LastSeen.Equal(time.Unix(1_800_000_000, 0)) {
		t.Fatalf("peers %+v", got)
	}
	if err := s.DeletePeer(ctx, p.URL); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePeer(ctx, p.URL); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
}

func TestParseState(t *testing.T) {
	for in, want := range map[string]State{
		"completed": StateCompleted, "TASK_STATE_INPUT_REQUIRED": StateInputRequired,
		"TASK_STATE_CANCELED": StateCanceled, "TASK_STATE_CANCELLED": StateCanceled, "rejected": StateRejected,
	} {
		if got, err := ParseState(in); err != nil || got != want {
			t.Errorf("ParseState(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseState("TASK_STATE_UNSPECIFIED"); err == nil {
		t.Error("unspecified accepted")
	}
	if !StateRejected.Terminal() || StateInputRequired.Terminal() || !StateAuthRequired.Interrupted() {
		t.Error("Terminal/Interrupted")
	}
}

// A write-behind write that the database refuses is never silent: the
// store takes no more writes and says why (Flush, every later write), and
// reads, which could miss it, fail too.
func TestFailedWriteBehindStopsWrites(t *testing.T) {
	ctx := context.Background()
	path := tempDB(t)
	s := openTest(t, path, Options{})
	db := rawDB(t, path)
	if _, err := db.Exec(`CREATE TRIGGER refuse BEFORE INSERT ON tasks WHEN NEW.id = 'boom'
		BEGIN SELECT RAISE(ABORT, 'disk says no'); END`); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTask(ctx, Task{ID: "ok", Owner: "g", State: StateWorking}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTask(ctx, Task{ID: "boom", Owner: "g", State: StateWorking}); err != nil {
		t.Fatalf("write-behind CreateTask = %v, want it queued", err)
	}
	if err := s.Flush(ctx); !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "disk says no") {
		t.Fatalf("Flush after the failed write = %v, want ErrFailed with the cause", err)
	}
	if _, err := s.Task(ctx, "boom"); !errors.Is(err, ErrFailed) {
		t.Fatalf("read after the failed write = %v, want ErrFailed", err)
	}
	if _, err := s.Tasks(ctx, TaskFilter{}); !errors.Is(err, ErrFailed) {
		t.Fatalf("list after the failed write = %v, want ErrFailed", err)
	}
	if err := s.UpdateTask(ctx, Task{ID: "ok", Owner: "g", State: StateCompleted}); !errors.Is(err, ErrFailed) {
		t.Fatalf("later write = %v, want ErrFailed", err)
	}
	if _, err := s.Append(ctx, Entry{Kind: KindLAN, Result: "on"}); !errors.Is(err, ErrFailed) {
		t.Fatalf("later audit append = %v, want ErrFailed", err)
	}
	// Reopened, the store holds what was committed before the failure.
	s.Close()
	db.Exec("DROP TRIGGER refuse")
	s2 := openTest(t, path, Options{})
	if _, err := s2.Task(ctx, "boom"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("refused task after reopen: %v", err)
	}
}

// Write-behind writes are seen by the next read and kept by Close.
func TestWriteBehindReadAndClose(t *testing.T) {
	ctx := context.Background()
	path := tempDB(t)
	s, _ := Open(path, Options{})
	for i := range 200 {
		if err := s.CreateTask(ctx, Task{ID: fmt.Sprint("w", i), Owner: "g", State: StateSubmitted}); err != nil {
			t.Fatal(err)
		}
		if i == 100 {
			if got, err := s.Task(ctx, "w100"); err != nil || got.State != StateSubmitted {
				t.Fatalf("read right after a write-behind write: %v", err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, path, Options{})
	if total, live, _ := s.TaskCount(ctx); total != 200 || live != 200 {
		t.Fatalf("after Close and reopen: %d tasks, %d live", total, live)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// A group commit acknowledges a write only once the transaction holding it
// committed: when the commit fails, every write it carried reaches its
// caller as the error (none returns success), none of them is in the file
// afterwards, and what was committed before stays.
func TestGroupCommitFailureReachesEveryWaiter(t *testing.T) {
	ctx := context.Background()
	path := tempDB(t)
	s := openTest(t, path, Options{})
	db := rawDB(t, path)
	if _, err := db.Exec(`CREATE TRIGGER refuse BEFORE INSERT ON tasks WHEN NEW.id = 'boom'
		BEGIN SELECT RAISE(ABORT, 'disk says no'); END`); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTask(ctx, Task{ID: "before", Owner: "g", State: StateCompleted}); err != nil {
		t.Fatal(err)
	}
	// Hold the writer, so the writes below queue and go into one batch.
	const n = 32
	s.wmu.Lock()
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	for i := range n + 1 {
		id := fmt.Sprint("t", i)
		if i == n {
			id = "boom"
		}
		wg.Go(func() { errs[i] = s.CreateTask(ctx, Task{ID: id, Owner: "g", State: StateCompleted}) })
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(s.ops) < n+1 {
		if time.Now().After(deadline) {
			s.wmu.Unlock()
			t.Fatalf("%d writes queued, want %d", len(s.ops), n+1)
		}
		time.Sleep(time.Millisecond)
	}
	s.wmu.Unlock()
	s.kickWriter()
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "disk says no") {
			t.Errorf("write %d of the failed batch = %v, want ErrFailed with the cause", i, err)
		}
	}
	s.Close()
	if _, err := db.Exec("DROP TRIGGER refuse"); err != nil {
		t.Fatal(err)
	}
	s2 := openTest(t, path, Options{})
	if _, err := s2.Task(ctx, "before"); err != nil {
		t.Fatalf("task committed before the failure: %v", err)
	}
	if total, _, _ := s2.TaskCount(ctx); total != 1 {
		t.Fatalf("%d tasks after reopen, want only the one committed before the failed batch", total)
	}
}

// The sends under way outlive a close: put, listed oldest first after a
// reopen, deleted by (device, task) and gone after the next reopen; the
// same task id at another device is another send.
func TestSendings(t *testing.T) {
	ctx := context.Background()
	path := tempDB(t)
	s, err := Open(path, Options{MaxSendings: 2})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_800_000_000, 0)
	a := Sending{Device: "AAAAAAA-BBBBBBB", TaskID: "t1", Name: "bee", Started: t0.Add(time.Second)}
	b := Sending{Device: "CCCCCCC-DDDDDDD", TaskID: "t1", Name: "wasp", Started: t0}
	for _, sd := range []Sending{a, b, a} { // a twice: replaced, not counted twice
		if err := s.PutSending(ctx, sd); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutSending(ctx, Sending{Device: "EEEEEEE-FFFFFFF", TaskID: "t2"}); !errors.Is(err, ErrFull) {
		t.Fatalf("over MaxSendings = %v", err)
	}
	if err := s.PutSending(ctx, Sending{Device: "EEEEEEE-FFFFFFF"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("no task id = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(path, Options{MaxSendings: 2})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Sendings(ctx)
	if err != nil || len(got) != 2 || !sameSending(got[0], b) || !sameSending(got[1], a) {
		t.Fatalf("after reopen Sendings = %+v, %v", got, err)
	}
	// The count is read back at Open: still full.
	if err := s.PutSending(ctx, Sending{Device: "EEEEEEE-FFFFFFF", TaskID: "t2"}); !errors.Is(err, ErrFull) {
		t.Fatalf("over MaxSendings after reopen = %v", err)
	}
	if err := s.DeleteSending(ctx, a.Device, "t1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSending(ctx, a.Device, "t1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete = %v", err)
	}
	if err := s.PutSending(ctx, Sending{Device: "EEEEEEE-FFFFFFF", TaskID: "t2", Started: t0.Add(time.Hour)}); err != nil {
		t.Fatalf("after a delete = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openTest(t, path, Options{})
	got, err = s.Sendings(ctx)
	if err != nil || len(got) != 2 || !sameSending(got[0], b) || got[1].Device != "EEEEEEE-FFFFFFF" || got[1].TaskID != "t2" || !got[1].Started.Equal(t0.Add(time.Hour)) {
		t.Fatalf("after delete and reopen Sendings = %+v, %v", got, err)
	}
}

// A database of the schema before the sends under way (as the previous
// build left it: that step neither applied nor recorded) migrates forward
// keeping its records, and then takes them.
func TestSendingsMigrateFromPreviousSchema(t *testing.T) {
	ctx := context.Background()
	path := tempDB(t)
	v := 1 + slices.IndexFunc(migrations, func(m migration) bool { return strings.Contains(m.sql, "CREATE TABLE sendings") })
	if v == 0 {
		t.Fatal("no migration creates the sendings table")
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutPeer(ctx, ManualPeer{URL: "https://192.0.2.7:47654", Name: "nas"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db := rawDB(t, path)
	for _, q := range []string{"DROP TABLE sendings", fmt.Sprintf("DELETE FROM schema_migrations WHERE version >= %d", v)} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	s = openTest(t, path, Options{})
	var versions, rows int
	s.db.QueryRow("SELECT count(*) FROM schema_migrations WHERE version >= ?", v).Scan(&versions)
	s.db.QueryRow("SELECT count(*) FROM schema_migrations").Scan(&rows)
	if versions != SchemaVersion-v+1 || rows != SchemaVersion {
		t.Fatalf("%d steps from %d recorded, %d in all; want %d, %d", versions, v, rows, SchemaVersion-v+1, SchemaVersion)
	}
	if ps, err := s.Peers(ctx); err != nil || len(ps) != 1 || ps[0].Name != "nas" {
		t.Fatalf("peers across the upgrade: %+v, %v", ps, err)
	}
	sd := Sending{Device: "AAAAAAA-BBBBBBB", TaskID: "t1", Name: "bee", Started: time.Unix(1_800_000_000, 0)}
	if err := s.PutSending(ctx, sd); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Sendings(ctx); err != nil || len(got) != 1 || !sameSending(got[0], sd) {
		t.Fatalf("Sendings after the upgrade = %+v, %v", got, err)
	}
}

func sameSending(a, b Sending) bool {
	return a.Device == b.Device && a.TaskID == b.TaskID && a.Name == b.Name && a.Started.Equal(b.Started)
}
