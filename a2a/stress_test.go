package a2a

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
)

// TestKeepAliveWhileWaitingForApproval: a stream waiting on the owner's
// approval carries SSE comment lines, and still ends with the final event.
func TestKeepAliveWhileWaitingForApproval(t *testing.T) {
	t.Parallel()
	ap := newManualApprover()
	env := newEnv(t, Options{Approver: ap, KeepAlive: 10 * time.Millisecond})
	req, _ := http.NewRequest("POST", env.hs.URL+RPCPath, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"message/stream","params":`+sendParams+`}`))
	req.Header.Set("Authorization", "Bearer "+tokA)
	resp, err := env.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	pa := ap.next(t)
	// Read until a keep-alive comment shows up, then approve.
	var got strings.Builder
	buf := make([]byte, 256)
	for !strings.Contains(got.String(), ": keep-alive\n\n") {
		n, err := resp.Body.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			t.Fatalf("stream ended before a keep-alive: %v\n%s", err, got.String())
		}
	}
	pa.answer <- Decision{Approved: true}
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	got.Write(rest)
	evs := sseEvents(t, []byte(got.String()))
	// Task, "waiting for approval" (the approver queued it), working,
	// artifact, completed.
	if len(evs) != 5 || !strings.Contains(string(evs[1]), `"waiting for approval on testbox"`) ||
		!strings.Contains(string(evs[4]), `"completed"`) || !strings.Contains(string(evs[4]), `"final":true`) {
		t.Fatalf("events: %q", evs)
	}
}

// TestShutdownWaitsForStuckExecutor: Shutdown reports ctx's end when an
// executor ignores cancellation, with the task already canceled.
func TestShutdownWaitsForStuckExecutor(t *testing.T) {
	t.Parallel()
	x := &scriptExecutor{started: make(chan a2a.TaskID, 1), release: make(chan struct{})}
	srv := NewServer(Options{Executor: x, Approver: approveAll{}})
	rec := make(chan []byte, 1)
	go func() {
		rec <- rawCall(t, srv, tokA, `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"configuration":{"blocking":false},"message":{"kind":"message","messageId":"m","role":"user","parts":[{"kind":"text","text":"ignore"}]}}}`)
	}()
	<-rec
	<-x.started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want the deadline", err)
	}
	for _, ti := range srv.Tasks() {
		if ti.State != a2a.TaskStateCanceled {
			t.Fatalf("task is %s", ti.State)
		}
	}
	close(x.release)
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatalf("second Shutdown after the executor returned: %v", err)
	}
}

// TestConcurrentMix hammers one server with sends, streams, gets and
// cancels from two owners at once (run under -race), then checks the
// books: no live task left, the live count zero, the store within bounds.
func TestConcurrentMix(t *testing.T) {
	t.Parallel()
	env := newEnv(t, Options{MaxTasks: 40, MaxLiveTasksPerOwner: 8})
	ca, cb := env.client(t, tokA), env.client(t, tokB)
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 8 {
		c := ca
		if w%2 == 1 {
			c = cb
		}
		wg.Go(func() {
			for i := range 25 {
				switch (w + i) % 4 {
				case 0:
					res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("chunks 3")})
					if err == nil {
						_, _ = c.GetTask(ctx, &a2a.TaskQueryParams{ID: res.(*a2a.Task).ID})
					}
				case 1:
					for _, err := range c.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: userMsg("echo s")}) {
						if err != nil {
							break
						}
					}
				case 2:
					res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("ask")})
					if err == nil {
						_, _ = c.CancelTask(ctx, &a2a.TaskIDParams{ID: res.(*a2a.Task).ID})
					}
				case 3:
					res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("ask")})
					if err == nil {
						task := res.(*a2a.Task)
						for _, err := range c.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: answerTo(task, a2a.TextPart{Text: "x"})}) {
							if err != nil {
								break
							}
						}
					}
				}
			}
		})
	}
	wg.Wait()
	if s := env.srv.Status(); s.LiveTasks != 0 {
		t.Fatalf("live tasks after the mix: %d", s.LiveTasks)
	}
	infos := env.srv.Tasks()
	if len(infos) > 40 {
		t.Fatalf("store holds %d tasks, bound 40", len(infos))
	}
	for _, ti := range infos {
		if !ti.State.Terminal() {
			t.Errorf("task %s left %s", ti.ID, ti.State)
		}
	}
}
