package a2a

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	a2av1 "github.com/a2aproject/a2a-go/v2/a2a"

	"meshtray/store"
)

// A graceful stop of a node that keeps its tasks (Options.Store) tells no
// caller a final state the task does not reach: the streams open on a
// running task and on one waiting for approval, over 0.3 and over 1.0,
// and a blocking message/send end with the CodeRestarting error naming
// their task, not with "canceled"; after the restart the tasks are there
// as they were written (the one waiting for approval is asked again).
func TestShutdownWithStoreEndsCallsWithoutAFinalState(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), store.DefaultFile)
	db := openStore(t, path, store.Options{})
	started := make(chan a2a.TaskID, 4)
	appr := newManualApprover()
	split := approverFunc(func(ctx context.Context, a TaskApproval) Decision {
		if strings.HasPrefix(text(a.Message), "wait") {
			return appr.ApproveTask(ctx, a)
		}
		return Decision{Approved: true}
	})
	env := newEnv(t, Options{Store: db, Approver: split, Executor: &scriptExecutor{started: started}})
	ctx := context.Background()
	c03 := env.client(t, tokA)
	c10 := env.clientV1(t, tokA)

	type end struct {
		what string
		task string // the task id the call saw ("" for none yet)
		last string // the last event's state, "" for none
		err  error
	}
	ends := make(chan end, 4)
	stream03 := func(what string, msg *a2a.Message) {
		go func() {
			e := end{what: what}
			for ev, err := range c03.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: msg}) {
				if err != nil {
					e.err = err
					break
				}
				e.task = string(ev.TaskInfo().TaskID)
				switch v := ev.(type) {
				case *a2a.Task:
					e.last = string(v.Status.State)
				case *a2a.TaskStatusUpdateEvent:
					e.last = string(v.Status.State)
				}
			}
			ends <- e
		}()
	}
	stream03("0.3 stream of a running task", userMsg("sleep"))
	running := <-started
	stream03("0.3 stream waiting for approval", userMsg("wait for me"))
	waiting := appr.next(t)
	go func() {
		e := end{what: "1.0 stream of a running task"}
		for ev, err := range c10.SendStreamingMessage(ctx, &a2av1.SendMessageRequest{Message: userV1("sleep")}) {
			if err != nil {
				e.err = err
				break
			}
			switch v := ev.(type) {
			case *a2av1.Task:
				e.task, e.last = string(v.ID), string(v.Status.State)
			case *a2av1.TaskStatusUpdateEvent:
				e.task, e.last = string(v.TaskID), string(v.Status.State)
			}
		}
		ends <- e
	}()
	running10 := <-started
	blocked := make(chan error, 1)
	go func() {
		_, err := c10.SendMessage(ctx, &a2av1.SendMessageRequest{Message: userV1("wait blocking")})
		blocked <- err
	}()
	blocking := appr.next(t)

	env.stop(t)
	for range 3 {
		e := <-ends
		if e.err == nil {
			t.Errorf("%s: ended without an error, last state %q (task %s)", e.what, e.last, e.task)
			continue
		}
		if !strings.Contains(e.err.Error(), "restarting") || !strings.Contains(e.err.Error(), e.task) || e.task == "" {
			t.Errorf("%s (task %s): %v", e.what, e.task, e.err)
		}
		if a2a.TaskState(e.last).Terminal() || strings.HasSuffix(e.last, "CANCELED") {
			t.Errorf("%s: told %s", e.what, e.last)
		}
	}
	select {
	case err := <-blocked:
		if err == nil || !strings.Contains(err.Error(), "restarting") || !strings.Contains(err.Error(), string(blocking.TaskID)) {
			t.Errorf("blocking SendMessage at the stop: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the blocking SendMessage did not return")
	}
	// Calls after the stop: the same error, over both versions.
	if _, err := c03.GetTask(ctx, &a2a.TaskQueryParams{ID: running}); err == nil || !strings.Contains(err.Error(), "restarting") {
		t.Errorf("0.3 tasks/get after the stop: %v", err)
	}
	if _, err := c10.GetTask(ctx, &a2av1.GetTaskRequest{ID: a2av1.TaskID(running10)}); err == nil || !strings.Contains(err.Error(), "restarting") {
		t.Errorf("1.0 GetTask after the stop: %v", err)
	}
	for id, want := range map[a2a.TaskID]store.State{running: store.StateWorking, running10: store.StateWorking,
		waiting.TaskID: store.StateSubmitted, blocking.TaskID: store.StateSubmitted} {
		rec, err := db.Task(ctx, string(id))
		if err != nil || rec.State != want {
			t.Errorf("task %s on disk after the stop: %s %v, want %s", id, rec.State, err, want)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// The restart takes them from there: asked again, approved, run.
	db2 := openStore(t, path, store.Options{})
	appr2 := newManualApprover()
	env2 := newEnv(t, Options{Store: db2, Approver: appr2})
	if env2.restored.Approvals != 2 || env2.restored.Failed != 2 {
		t.Fatalf("Restore = %+v", env2.restored)
	}
	for range 2 {
		p := appr2.next(t)
		p.answer <- Decision{Approved: true, ByOwner: true}
	}
	c := env2.client(t, tokA)
	waitFor(t, "the approved task completes after the restart", func() bool {
		got, err := c.GetTask(ctx, &a2a.TaskQueryParams{ID: waiting.TaskID})
		return err == nil && got.Status.State == a2a.TaskStateCompleted
	})
}

// The CodeRestarting error on the wire: over 0.3 its data names the reason
// and the task; over 1.0 the ErrorInfo reason is RestartingReason.
func TestRestartingErrorShapes(t *testing.T) {
	t.Parallel()
	e := restartingError("t1")
	got03 := string(appendError(nil, v03, e))
	if !strings.Contains(got03, `"code":-32013`) || !strings.Contains(got03, `"reason":"NODE_RESTARTING"`) || !strings.Contains(got03, `"taskId":"t1"`) {
		t.Errorf("0.3: %s", got03)
	}
	got10 := string(appendError(nil, v10, e))
	if !strings.Contains(got10, `"reason":"NODE_RESTARTING"`) || strings.Count(got10, "NODE_RESTARTING") != 1 || !strings.Contains(got10, `"taskId":"t1"`) {
		t.Errorf("1.0: %s", got10)
	}
	if errors.Is(e, ErrUnavailable) {
		t.Error("a restart is not the per-task bound ErrUnavailable")
	}
}
