package a2a

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	a2av1 "github.com/a2aproject/a2a-go/v2/a2a"

	"meshtray/store"
)

// openStore opens (or reopens) the database file path.
func openStore(t *testing.T, path string, opts store.Options) *store.Store {
	t.Helper()
	db, err := store.Open(path, opts)
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// stop shuts the env's server down (gracefully, as a node's Close does).
func (e *testEnv) stop(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

func sendNonBlocking(t *testing.T, env *testEnv, token string, msg *a2a.Message) *a2a.Task {
	t.Helper()
	no := false
	res, err := env.client(t, token).SendMessage(context.Background(), &a2a.MessageSendParams{
		Message: msg, Config: &a2a.MessageSendConfig{Blocking: &no},
	})
	if err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	task, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("SendMessage returned %T", res)
	}
	return task
}

func sendBlocking(t *testing.T, env *testEnv, token string, msg *a2a.Message) *a2a.Task {
	t.Helper()
	res, err := env.client(t, token).SendMessage(context.Background(), &a2a.MessageSendParams{Message: msg})
	if err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	task, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("SendMessage returned %T", res)
	}
	return task
}

// TestRestartKeepsTasks drives a server on a real SQLite file, shuts it
// down as a node's Close does, and starts a new one on the same file: the
// official 0.3 and 1.0 clients read the old tasks (the owner's, never
// another's); the input-required task is answered through the executor
// with its restored state; the task that was running ended failed saying
// why (not "node shutting down": a graceful stop writes nothing); the task
// waiting for approval is asked again with its original deadline.
func TestRestartKeepsTasks(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), store.DefaultFile)
	db := openStore(t, path, store.Options{})
	started := make(chan a2a.TaskID, 1)
	appr := newManualApprover()
	// Tasks whose text starts "wait" go to the manual approver; others are
	// allowed.
	split := approverFunc(func(ctx context.Context, a TaskApproval) Decision {
		if strings.HasPrefix(text(a.Message), "wait") {
			return appr.ApproveTask(ctx, a)
		}
		return Decision{Approved: true}
	})
	env := newEnv(t, Options{Store: db, Approver: split, Executor: &scriptExecutor{started: started}})

	echo := sendBlocking(t, env, tokA, userMsg("echo kept"))
	if echo.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("echo: %s", echo.Status.State)
	}
	// The terminal state was on disk when the caller read it.
	if rec, err := db.Task(context.Background(), string(echo.ID)); err != nil || rec.State != store.StateCompleted {
		t.Fatalf("stored echo task: %+v %v", rec.State, err)
	}
	ask := sendBlocking(t, env, tokA, userMsg("ask"))
	if ask.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("ask: %s", ask.Status.State)
	}
	sleeping := sendNonBlocking(t, env, tokA, userMsg("sleep"))
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("sleep did not start")
	}
	waiting := sendNonBlocking(t, env, tokB, userMsg("wait for me"))
	first := appr.next(t)
	theirs := sendBlocking(t, env, tokB, userMsg("echo theirs"))
	env.stop(t)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db2 := openStore(t, path, store.Options{})
	appr2 := newManualApprover()
	env2 := newEnv(t, Options{Store: db2, Approver: appr2})
	want := Restored{Tasks: 5, Waiting: 1, Approvals: 1, Failed: 1}
	if env2.restored != want {
		t.Fatalf("Restore = %+v, want %+v", env2.restored, want)
	}

	// The approval is asked again, with the original deadline.
	again := appr2.next(t)
	if again.TaskID != waiting.ID || !again.Deadline.Equal(first.Deadline) || again.Deadline.IsZero() {
		t.Fatalf("asked again: task %s deadline %v, want %s %v", again.TaskID, again.Deadline, waiting.ID, first.Deadline)
	}
	if again.Caller.Owner() != "grantB" || again.Summary != first.Summary {
		t.Fatalf("asked again for %q by %q", again.Summary, again.Caller.Owner())
	}

	c := env2.client(t, tokA)
	ctx := context.Background()
	got, err := c.GetTask(ctx, &a2a.TaskQueryParams{ID: echo.ID})
	if err != nil {
		t.Fatalf("tasks/get after the restart: %v", err)
	}
	if got.Status.State != a2a.TaskStateCompleted || len(got.Artifacts) != 1 || len(got.History) != 1 ||
		text(got.History[0]) != "echo kept" || got.ContextID != echo.ContextID {
		t.Fatalf("restored echo: %+v", got)
	}
	if tp, ok := got.Artifacts[0].Parts[0].(a2a.TextPart); !ok || tp.Text != "kept" {
		t.Fatalf("restored artifact: %+v", got.Artifacts[0])
	}
	run, err := c.GetTask(ctx, &a2a.TaskQueryParams{ID: sleeping.ID})
	if err != nil {
		t.Fatal(err)
	}
	if run.Status.State != a2a.TaskStateFailed || text(run.Status.Message) != RestartedText {
		t.Fatalf("the running task after the restart: %s %q", run.Status.State, text(run.Status.Message))
	}
	// Another owner's tasks stay invisible.
	if _, err := c.GetTask(ctx, &a2a.TaskQueryParams{ID: theirs.ID}); !errIs(err, a2a.ErrTaskNotFound) {
		t.Fatalf("another owner's restored task: %v", err)
	}

	// The input-required task continues through the executor, with the
	// state it stored (Value "asked").
	answer := userMsg("forty-two")
	answer.TaskID = ask.ID
	res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: answer})
	if err != nil {
		t.Fatalf("answering the restored task: %v", err)
	}
	done := res.(*a2a.Task)
	if done.Status.State != a2a.TaskStateCompleted || len(done.Artifacts) != 1 || text(done.Status.Message) != "thanks" {
		t.Fatalf("answered restored task: %s %q %d artifacts", done.Status.State, text(done.Status.Message), len(done.Artifacts))
	}
	if tp := done.Artifacts[0].Parts[0].(a2a.TextPart); tp.Text != "forty-two" {
		t.Fatalf("answer artifact %q", tp.Text)
	}
	if len(done.History) != 3 || text(done.History[1]) != "what?" {
		t.Fatalf("history of the answered task: %d messages", len(done.History))
	}

	// A 1.0 client (a2a-go v2) reads them too: GetTask and ListTasks.
	c1 := env2.clientV1(t, tokA)
	t1, err := c1.GetTask(ctx, &a2av1.GetTaskRequest{ID: a2av1.TaskID(echo.ID)})
	if err != nil {
		t.Fatalf("GetTask (1.0) after the restart: %v", err)
	}
	if t1.Status.State != a2av1.TaskStateCompleted || len(t1.Artifacts) != 1 {
		t.Fatalf("GetTask (1.0): %+v", t1.Status)
	}
	list, err := c1.ListTasks(ctx, &a2av1.ListTasksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tk := range list.Tasks {
		ids = append(ids, string(tk.ID))
	}
	slices.Sort(ids)
	wantIDs := []string{string(echo.ID), string(ask.ID), string(sleeping.ID)}
	slices.Sort(wantIDs)
	if !slices.Equal(ids, wantIDs) {
		t.Fatalf("ListTasks after the restart: %v, want %v", ids, wantIDs)
	}

	// Approving the restored request runs it.
	again.answer <- Decision{Approved: true, ByOwner: true}
	waitFor(t, "the restored approval's task", func() bool {
		tk, err := env2.client(t, tokB).GetTask(ctx, &a2a.TaskQueryParams{ID: waiting.ID})
		return err == nil && tk.Status.State == a2a.TaskStateCompleted
	})
}

type approverFunc func(ctx context.Context, a TaskApproval) Decision

func (f approverFunc) ApproveTask(ctx context.Context, a TaskApproval) Decision { return f(ctx, a) }

// TestRestartPastApprovalDeadline: a task whose approval deadline passed
// while the node was stopped is rejected with the reason, the Approver not
// asked.
func TestRestartPastApprovalDeadline(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), store.DefaultFile)
	db := openStore(t, path, store.Options{})
	appr := newManualApprover()
	env := newEnv(t, Options{Store: db, Approver: appr, ApprovalTimeout: time.Minute})
	task := sendNonBlocking(t, env, tokA, userMsg("echo late"))
	a := appr.next(t)
	if d := a.Deadline.Sub(time.Now()); d < 50*time.Second || d > time.Minute {
		t.Fatalf("deadline %v from now, want about a minute", d)
	}
	env.stop(t)
	db.Close()

	db2 := openStore(t, path, store.Options{})
	later := func() time.Time { return time.Now().Add(2 * time.Minute) }
	asked := make(chan TaskApproval, 1)
	env2 := newEnv(t, Options{Store: db2, Now: later, Approver: approverFunc(func(_ context.Context, a TaskApproval) Decision {
		asked <- a
		return Decision{Approved: true}
	})})
	if env2.restored.Rejected != 1 || env2.restored.Approvals != 0 {
		t.Fatalf("Restore = %+v", env2.restored)
	}
	got, err := env2.client(t, tokA).GetTask(context.Background(), &a2a.TaskQueryParams{ID: task.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.State != a2a.TaskStateRejected || !strings.Contains(text(got.Status.Message), "no answer within 1m0s") {
		t.Fatalf("late task: %s %q", got.Status.State, text(got.Status.Message))
	}
	select {
	case a := <-asked:
		t.Fatalf("the approver was asked about %s", a.TaskID)
	default:
	}
	// On disk too: a third start finds it rejected.
	if rec, err := db2.Task(context.Background(), string(task.ID)); err != nil || rec.State != store.StateRejected {
		t.Fatalf("stored: %s %v", rec.State, err)
	}
}

// reattachExecutor is scriptExecutor with Reattach: it completes a
// restored running turn with what its stored state says.
type reattachExecutor struct {
	scriptExecutor
	mu       sync.Mutex
	attached []string
}

func (x *reattachExecutor) Execute(ctx context.Context, ex *Execution) error {
	if text(ex.Message()) == "long" {
		ex.SetValue(map[string]string{"job": "j-7"})
		ex.Working("started")
		<-ctx.Done()
		return ctx.Err()
	}
	return x.scriptExecutor.Execute(ctx, ex)
}

func (x *reattachExecutor) Reattach(ctx context.Context, ex *Execution) error {
	var st map[string]string
	if !ex.DecodeValue(&st) {
		ex.Fail("no state")
		return nil
	}
	x.mu.Lock()
	x.attached = append(x.attached, st["job"])
	x.mu.Unlock()
	ex.Complete("picked up " + st["job"] + " for " + text(ex.Message()))
	return nil
}

// TestRestartReattach: a running task of an executor with Reattach is
// handed to it after the restart, with the state it had stored.
func TestRestartReattach(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), store.DefaultFile)
	db := openStore(t, path, store.Options{})
	env := newEnv(t, Options{Store: db, Executor: &reattachExecutor{}})
	task := sendNonBlocking(t, env, tokA, userMsg("long"))
	waitFor(t, "the state on disk", func() bool {
		rec, err := db.Task(context.Background(), string(task.ID))
		return err == nil && strings.Contains(string(rec.ExecState), "j-7") && rec.State == store.StateWorking
	})
	env.stop(t)
	db.Close()

	db2 := openStore(t, path, store.Options{})
	x := &reattachExecutor{}
	env2 := newEnv(t, Options{Store: db2, Executor: x})
	if env2.restored.Reattached != 1 {
		t.Fatalf("Restore = %+v", env2.restored)
	}
	waitFor(t, "the reattached task", func() bool {
		got, err := env2.client(t, tokA).GetTask(context.Background(), &a2a.TaskQueryParams{ID: task.ID})
		return err == nil && got.Status.State == a2a.TaskStateCompleted && text(got.Status.Message) == "picked up j-7 for long"
	})
}

// TestRestoreBounds: a store holding more tasks than MaxTasks restores the
// newest terminal ones within the bound and every live one.
func TestRestoreBounds(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), store.DefaultFile)
	db := openStore(t, path, store.Options{})
	env := newEnv(t, Options{Store: db})
	var ids []a2a.TaskID
	for i := range 6 {
		ids = append(ids, sendBlocking(t, env, tokA, userMsg("echo "+string(rune('a'+i)))).ID)
	}
	ask := sendBlocking(t, env, tokA, userMsg("ask"))
	env.stop(t)
	db.Close()

	db2 := openStore(t, path, store.Options{})
	env2 := newEnv(t, Options{Store: db2, MaxTasks: 3})
	if env2.restored.Tasks != 7 || env2.restored.Waiting != 1 {
		t.Fatalf("Restore = %+v", env2.restored)
	}
	infos := env2.srv.Tasks()
	var got []string
	for _, ti := range infos {
		got = append(got, ti.ID)
	}
	want := []string{string(ids[4]), string(ids[5]), string(ask.ID)}
	if !slices.Equal(got, want) {
		t.Fatalf("kept %v, want %v", got, want)
	}
}

// TestShutdownLeavesTheDatabase: Shutdown with a store writes none of its
// cancellations: the database holds the tasks as they were.
func TestShutdownLeavesTheDatabase(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), store.DefaultFile)
	db := openStore(t, path, store.Options{})
	started := make(chan a2a.TaskID, 1)
	env := newEnv(t, Options{Store: db, Executor: &scriptExecutor{started: started}})
	ask := sendBlocking(t, env, tokA, userMsg("ask"))
	run := sendNonBlocking(t, env, tokA, userMsg("sleep"))
	<-started
	env.stop(t)
	ctx := context.Background()
	for id, want := range map[a2a.TaskID]store.State{ask.ID: store.StateInputRequired, run.ID: store.StateWorking} {
		rec, err := db.Task(ctx, string(id))
		if err != nil || rec.State != want {
			t.Errorf("task %s on disk after Shutdown: %s %v, want %s", id, rec.State, err, want)
		}
	}
}

// TestRestoreWhileSwitchedOff: with A2A off at start (RequirePublished,
// unpublished), the restored live tasks end canceled as a switch-off ends
// them, and nothing is asked or run.
func TestRestoreWhileSwitchedOff(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), store.DefaultFile)
	db := openStore(t, path, store.Options{})
	appr := newManualApprover()
	env := newEnv(t, Options{Store: db, Approver: appr})
	waiting := sendNonBlocking(t, env, tokA, userMsg("echo later"))
	appr.next(t)
	env.stop(t)
	db.Close()

	db2 := openStore(t, path, store.Options{})
	asked := make(chan TaskApproval, 1)
	srv := NewServer(Options{Store: db2, RequirePublished: true, Executor: &scriptExecutor{}, Approver: approverFunc(func(_ context.Context, a TaskApproval) Decision {
		asked <- a
		return Decision{Approved: true}
	})})
	defer srv.Shutdown(context.Background())
	if _, err := srv.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec, err := db2.Task(context.Background(), string(waiting.ID))
	if err != nil || rec.State != store.StateCanceled || !strings.Contains(string(rec.Status), errSwitchedOff.Error()) {
		t.Fatalf("restored while off: %s %s %v", rec.State, rec.Status, err)
	}
	select {
	case a := <-asked:
		t.Fatalf("asked about %s while A2A is off", a.TaskID)
	default:
	}
}

// TestQueuedApprovalIsOnDisk: once the Approver says a person is asked
// (Queued), the task is in the database with its deadline, even for a
// blocking send whose writes otherwise wait for its end.
func TestQueuedApprovalIsOnDisk(t *testing.T) {
	t.Parallel()
	db := openStore(t, filepath.Join(t.TempDir(), store.DefaultFile), store.Options{})
	appr := newManualApprover()
	env := newEnv(t, Options{Store: db, Approver: appr})
	c := env.client(t, tokA)
	go c.SendMessage(context.Background(), &a2a.MessageSendParams{Message: userMsg("echo blocking")})
	p := appr.next(t) // after Queued
	rec, err := db.Task(context.Background(), string(p.TaskID))
	if err != nil || rec.State != store.StateSubmitted || !rec.ApprovalDeadline.Equal(p.Deadline) {
		t.Fatalf("queued task on disk: %+v %v", rec, err)
	}
	p.answer <- Decision{Reason: "no"}
}

// TestStreamedTaskStoredBeforeItsID: a stream's caller reads the task id
// in the first event; by then the store holds the task (write-behind at
// most), so a restart right after cannot lose a task whose id was handed
// out.
func TestStreamedTaskStoredBeforeItsID(t *testing.T) {
	t.Parallel()
	db := openStore(t, filepath.Join(t.TempDir(), store.DefaultFile), store.Options{})
	appr := newManualApprover()
	env := newEnv(t, Options{Store: db, Approver: appr})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for ev, err := range env.client(t, tokA).SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: userMsg("echo streamed")}) {
		if err != nil {
			t.Fatal(err)
		}
		id := ev.TaskInfo().TaskID
		rec, err := db.Task(context.Background(), string(id))
		if err != nil || rec.State != store.StateSubmitted {
			t.Fatalf("streamed task %s in the store at its first event: %+v %v", id, rec.State, err)
		}
		break
	}
	appr.next(t).answer <- Decision{Reason: "no"}
}

// TestEarlyTaskCommittedBeforeItsID: a non-blocking send's and a stream's
// caller get the task id before the task settles; by then the task is
// committed to the file (not only queued), so a kill -9 right after cannot
// lose a task whose id was handed out. Another connection to the same file
// holds SQLite's write lock meanwhile: the id must not come out before the
// lock is let go and the commit made, and the row is in the file, read by
// that other connection, when it does.
func TestEarlyTaskCommittedBeforeItsID(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), store.DefaultFile)
	db := openStore(t, path, store.Options{})
	appr := newManualApprover()
	env := newEnv(t, Options{Store: db, Approver: appr})
	raw, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ctx := context.Background()
	for _, how := range []string{"non-blocking send", "stream"} {
		conn, err := raw.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			t.Fatal(err)
		}
		got := make(chan a2a.TaskID, 1)
		go func() {
			if how == "stream" {
				sctx, cancel := context.WithCancel(ctx)
				defer cancel()
				for ev, err := range env.client(t, tokA).SendStreamingMessage(sctx, &a2a.MessageSendParams{Message: userMsg("echo streamed")}) {
					if err != nil {
						t.Error(err)
						got <- ""
						return
					}
					got <- ev.TaskInfo().TaskID
					return
				}
				return
			}
			got <- sendNonBlocking(t, env, tokA, userMsg("echo later")).ID
		}()
		select {
		case id := <-got:
			t.Fatalf("%s: task id %s handed out while the database could not commit it", how, id)
		case <-time.After(500 * time.Millisecond):
		}
		if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
			t.Fatal(err)
		}
		conn.Close()
		var id a2a.TaskID
		select {
		case id = <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no task id once the database was free", how)
		}
		var state string
		if err := raw.QueryRowContext(ctx, "SELECT state FROM tasks WHERE id = ?", string(id)).Scan(&state); err != nil || state != string(store.StateSubmitted) {
			t.Fatalf("%s: task %s in the file when its id came out: %q %v", how, id, state, err)
		}
		appr.next(t).answer <- Decision{Reason: "no"}
	}
}

// failingStore is a TaskStore double (in addition to the real store): its
// writes fail as a store whose commit failed does (store.ErrFailed).
type failingStore struct{ *store.Store }

func (failingStore) CreateTask(context.Context, store.Task) error { return store.ErrFailed }
func (failingStore) UpdateTask(context.Context, store.Task) error { return store.ErrFailed }

// TestFailedDatabaseRefusesWork: once the database takes no more writes,
// new tasks are refused (CodeUnavailable) instead of ending in states no
// restart would find.
func TestFailedDatabaseRefusesWork(t *testing.T) {
	t.Parallel()
	db := openStore(t, filepath.Join(t.TempDir(), store.DefaultFile), store.Options{})
	env := newEnv(t, Options{Store: failingStore{db}})
	c := env.client(t, tokA)
	ctx := context.Background()
	// The first task's end cannot be written.
	if _, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("echo one")}); err != nil {
		t.Fatalf("first send: %v", err)
	}
	_, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("echo two")})
	if err == nil || !strings.Contains(err.Error(), "task database") {
		t.Fatalf("a send after the database failed: %v", err)
	}
}

// TestListedTaskCommittedBeforeItsID: a blocking send's task is written
// to the database first at its end (one write for a short task), since
// its caller gets its id only with the settled state; but ListTasks shows
// the ids of the owner's running tasks too, so a listed task is committed
// before the list answers. Another connection holds SQLite's write lock
// meanwhile: the list must wait for it, and the row is in the file, read
// by that other connection, when the list comes.
func TestListedTaskCommittedBeforeItsID(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), store.DefaultFile)
	db := openStore(t, path, store.Options{})
	x := &scriptExecutor{started: make(chan a2a.TaskID, 1)}
	env := newEnv(t, Options{Store: db, Executor: x})
	raw, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ctx := context.Background()
	conn, err := raw.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	sent := make(chan error, 1)
	go func() {
		_, err := env.client(t, tokA).SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("sleep")})
		sent <- err
	}()
	id := <-x.started
	listed := make(chan []string, 1)
	go func() {
		res, err := env.clientV1(t, tokA).ListTasks(ctx, &a2av1.ListTasksRequest{})
		if err != nil {
			t.Error(err)
			listed <- nil
			return
		}
		var ids []string
		for _, tk := range res.Tasks {
			ids = append(ids, string(tk.ID))
		}
		listed <- ids
	}()
	select {
	case ids := <-listed:
		t.Fatalf("ListTasks answered %v while the database could not commit the running task", ids)
	case <-time.After(500 * time.Millisecond):
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	var ids []string
	select {
	case ids = <-listed:
	case <-time.After(10 * time.Second):
		t.Fatal("no list once the database was free")
	}
	if len(ids) != 1 || ids[0] != string(id) {
		t.Fatalf("listed %v, want the running task %s", ids, id)
	}
	var state string
	if err := raw.QueryRowContext(ctx, "SELECT state FROM tasks WHERE id = ?", string(id)).Scan(&state); err != nil || state != string(store.StateWorking) {
		t.Fatalf("task %s in the file when the list came: %q %v", id, state, err)
	}
	if _, err := env.client(t, tokA).CancelTask(ctx, &a2a.TaskIDParams{ID: id}); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}
