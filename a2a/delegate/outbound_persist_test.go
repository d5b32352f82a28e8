package delegate

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/store"
)

// The outbound view across a restart of the node: a real SQLite file
// (package store), a real a2asrv agent, and a second Outbound standing for
// the restarted node over the reopened file. (The kill -9 of a whole node
// is app's TestOutboundAcrossNodeRestarts.)

// outboundDB opens the database at path and closes it at the end.
func outboundDB(t *testing.T, path string) *store.Store {
	t.Helper()
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// restartOutbound closes ob and its database (a graceful stop) and returns
// the view of the "restarted node": the database reopened, Restore run.
func restartOutbound(t *testing.T, ob *Outbound, db *store.Store, a *Agents, o OutboundOptions) (*Outbound, *store.Store, int) {
	t.Helper()
	ob.Close()
	path := db.Path()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db2 := outboundDB(t, path)
	o.Store = db2
	ob2 := newOutbound(t, a, o)
	n, err := ob2.Restore(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ob2, db2, n
}

// waitTask polls ob until task id satisfies cond.
func waitTask(t *testing.T, ob *Outbound, id, what string, cond func(OutboundTask) bool) OutboundTask {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := ob.Get(id)
		if err == nil && cond(got) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s: want %s; have %+v (%v)", id, what, got, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestOutboundAcrossRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, stream := range []bool{true, false} {
		t.Run(map[bool]string{true: "stream", false: "poll"}[stream], func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, upstreamOpts{streaming: true})
			a, _ := newAgents(t, AgentsOptions{})
			ag, err := a.Add(ctx, up.hs.URL, "")
			if err != nil {
				t.Fatal(err)
			}
			db := outboundDB(t, filepath.Join(t.TempDir(), store.DefaultFile))
			ob := newOutbound(t, a, OutboundOptions{Store: db})
			send := func(text string) OutboundTask {
				t.Helper()
				task, err := ob.Delegate(ctx, DelegateRequest{Agent: ag.ID, MessageInput: MessageInput{Text: text}, Stream: &stream})
				if err != nil {
					t.Fatal(err)
				}
				return task
			}
			done := send("chunks 5")
			_, doneFinal := watchAll(t, ob, done.ID)
			// Shown ended means written ended (not left to a batch).
			recs, err := db.OutboundTasks(ctx)
			if err != nil || len(recs) != 1 || recs[0].ID != done.ID || recs[0].State != store.StateCompleted || recs[0].Following {
				t.Fatalf("the database when the view showed %s completed: %+v %v", done.ID, recs, err)
			}
			asked := send("ask")
			_, askedFinal := watchAll(t, ob, asked.ID)
			if askedFinal.State != a2a.TaskStateInputRequired {
				t.Fatalf("asked %+v", askedFinal)
			}
			running := send("sleep")
			<-up.started

			ob2, _, n := restartOutbound(t, ob, db, a, OutboundOptions{})
			if n != 3 {
				t.Fatalf("restored %d tasks, want 3: %+v", n, ob2.List())
			}

			// A finished task is as it was, parts and all.
			got, err := ob2.Get(done.ID)
			if err != nil || got.State != a2a.TaskStateCompleted || len(got.Artifacts) != 1 || partsText(got.Artifacts[0].Parts) != "01234" ||
				got.TaskID != doneFinal.TaskID || got.ContextID != doneFinal.ContextID || got.Request != "chunks 5" || got.Following {
				t.Fatalf("restored finished task %+v (%v), was %+v", got, err, doneFinal)
			}
			// A question is still asked (followed up: the agent knows it)
			// and takes its answer.
			waitTask(t, ob2, asked.ID, "input-required, checked", func(x OutboundTask) bool {
				return x.State == a2a.TaskStateInputRequired && !x.Following && x.Message == "what is your name?"
			})
			if _, err := ob2.Answer(ctx, asked.ID, MessageInput{Text: "Ada"}); err != nil {
				t.Fatal(err)
			}
			if _, final := watchAll(t, ob2, asked.ID); final.State != a2a.TaskStateCompleted || len(final.Artifacts) != 1 || partsText(final.Artifacts[0].Parts) != "hello Ada" {
				t.Fatalf("answered after the restart: %+v", final)
			}
			// A running task is followed again; a cancel reaches it.
			waitTask(t, ob2, running.ID, "working, followed", func(x OutboundTask) bool {
				return x.State == a2a.TaskStateWorking && x.Following && x.Error == ""
			})
			if got, err := ob2.Cancel(ctx, running.ID); err != nil || got.State != a2a.TaskStateCanceled {
				t.Fatalf("cancel after the restart: %+v %v", got, err)
			}
			<-up.stopped
		})
	}
}

// A task its agent no longer knows ends failed saying so; the end is on
// the disk (a second restart reads it).
func TestOutboundRestoredTaskForgottenByItsAgent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	up := newUpstream(t, upstreamOpts{streaming: true})
	a, _ := newAgents(t, AgentsOptions{})
	ag, err := a.Add(ctx, up.hs.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	db := outboundDB(t, filepath.Join(t.TempDir(), store.DefaultFile))
	ob := newOutbound(t, a, OutboundOptions{Store: db})
	task, err := ob.Delegate(ctx, DelegateRequest{Agent: ag.ID, MessageInput: MessageInput{Text: "sleep"}})
	if err != nil {
		t.Fatal(err)
	}
	<-up.started
	ob.Close()
	up.mu.Lock()
	old := up.rpc
	up.mu.Unlock()
	up.restart()
	ob2, db2, _ := restartOutbound(t, ob, db, a, OutboundOptions{})
	got := waitTask(t, ob2, task.ID, "failed", func(x OutboundTask) bool { return x.State.Terminal() })
	if got.State != a2a.TaskStateFailed || got.Message != forgotten || got.Following || got.Error != "" {
		t.Fatalf("forgotten task %+v", got)
	}
	ob3, _, _ := restartOutbound(t, ob2, db2, a, OutboundOptions{})
	if again, err := ob3.Get(task.ID); err != nil || again.State != a2a.TaskStateFailed || again.Message != forgotten {
		t.Fatalf("after a second restart: %+v %v", again, err)
	}
	// The first handler still runs the task: end it there.
	rec := httptest.NewRecorder()
	old.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/rpc", strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"id":"`+got.TaskID+`"}}`)))
	<-up.stopped
}

// An agent that cannot be reached after the restart: the task stays live
// with the reason, is tried again, and the node stops trying after
// MaxFollow.
func TestOutboundRestoredTaskAgentUnreachable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	up := newUpstream(t, upstreamOpts{streaming: false})
	a, _ := newAgents(t, AgentsOptions{CardTTL: time.Hour})
	ag, err := a.Add(ctx, up.hs.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	db := outboundDB(t, filepath.Join(t.TempDir(), store.DefaultFile))
	ob := newOutbound(t, a, OutboundOptions{Store: db})
	// "slow" works 300 ms, then completes at the agent, which then goes.
	task, err := ob.Delegate(ctx, DelegateRequest{Agent: ag.ID, MessageInput: MessageInput{Text: "slow"}})
	if err != nil {
		t.Fatal(err)
	}
	ob.Close()
	up.hs.CloseClientConnections()
	up.hs.Close()
	ob2, _, _ := restartOutbound(t, ob, db, a, OutboundOptions{MaxFollow: 3 * time.Second})
	got := waitTask(t, ob2, task.ID, "an unreachable agent said", func(x OutboundTask) bool {
		return strings.HasPrefix(x.Error, unreachablePrefix)
	})
	if got.State.Terminal() || got.Following {
		t.Fatalf("unreachable: %+v", got)
	}
	got = waitTask(t, ob2, task.ID, "the node giving up", func(x OutboundTask) bool {
		return strings.Contains(x.Error, "stopped trying after 3s")
	})
	if got.State.Terminal() || got.Following || !strings.HasPrefix(got.Error, unreachablePrefix) {
		t.Fatalf("given up: %+v", got)
	}
}
