package a2a

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/nodes"
)

// fakeRegistry is a unit-test double of nodes.Registry (the real registry
// is driven in nodeexec_real_test.go). Check enforces "required" only.
type fakeRegistry struct {
	discard bool // keep no calls (benchmark memory figures)
	mu      sync.Mutex
	calls   []nodes.Call
}

var fakeManifest = nodes.Manifest{Capabilities: []nodes.Capability{
	{Name: "device.info", Available: true, Effects: nodes.EffectRead, Params: json.RawMessage(`{"type":"object","properties":{}}`)},
	{Name: "system.notify", Available: true, Effects: nodes.EffectWrite, Params: json.RawMessage(`{"type":"object","properties":{"title":{"type":"string"},"body":{"type":"string"}},"required":["title"]}`)},
	{Name: "system.run", Available: true, Effects: nodes.EffectExec, Params: json.RawMessage(`{"type":"object","properties":{"argv":{"type":"array","items":{"type":"string"}}},"required":["argv"]}`)},
	{Name: "clipboard.read", Available: false, Reason: "no display", Params: json.RawMessage(`{"type":"object"}`)},
}}

func (f *fakeRegistry) Manifest() nodes.Manifest { return fakeManifest }

func (f *fakeRegistry) Check(name string, params json.RawMessage) error {
	c, ok := findCapability(fakeManifest, name)
	if !ok {
		return nodes.ErrUnknownCapability
	}
	var sc struct{ Required []string }
	_ = json.Unmarshal(c.Params, &sc)
	var p map[string]any
	if err := json.Unmarshal(params, &p); err != nil {
		return &nodes.ParamError{Capability: name, Invalid: []string{"params: not an object"}}
	}
	pe := &nodes.ParamError{Capability: name}
	for _, r := range sc.Required {
		if _, ok := p[r]; !ok {
			pe.Missing = append(pe.Missing, r)
		}
	}
	if t, ok := p["title"]; ok {
		if _, isStr := t.(string); !isStr {
			pe.Invalid = append(pe.Invalid, "title: want string")
		}
	}
	if len(pe.Missing)+len(pe.Invalid) > 0 {
		return pe
	}
	return nil
}

func (f *fakeRegistry) Invoke(ctx context.Context, c nodes.Call) (nodes.Result, error) {
	if !f.discard {
		f.mu.Lock()
		f.calls = append(f.calls, c)
		f.mu.Unlock()
	}
	var p map[string]any
	_ = json.Unmarshal(c.Params, &p)
	switch c.Capability {
	case "device.info":
		return nodes.Result{Data: json.RawMessage(`{"hostname":"testbox","cpus":2}`), Summary: "testbox: 2 CPUs"}, nil
	case "system.notify":
		if p["title"] == "deny" {
			return nodes.Result{}, fmt.Errorf("%w: policy deny for system.notify", nodes.ErrDenied)
		}
		return nodes.Result{Data: json.RawMessage(`{"delivered":false,"reason":"headless"}`), Summary: "not delivered: headless"}, nil
	case "system.run":
		<-ctx.Done()
		return nodes.Result{}, ctx.Err()
	}
	return nodes.Result{}, nodes.ErrUnknownCapability
}

func (f *fakeRegistry) lastCall() nodes.Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[len(f.calls)-1]
}

func dataMsg(d map[string]any) *a2a.Message {
	return a2a.NewMessage(a2a.MessageRoleUser, a2a.DataPart{Data: d})
}

// answerTo builds the next message of task.
func answerTo(task *a2a.Task, parts ...a2a.Part) *a2a.Message {
	m := a2a.NewMessage(a2a.MessageRoleUser, parts...)
	m.TaskID, m.ContextID = task.ID, task.ContextID
	return m
}

func TestNodeExecutorConversations(t *testing.T) {
	t.Parallel()
	reg := &fakeRegistry{}
	env := newEnv(t, Options{Executor: NewNodeExecutor(reg, nil)})
	c := env.client(t, tokA)
	ctx := context.Background()

	type turn struct {
		msg       func(prev *a2a.Task) *a2a.Message
		state     a2a.TaskState
		statusHas string
	}
	first := func(m *a2a.Message) func(*a2a.Task) *a2a.Message { return func(*a2a.Task) *a2a.Message { return m } }
	next := func(parts ...a2a.Part) func(*a2a.Task) *a2a.Message {
		return func(p *a2a.Task) *a2a.Message { return answerTo(p, parts...) }
	}
	tests := []struct {
		name     string
		turns    []turn
		wantCall string // capability + params JSON of the last call
	}{
		{"text names the capability", []turn{
			{first(userMsg("please run device.info.")), a2a.TaskStateCompleted, "testbox: 2 CPUs"},
		}, `device.info {}`},
		{"data part", []turn{
			{first(dataMsg(map[string]any{"capability": "system.notify", "params": map[string]any{"title": "hi", "body": "there"}})), a2a.TaskStateCompleted, "not delivered"},
		}, `system.notify {"body":"there","title":"hi"}`},
		{"no capability, then text naming one", []turn{
			{first(userMsg("hello there")), a2a.TaskStateInputRequired, "device.info, system.notify, system.run"},
			{next(a2a.TextPart{Text: "device.info"}), a2a.TaskStateCompleted, "testbox"},
		}, `device.info {}`},
		{"missing string param answered by text", []turn{
			{first(userMsg("system.notify")), a2a.TaskStateInputRequired, "missing parameter(s) title"},
			{next(a2a.TextPart{Text: "  Dinner is ready  "}), a2a.TaskStateCompleted, "not delivered"},
		}, `system.notify {"title":"Dinner is ready"}`},
		{"missing param answered by a data part of params", []turn{
			{first(dataMsg(map[string]any{"capability": "system.notify", "params": map[string]any{"body": "b"}})), a2a.TaskStateInputRequired, "title"},
			{next(a2a.DataPart{Data: map[string]any{"title": "t"}}), a2a.TaskStateCompleted, ""},
		}, `system.notify {"body":"b","title":"t"}`},
		{"invalid param, fixed", []turn{
			{first(dataMsg(map[string]any{"capability": "system.notify", "params": map[string]any{"title": 5}})), a2a.TaskStateInputRequired, "invalid parameter(s) title"},
			{next(a2a.DataPart{Data: map[string]any{"params": map[string]any{"title": "five"}}}), a2a.TaskStateCompleted, ""},
		}, `system.notify {"title":"five"}`},
		{"array param cannot come from text", []turn{
			{first(userMsg("run system.run")), a2a.TaskStateInputRequired, "argv"},
			{next(a2a.TextPart{Text: "uname -a"}), a2a.TaskStateInputRequired, "argv"},
		}, ``},
		{"two capabilities named", []turn{
			{first(userMsg("device.info and system.notify")), a2a.TaskStateInputRequired, "more than one"},
			{next(a2a.DataPart{Data: map[string]any{"capability": "device.info"}}), a2a.TaskStateCompleted, ""},
		}, `device.info {}`},
		{"unknown capability", []turn{
			{first(dataMsg(map[string]any{"capability": "rm.rf"})), a2a.TaskStateInputRequired, `no capability "rm.rf"`},
		}, ``},
		{"unavailable capability", []turn{
			{first(userMsg("clipboard.read")), a2a.TaskStateFailed, "unavailable on this device: no display"},
		}, ``},
		{"denied call", []turn{
			{first(dataMsg(map[string]any{"capability": "system.notify", "params": map[string]any{"title": "deny"}})), a2a.TaskStateRejected, "rejected: system.notify: policy deny for system.notify"},
		}, `system.notify {"title":"deny"}`},
		{"longer names are not matches", []turn{
			{first(userMsg("what is my.device.info or device.infos?")), a2a.TaskStateInputRequired, "names no capability"},
		}, ``},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(reg.calls)
			var task *a2a.Task
			for i, tn := range tc.turns {
				task = sendTask(t, ctx, c, tn.msg(task))
				st := ""
				if task.Status.Message != nil {
					st = text(task.Status.Message)
				}
				if task.Status.State != tn.state || !strings.Contains(st, tn.statusHas) {
					t.Fatalf("turn %d: %s %q, want %s containing %q", i, task.Status.State, st, tn.state, tn.statusHas)
				}
			}
			reg.mu.Lock()
			n := len(reg.calls)
			reg.mu.Unlock()
			if tc.wantCall == "" {
				if n != before {
					t.Fatalf("a call was made: %+v", reg.lastCall())
				}
				return
			}
			lc := reg.lastCall()
			if got := lc.Capability + " " + string(lc.Params); got != tc.wantCall {
				t.Fatalf("call = %s, want %s", got, tc.wantCall)
			}
			if lc.Caller == nil || lc.Caller.Owner() != "grantA" {
				t.Fatalf("call's caller = %+v", lc.Caller)
			}
			if task.Status.State == a2a.TaskStateCompleted {
				// The result once as data, its summary once as the
				// status message.
				if len(task.Artifacts) != 1 || len(task.Artifacts[0].Parts) != 1 {
					t.Fatalf("artifacts = %+v", task.Artifacts)
				}
				if _, ok := task.Artifacts[0].Parts[0].(a2a.DataPart); !ok {
					t.Fatalf("the artifact part is %T, want the DataPart", task.Artifacts[0].Parts[0])
				}
				if text(task.Status.Message) == "" {
					t.Fatal("completed without the summary")
				}
			}
		})
	}
}

func TestNodeExecutorInputRequiredData(t *testing.T) {
	t.Parallel()
	env := newEnv(t, Options{Executor: NewNodeExecutor(&fakeRegistry{}, nil)})
	c := env.client(t, tokA)
	task := sendTask(t, context.Background(), c, userMsg("nothing here"))
	var list []any
	for _, p := range task.Status.Message.Parts {
		if d, ok := p.(a2a.DataPart); ok {
			list, _ = d.Data["capabilities"].([]any)
		}
	}
	var names []string
	for _, e := range list {
		names = append(names, e.(map[string]any)["name"].(string))
	}
	if !slices.Equal(names, []string{"device.info", "system.notify", "system.run"}) {
		t.Fatalf("listed capabilities %v", names)
	}

	task = sendTask(t, context.Background(), c, userMsg("system.notify"))
	var d map[string]any
	for _, p := range task.Status.Message.Parts {
		if dp, ok := p.(a2a.DataPart); ok {
			d = dp.Data
		}
	}
	if d["capability"] != "system.notify" || fmt.Sprint(d["missing"]) != "[title]" || d["params_schema"] == nil {
		t.Fatalf("param question data = %v", d)
	}
}

// TestNodeExecutorApprovedCall: the call the owner saw is marked approved;
// after params changed it is not.
func TestNodeExecutorApprovedCall(t *testing.T) {
	t.Parallel()
	reg := &fakeRegistry{}
	ap := newManualApprover()
	env := newEnv(t, Options{Executor: NewNodeExecutor(reg, nil), Approver: ap})
	c := env.client(t, tokA)
	ctx := context.Background()

	run := func(msg *a2a.Message, summary string, d Decision) *a2a.Task {
		t.Helper()
		resc := make(chan *a2a.Task, 1)
		go func() {
			res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: msg})
			if err != nil {
				t.Error(err)
			}
			task, _ := res.(*a2a.Task)
			resc <- task
		}()
		if summary != "" {
			pa := ap.next(t)
			if pa.Summary != summary {
				t.Errorf("approval summary %q, want %q", pa.Summary, summary)
			}
			pa.answer <- d
		}
		return <-resc
	}
	run(dataMsg(map[string]any{"capability": "system.notify", "params": map[string]any{"title": "hi"}}), `system.notify {"title":"hi"}`, Decision{Approved: true, ByOwner: true})
	if !reg.lastCall().Approved {
		t.Fatal("the call the owner approved was not marked approved")
	}
	run(userMsg("device.info"), "device.info", Decision{Approved: true}) // policy allow
	if reg.lastCall().Approved {
		t.Fatal("a policy-allowed delegation marked the call approved by the owner")
	}
	task := run(userMsg("system.notify please"), "system.notify", Decision{Approved: true, ByOwner: true})
	if task.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("state %s", task.Status.State)
	}
	run(answerTo(task, a2a.TextPart{Text: "hello"}), "", Decision{})
	if lc := reg.lastCall(); lc.Approved || string(lc.Params) != `{"title":"hello"}` {
		t.Fatalf("a call the owner never saw was marked approved: %+v", lc)
	}
}

func TestNodeExecutorSummarize(t *testing.T) {
	t.Parallel()
	x := NewNodeExecutor(&fakeRegistry{}, nil)
	tests := []struct {
		msg  *a2a.Message
		want string
	}{
		{userMsg("please run device.info"), "device.info"},
		{dataMsg(map[string]any{"capability": "system.notify", "params": map[string]any{"title": "t", "body": "b"}}), `system.notify {"body":"b","title":"t"}`},
		{userMsg("do something\nsecond line"), "do something …"},
		{userMsg("device.info or system.run"), "device.info or system.run"},
		{a2a.NewMessage(a2a.MessageRoleUser, a2a.FilePart{File: a2a.FileURI{URI: "file:///x"}}), "[file file:///x]"},
		{a2a.NewMessage(a2a.MessageRoleUser), "(no capability named)"},
		{a2a.NewMessage(a2a.MessageRoleUser, a2a.DataPart{Data: map[string]any{"capability": "device.info"}},
			a2a.FilePart{File: a2a.FileBytes{FileMeta: a2a.FileMeta{Name: "x.sh"}, Bytes: "eA=="}}), "device.info [file x.sh]"},
		// What the owner approves shows control and bidi characters.
		{dataMsg(map[string]any{"capability": "device.info\u202e\nsystem.run"}), `device.info\u202E\u000Asystem.run`},
		{dataMsg(map[string]any{"capability": "system.notify", "params": map[string]any{"title": "a\u2066b<c>&"}}), `system.notify {"title":"a\u2066b<c>&"}`},
		{userMsg("look \u202eexe.pdf\x1b[2J"), `look \u202Eexe.pdf\u001B[2J`},
		{a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: "summarize this"},
			a2a.FilePart{File: a2a.FileBytes{FileMeta: a2a.FileMeta{Name: "report\n\u202efdp.exe"}, Bytes: "eA=="}}),
			`summarize this [file report\u000A\u202Efdp.exe]`},
	}
	for _, tc := range tests {
		if got := x.Summarize(nil, tc.msg); got != tc.want {
			t.Errorf("Summarize = %q, want %q", got, tc.want)
		}
	}
}

func TestNodeExecutorCancelStopsInvoke(t *testing.T) {
	t.Parallel()
	reg := &fakeRegistry{}
	env := newEnv(t, Options{Executor: NewNodeExecutor(reg, nil)})
	c := env.client(t, tokA)
	ctx := context.Background()
	res, err := c.SendMessage(ctx, &a2a.MessageSendParams{
		Message: dataMsg(map[string]any{"capability": "system.run", "params": map[string]any{"argv": []any{"sleep", "30"}}}),
		Config:  &a2a.MessageSendConfig{Blocking: new(false)},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := res.(*a2a.Task).ID
	waitFor(t, "the invoke to start", func() bool {
		reg.mu.Lock()
		defer reg.mu.Unlock()
		return len(reg.calls) == 1
	})
	got, err := c.CancelTask(ctx, &a2a.TaskIDParams{ID: id})
	if err != nil || got.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("cancel: %v %+v", err, got)
	}
}
