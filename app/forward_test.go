package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"

	"meshtray/a2a/delegate"
	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/app/cli"
)

// A real a2a-go v0.3.15 a2asrv agent in the test process (loopback), as
// the forward executor's upstream and as an external agent. Its executor
// reads the first word of the text:
//
//	echo X     artifact "echo" X, completed "done"
//	chunks N   artifact "chunks" in N appended chunks, completed
//	ask        input-required "what is your name?"; the answer X completes with "hello X"
//	sleep      working, waits for cancel
//	reject     rejected "not today"
//	(other)    failed "unknown command"
type a2asrvAgent struct {
	URL   string
	token string

	mu       sync.Mutex
	calls    []a2asrvCall
	canceled []a2a.TaskID
	started  chan a2a.TaskID
	stopped  chan a2a.TaskID
}

type a2asrvCall struct {
	TaskID    a2a.TaskID
	ContextID string
	Text      string
	Resumed   bool
}

func (x *a2asrvAgent) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	var txt string
	for _, p := range rc.Message.Parts {
		if tp, ok := p.(a2a.TextPart); ok {
			txt += tp.Text
		}
	}
	x.mu.Lock()
	x.calls = append(x.calls, a2asrvCall{TaskID: rc.TaskID, ContextID: rc.ContextID, Text: txt, Resumed: rc.StoredTask != nil})
	x.mu.Unlock()
	if rc.StoredTask == nil {
		if err := q.Write(ctx, a2a.NewSubmittedTask(rc, rc.Message)); err != nil {
			return err
		}
	}
	say := func(s string) *a2a.Message {
		return a2a.NewMessageForTask(a2a.MessageRoleAgent, rc, a2a.TextPart{Text: s})
	}
	status := func(st a2a.TaskState, m *a2a.Message, final bool) error {
		ev := a2a.NewStatusUpdateEvent(rc, st, m)
		ev.Final = final
		return q.Write(ctx, ev)
	}
	if rc.StoredTask != nil && rc.StoredTask.Status.State == a2a.TaskStateInputRequired {
		art := a2a.NewArtifactEvent(rc, a2a.TextPart{Text: "hello " + txt})
		art.Artifact.Name = "greeting"
		if err := q.Write(ctx, art); err != nil {
			return err
		}
		return status(a2a.TaskStateCompleted, say("greeted"), true)
	}
	cmd, arg, _ := strings.Cut(txt, " ")
	switch cmd {
	case "echo":
		art := a2a.NewArtifactEvent(rc, a2a.TextPart{Text: arg})
		art.Artifact.Name = "echo"
		if err := q.Write(ctx, art); err != nil {
			return err
		}
		return status(a2a.TaskStateCompleted, say("done"), true)
	case "chunks":
		var n int
		fmt.Sscan(arg, &n)
		first := a2a.NewArtifactEvent(rc, a2a.TextPart{Text: "0"})
		first.Artifact.Name = "chunks"
		if err := q.Write(ctx, first); err != nil {
			return err
		}
		for i := 1; i < n; i++ {
			ev := a2a.NewArtifactUpdateEvent(rc, first.Artifact.ID, a2a.TextPart{Text: fmt.Sprint(i)})
			ev.LastChunk = i == n-1
			if err := q.Write(ctx, ev); err != nil {
				return err
			}
		}
		return status(a2a.TaskStateCompleted, nil, true)
	case "ask":
		return status(a2a.TaskStateInputRequired, say("what is your name?"), true)
	case "sleep":
		if err := status(a2a.TaskStateWorking, say("sleeping"), false); err != nil {
			return err
		}
		x.started <- rc.TaskID
		<-ctx.Done()
		x.stopped <- rc.TaskID
		return nil
	case "reject":
		return status(a2a.TaskStateRejected, say("not today"), true)
	}
	return status(a2a.TaskStateFailed, say("unknown command "+cmd), true)
}

func (x *a2asrvAgent) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	x.mu.Lock()
	x.canceled = append(x.canceled, rc.TaskID)
	x.mu.Unlock()
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCanceled, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

func (x *a2asrvAgent) snapshot() ([]a2asrvCall, []a2a.TaskID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]a2asrvCall(nil), x.calls...), append([]a2a.TaskID(nil), x.canceled...)
}

// startA2asrv serves the agent on loopback; token "" takes none.
func startA2asrv(t *testing.T, token string) *a2asrvAgent {
	t.Helper()
	x := &a2asrvAgent{token: token, started: make(chan a2a.TaskID, 4), stopped: make(chan a2a.TaskID, 4)}
	rpc := a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(x))
	mux := http.NewServeMux()
	var card a2a.AgentCard
	mux.HandleFunc("GET /.well-known/agent-card.json", func(w http.ResponseWriter, r *http.Request) {
		a2asrv.NewStaticAgentCardHandler(&card).ServeHTTP(w, r)
	})
	mux.HandleFunc("POST /rpc", func(w http.ResponseWriter, r *http.Request) {
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		rpc.ServeHTTP(w, r)
	})
	hs := httptest.NewServer(mux)
	x.URL = hs.URL
	card = a2a.AgentCard{
		Name: "Local Helper", Description: "an a2asrv agent", Version: "1", ProtocolVersion: "0.3.0",
		URL: hs.URL + "/rpc", PreferredTransport: a2a.TransportProtocolJSONRPC,
		Capabilities:      a2a.AgentCapabilities{Streaming: true},
		DefaultInputModes: []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
		Skills: []a2a.AgentSkill{{ID: "help", Name: "Help", Description: "helps", Tags: []string{"test"}}},
	}
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
	})
	return x
}

// cliWithStdin runs the CLI of n with stdin.
func cliWithStdin(t *testing.T, n *apptest.Node, stdin string, args ...string) apptest.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := apptest.Command(ctx, nil, append(args, "--state-dir", n.StateDir)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	code := 0
	if err := cmd.Run(); err != nil {
		code = -1
		if ee, ok := err.(interface{ ExitCode() int }); ok {
			code = ee.ExitCode()
		}
	}
	return apptest.Result{Stdout: out.String(), Stderr: errb.String(), Code: code}
}

func TestForwardInFrontOfA2asrv(t *testing.T) {
	up := startA2asrv(t, "upstream-secret-7")
	n := apptest.StartNode(t, apptest.Options{Name: "gate", Config: fmt.Sprintf("[a2a.forward]\nurl = %q\n", up.URL)})
	if r := cliWithStdin(t, n, "upstream-secret-7\n", "forward", "token"); r.Code != 0 {
		t.Fatalf("forward token: %d %s", r.Code, r.Stderr)
	}
	var fv app.ForwardView
	if err := json.Unmarshal([]byte(mustCLI(t, n, "forward", "check", "--json").Stdout), &fv); err != nil {
		t.Fatal(err)
	}
	if !fv.Configured || fv.TokenSource != "keychain" || fv.Status == nil || !fv.Status.Ready || fv.Status.Agent != "Local Helper" {
		t.Fatalf("forward view %+v %+v", fv, fv.Status)
	}
	if b, _ := os.ReadFile(filepath.Join(n.StateDir, "config.toml")); strings.Contains(string(b), "upstream-secret-7") {
		t.Fatal("the token landed in the config file")
	}
	mustCLI(t, n, "a2a", "on")
	var tok app.GrantToken
	if err := json.Unmarshal([]byte(mustCLI(t, n, "grant", "create", "--name", "outsider", "--scope", "agent", "--approval", "ask", "--json").Stdout), &tok); err != nil {
		t.Fatal(err)
	}
	c := apptest.A2AClient(t, n.BaseURL, tok.Token)
	ctx := context.Background()

	t.Run("streaming", func(t *testing.T) {
		type ev struct {
			kind  string
			text  string
			state a2a.TaskState
		}
		var evs []ev
		done := make(chan error, 1)
		go func() {
			for e, err := range c.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: "chunks 4"})}) {
				if err != nil {
					done <- err
					return
				}
				switch v := e.(type) {
				case *a2a.Task:
					evs = append(evs, ev{kind: "task", state: v.Status.State})
				case *a2a.TaskStatusUpdateEvent:
					evs = append(evs, ev{kind: "status", state: v.Status.State})
				case *a2a.TaskArtifactUpdateEvent:
					var s string
					for _, p := range v.Artifact.Parts {
						s += p.(a2a.TextPart).Text
					}
					evs = append(evs, ev{kind: "artifact", text: s})
				}
			}
			done <- nil
		}()
		ap := approvalOf(t, n, app.KindDelegation)
		if calls, _ := up.snapshot(); len(calls) != 0 {
			t.Fatal("the upstream was called before the owner approved")
		}
		if ap.Summary != "chunks 4" || ap.Peer != "outsider" {
			t.Fatalf("approval %+v", ap)
		}
		decide(t, n, ap.ID, true)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		var arts []string
		for _, e := range evs {
			if e.kind == "artifact" {
				arts = append(arts, e.text)
			}
		}
		last := evs[len(evs)-1]
		if evs[0].kind != "task" || strings.Join(arts, "") != "0123" || len(arts) != 4 || last.kind != "status" || last.state != a2a.TaskStateCompleted {
			t.Fatalf("events %+v", evs)
		}
	})

	t.Run("input-required", func(t *testing.T) {
		res := make(chan *a2a.Task, 1)
		go func() {
			r, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: "ask"})})
			if err != nil {
				t.Error(err)
				res <- nil
				return
			}
			res <- r.(*a2a.Task)
		}()
		decide(t, n, approvalOf(t, n, app.KindDelegation).ID, true)
		task := <-res
		if task == nil || task.Status.State != a2a.TaskStateInputRequired || task.Status.Message == nil ||
			task.Status.Message.Parts[0].(a2a.TextPart).Text != "what is your name?" {
			t.Fatalf("asked %+v", task)
		}
		ans := a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: "Ada"})
		ans.TaskID, ans.ContextID = task.ID, task.ContextID
		r, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: ans})
		if err != nil {
			t.Fatal(err)
		}
		done := r.(*a2a.Task)
		if done.Status.State != a2a.TaskStateCompleted || len(done.Artifacts) != 1 || done.Artifacts[0].Parts[0].(a2a.TextPart).Text != "hello Ada" {
			t.Fatalf("answered %+v", done)
		}
		calls, _ := up.snapshot()
		last2 := calls[len(calls)-2:]
		if last2[0].Text != "ask" || !last2[1].Resumed || last2[1].TaskID != last2[0].TaskID || last2[0].ContextID == task.ContextID {
			t.Fatalf("upstream calls %+v (caller context %s)", last2, task.ContextID)
		}
	})

	t.Run("cancel travels forward", func(t *testing.T) {
		r, err := c.SendMessage(ctx, &a2a.MessageSendParams{
			Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: "sleep"}),
			Config:  &a2a.MessageSendConfig{Blocking: new(false)},
		})
		if err != nil {
			t.Fatal(err)
		}
		local := r.(*a2a.Task).ID
		decide(t, n, approvalOf(t, n, app.KindDelegation).ID, true)
		var upID a2a.TaskID
		select {
		case upID = <-up.started:
		case <-time.After(30 * time.Second):
			t.Fatal("the upstream did not start")
		}
		got, err := c.CancelTask(ctx, &a2a.TaskIDParams{ID: local})
		if err != nil || got.Status.State != a2a.TaskStateCanceled {
			t.Fatalf("cancel: %v %+v", err, got)
		}
		select {
		case id := <-up.stopped:
			if id != upID {
				t.Fatalf("upstream stopped %s, want %s", id, upID)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the upstream's work did not stop")
		}
		if _, canceled := up.snapshot(); len(canceled) != 1 || canceled[0] != upID {
			t.Fatalf("upstream cancels %v", canceled)
		}
	})

	t.Run("denied never reaches the upstream", func(t *testing.T) {
		before, _ := up.snapshot()
		res := make(chan a2a.TaskState, 1)
		go func() {
			r, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: "echo private"})})
			if err != nil {
				res <- ""
				return
			}
			res <- r.(*a2a.Task).Status.State
		}()
		decide(t, n, approvalOf(t, n, app.KindDelegation).ID, false)
		if st := <-res; st != a2a.TaskStateRejected {
			t.Fatalf("denied task ended %q", st)
		}
		if after, _ := up.snapshot(); len(after) != len(before) {
			t.Fatalf("the upstream got a denied task: %+v", after[len(before):])
		}
	})
}

func TestExternalAgentFromCLI(t *testing.T) {
	up := startA2asrv(t, "ext-token-99")
	n := apptest.StartNode(t, apptest.Options{Name: "solo"})

	if r := n.CLI("agents", "add", "http://192.168.200.7:8000"); r.Code != 1 || !strings.Contains(r.Stderr, "in clear") {
		t.Fatalf("LAN http agent: exit %d %s", r.Code, r.Stderr)
	}
	r := cliWithStdin(t, n, "ext-token-99\n", "agents", "add", up.URL, "--token-stdin", "--json")
	if r.Code != 0 {
		t.Fatalf("agents add: %d %s", r.Code, r.Stderr)
	}
	var ag delegate.Agent
	if err := json.Unmarshal([]byte(r.Stdout), &ag); err != nil || ag.ID != "local-helper" || ag.Status != delegate.AgentReady || !ag.HasToken {
		t.Fatalf("added %+v %v", ag, err)
	}
	path := filepath.Join(n.StateDir, "agents.json")
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("agents.json: %v %v", st, err)
	}
	if b, _ := os.ReadFile(path); strings.Contains(string(b), "ext-token-99") {
		t.Fatal("the token is in agents.json")
	}
	if r := mustCLI(t, n, "agents"); !strings.Contains(r.Stdout, "local-helper") || !strings.Contains(r.Stdout, "ready") {
		t.Fatalf("agents list:\n%s", r.Stdout)
	}

	for _, tc := range []struct {
		text, out string
		code      int
	}{
		{"echo from the mesh", "from the mesh", 0},
		{"reject", "not today", cli.ExitTaskRejected},
		{"explode", "unknown command explode", cli.ExitTaskFailed},
	} {
		r := n.CLI("delegate", "Local Helper", tc.text)
		if r.Code != tc.code || !strings.Contains(r.Stdout+r.Stderr, tc.out) {
			t.Fatalf("delegate %q: exit %d (want %d)\nstdout:\n%s\nstderr:\n%s", tc.text, r.Code, tc.code, r.Stdout, r.Stderr)
		}
	}
	// --json prints the events as NDJSON; the last one ends.
	r = n.CLI("delegate", "local-helper", "echo json", "--json", "--stream=false")
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	var last delegate.OutboundEvent
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || r.Code != 0 || !last.End || last.Task.State != a2a.TaskStateCompleted || last.Task.Streaming {
		t.Fatalf("--json: exit %d %v\n%s", r.Code, err, r.Stdout)
	}

	mustCLI(t, n, "agents", "disable", "local-helper")
	if r := n.CLI("delegate", "local-helper", "echo x"); r.Code != 1 || !strings.Contains(r.Stderr, "disabled") {
		t.Fatalf("disabled: exit %d %s", r.Code, r.Stderr)
	}
	mustCLI(t, n, "agents", "rm", "local-helper")
	if r := n.CLI("delegate", "local-helper", "echo x"); r.Code != 1 || !strings.Contains(r.Stderr, "no agent") {
		t.Fatalf("removed: exit %d %s", r.Code, r.Stderr)
	}
	if calls, _ := up.snapshot(); len(calls) != 4 {
		t.Fatalf("upstream calls %+v", calls)
	}
}
