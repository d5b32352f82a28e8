package delegate

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	agent "meshtray/a2a"
	"meshtray/store"
)

// durableForward is forwardEnv with the engine's tasks and the forward
// executor's context map in the database at path, restored at start.
func durableForward(t *testing.T, up *upstream, path string) (*testEnv, *ForwardExecutor, *store.Store, agent.Restored) {
	t.Helper()
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	fw, err := NewForwardExecutor(ForwardOptions{URL: up.hs.URL, Store: db})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fw.Close)
	env := newEnv(t, agent.Options{Executor: fw, Store: db})
	fw.Attach(env.srv)
	res, err := env.srv.Restore(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return env, fw, db, res
}

// stopNode shuts the engine and the executor down as a node's Close does,
// and closes the database.
func stopNode(t *testing.T, env *testEnv, fw *ForwardExecutor, db *store.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := env.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	fw.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// A forwarded task running when the node restarts follows its upstream
// task again (the stored upstream task id), and ends as the upstream's
// does; the graceful stop did not cancel the upstream task. When the
// upstream no longer knows the task, the local one fails saying so. The
// caller's context map survives too.
func TestForwardReattachesAfterRestart(t *testing.T) {
	t.Parallel()
	for _, forgotten := range []bool{false, true} {
		t.Run(map[bool]string{false: "upstream still knows it", true: "upstream forgot it"}[forgotten], func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, upstreamOpts{streaming: false})
			path := filepath.Join(t.TempDir(), store.DefaultFile)
			env, fw, db, _ := durableForward(t, up, path)
			ctx := context.Background()
			no := false
			res, err := env.client(t, tokA).SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("hold"), Config: &a2a.MessageSendConfig{Blocking: &no}})
			if err != nil {
				t.Fatal(err)
			}
			task := res.(*a2a.Task)
			waitFor(t, "the upstream task id on disk", func() bool {
				rec, err := db.Task(ctx, string(task.ID))
				return err == nil && strings.Contains(string(rec.ExecState), "upstream_task")
			})
			stopNode(t, env, fw, db)
			if ids := up.canceledIDs(); len(ids) != 0 {
				t.Fatalf("the graceful stop canceled upstream tasks %v", ids)
			}
			if forgotten {
				up.restart()
				t.Cleanup(func() { close(up.release) }) // the old handler's task ends unseen
			}

			env2, fw2, _, restored := durableForward(t, up, path)
			if restored.Reattached != 1 {
				t.Fatalf("Restore = %+v", restored)
			}
			if st := fw2.Status(); st.Contexts != 1 {
				t.Fatalf("context map after the restart: %d links", st.Contexts)
			}
			c := env2.client(t, tokA)
			if !forgotten {
				close(up.release)
			}
			var got *a2a.Task
			waitFor(t, "the reattached task to end", func() bool {
				got, err = c.GetTask(ctx, &a2a.TaskQueryParams{ID: task.ID})
				return err == nil && got.Status.State.Terminal()
			})
			if forgotten {
				if got.Status.State != a2a.TaskStateFailed || !strings.Contains(text(got.Status.Message), "no longer knows its task") {
					t.Fatalf("forgotten: %s %q", got.Status.State, text(got.Status.Message))
				}
				return
			}
			if got.Status.State != a2a.TaskStateCompleted || text(got.Status.Message) != "released" ||
				len(got.Artifacts) != 1 || partsText(got.Artifacts[0].Parts) != "held" {
				t.Fatalf("reattached: %s %q %+v", got.Status.State, text(got.Status.Message), got.Artifacts)
			}
			if n := len(up.calls()); n != 1 {
				t.Fatalf("the upstream got %d messages, want 1 (reattached, not sent again)", n)
			}
		})
	}
}

// A forwarded task waiting for its caller when the node restarts is
// answered after it: the answer goes to the same upstream task, which
// Close left waiting.
func TestForwardInputRequiredAcrossRestart(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, upstreamOpts{streaming: true})
	path := filepath.Join(t.TempDir(), store.DefaultFile)
	env, fw, db, _ := durableForward(t, up, path)
	ctx := context.Background()
	task := sendTask(t, ctx, env.client(t, tokA), userMsg("ask"))
	if task.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("asked: %s", task.Status.State)
	}
	stopNode(t, env, fw, db)
	if ids := up.canceledIDs(); len(ids) != 0 {
		t.Fatalf("Close canceled upstream tasks %v", ids)
	}

	env2, fw2, _, restored := durableForward(t, up, path)
	if restored.Waiting != 1 {
		t.Fatalf("Restore = %+v", restored)
	}
	// Its upstream task is parked again, for the sweep.
	if st := fw2.Status(); st.Parked != 1 {
		t.Fatalf("parked upstream tasks after the restart: %d", st.Parked)
	}
	answered := sendTask(t, ctx, env2.client(t, tokA), answerTo(task, a2a.TextPart{Text: "Ada"}))
	if answered.Status.State != a2a.TaskStateCompleted || len(answered.Artifacts) != 1 || partsText(answered.Artifacts[0].Parts) != "hello Ada" {
		t.Fatalf("answered: %s %+v", answered.Status.State, answered.Artifacts)
	}
	calls := up.calls()
	if len(calls) != 2 || !calls[1].Resumed || calls[1].TaskID != calls[0].TaskID {
		t.Fatalf("upstream calls %+v", calls)
	}
}
