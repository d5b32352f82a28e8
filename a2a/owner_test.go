package a2a

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
)

// CancelOwner and RequirePublished: what app calls when a grant is revoked
// or paused, and when the owner switches A2A off.

// collectStream reads a stream to its end and returns its last event.
func collectStream(ctx context.Context, t *testing.T, c *a2aclient.Client, id a2a.TaskID) <-chan a2a.Event {
	out := make(chan a2a.Event, 1)
	go func() {
		var last a2a.Event
		for ev, err := range c.ResubscribeToTask(ctx, &a2a.TaskIDParams{ID: id}) {
			if err != nil {
				t.Error(err)
				break
			}
			last = ev
		}
		out <- last
	}()
	return out
}

func TestCancelOwner(t *testing.T) {
	t.Parallel()
	ap := newManualApprover()
	x := &scriptExecutor{started: make(chan a2a.TaskID, 2), stopped: make(chan a2a.TaskID, 2)}
	env := newEnv(t, Options{Approver: ap, Executor: x})
	a, b := env.client(t, tokA), env.client(t, tokB)
	ctx := context.Background()
	nb := &a2a.MessageSendConfig{Blocking: new(false)}
	send := func(c interface {
		SendMessage(context.Context, *a2a.MessageSendParams) (a2a.SendMessageResult, error)
	}, s string) a2a.TaskID {
		t.Helper()
		res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg(s), Config: nb})
		if err != nil {
			t.Fatal(err)
		}
		return res.(*a2a.Task).ID
	}

	// A's tasks: one running, one asking, one waiting for the owner.
	running := send(a, "sleep")
	ap.next(t).answer <- Decision{Approved: true}
	<-x.started
	asking := send(a, "ask")
	ap.next(t).answer <- Decision{Approved: true}
	waitFor(t, "the ask task to wait for input", func() bool {
		got, err := a.GetTask(ctx, &a2a.TaskQueryParams{ID: asking})
		return err == nil && got.Status.State == a2a.TaskStateInputRequired
	})
	pending := send(a, "echo later")
	pa := ap.next(t)
	// B's running task is not A's.
	other := send(b, "sleep")
	ap.next(t).answer <- Decision{Approved: true}
	<-x.started

	final := collectStream(ctx, t, a, running)
	waitFor(t, "the stream to subscribe", func() bool {
		env.srv.mu.Lock()
		tk := env.srv.tasks[running]
		env.srv.mu.Unlock()
		tk.mu.Lock()
		defer tk.mu.Unlock()
		return len(tk.subs) == 1
	})

	if n := env.srv.CancelOwner("grantA", "grant revoked"); n != 3 {
		t.Fatalf("CancelOwner = %d, want 3", n)
	}
	for _, id := range []a2a.TaskID{running, asking, pending} {
		got, err := a.GetTask(ctx, &a2a.TaskQueryParams{ID: id})
		if err != nil || got.Status.State != a2a.TaskStateCanceled || text(got.Status.Message) != "grant revoked" {
			t.Errorf("task %s after CancelOwner: %v %s %q", id, err, got.Status.State, text(got.Status.Message))
		}
	}
	select {
	case <-pa.ctx.Done():
	default:
		t.Error("the pending approval was not withdrawn")
	}
	if got := <-x.stopped; got != running {
		t.Errorf("stopped %s, want %s", got, running)
	}
	su, ok := (<-final).(*a2a.TaskStatusUpdateEvent)
	if !ok || !su.Final || su.Status.State != a2a.TaskStateCanceled || text(su.Status.Message) != "grant revoked" {
		t.Errorf("the stream's last event = %#v", su)
	}
	got, err := b.GetTask(ctx, &a2a.TaskQueryParams{ID: other})
	if err != nil || got.Status.State != a2a.TaskStateWorking {
		t.Fatalf("B's task after A's were canceled: %v %+v", err, got)
	}
	if st := env.srv.Status(); st.LiveTasks != 1 {
		t.Fatalf("live tasks = %d, want 1 (B's)", st.LiveTasks)
	}
	if n := env.srv.CancelOwner("grantA", "again"); n != 0 {
		t.Fatalf("second CancelOwner = %d, want 0", n)
	}
	if n := env.srv.CancelOwner("grantB", ""); n != 1 {
		t.Fatalf("CancelOwner(grantB) = %d", n)
	}
	<-x.stopped
	got, _ = b.GetTask(ctx, &a2a.TaskQueryParams{ID: other})
	if text(got.Status.Message) != "canceled by the owner of this device" {
		t.Fatalf("default reason: %q", text(got.Status.Message))
	}
}

func TestCancelOwnerStuckExecutor(t *testing.T) {
	t.Parallel()
	x := &scriptExecutor{started: make(chan a2a.TaskID, 1), release: make(chan struct{})}
	env := newEnv(t, Options{Executor: x, CancelWait: 50 * time.Millisecond})
	defer close(x.release)
	c := env.client(t, tokA)
	ctx := context.Background()
	res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("ignore"), Config: &a2a.MessageSendConfig{Blocking: new(false)}})
	if err != nil {
		t.Fatal(err)
	}
	<-x.started
	if n := env.srv.CancelOwner("grantA", "grant paused"); n != 1 {
		t.Fatalf("CancelOwner = %d", n)
	}
	got, err := c.GetTask(ctx, &a2a.TaskQueryParams{ID: res.(*a2a.Task).ID})
	if err != nil || got.Status.State != a2a.TaskStateCanceled || text(got.Status.Message) != "grant paused" {
		t.Fatalf("a stuck executor's task: %v %+v", err, got)
	}
	if env.srv.Status().LiveTasks != 0 {
		t.Fatal("the task still counts as live")
	}
}

// plainPost posts body and returns the status, Content-Type and body.
func plainPost(t *testing.T, env *testEnv, method, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, env.hs.URL+RPCPath, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tokA)
	req.Header.Set("Content-Type", "application/json")
	resp, err := env.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

func TestRequirePublished(t *testing.T) {
	t.Parallel()
	const get = `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"nope"}}`
	t.Run("off closes the endpoint and cancels live tasks", func(t *testing.T) {
		t.Parallel()
		x := &scriptExecutor{started: make(chan a2a.TaskID, 1), stopped: make(chan a2a.TaskID, 1)}
		env := newEnv(t, Options{Executor: x, RequirePublished: true})
		c := env.client(t, tokA)
		ctx := context.Background()
		res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("sleep"), Config: &a2a.MessageSendConfig{Blocking: new(false)}})
		if err != nil {
			t.Fatal(err)
		}
		running := res.(*a2a.Task).ID
		<-x.started
		asking := sendTask(t, ctx, c, userMsg("ask")).ID

		env.srv.SetPublished(false)
		if got := <-x.stopped; got != running {
			t.Fatalf("stopped %s", got)
		}
		for _, id := range []a2a.TaskID{running, asking} {
			env.srv.mu.Lock()
			tk := env.srv.tasks[id]
			env.srv.mu.Unlock()
			tk.mu.Lock()
			st, msg := tk.status.State, text(tk.status.Message)
			tk.mu.Unlock()
			if st != a2a.TaskStateCanceled || msg != "A2A switched off by the owner" {
				t.Errorf("task %s after switching off: %s %q", id, st, msg)
			}
		}
		if env.srv.Status().LiveTasks != 0 {
			t.Fatal("live tasks after switching off")
		}
		code, ct, body := plainPost(t, env, http.MethodPost, get)
		if code != http.StatusNotFound || !strings.HasPrefix(ct, "text/plain") || body != "404 page not found\n" {
			t.Errorf("POST while unpublished: %d %q %q", code, ct, body)
		}
		env.srv.SetPublished(true)
		if code, _, body := plainPost(t, env, http.MethodPost, get); code != http.StatusOK || errorCode(t, []byte(body)) != CodeTaskNotFound {
			t.Fatalf("published again: %d %s", code, body)
		}
	})
	t.Run("without the option the endpoint stays", func(t *testing.T) {
		t.Parallel()
		env := newEnv(t, Options{})
		c := env.client(t, tokA)
		asking := sendTask(t, context.Background(), c, userMsg("ask")).ID
		env.srv.SetPublished(false)
		if code, _, body := plainPost(t, env, http.MethodPost, get); code != http.StatusOK || errorCode(t, []byte(body)) != CodeTaskNotFound {
			t.Fatalf("unpublished without RequirePublished: %d %s", code, body)
		}
		got, err := c.GetTask(context.Background(), &a2a.TaskQueryParams{ID: asking})
		if err != nil || got.Status.State != a2a.TaskStateInputRequired {
			t.Fatalf("the task was touched: %v %+v", err, got)
		}
	})
}

func TestInterruptedTaskExpires(t *testing.T) {
	t.Parallel()
	env := newEnv(t, Options{InterruptedTTL: 150 * time.Millisecond, MaxLiveTasksPerOwner: 1})
	c := env.client(t, tokA)
	ctx := context.Background()
	asking := sendTask(t, ctx, c, userMsg("ask"))
	if asking.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("task %+v", asking.Status)
	}
	// It waits apart from the running tasks: the grant's only running
	// slot stays free.
	if task := sendTask(t, ctx, c, userMsg("echo x")); task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("second task while one waits: %+v", task.Status)
	}
	var got *a2a.Task
	waitFor(t, "the waiting task to expire", func() bool {
		var err error
		got, err = c.GetTask(ctx, &a2a.TaskQueryParams{ID: asking.ID})
		return err == nil && got.Status.State.Terminal()
	})
	if got.Status.State != a2a.TaskStateCanceled || text(got.Status.Message) != "no answer within 150ms" {
		t.Fatalf("expired task: %s %q", got.Status.State, text(got.Status.Message))
	}
	if env.srv.Status().LiveTasks != 0 {
		t.Fatal("the expired task still counts as live")
	}
	if task := sendTask(t, ctx, c, userMsg("echo x")); task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("after expiry: %+v", task.Status)
	}
	// An answer in time stops the clock: the task completes and stays so.
	asking = sendTask(t, ctx, c, userMsg("ask"))
	done, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: answerTo(asking, a2a.TextPart{Text: "bob"})})
	if err != nil || done.(*a2a.Task).Status.State != a2a.TaskStateCompleted {
		t.Fatalf("answer: %v %+v", err, done)
	}
	env.srv.mu.Lock()
	tk := env.srv.tasks[asking.ID]
	env.srv.mu.Unlock()
	tk.mu.Lock()
	armed := tk.expiry != nil
	tk.mu.Unlock()
	if armed {
		t.Fatal("the expiry clock still runs after the answer")
	}
}

func TestDefaultInterruptedTTL(t *testing.T) {
	t.Parallel()
	srv := NewServer(Options{Executor: &scriptExecutor{}})
	defer srv.Shutdown(context.Background())
	if srv.opts.InterruptedTTL != 10*time.Minute {
		t.Fatalf("default TTL %s", srv.opts.InterruptedTTL)
	}
}
