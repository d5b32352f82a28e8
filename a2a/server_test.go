package a2a

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"
)

// Conformance of the engine against the official a2a-go v0.3.15 client,
// with the scripted executor (the node executor has its own tests).

func TestCardUnpublishedIs404(t *testing.T) {
	t.Parallel()
	env := newEnv(t, Options{})
	env.srv.SetPublished(false)
	_, err := agentcard.NewResolver(env.httpClient()).Resolve(context.Background(), env.hs.URL)
	var st *agentcard.ErrStatusNotOK
	if !errors.As(err, &st) || st.StatusCode != http.StatusNotFound {
		t.Fatalf("unpublished card: got %v, want a 404", err)
	}
	env.srv.SetPublished(true)
	if _, err := agentcard.NewResolver(env.httpClient()).Resolve(context.Background(), env.hs.URL); err != nil {
		t.Fatalf("published card: %v", err)
	}
	if got := env.srv.Status(); !got.Published || got.LiveTasks != 0 {
		t.Fatalf("Status = %+v", got)
	}
}

func sendTask(t *testing.T, ctx context.Context, c interface {
	SendMessage(context.Context, *a2a.MessageSendParams) (a2a.SendMessageResult, error)
}, msg *a2a.Message) *a2a.Task {
	t.Helper()
	res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: msg})
	if err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	task, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("SendMessage returned %T, want *a2a.Task", res)
	}
	return task
}

func TestSendCompletes(t *testing.T) {
	t.Parallel()
	env := newEnv(t, Options{})
	c := env.client(t, tokA)
	ctx := context.Background()

	tests := []struct {
		text      string
		state     a2a.TaskState
		status    string // text of the status message
		artifacts int
	}{
		{"echo hello", a2a.TaskStateCompleted, "done", 1},
		{"fail no disk", a2a.TaskStateFailed, "no disk", 0},
		{"err boom", a2a.TaskStateFailed, "boom", 0},
		{"panic", a2a.TaskStateFailed, "the executor failed unexpectedly", 0},
		{"chunks 3", a2a.TaskStateCompleted, "", 1},
	}
	for _, tc := range tests {
		task := sendTask(t, ctx, c, userMsg(tc.text))
		if task.Status.State != tc.state {
			t.Errorf("%q: state %s, want %s", tc.text, task.Status.State, tc.state)
			continue
		}
		var st string
		if task.Status.Message != nil {
			st = text(task.Status.Message)
		}
		if st != tc.status {
			t.Errorf("%q: status message %q, want %q", tc.text, st, tc.status)
		}
		if len(task.Artifacts) != tc.artifacts {
			t.Errorf("%q: %d artifacts, want %d", tc.text, len(task.Artifacts), tc.artifacts)
		}
		if task.ContextID == "" || task.ID == "" || task.Status.Timestamp == nil {
			t.Errorf("%q: task without id/contextId/timestamp: %+v", tc.text, task)
		}
		if len(task.History) != 1 || text(task.History[0]) != tc.text || task.History[0].TaskID != task.ID {
			t.Errorf("%q: history %+v", tc.text, task.History)
		}
	}
	// The chunked artifact is whole in the stored task.
	task := sendTask(t, ctx, c, userMsg("chunks 4"))
	var got strings.Builder
	for _, p := range task.Artifacts[0].Parts {
		got.WriteString(p.(a2a.TextPart).Text)
	}
	if got.String() != "0123" {
		t.Errorf("chunked artifact = %q, want 0123", got.String())
	}
	if s := env.srv.Status(); s.LiveTasks != 0 {
		t.Errorf("live tasks after all ended: %d", s.LiveTasks)
	}
}

func TestStreamOrderAndFinal(t *testing.T) {
	t.Parallel()
	env := newEnv(t, Options{})
	c := env.client(t, tokA)
	var events []a2a.Event
	for ev, err := range c.SendStreamingMessage(context.Background(), &a2a.MessageSendParams{Message: userMsg("chunks 3")}) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		events = append(events, ev)
	}
	// Task(submitted) first, then working, the artifact and its two
	// appended chunks, then completed with final:true, and the stream ends.
	want := []string{"task:submitted", "status:working", "artifact:new", "artifact:append", "artifact:append,last", "status:completed,final"}
	var got []string
	for _, ev := range events {
		switch e := ev.(type) {
		case *a2a.Task:
			got = append(got, "task:"+string(e.Status.State))
		case *a2a.TaskStatusUpdateEvent:
			s := "status:" + string(e.Status.State)
			if e.Final {
				s += ",final"
			}
			got = append(got, s)
		case *a2a.TaskArtifactUpdateEvent:
			s := "artifact:new"
			if e.Append {
				s = "artifact:append"
			}
			if e.LastChunk {
				s += ",last"
			}
			got = append(got, s)
		default:
			got = append(got, "other")
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("events:\n got %v\nwant %v", got, want)
	}
	first := events[0].(*a2a.Task)
	if first.Status.Message == nil || text(first.Status.Message) != "waiting for approval on testbox" {
		t.Errorf("first Task's status message = %+v", first.Status.Message)
	}
	for _, ev := range events {
		if ev.TaskInfo().TaskID != first.ID || ev.TaskInfo().ContextID != first.ContextID {
			t.Errorf("event %T for task %v, want %s", ev, ev.TaskInfo(), first.ID)
		}
	}
}

func TestInputRequiredRoundTripAndHistory(t *testing.T) {
	t.Parallel()
	x := &scriptExecutor{}
	env := newEnv(t, Options{Executor: x})
	c := env.client(t, tokA)
	ctx := context.Background()

	task := sendTask(t, ctx, c, userMsg("ask"))
	if task.Status.State != a2a.TaskStateInputRequired || text(task.Status.Message) != "what?" {
		t.Fatalf("first turn: %s %+v", task.Status.State, task.Status.Message)
	}
	// The answer, on the same taskId and contextId; streamed this time.
	answer := userMsg("blue")
	answer.TaskID, answer.ContextID = task.ID, task.ContextID
	var states []a2a.TaskState
	for ev, err := range c.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: answer}) {
		if err != nil {
			t.Fatalf("resume stream: %v", err)
		}
		switch e := ev.(type) {
		case *a2a.Task:
			states = append(states, e.Status.State)
		case *a2a.TaskStatusUpdateEvent:
			states = append(states, e.Status.State)
		}
	}
	if len(states) != 2 || states[0] != a2a.TaskStateWorking || states[1] != a2a.TaskStateCompleted {
		t.Fatalf("resume stream states = %v, want [working completed]", states)
	}

	full, err := c.GetTask(ctx, &a2a.TaskQueryParams{ID: task.ID})
	if err != nil {
		t.Fatal(err)
	}
	var hist []string
	for _, m := range full.History {
		hist = append(hist, string(m.Role)+":"+text(m))
	}
	if want := "user:ask agent:what? user:blue"; strings.Join(hist, " ") != want {
		t.Fatalf("history = %q, want %q", hist, want)
	}
	if len(full.Artifacts) != 1 || full.Artifacts[0].Parts[0].(a2a.TextPart).Text != "blue" {
		t.Fatalf("artifacts = %+v", full.Artifacts)
	}
	for _, tc := range []struct{ n, want int }{{0, 0}, {1, 1}, {2, 2}, {10, 3}} {
		n := tc.n
		got, err := c.GetTask(ctx, &a2a.TaskQueryParams{ID: task.ID, HistoryLength: &n})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.History) != tc.want {
			t.Errorf("historyLength %d: %d messages, want %d", tc.n, len(got.History), tc.want)
		}
		if tc.want > 0 && text(got.History[len(got.History)-1]) != "blue" {
			t.Errorf("historyLength %d: last message %q, want the newest", tc.n, text(got.History[len(got.History)-1]))
		}
	}
	// The resume was not approved again, and the approvals were policy
	// (no summary).
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.approved) != 2 || x.approved[0] != "" || x.approved[1] != "" {
		t.Errorf("ApprovedSummary per turn = %q", x.approved)
	}
}

func TestMessageRefusals(t *testing.T) {
	t.Parallel()
	env := newEnv(t, Options{})
	a := env.client(t, tokA)
	b := env.client(t, tokB)
	ctx := context.Background()
	done := sendTask(t, ctx, a, userMsg("echo x"))
	asking := sendTask(t, ctx, a, userMsg("ask"))

	follow := func(id a2a.TaskID, ctxID string) *a2a.MessageSendParams {
		m := userMsg("more")
		m.TaskID, m.ContextID = id, ctxID
		return &a2a.MessageSendParams{Message: m}
	}
	tests := []struct {
		name   string
		client interface {
			SendMessage(context.Context, *a2a.MessageSendParams) (a2a.SendMessageResult, error)
		}
		params  *a2a.MessageSendParams
		want    error
		wantMsg string
	}{
		{"terminal task", a, follow(done.ID, ""), a2a.ErrUnsupportedOperation, "is completed"},
		{"unknown taskId", a, follow("no-such-task", ""), a2a.ErrTaskNotFound, ""},
		{"another owner's task", b, follow(asking.ID, ""), a2a.ErrTaskNotFound, ""},
		{"contradicting contextId", a, follow(asking.ID, "other-context"), a2a.ErrInvalidParams, "contradicts"},
	}
	for _, tc := range tests {
		_, err := tc.client.SendMessage(ctx, tc.params)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.wantMsg) {
			t.Errorf("%s: got %v, want %v containing %q", tc.name, err, tc.want, tc.wantMsg)
		}
	}
	// The refusals left the input-required task as it was.
	got, err := a.GetTask(ctx, &a2a.TaskQueryParams{ID: asking.ID})
	if err != nil || got.Status.State != a2a.TaskStateInputRequired || len(got.History) != 1 {
		t.Fatalf("asking task after refusals: %v %+v", err, got)
	}
}

func TestOwnershipOnEveryMethod(t *testing.T) {
	t.Parallel()
	x := &scriptExecutor{started: make(chan a2a.TaskID, 1), stopped: make(chan a2a.TaskID, 1)}
	env := newEnv(t, Options{Executor: x})
	a := env.client(t, tokA)
	b := env.client(t, tokB)
	ctx := context.Background()
	res, err := a.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("sleep"), Config: &a2a.MessageSendConfig{Blocking: new(false)}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.(*a2a.Task).ID
	<-x.started

	if _, err := b.GetTask(ctx, &a2a.TaskQueryParams{ID: id}); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Errorf("get: %v", err)
	}
	if _, err := b.CancelTask(ctx, &a2a.TaskIDParams{ID: id}); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Errorf("cancel: %v", err)
	}
	for _, err := range b.ResubscribeToTask(ctx, &a2a.TaskIDParams{ID: id}) {
		if !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Errorf("resubscribe: %v", err)
		}
		break
	}
	m := userMsg("x")
	m.TaskID = id
	if _, err := b.SendMessage(ctx, &a2a.MessageSendParams{Message: m}); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Errorf("send: %v", err)
	}
	// The owner still has it, running.
	got, err := a.GetTask(ctx, &a2a.TaskQueryParams{ID: id})
	if err != nil || got.Status.State != a2a.TaskStateWorking {
		t.Fatalf("owner's get: %v %+v", err, got)
	}
	if _, err := a.CancelTask(ctx, &a2a.TaskIDParams{ID: id}); err != nil {
		t.Fatal(err)
	}
	<-x.stopped
}

func TestContextIDsAreNamespacedByOwner(t *testing.T) {
	t.Parallel()
	env := newEnv(t, Options{})
	ctx := context.Background()
	var tasks []*a2a.Task
	for _, tok := range []string{tokA, tokB} {
		m := userMsg("echo same context")
		m.ContextID = "shared-ctx"
		tasks = append(tasks, sendTask(t, ctx, env.client(t, tok), m))
	}
	for _, task := range tasks {
		if task.ContextID != "shared-ctx" {
			t.Errorf("wire contextId = %q, want the caller's own", task.ContextID)
		}
	}
	owners := map[string]string{}
	for _, ti := range env.srv.Tasks() {
		owners[ti.ID] = ti.Owner
	}
	if owners[string(tasks[0].ID)] != "grantA" || owners[string(tasks[1].ID)] != "grantB" {
		t.Fatalf("owners = %v", owners)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	t.Run("running executor stops", func(t *testing.T) {
		t.Parallel()
		x := &scriptExecutor{started: make(chan a2a.TaskID, 1), stopped: make(chan a2a.TaskID, 1)}
		env := newEnv(t, Options{Executor: x})
		c := env.client(t, tokA)
		ctx := context.Background()
		res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("sleep"), Config: &a2a.MessageSendConfig{Blocking: new(false)}})
		if err != nil {
			t.Fatal(err)
		}
		id := res.(*a2a.Task).ID
		<-x.started
		got, err := c.CancelTask(ctx, &a2a.TaskIDParams{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.State != a2a.TaskStateCanceled || text(got.Status.Message) != "canceled by the caller" {
			t.Fatalf("after cancel: %s %+v", got.Status.State, got.Status.Message)
		}
		select {
		case stopped := <-x.stopped:
			if stopped != id {
				t.Fatalf("stopped %s, want %s", stopped, id)
			}
		default:
			t.Fatal("tasks/cancel answered before the executor stopped")
		}
		if _, err := c.CancelTask(ctx, &a2a.TaskIDParams{ID: id}); !errors.Is(err, a2a.ErrTaskNotCancelable) {
			t.Fatalf("second cancel: %v, want -32002", err)
		}
	})
	t.Run("input-required", func(t *testing.T) {
		t.Parallel()
		env := newEnv(t, Options{})
		c := env.client(t, tokA)
		ctx := context.Background()
		task := sendTask(t, ctx, c, userMsg("ask"))
		got, err := c.CancelTask(ctx, &a2a.TaskIDParams{ID: task.ID})
		if err != nil || got.Status.State != a2a.TaskStateCanceled {
			t.Fatalf("cancel input-required: %v %+v", err, got)
		}
	})
	t.Run("waiting for approval", func(t *testing.T) {
		t.Parallel()
		ap := newManualApprover()
		env := newEnv(t, Options{Approver: ap})
		c := env.client(t, tokA)
		ctx := context.Background()
		res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("echo x"), Config: &a2a.MessageSendConfig{Blocking: new(false)}})
		if err != nil {
			t.Fatal(err)
		}
		task := res.(*a2a.Task)
		pa := ap.next(t)
		if got, err := c.GetTask(ctx, &a2a.TaskQueryParams{ID: task.ID}); err != nil ||
			got.Status.State != a2a.TaskStateSubmitted || text(got.Status.Message) != "waiting for approval on testbox" {
			t.Fatalf("before approval: %v %+v", err, got)
		}
		if pa.TaskID != task.ID || pa.Caller.Owner() != "grantA" || pa.Summary != "echo x" {
			t.Fatalf("approval request = %+v", pa.TaskApproval)
		}
		got, err := c.CancelTask(ctx, &a2a.TaskIDParams{ID: task.ID})
		if err != nil || got.Status.State != a2a.TaskStateCanceled {
			t.Fatalf("cancel while awaiting approval: %v %+v", err, got)
		}
		select {
		case <-pa.ctx.Done(): // the approval request was withdrawn
		default:
			t.Fatal("the approval's ctx is still live after cancel")
		}
	})
	t.Run("executor ignoring ctx", func(t *testing.T) {
		t.Parallel()
		x := &scriptExecutor{started: make(chan a2a.TaskID, 1), release: make(chan struct{})}
		env := newEnv(t, Options{Executor: x, CancelWait: 50 * time.Millisecond})
		defer close(x.release) // runs before the env's Shutdown cleanup
		c := env.client(t, tokA)
		ctx := context.Background()
		res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("ignore"), Config: &a2a.MessageSendConfig{Blocking: new(false)}})
		if err != nil {
			t.Fatal(err)
		}
		<-x.started
		got, err := c.CancelTask(ctx, &a2a.TaskIDParams{ID: res.(*a2a.Task).ID})
		if err != nil || got.Status.State != a2a.TaskStateCanceled || !strings.Contains(text(got.Status.Message), "did not confirm") {
			t.Fatalf("cancel of a stuck executor: %v %+v", err, got)
		}
		if env.srv.Status().LiveTasks != 0 {
			t.Fatal("the canceled task still counts as live")
		}
	})
}

func TestApproval(t *testing.T) {
	t.Parallel()
	ap := newManualApprover()
	x := &scriptExecutor{}
	env := newEnv(t, Options{Approver: ap, Executor: x})
	c := env.client(t, tokA)
	ctx := context.Background()

	// Refused: rejected, with the reason.
	resc := make(chan *a2a.Task, 1)
	go func() {
		res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("echo no")})
		if err != nil {
			t.Error(err)
		}
		task, _ := res.(*a2a.Task)
		resc <- task
	}()
	ap.next(t).answer <- Decision{Reason: "denied by the owner", ByOwner: true}
	task := <-resc
	if task == nil || task.Status.State != a2a.TaskStateRejected || text(task.Status.Message) != "rejected: denied by the owner" {
		t.Fatalf("refused task: %+v", task)
	}

	// Approved by a person: the executor sees the approved summary.
	go func() {
		res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("echo yes")})
		if err != nil {
			t.Error(err)
		}
		task, _ := res.(*a2a.Task)
		resc <- task
	}()
	ap.next(t).answer <- Decision{Approved: true, ByOwner: true}
	task = <-resc
	if task == nil || task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("approved task: %+v", task)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.approved) != 1 || x.approved[0] != "echo yes" {
		t.Fatalf("ApprovedSummary = %q, want [echo yes]", x.approved)
	}
}

func TestNoApproverRefusesEverything(t *testing.T) {
	t.Parallel()
	srv := NewServer(Options{Executor: &scriptExecutor{}})
	defer srv.Shutdown(context.Background())
	rec := rawCall(t, srv, tokA, `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"text","text":"echo x"}]}}}`)
	var resp struct {
		Result a2a.Task `json:"result"`
	}
	if err := json.Unmarshal(rec, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Result.Status.State != a2a.TaskStateRejected || !strings.Contains(text(resp.Result.Status.Message), "no approver") {
		t.Fatalf("without an approver: %s", rec)
	}
}

func TestResubscribe(t *testing.T) {
	t.Parallel()
	x := &scriptExecutor{started: make(chan a2a.TaskID, 1), stopped: make(chan a2a.TaskID, 1)}
	env := newEnv(t, Options{Executor: x})
	c := env.client(t, tokA)
	ctx := context.Background()
	res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("sleep"), Config: &a2a.MessageSendConfig{Blocking: new(false)}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.(*a2a.Task).ID
	<-x.started

	var got []string
	n := 0
	for ev, err := range c.ResubscribeToTask(ctx, &a2a.TaskIDParams{ID: id}) {
		if err != nil {
			t.Fatal(err)
		}
		switch e := ev.(type) {
		case *a2a.Task:
			got = append(got, "task:"+string(e.Status.State))
		case *a2a.TaskStatusUpdateEvent:
			got = append(got, "status:"+string(e.Status.State))
		}
		if n++; n == 1 {
			// Cancel from elsewhere once the stream is attached.
			go func() {
				if _, err := c.CancelTask(ctx, &a2a.TaskIDParams{ID: id}); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	if want := "task:working status:canceled"; strings.Join(got, " ") != want {
		t.Fatalf("resubscribe events = %v, want %s", got, want)
	}
	<-x.stopped

	// A resubscribe to a terminal task yields the Task and ends.
	got = got[:0]
	for ev, err := range c.ResubscribeToTask(ctx, &a2a.TaskIDParams{ID: id}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(ev.(*a2a.Task).Status.State))
	}
	if len(got) != 1 || got[0] != "canceled" {
		t.Fatalf("resubscribe to a terminal task: %v", got)
	}
}

func TestStreamDisconnectFreesSubscriber(t *testing.T) {
	t.Parallel()
	x := &scriptExecutor{started: make(chan a2a.TaskID, 1), stopped: make(chan a2a.TaskID, 1)}
	env := newEnv(t, Options{Executor: x})
	c := env.client(t, tokA)
	ctx, cancel := context.WithCancel(context.Background())
	var id a2a.TaskID
	for ev, err := range c.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: userMsg("sleep")}) {
		if err != nil {
			t.Fatal(err)
		}
		id = ev.TaskInfo().TaskID
		break // the client leaves after the first event
	}
	cancel()
	<-x.started
	task := env.srv.tasks[id]
	waitFor(t, "the subscriber to be dropped", func() bool {
		task.mu.Lock()
		defer task.mu.Unlock()
		return len(task.subs) == 0 && len(task.log) == 0
	})
	// The task itself runs on: a client leaving is not a cancel.
	task.mu.Lock()
	st := task.status.State
	task.mu.Unlock()
	if st != a2a.TaskStateWorking {
		t.Fatalf("task state after the client left: %s", st)
	}
	if _, err := c.CancelTask(context.Background(), &a2a.TaskIDParams{ID: id}); err != nil {
		t.Fatal(err)
	}
	<-x.stopped
}

func TestNonBlockingSend(t *testing.T) {
	t.Parallel()
	ap := newManualApprover()
	env := newEnv(t, Options{Approver: ap})
	c := env.client(t, tokA)
	ctx := context.Background()
	res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("echo later"), Config: &a2a.MessageSendConfig{Blocking: new(false)}})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*a2a.Task)
	if task.Status.State != a2a.TaskStateSubmitted {
		t.Fatalf("non-blocking answer state %s", task.Status.State)
	}
	ap.next(t).answer <- Decision{Approved: true}
	waitFor(t, "completion", func() bool {
		got, err := c.GetTask(ctx, &a2a.TaskQueryParams{ID: task.ID})
		return err == nil && got.Status.State == a2a.TaskStateCompleted
	})
}

func TestUnsupportedMethods(t *testing.T) {
	t.Parallel()
	env := newEnv(t, Options{})
	c := env.client(t, tokA)
	ctx := context.Background()
	if _, err := c.SetTaskPushConfig(ctx, &a2a.TaskPushConfig{TaskID: "x", Config: a2a.PushConfig{URL: "http://127.0.0.1:1/"}}); !errors.Is(err, a2a.ErrPushNotificationNotSupported) {
		t.Errorf("push config set: %v", err)
	}
	if _, err := c.ListTaskPushConfig(ctx, &a2a.ListTaskPushConfigParams{TaskID: "x"}); !errors.Is(err, a2a.ErrPushNotificationNotSupported) {
		t.Errorf("push config list: %v", err)
	}
	// The client answers GetAgentCard from the public card (it does not
	// advertise an extended one), so ask over the wire.
	raw := rawHTTP(t, env, tokA, `{"jsonrpc":"2.0","id":"c","method":"agent/getAuthenticatedExtendedCard"}`)
	if code := errorCode(t, raw); code != CodeExtendedCard {
		t.Errorf("extended card: %s", raw)
	}
}

func TestLiveTaskCapPerOwner(t *testing.T) {
	t.Parallel()
	x := &scriptExecutor{started: make(chan a2a.TaskID, 8), stopped: make(chan a2a.TaskID, 8)}
	env := newEnv(t, Options{Executor: x, MaxLiveTasksPerOwner: 2})
	a := env.client(t, tokA)
	b := env.client(t, tokB)
	ctx := context.Background()
	nb := &a2a.MessageSendConfig{Blocking: new(false)}
	var ids []a2a.TaskID
	for range 2 {
		res, err := a.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("sleep"), Config: nb})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.(*a2a.Task).ID)
	}
	_, err := a.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("sleep"), Config: nb})
	if err == nil || !strings.Contains(err.Error(), "too many live tasks") {
		t.Fatalf("third live task: %v", err)
	}
	raw := rawHTTP(t, env, tokA, `{"jsonrpc":"2.0","id":"x","method":"message/send","params":{"configuration":{"blocking":false},"message":{"kind":"message","messageId":"m","role":"user","parts":[{"kind":"text","text":"sleep"}]}}}`)
	if code := errorCode(t, raw); code != CodeLiveTaskLimit {
		t.Fatalf("cap code = %d, want %d (%s)", code, CodeLiveTaskLimit, raw)
	}
	// Another grant is not affected.
	if _, err := b.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("echo b")}); err != nil {
		t.Fatalf("other owner: %v", err)
	}
	// Ending one frees a slot.
	<-x.started
	<-x.started
	if _, err := a.CancelTask(ctx, &a2a.TaskIDParams{ID: ids[0]}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("echo again")}); err != nil {
		t.Fatalf("after a cancel: %v", err)
	}
	if _, err := a.CancelTask(ctx, &a2a.TaskIDParams{ID: ids[1]}); err != nil {
		t.Fatal(err)
	}
	<-x.stopped
	<-x.stopped
}

func TestStoreBoundAndEviction(t *testing.T) {
	t.Parallel()
	x := &scriptExecutor{started: make(chan a2a.TaskID, 8), stopped: make(chan a2a.TaskID, 8)}
	env := newEnv(t, Options{Executor: x, MaxTasks: 3})
	c := env.client(t, tokA)
	ctx := context.Background()
	var ids []a2a.TaskID
	for i := range 5 {
		ids = append(ids, sendTask(t, ctx, c, userMsg("echo "+string(rune('a'+i)))).ID)
	}
	// The two oldest terminal tasks were evicted; the three newest remain.
	for i, id := range ids {
		_, err := c.GetTask(ctx, &a2a.TaskQueryParams{ID: id})
		if evicted := i < 2; evicted != errors.Is(err, a2a.ErrTaskNotFound) {
			t.Errorf("task %d: get err %v, evicted=%v", i, err, evicted)
		}
	}
	if n := len(env.srv.Tasks()); n != 3 {
		t.Fatalf("store holds %d tasks, want 3", n)
	}
	// Three live tasks fill the store: they evict every terminal one, and a
	// fourth is refused rather than evicting a live task.
	nb := &a2a.MessageSendConfig{Blocking: new(false)}
	var live []a2a.TaskID
	for range 3 {
		res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("sleep"), Config: nb})
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, res.(*a2a.Task).ID)
	}
	raw := rawHTTP(t, env, tokB, `{"jsonrpc":"2.0","id":7,"method":"message/send","params":{"message":{"kind":"message","messageId":"m","role":"user","parts":[{"kind":"text","text":"echo"}]}}}`)
	if code := errorCode(t, raw); code != CodeStoreFull {
		t.Fatalf("full store code = %d, want %d (%s)", code, CodeStoreFull, raw)
	}
	for _, id := range live {
		got, err := c.GetTask(ctx, &a2a.TaskQueryParams{ID: id})
		if err != nil || got.Status.State.Terminal() {
			t.Fatalf("live task %s: %v %+v", id, err, got)
		}
	}
	for range 3 {
		<-x.started
	}
	for _, id := range live {
		if _, err := c.CancelTask(ctx, &a2a.TaskIDParams{ID: id}); err != nil {
			t.Fatal(err)
		}
		<-x.stopped
	}
}

func TestShutdownCancelsLiveTasks(t *testing.T) {
	t.Parallel()
	x := &scriptExecutor{started: make(chan a2a.TaskID, 1), stopped: make(chan a2a.TaskID, 1)}
	env := newEnv(t, Options{Executor: x})
	c := env.client(t, tokA)
	ctx := context.Background()
	asking := sendTask(t, ctx, c, userMsg("ask"))

	// A stream on a running task.
	finals := make(chan a2a.Event, 1)
	go func() {
		var last a2a.Event
		for ev, err := range c.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: userMsg("sleep")}) {
			if err != nil {
				t.Error(err)
				break
			}
			last = ev
		}
		finals <- last
	}()
	running := <-x.started

	if err := env.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	last := <-finals
	su, ok := last.(*a2a.TaskStatusUpdateEvent)
	if !ok || !su.Final || su.Status.State != a2a.TaskStateCanceled || text(su.Status.Message) != "node shutting down" {
		t.Fatalf("stream's last event = %#v", last)
	}
	if <-x.stopped != running {
		t.Fatal("the running executor did not stop")
	}
	for _, ti := range env.srv.Tasks() {
		if ti.State != a2a.TaskStateCanceled {
			t.Errorf("task %s (%s) is %s after shutdown", ti.ID, ti.Summary, ti.State)
		}
	}
	if env.srv.tasks[asking.ID].status.State != a2a.TaskStateCanceled {
		t.Error("the input-required task was not canceled")
	}
	// New requests are refused.
	raw := rawHTTP(t, env, tokA, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"x"}}`)
	if code := errorCode(t, raw); code != CodeUnavailable {
		t.Fatalf("after shutdown: %s", raw)
	}
	if s := env.srv.Status(); s.LiveTasks != 0 {
		t.Fatalf("live tasks after shutdown: %d", s.LiveTasks)
	}
}

// rawHTTP posts body to the env's endpoint with token and returns the
// response body, checking the JSON-RPC HTTP conventions on the way.
func rawHTTP(t *testing.T, env *testEnv, token, body string) []byte {
	t.Helper()
	req, err := http.NewRequest("POST", env.hs.URL+RPCPath, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := env.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP %d: %s", resp.StatusCode, out)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" && ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	return out
}

// rawCall serves one request in-process with the principal of token.
func rawCall(t *testing.T, srv *Server, token, body string) []byte {
	t.Helper()
	auth := &testAuth{}
	auth.Add(tokA, "grantA", "laptop")
	rec := newRecorder()
	req, _ := http.NewRequest("POST", RPCPath, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	auth.Wrap(srv).ServeHTTP(rec, req)
	return rec.buf.Bytes()
}

func errorCode(t *testing.T, raw []byte) int {
	t.Helper()
	var resp struct {
		Error *rpcError `json:"error"`
	}
	if err := json.Unmarshal(raw, &resp); err != nil || resp.Error == nil {
		t.Fatalf("not a JSON-RPC error: %s (%v)", raw, err)
	}
	return resp.Error.Code
}

// recorder is a minimal flushing ResponseWriter for in-process calls.
type recorder struct {
	hdr    http.Header
	status int
	buf    bytes.Buffer
}

func newRecorder() *recorder             { return &recorder{hdr: http.Header{}} }
func (r *recorder) Header() http.Header  { return r.hdr }
func (r *recorder) WriteHeader(code int) { r.status = code }
func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = 200
	}
	return r.buf.Write(p)
}
func (r *recorder) Flush() {}

// sseEvents splits an SSE body into its data payloads, failing on any line
// that is not a single-line "data: " event, a comment or a blank.
func sseEvents(t *testing.T, body []byte) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "", strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "data: "):
			d := json.RawMessage(strings.TrimPrefix(line, "data: "))
			if !json.Valid(d) {
				t.Fatalf("data line is not one JSON value: %q", line)
			}
			out = append(out, d)
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	return out
}
