package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	a2av1 "github.com/a2aproject/a2a-go/v2/a2a"
	a2aclientv1 "github.com/a2aproject/a2a-go/v2/a2aclient"
	agentcardv1 "github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"

	"meshtray/keychain"
	"meshtray/pairing"
)

// bearerV1 is an a2a-go v2 CallInterceptor adding the grant token and,
// when version is set, replacing the A2A-Version the client sends.
type bearerV1 struct {
	a2aclientv1.PassthroughInterceptor
	token, version string
}

func (b bearerV1) Before(ctx context.Context, req *a2aclientv1.Request) (context.Context, any, error) {
	req.ServiceParams.Append("Authorization", "Bearer "+b.token)
	if b.version != "" {
		req.ServiceParams[a2av1.SvcParamVersion] = []string{b.version}
	}
	return ctx, nil, nil
}

// versionLog records the A2A-Version header of every request a client
// sends (a RoundTripper in front of the env's transport).
type versionLog struct {
	next http.RoundTripper
	mu   sync.Mutex
	seen []string
}

func (v *versionLog) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost {
		v.mu.Lock()
		v.seen = append(v.seen, r.Header.Get(VersionHeader))
		v.mu.Unlock()
	}
	return v.next.RoundTrip(r)
}

// clientV1 resolves the card with a2a-go v2's resolver and builds its
// client from it (the client picks the newest interface it speaks).
func clientV1(t *testing.T, base string, hc *http.Client, token, version string) (*a2aclientv1.Client, *a2av1.AgentCard) {
	t.Helper()
	ctx := context.Background()
	card, err := agentcardv1.NewResolver(hc).Resolve(ctx, base)
	if err != nil {
		t.Fatalf("resolve card (v2): %v", err)
	}
	c, err := a2aclientv1.NewFromCard(ctx, card,
		a2aclientv1.WithJSONRPCTransport(hc),
		a2aclientv1.WithCallInterceptors(bearerV1{token: token, version: version}))
	if err != nil {
		t.Fatalf("NewFromCard (v2): %v", err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c, card
}

func (e *testEnv) clientV1(t *testing.T, token string) *a2aclientv1.Client {
	t.Helper()
	c, _ := clientV1(t, e.hs.URL, e.httpClient(), token, "")
	return c
}

func textV1(m *a2av1.Message) string {
	if m == nil {
		return ""
	}
	var b strings.Builder
	for _, p := range m.Parts {
		b.WriteString(p.Text())
	}
	return b.String()
}

func sendV1(t *testing.T, c *a2aclientv1.Client, msg *a2av1.Message) *a2av1.Task {
	t.Helper()
	res, err := c.SendMessage(context.Background(), &a2av1.SendMessageRequest{Message: msg})
	if err != nil {
		t.Fatalf("SendMessage (1.0): %v", err)
	}
	task, ok := res.(*a2av1.Task)
	if !ok {
		t.Fatalf("SendMessage (1.0) returned %T, want a Task", res)
	}
	return task
}

func userV1(s string) *a2av1.Message {
	return a2av1.NewMessage(a2av1.MessageRoleUser, a2av1.NewTextPart(s))
}

// TestV1ClientMethods drives the A2A 1.0 method set with a2a-go v2.3.1's
// own client against the server: card resolution (it picks 1.0 from the
// union card), send, stream order, get with historyLength, the
// input-required round trip, list, another grant's task, the push and
// extended-card refusals, and a task made over 0.3 read over 1.0.
func TestV1ClientMethods(t *testing.T) {
	t.Parallel()
	env := newEnv(t, Options{})
	log := &versionLog{next: env.tr}
	hc := &http.Client{Transport: log}
	c, card := clientV1(t, env.hs.URL, hc, tokA, "")
	ctx := context.Background()

	// The union card, as a 1.0 client reads it.
	var versions []string
	for _, i := range card.SupportedInterfaces {
		if i.URL != env.hs.URL+RPCPath || i.ProtocolBinding != a2av1.TransportProtocolJSONRPC {
			t.Errorf("interface %+v", i)
		}
		versions = append(versions, string(i.ProtocolVersion))
	}
	if !slices.Equal(versions, []string{"1.0", "0.3"}) {
		t.Fatalf("supportedInterfaces versions %v", versions)
	}
	sch, ok := card.SecuritySchemes[SecuritySchemeName].(a2av1.HTTPAuthSecurityScheme)
	if !ok || sch.Scheme != "bearer" || len(card.SecurityRequirements) != 1 || card.SecurityRequirements[0][SecuritySchemeName] == nil {
		t.Fatalf("security %+v %+v", card.SecuritySchemes, card.SecurityRequirements)
	}
	if !card.Capabilities.Streaming || card.Capabilities.PushNotifications || card.Capabilities.ExtendedAgentCard {
		t.Fatalf("capabilities %+v", card.Capabilities)
	}

	// Send: a Task in 1.0 form.
	done := sendV1(t, c, userV1("echo hi"))
	if done.Status.State != a2av1.TaskStateCompleted || textV1(done.Status.Message) != "done" ||
		len(done.Artifacts) != 1 || done.Artifacts[0].Parts[0].Text() != "hi" ||
		len(done.History) != 1 || done.History[0].Role != a2av1.MessageRoleUser {
		t.Fatalf("sent task %+v", done)
	}
	log.mu.Lock()
	sent := slices.Clone(log.seen)
	log.mu.Unlock()
	if len(sent) == 0 || sent[0] != "1.0" {
		t.Fatalf("the v2 client sent A2A-Version %q", sent)
	}

	// Stream: the Task first, then events in generation order; the stream
	// ends after the terminal status.
	var kinds []string
	var last *a2av1.TaskStatusUpdateEvent
	for ev, err := range c.SendStreamingMessage(ctx, &a2av1.SendMessageRequest{Message: userV1("chunks 3")}) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		switch v := ev.(type) {
		case *a2av1.Task:
			kinds = append(kinds, "task:"+string(v.Status.State))
		case *a2av1.TaskStatusUpdateEvent:
			kinds = append(kinds, "status:"+string(v.Status.State))
			last = v
		case *a2av1.TaskArtifactUpdateEvent:
			kinds = append(kinds, "artifact:"+v.Artifact.Parts[0].Text())
		default:
			t.Fatalf("event %T", ev)
		}
	}
	want := []string{"task:TASK_STATE_SUBMITTED", "status:TASK_STATE_WORKING", "artifact:0", "artifact:1", "artifact:2", "status:TASK_STATE_COMPLETED"}
	if !slices.Equal(kinds, want) || last == nil {
		t.Fatalf("stream events %v, want %v", kinds, want)
	}

	// The input-required round trip, then get with historyLength.
	asking := sendV1(t, c, userV1("ask"))
	if asking.Status.State != a2av1.TaskStateInputRequired || textV1(asking.Status.Message) != "what?" {
		t.Fatalf("ask: %+v", asking.Status)
	}
	answer := a2av1.NewMessageForTask(a2av1.MessageRoleUser, asking, a2av1.NewTextPart("bob"))
	answered := sendV1(t, c, answer)
	if answered.ID != asking.ID || answered.Status.State != a2av1.TaskStateCompleted || answered.Artifacts[0].Parts[0].Text() != "bob" {
		t.Fatalf("answered: %+v", answered)
	}
	for _, tc := range []struct {
		hl   *int
		want []string
	}{
		{nil, []string{"ask", "what?", "bob"}},
		{new(1), []string{"bob"}},
		{new(0), nil},
	} {
		got, err := c.GetTask(ctx, &a2av1.GetTaskRequest{ID: asking.ID, HistoryLength: tc.hl})
		if err != nil {
			t.Fatal(err)
		}
		var texts []string
		for _, m := range got.History {
			texts = append(texts, textV1(m))
		}
		if !slices.Equal(texts, tc.want) {
			t.Errorf("historyLength %v: %q, want %q", tc.hl, texts, tc.want)
		}
	}
	if _, err := c.GetTask(ctx, &a2av1.GetTaskRequest{ID: asking.ID, HistoryLength: new(-1)}); !errors.Is(err, a2av1.ErrInvalidParams) {
		t.Errorf("historyLength -1: %v", err)
	}

	// A task made over 0.3 by the same grant reads over 1.0.
	old := sendTask(t, ctx, env.client(t, tokA), userMsg("echo old"))
	got, err := c.GetTask(ctx, &a2av1.GetTaskRequest{ID: a2av1.TaskID(old.ID)})
	if err != nil || got.Status.State != a2av1.TaskStateCompleted || got.Artifacts[0].Parts[0].Text() != "old" || got.ContextID != old.ContextID {
		t.Fatalf("0.3 task over 1.0: %v %+v", err, got)
	}

	// Another grant's task is not found, on every method.
	other := env.clientV1(t, tokB)
	if _, err := other.GetTask(ctx, &a2av1.GetTaskRequest{ID: done.ID}); !errors.Is(err, a2av1.ErrTaskNotFound) {
		t.Errorf("GetTask of another grant's task: %v", err)
	}
	if _, err := other.CancelTask(ctx, &a2av1.CancelTaskRequest{ID: done.ID}); !errors.Is(err, a2av1.ErrTaskNotFound) {
		t.Errorf("CancelTask of another grant's task: %v", err)
	}
	if err := firstStreamErr(t, "SubscribeToTask of another grant's task: %v", other.SubscribeToTask(ctx, &a2av1.SubscribeToTaskRequest{ID: done.ID})); !errors.Is(err, a2av1.ErrTaskNotFound) {
		t.Errorf("SubscribeToTask of another grant's task: %v", err)
	}
	if _, err := other.SendMessage(ctx, &a2av1.SendMessageRequest{Message: a2av1.NewMessageForTask(a2av1.MessageRoleUser, asking, a2av1.NewTextPart("x"))}); !errors.Is(err, a2av1.ErrTaskNotFound) {
		t.Errorf("SendMessage to another grant's task: %v", err)
	}

	// The methods meshtray does not offer say so in their own codes.
	if _, err := c.GetExtendedAgentCard(ctx, &a2av1.GetExtendedAgentCardRequest{}); !errors.Is(err, a2av1.ErrExtendedCardNotConfigured) {
		t.Errorf("GetExtendedAgentCard: %v", err)
	}
	if _, err := c.ListTaskPushConfigs(ctx, &a2av1.ListTaskPushConfigRequest{TaskID: done.ID}); !errors.Is(err, a2av1.ErrPushNotificationNotSupported) {
		t.Errorf("ListTaskPushConfigs: %v", err)
	}
	// A finished task has nothing to subscribe to (1.0: UnsupportedOperation).
	if err := firstStreamErr(t, "SubscribeToTask of a completed task: %v", c.SubscribeToTask(ctx, &a2av1.SubscribeToTaskRequest{ID: done.ID})); !errors.Is(err, a2av1.ErrUnsupportedOperation) {
		t.Errorf("SubscribeToTask of a completed task: %v", err)
	}
}

// TestV1ListTasks: only the caller's own tasks, newest first, filters by
// contextId and status, cursor paging through all of them, bounded page
// size.
func TestV1ListTasks(t *testing.T) {
	t.Parallel()
	env := newEnv(t, Options{})
	c := env.clientV1(t, tokA)
	ctx := context.Background()

	var ids []a2av1.TaskID // newest first
	for i := range 5 {
		ids = slices.Insert(ids, 0, sendV1(t, c, userV1(fmt.Sprintf("echo %d", i))).ID)
	}
	asking := sendV1(t, c, userV1("ask"))
	ids = slices.Insert(ids, 0, asking.ID)
	theirs := sendV1(t, env.clientV1(t, tokB), userV1("echo b"))

	// Pages of 4: all of mine, none of theirs, each once.
	var seen []a2av1.TaskID
	token := ""
	for page := 0; ; page++ {
		res, err := c.ListTasks(ctx, &a2av1.ListTasksRequest{PageSize: 4, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if res.TotalSize != len(ids) || res.PageSize != 4 {
			t.Fatalf("page %d: total %d size %d", page, res.TotalSize, res.PageSize)
		}
		for _, tk := range res.Tasks {
			seen = append(seen, tk.ID)
			if len(tk.Artifacts) != 0 {
				t.Errorf("artifacts listed without includeArtifacts: %s", tk.ID)
			}
		}
		if token = res.NextPageToken; token == "" {
			break
		}
		if page > 3 {
			t.Fatal("paging does not end")
		}
	}
	if !slices.Equal(seen, ids) {
		t.Fatalf("listed %v, want %v (newest first)", seen, ids)
	}
	if slices.Contains(seen, theirs.ID) {
		t.Fatal("another grant's task listed")
	}

	// Filters.
	res, err := c.ListTasks(ctx, &a2av1.ListTasksRequest{Status: a2av1.TaskStateInputRequired})
	if err != nil || len(res.Tasks) != 1 || res.Tasks[0].ID != asking.ID {
		t.Fatalf("status filter: %v %+v", err, res)
	}
	res, err = c.ListTasks(ctx, &a2av1.ListTasksRequest{ContextID: asking.ContextID, IncludeArtifacts: true, HistoryLength: new(0)})
	if err != nil || len(res.Tasks) != 1 || res.Tasks[0].ID != asking.ID || len(res.Tasks[0].History) != 0 {
		t.Fatalf("contextId filter: %v %+v", err, res)
	}
	res, err = c.ListTasks(ctx, &a2av1.ListTasksRequest{ContextID: theirs.ContextID})
	if err != nil || len(res.Tasks) != 0 {
		t.Fatalf("another grant's context: %v %+v", err, res)
	}
	res, err = c.ListTasks(ctx, &a2av1.ListTasksRequest{PageSize: 2, IncludeArtifacts: true, Status: a2av1.TaskStateCompleted})
	if err != nil || len(res.Tasks) != 2 || res.TotalSize != 5 || len(res.Tasks[0].Artifacts) != 1 {
		t.Fatalf("completed, with artifacts: %v %+v", err, res)
	}

	// Bounds and bad tokens.
	for _, req := range []*a2av1.ListTasksRequest{
		{PageSize: MaxListPageSize + 1},
		{PageSize: -1},
		{PageToken: "not-a-token"},
		{Status: "TASK_STATE_BOGUS"},
	} {
		if _, err := c.ListTasks(ctx, req); !errors.Is(err, a2av1.ErrInvalidParams) {
			t.Errorf("ListTasks %+v: %v", req, err)
		}
	}
}

// TestV1CancelRunningSystemRun: over 1.0, the owner approves a real
// `system.run sleep`, CancelTask ends it canceled and the process is gone.
func TestV1CancelRunningSystemRun(t *testing.T) {
	t.Parallel()
	reg := realRegistry(t, nil)
	ap := newManualApprover()
	env := newEnv(t, Options{Executor: NewNodeExecutor(reg, nil), Manifest: reg, Approver: ap})
	c := env.clientV1(t, tokA)
	ctx := context.Background()

	secs := "318.75"
	msg := a2av1.NewMessage(a2av1.MessageRoleUser, a2av1.NewDataPart(map[string]any{
		"capability": "system.run", "params": map[string]any{"argv": []any{"sleep", secs}, "timeout_s": 600},
	}))
	res, err := c.SendMessage(ctx, &a2av1.SendMessageRequest{Message: msg, Config: &a2av1.SendMessageConfig{ReturnImmediately: true}})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*a2av1.Task)
	if task.Status.State != a2av1.TaskStateSubmitted {
		t.Fatalf("returnImmediately: %+v", task.Status)
	}
	ap.next(t).answer <- Decision{Approved: true, ByOwner: true}
	var pid int
	waitFor(t, "the sleep process to start", func() bool {
		pid = findProcess(t, "sleep", secs)
		return pid != 0
	})
	got, err := c.CancelTask(ctx, &a2av1.CancelTaskRequest{ID: task.ID})
	if err != nil || got.Status.State != a2av1.TaskStateCanceled {
		t.Fatalf("CancelTask: %v %+v", err, got)
	}
	waitFor(t, fmt.Sprintf("pid %d to be gone", pid), func() bool {
		_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
		return os.IsNotExist(err)
	})
	if _, err := c.CancelTask(ctx, &a2av1.CancelTaskRequest{ID: task.ID}); !errors.Is(err, a2av1.ErrTaskNotCancelable) {
		t.Fatalf("second CancelTask: %v", err)
	}
}

// TestStreamingErrorsReachTheOfficialClients: every error of a streaming
// method is an SSE stream, so both a2a-go clients (v0.3.15 over 0.3, v2.3.1
// over 1.0) see the server's real error, not "the stream ended": unknown
// task, the live-task cap, bad params, an unknown version.
func TestStreamingErrorsReachTheOfficialClients(t *testing.T) {
	t.Parallel()
	x := &scriptExecutor{started: make(chan a2a.TaskID, 1)}
	env := newEnv(t, Options{Executor: x, MaxLiveTasksPerOwner: 1})
	ctx := context.Background()
	c03 := env.client(t, tokA)
	c10 := env.clientV1(t, tokA)

	// 0.3: resubscribe to an unknown task.
	if err := firstStreamErr(t, "0.3 resubscribe to an unknown task: %v", c03.ResubscribeToTask(ctx, &a2a.TaskIDParams{ID: "nope"})); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Errorf("0.3 resubscribe to an unknown task: %v", err)
	}
	// 1.0: subscribe to an unknown task; stream into an unknown task.
	if err := firstStreamErr(t, "1.0 subscribe to an unknown task: %v", c10.SubscribeToTask(ctx, &a2av1.SubscribeToTaskRequest{ID: "nope"})); !errors.Is(err, a2av1.ErrTaskNotFound) {
		t.Errorf("1.0 subscribe to an unknown task: %v", err)
	}
	into := userV1("x")
	into.TaskID = "nope"
	if err := firstStreamErr(t, "1.0 stream into an unknown task: %v", c10.SendStreamingMessage(ctx, &a2av1.SendMessageRequest{Message: into})); !errors.Is(err, a2av1.ErrTaskNotFound) {
		t.Errorf("1.0 stream into an unknown task: %v", err)
	}
	// 0.3: bad params on message/stream (an agent-role message).
	bad := a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: "x"})
	if err := firstStreamErr(t, "0.3 stream with bad params: %v", c03.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: bad})); !errors.Is(err, a2a.ErrInvalidParams) {
		t.Errorf("0.3 stream with bad params: %v", err)
	}

	// The live-task cap, in both versions: one task sleeps.
	if _, err := c03.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("sleep"), Config: &a2a.MessageSendConfig{Blocking: new(false)}}); err != nil {
		t.Fatal(err)
	}
	<-x.started
	if err := firstStreamErr(t, "0.3 stream at the live-task cap: %v", c03.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: userMsg("echo x")})); err == nil || !strings.Contains(err.Error(), "running tasks (the limit)") {
		t.Errorf("0.3 stream at the live-task cap: %v", err)
	}
	if err := firstStreamErr(t, "1.0 stream at the live-task cap: %v", c10.SendStreamingMessage(ctx, &a2av1.SendMessageRequest{Message: userV1("echo x")})); err == nil || !strings.Contains(err.Error(), "running tasks (the limit)") {
		t.Errorf("1.0 stream at the live-task cap: %v", err)
	}

	// An unknown version: -32009, on a plain and on a streaming method.
	bogus, _ := clientV1(t, env.hs.URL, env.httpClient(), tokA, "9.9")
	if _, err := bogus.SendMessage(ctx, &a2av1.SendMessageRequest{Message: userV1("echo x")}); !errors.Is(err, a2av1.ErrVersionNotSupported) || !strings.Contains(err.Error(), "1.0 and 0.3") {
		t.Errorf("SendMessage with A2A-Version 9.9: %v", err)
	}
	if err := firstStreamErr(t, "SendStreamingMessage with A2A-Version 9.9: %v", bogus.SendStreamingMessage(ctx, &a2av1.SendMessageRequest{Message: userV1("echo x")})); !errors.Is(err, a2av1.ErrVersionNotSupported) {
		t.Errorf("SendStreamingMessage with A2A-Version 9.9: %v", err)
	}
	// A 0.3 client that sends a version we do not speak reads the error
	// (its data is an object, as 0.3 clients decode it).
	old := env.clientWith(t, tokA, "2.0")
	if _, err := old.GetTask(ctx, &a2a.TaskQueryParams{ID: "nope"}); err == nil || !strings.Contains(err.Error(), `A2A version "2.0" is not supported`) {
		t.Errorf("0.3 client with A2A-Version 2.0: %v", err)
	}
	if err := firstStreamErr(t, "0.3 stream with A2A-Version 2.0: %v", old.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: userMsg("echo x")})); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Errorf("0.3 stream with A2A-Version 2.0: %v", err)
	}
	// 0.3 with its own version named explicitly is 0.3.
	if task := sendTask(t, ctx, env.clientWith(t, tokB, "0.3"), userMsg("echo y")); task.Status.State != a2a.TaskStateCompleted {
		t.Errorf("A2A-Version 0.3: %+v", task.Status)
	}
}

// firstStreamErr returns the error a stream's first item carries; an
// event instead, or a stream that ends before any item, fails the test (a
// plain JSON error body on a streaming method reads as the latter).
func firstStreamErr[E any](t *testing.T, what string, seq iter.Seq2[E, error]) error {
	t.Helper()
	what = strings.TrimSuffix(what, ": %v")
	for _, err := range seq {
		if err == nil {
			t.Fatalf("%s: an event, want an error", what)
		}
		return err
	}
	t.Fatalf("%s: the stream ended before any event", what)
	return nil
}

// versionBearer is an a2a-go v0.3 interceptor adding the token and an
// A2A-Version header.
type versionBearer struct {
	bearer
	version string
}

func (b versionBearer) Before(ctx context.Context, req *a2aclient.Request) (context.Context, error) {
	req.Meta.Append("Authorization", "Bearer "+b.token)
	req.Meta.Append(VersionHeader, b.version)
	return ctx, nil
}

// clientWith is env.client with an A2A-Version header on every request.
func (e *testEnv) clientWith(t *testing.T, token, version string) *a2aclient.Client {
	t.Helper()
	return e.clientIntercepted(t, versionBearer{bearer: bearer{token: token}, version: version})
}

// TestOfficialClientsSee401And403: behind the real pairing.Auth, an
// unknown token is 401 and a grant without scope agent is 403, as both
// a2a-go clients report them.
func TestOfficialClientsSee401And403(t *testing.T) {
	t.Parallel()
	grants, err := pairing.NewGrants(keychain.NewMemory(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { grants.Close() })
	_, agentTok, err := grants.Issue(pairing.IssueRequest{Name: "laptop", Scopes: pairing.Scopes{pairing.ScopeAgent}, Policy: pairing.PolicyAllow})
	if err != nil {
		t.Fatal(err)
	}
	_, nodeTok, err := grants.Issue(pairing.IssueRequest{Name: "sensor", Scopes: pairing.Scopes{pairing.ScopeNode}, Policy: pairing.PolicyAllow})
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(Options{Executor: &scriptExecutor{}, Approver: approveAll{}})
	srv.SetPublished(true)
	auth := &pairing.Auth{Grants: grants}
	mux := http.NewServeMux()
	mux.Handle("POST "+RPCPath, auth.Require(pairing.ScopeAgent, srv))
	mux.Handle("GET "+CardPath, srv.CardHandler())
	hs := httptest.NewServer(mux)
	tr := &http.Transport{}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		tr.CloseIdleConnections()
		hs.Close()
	})
	hc := &http.Client{Transport: tr}
	env := &testEnv{srv: srv, hs: hs, tr: tr}
	ctx := context.Background()

	for _, tc := range []struct {
		token, want string
	}{
		{agentTok, ""},
		{"mt1_nope_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "401"},
		{nodeTok, "403"},
	} {
		c10, _ := clientV1(t, hs.URL, hc, tc.token, "")
		_, err10 := c10.SendMessage(ctx, &a2av1.SendMessageRequest{Message: userV1("echo x")})
		c03 := env.client(t, tc.token)
		_, err03 := c03.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("echo x")})
		for name, err := range map[string]error{"1.0": err10, "0.3": err03} {
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("%s with an agent grant: %v", name, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("%s: %v, want HTTP %s", name, err, tc.want)
			}
		}
	}
}

// rawV1 posts body with A2A-Version version and returns the Content-Type
// and body.
func rawV1(t *testing.T, env *testEnv, version, body string) (string, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", env.hs.URL+RPCPath, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tokA)
	req.Header.Set("Content-Type", "application/json")
	if version != "" {
		req.Header.Set(VersionHeader, version)
	}
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
	return resp.Header.Get("Content-Type"), out
}

// TestV1WireShapes reads the 1.0 answers as bytes: no "kind", TASK_STATE_*
// and ROLE_* values, SendMessage's {"task": ...}, error.data an array
// holding a google.rpc.ErrorInfo (A2A 1.0 §9.5), -32009 naming the
// supported versions, and the version from the query parameter.
func TestV1WireShapes(t *testing.T) {
	t.Parallel()
	env := newEnv(t, Options{})
	const send = `{"jsonrpc":"2.0","id":"s","method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"echo hi"}]}}}`
	ct, raw := rawV1(t, env, "1.0", send)
	var res struct {
		Result struct {
			Task map[string]any `json:"task"`
		} `json:"result"`
	}
	if err := json.Unmarshal(raw, &res); err != nil || ct != "application/json" || res.Result.Task == nil {
		t.Fatalf("SendMessage: %s %s (%v)", ct, raw, err)
	}
	if strings.Contains(string(raw), `"kind"`) || !strings.Contains(string(raw), `"state":"TASK_STATE_COMPLETED"`) ||
		!strings.Contains(string(raw), `"role":"ROLE_USER"`) || !strings.Contains(string(raw), `"role":"ROLE_AGENT"`) {
		t.Fatalf("1.0 shapes: %s", raw)
	}

	type errInfo struct {
		Error struct {
			Code    int              `json:"code"`
			Message string           `json:"message"`
			Data    []map[string]any `json:"data"`
		} `json:"error"`
	}
	check := func(name string, raw []byte, code int, reason, domain string) errInfo {
		t.Helper()
		var e errInfo
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatalf("%s: %s (%v)", name, raw, err)
		}
		if e.Error.Code != code || len(e.Error.Data) == 0 ||
			e.Error.Data[0]["@type"] != "type.googleapis.com/google.rpc.ErrorInfo" ||
			e.Error.Data[0]["reason"] != reason || e.Error.Data[0]["domain"] != domain {
			t.Fatalf("%s: %s", name, raw)
		}
		return e
	}
	_, raw = rawV1(t, env, "1.0", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"nope"}}`)
	check("GetTask unknown", raw, CodeTaskNotFound, "TASK_NOT_FOUND", "a2a-protocol.org")
	_, raw = rawV1(t, env, "1.0", `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"nope"}}`)
	check("0.3 method over 1.0", raw, CodeMethodNotFound, "METHOD_NOT_FOUND", "a2a-protocol.org")

	ct, raw = rawV1(t, env, "3.1", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"nope"}}`)
	e := check("unknown version", raw, CodeVersionNotSupported, "VERSION_NOT_SUPPORTED", "a2a-protocol.org")
	if ct != "application/json" || !strings.Contains(e.Error.Message, "1.0 and 0.3") || !strings.Contains(string(raw), `"supportedVersions":["1.0","0.3"]`) {
		t.Fatalf("-32009: %s", raw)
	}
	ct, raw = rawV1(t, env, "3.1", `{"jsonrpc":"2.0","id":1,"method":"SendStreamingMessage","params":{}}`)
	if evs := sseEvents(t, raw); ct != "text/event-stream" || len(evs) != 1 {
		t.Fatalf("-32009 on a streaming method: %s %s", ct, raw)
	} else {
		check("unknown version, stream", evs[0], CodeVersionNotSupported, "VERSION_NOT_SUPPORTED", "a2a-protocol.org")
	}
	// Over 0.3 the same error keeps its data an object.
	_, raw = rawV1(t, env, "3.1", `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"nope"}}`)
	if !strings.Contains(string(raw), `"data":{"supportedVersions":["1.0","0.3"]}`) {
		t.Fatalf("-32009 for a 0.3 method: %s", raw)
	}
	// meshtray's own codes carry its own domain.
	ct, raw = rawV1(t, env, "1.0", `{"jsonrpc":"2.0","id":1,"method":"SubscribeToTask","params":{}}`)
	if evs := sseEvents(t, raw); ct != "text/event-stream" || len(evs) != 1 {
		t.Fatalf("SubscribeToTask without id: %s %s", ct, raw)
	} else {
		check("SubscribeToTask without id", evs[0], CodeInvalidParams, "INVALID_PARAMS", "a2a-protocol.org")
	}

	// A body too broken to name its method, from a client that asked for a
	// stream (Accept: text/event-stream), is answered as a stream too.
	{
		req, _ := http.NewRequest("POST", env.hs.URL+RPCPath, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":`))
		req.Header.Set("Authorization", "Bearer "+tokA)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := env.httpClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if evs := sseEvents(t, raw); resp.Header.Get("Content-Type") != "text/event-stream" || len(evs) != 1 || errorCode(t, evs[0]) != CodeParseError {
			t.Fatalf("parse error for a stream: %s", raw)
		}
	}

	// The query parameter names the version too; a patch level is fine.
	req, _ := http.NewRequest("POST", env.hs.URL+RPCPath+"?A2A-Version=1.0.1", strings.NewReader(send))
	req.Header.Set("Authorization", "Bearer "+tokA)
	resp, err := env.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(raw), `"result":{"task":`) {
		t.Fatalf("A2A-Version as a query parameter: %s", raw)
	}

	// Streaming over 1.0: StreamResponse events, the Task first.
	ct, raw = rawV1(t, env, "1.0", strings.Replace(send, "SendMessage", "SendStreamingMessage", 1))
	evs := sseEvents(t, raw)
	if ct != "text/event-stream" || len(evs) < 3 || !strings.Contains(string(evs[0]), `"result":{"task":`) ||
		!strings.Contains(string(evs[len(evs)-1]), `"result":{"statusUpdate":`) || strings.Contains(string(raw), `"final"`) {
		t.Fatalf("1.0 stream: %s", raw)
	}
}

// TestHugeIDOnStream: a 1 MB id on message/stream is one -32600 event with
// a null id, not the id echoed in every event.
func TestHugeIDOnStream(t *testing.T) {
	t.Parallel()
	env := newEnv(t, Options{})
	id := strings.Repeat("x", 1_000_000)
	body := `{"jsonrpc":"2.0","id":"` + id + `","method":"message/stream","params":` + sendParams + `}`
	raw := rawHTTP(t, env, tokA, body)
	if len(raw) > 1024 {
		t.Fatalf("answer of %d bytes to a 1 MB id", len(raw))
	}
	evs := sseEvents(t, raw)
	if len(evs) != 1 || errorCode(t, evs[0]) != CodeInvalidRequest || !strings.Contains(string(evs[0]), `"id":null`) {
		t.Fatalf("answer %s", raw)
	}
	if env.srv.Status().LiveTasks != 0 || len(env.srv.Tasks()) != 0 {
		t.Fatal("a task was made for a refused request")
	}
}

// TestParkedTasksNeverLockAGrant: 100 tasks left waiting for their caller
// on one grant, then device.info still completes; the oldest waiting ones
// ended canceled saying why, and at most MaxParkedPerOwner still wait.
func TestParkedTasksNeverLockAGrant(t *testing.T) {
	t.Parallel()
	reg := realRegistry(t, nil)
	env := newEnv(t, Options{Executor: NewNodeExecutor(reg, nil), Manifest: reg})
	c := env.clientV1(t, tokA)
	var first *a2av1.Task
	for i := range 100 {
		task := sendV1(t, c, userV1("hello there"))
		if task.Status.State != a2av1.TaskStateInputRequired {
			t.Fatalf("task %d: %+v", i, task.Status)
		}
		if first == nil {
			first = task
		}
	}
	info := sendV1(t, c, userV1("please run device.info"))
	if info.Status.State != a2av1.TaskStateCompleted {
		t.Fatalf("device.info after 100 abandoned tasks: %s %q", info.Status.State, textV1(info.Status.Message))
	}
	got, err := c.GetTask(context.Background(), &a2av1.GetTaskRequest{ID: first.ID})
	if err != nil || got.Status.State != a2av1.TaskStateCanceled || !strings.Contains(textV1(got.Status.Message), "more than 16 tasks of this caller were waiting") {
		t.Fatalf("the oldest waiting task: %v %+v", err, got)
	}
	res, err := c.ListTasks(context.Background(), &a2av1.ListTasksRequest{Status: a2av1.TaskStateInputRequired})
	if err != nil || res.TotalSize != DefaultMaxParkedPerOwner {
		t.Fatalf("waiting tasks: %v %+v", err, res)
	}
	if n := env.srv.Status().LiveTasks; n != DefaultMaxParkedPerOwner {
		t.Fatalf("live tasks %d", n)
	}
	// The other grant is untouched by this one's parking.
	if task := sendV1(t, env.clientV1(t, tokB), userV1("hello there")); task.Status.State != a2av1.TaskStateInputRequired {
		t.Fatalf("other grant: %+v", task.Status)
	}
}
