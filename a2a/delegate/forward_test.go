package delegate

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	agent "meshtray/a2a"
)

// The forward executor in front of a real a2a-go v0.3.15 a2asrv agent,
// driven by the official a2a-go client through meshtray's own engine.

// forwardEnv is meshtray's server with the forward executor in front of
// up; the owner's approvals go through ap (nil: allowed by policy).
func forwardEnv(t *testing.T, up *upstream, ap agent.Approver, o ForwardOptions) (*testEnv, *ForwardExecutor) {
	t.Helper()
	if o.URL == "" {
		o.URL = up.hs.URL
	}
	if o.Token == nil && up != nil && up.token != "" {
		tok := up.token
		o.Token = func() string { return tok }
	}
	fw, err := NewForwardExecutor(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fw.Close) // after the server's shutdown (cleanups run last first)
	env := newEnv(t, agent.Options{Executor: fw, Approver: ap})
	fw.Attach(env.srv)
	return env, fw
}

func TestForwardStreamsUpstreamEvents(t *testing.T) {
	t.Parallel()
	for _, streaming := range []bool{true, false} {
		t.Run(map[bool]string{true: "upstream streams", false: "upstream polled"}[streaming], func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, upstreamOpts{token: "up-secret", streaming: streaming})
			ap := newManualApprover()
			env, _ := forwardEnv(t, up, ap, ForwardOptions{})
			c := env.client(t, tokA)
			ctx := context.Background()

			type got struct {
				kind  string
				state a2a.TaskState
				text  string
				final bool
			}
			var evs []got
			done := make(chan error, 1)
			go func() {
				for ev, err := range c.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: userMsg("chunks 3")}) {
					if err != nil {
						done <- err
						return
					}
					switch e := ev.(type) {
					case *a2a.Task:
						evs = append(evs, got{kind: "task", state: e.Status.State})
					case *a2a.TaskStatusUpdateEvent:
						evs = append(evs, got{kind: "status", state: e.Status.State, final: e.Final})
					case *a2a.TaskArtifactUpdateEvent:
						evs = append(evs, got{kind: "artifact", text: partsText(e.Artifact.Parts), final: e.Append})
					}
				}
				done <- nil
			}()
			// The owner approves first: nothing reaches the upstream before.
			pa := ap.next(t)
			if pa.Summary != "chunks 3" || up.requests() != 0 {
				t.Fatalf("approval %q, upstream requests %d before approval", pa.Summary, up.requests())
			}
			pa.answer <- agent.Decision{Approved: true, ByOwner: true}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("stream did not end")
			}
			var arts strings.Builder
			for _, e := range evs {
				if e.kind == "artifact" {
					arts.WriteString(e.text)
				}
			}
			last := evs[len(evs)-1]
			if evs[0].kind != "task" || last.kind != "status" || last.state != a2a.TaskStateCompleted || !last.final || arts.String() != "012" {
				t.Fatalf("events %+v", evs)
			}
			if streaming {
				// Chunks travel as chunks: one new artifact, then appends.
				n := 0
				for _, e := range evs {
					if e.kind == "artifact" && e.final {
						n++
					}
				}
				if n != 2 {
					t.Fatalf("appended chunks relayed %d times, want 2: %+v", n, evs)
				}
			}
		})
	}
}

func TestForwardInputRequiredRoundTrip(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, upstreamOpts{streaming: true})
	env, _ := forwardEnv(t, up, approveAll{}, ForwardOptions{})
	c := env.client(t, tokA)
	ctx := context.Background()

	task := sendTask(t, ctx, c, userMsg("ask"))
	if task.Status.State != a2a.TaskStateInputRequired || text(task.Status.Message) != "what is your name?" {
		t.Fatalf("asked: %s %+v", task.Status.State, task.Status.Message)
	}
	answered := sendTask(t, ctx, c, answerTo(task, a2a.TextPart{Text: "Ada"}))
	if answered.Status.State != a2a.TaskStateCompleted || len(answered.Artifacts) != 1 || partsText(answered.Artifacts[0].Parts) != "hello Ada" {
		t.Fatalf("answered: %s %+v", answered.Status.State, answered.Artifacts)
	}
	calls := up.calls()
	if len(calls) != 2 || !calls[1].Resumed || calls[1].TaskID != calls[0].TaskID || calls[1].Text != "Ada" {
		t.Fatalf("upstream calls %+v", calls)
	}
	if calls[0].ContextID == task.ContextID {
		t.Fatal("the caller's contextId was sent upstream")
	}
}

func TestForwardCancelTravelsUpstream(t *testing.T) {
	t.Parallel()
	for _, streaming := range []bool{true, false} {
		t.Run(map[bool]string{true: "stream", false: "poll"}[streaming], func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, upstreamOpts{streaming: streaming})
			env, _ := forwardEnv(t, up, approveAll{}, ForwardOptions{})
			c := env.client(t, tokA)
			ctx := context.Background()
			res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("sleep"), Config: &a2a.MessageSendConfig{Blocking: new(false)}})
			if err != nil {
				t.Fatal(err)
			}
			local := res.(*a2a.Task).ID
			var upID a2a.TaskID
			select {
			case upID = <-up.started:
			case <-time.After(10 * time.Second):
				t.Fatal("upstream did not start")
			}
			got, err := c.CancelTask(ctx, &a2a.TaskIDParams{ID: local})
			if err != nil || got.Status.State != a2a.TaskStateCanceled {
				t.Fatalf("cancel: %v %+v", err, got)
			}
			if ids := up.canceledIDs(); len(ids) != 1 || ids[0] != upID {
				t.Fatalf("upstream cancels %v, want [%s]", ids, upID)
			}
			select {
			case id := <-up.stopped:
				if id != upID {
					t.Fatalf("stopped %s", id)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("upstream work did not stop")
			}
		})
	}
}

func TestForwardCancelWhileWaitingForCaller(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, upstreamOpts{streaming: true})
	env, fw := forwardEnv(t, up, approveAll{}, ForwardOptions{SweepInterval: 20 * time.Millisecond})
	c := env.client(t, tokA)
	ctx := context.Background()
	task := sendTask(t, ctx, c, userMsg("ask"))
	if task.Status.State != a2a.TaskStateInputRequired || fw.Status().Parked != 1 {
		t.Fatalf("asked: %s, parked %d", task.Status.State, fw.Status().Parked)
	}
	if got, err := c.CancelTask(ctx, &a2a.TaskIDParams{ID: task.ID}); err != nil || got.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("cancel: %v %+v", err, got)
	}
	upID := up.calls()[0].TaskID
	waitFor(t, "the cancel to reach the upstream task parked in input-required", func() bool {
		ids := up.canceledIDs()
		return len(ids) == 1 && ids[0] == upID
	})
	if fw.Status().Parked != 0 {
		t.Fatalf("still parked: %+v", fw.Status())
	}
}

func TestForwardMapsContextsPerCaller(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, upstreamOpts{streaming: true})
	env, fw := forwardEnv(t, up, approveAll{}, ForwardOptions{})
	a, b := env.client(t, tokA), env.client(t, tokB)
	ctx := context.Background()
	send := func(c interface {
		SendMessage(context.Context, *a2a.MessageSendParams) (a2a.SendMessageResult, error)
	}, ctxID, s string) *a2a.Task {
		m := userMsg(s)
		m.ContextID = ctxID
		return sendTask(t, ctx, c, m)
	}
	t1 := send(a, "conv-1", "echo one")
	t2 := send(a, "conv-1", "echo two")
	t3 := send(b, "conv-1", "echo three")
	t4 := send(a, "conv-2", "echo four")
	for _, tk := range []*a2a.Task{t1, t2, t3, t4} {
		if tk.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("task %s: %s", tk.ID, tk.Status.State)
		}
	}
	calls := up.calls()
	if len(calls) != 4 {
		t.Fatalf("upstream calls %+v", calls)
	}
	if calls[0].ContextID != calls[1].ContextID {
		t.Fatalf("one caller's context went to two upstream contexts: %+v", calls)
	}
	if calls[2].ContextID == calls[0].ContextID || calls[3].ContextID == calls[0].ContextID || calls[2].ContextID == calls[3].ContextID {
		t.Fatalf("distinct caller contexts share an upstream context: %+v", calls)
	}
	for _, c := range calls {
		if strings.HasPrefix(c.ContextID, "conv-") {
			t.Fatalf("a caller's contextId went upstream: %+v", c)
		}
	}
	if fw.Status().Contexts != 3 {
		t.Fatalf("contexts mapped: %+v", fw.Status())
	}
}

func TestForwardRefusalsAndFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("denied by the owner never reaches the upstream", func(t *testing.T) {
		t.Parallel()
		up := newUpstream(t, upstreamOpts{streaming: true})
		ap := newManualApprover()
		env, _ := forwardEnv(t, up, ap, ForwardOptions{})
		c := env.client(t, tokA)
		done := make(chan *a2a.Task, 1)
		go func() {
			res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("echo secret")})
			if err != nil {
				done <- nil
				return
			}
			done <- res.(*a2a.Task)
		}()
		ap.next(t).answer <- agent.Decision{Reason: "denied by the owner", ByOwner: true}
		task := <-done
		if task == nil || task.Status.State != a2a.TaskStateRejected {
			t.Fatalf("denied task %+v", task)
		}
		if up.requests() != 0 {
			t.Fatalf("upstream got %d requests for a denied task", up.requests())
		}
	})

	t.Run("upstream down", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := "http://" + ln.Addr().String()
		ln.Close()
		env, fw := forwardEnv(t, nil, approveAll{}, ForwardOptions{URL: dead})
		task := sendTask(t, ctx, env.client(t, tokA), userMsg("echo x"))
		if task.Status.State != a2a.TaskStateFailed || !strings.Contains(text(task.Status.Message), "unreachable") {
			t.Fatalf("task %s %q", task.Status.State, text(task.Status.Message))
		}
		if _, port, _ := net.SplitHostPort(strings.TrimPrefix(dead, "http://")); strings.Contains(text(task.Status.Message), port) {
			t.Fatalf("the caller learns the upstream's address: %q", text(task.Status.Message))
		}
		if st := fw.Status(); st.Ready || !strings.Contains(st.Problem, "unreachable") {
			t.Fatalf("status %+v", st)
		}
	})

	t.Run("wrong token", func(t *testing.T) {
		t.Parallel()
		up := newUpstream(t, upstreamOpts{token: "right"})
		env, _ := forwardEnv(t, up, approveAll{}, ForwardOptions{Token: func() string { return "wrong" }})
		task := sendTask(t, ctx, env.client(t, tokA), userMsg("echo x"))
		if task.Status.State != a2a.TaskStateFailed || !strings.Contains(text(task.Status.Message), "refused its token") ||
			!strings.Contains(text(task.Status.Message), "meshtray forward token") {
			t.Fatalf("task %s %q", task.Status.State, text(task.Status.Message))
		}
	})

	t.Run("upstream rejects", func(t *testing.T) {
		t.Parallel()
		up := newUpstream(t, upstreamOpts{streaming: true})
		env, _ := forwardEnv(t, up, approveAll{}, ForwardOptions{})
		task := sendTask(t, ctx, env.client(t, tokA), userMsg("reject"))
		if task.Status.State != a2a.TaskStateFailed || !strings.Contains(text(task.Status.Message), "not today") {
			t.Fatalf("task %s %q", task.Status.State, text(task.Status.Message))
		}
	})

	t.Run("bad URL", func(t *testing.T) {
		t.Parallel()
		if _, err := NewForwardExecutor(ForwardOptions{URL: "http://192.168.7.7:8000"}); err == nil {
			t.Fatal("a plain-http LAN upstream was accepted")
		}
	})
}

func TestForwardWorkingMessagesTravelBack(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, upstreamOpts{streaming: true})
	env, _ := forwardEnv(t, up, approveAll{}, ForwardOptions{})
	c := env.client(t, tokA)
	var working []string
	var final a2a.TaskState
	for ev, err := range c.SendStreamingMessage(context.Background(), &a2a.MessageSendParams{Message: userMsg("slow")}) {
		if err != nil {
			t.Fatal(err)
		}
		if su, ok := ev.(*a2a.TaskStatusUpdateEvent); ok {
			if su.Status.State == a2a.TaskStateWorking && su.Status.Message != nil {
				working = append(working, text(su.Status.Message))
			}
			final = su.Status.State
		}
	}
	if strings.Join(working, ",") != "step 1,step 2" || final != a2a.TaskStateCompleted {
		t.Fatalf("working %v, final %s", working, final)
	}
}
