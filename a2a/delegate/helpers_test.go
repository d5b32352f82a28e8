package delegate

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"
	"go.uber.org/goleak"

	agent "meshtray/a2a"
	"meshtray/a2a/a2atest"
	"meshtray/nodes"
)

// The delegating half is tested against real servers: meshtray's own
// (meshtray/a2a behind a stand-in for pairing's auth middleware), a2a-go's
// a2asrv (upstream_test.go), and paired peers over pinned TLS.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testAuth is the stand-in for pairing's auth middleware (a2atest.Auth).
type testAuth = a2atest.Auth

// testEnv is a meshtray Server on a real loopback listener behind testAuth.
type testEnv struct {
	srv  *agent.Server
	hs   *httptest.Server
	auth *testAuth
	tr   *http.Transport
}

// Tokens every env knows: two grants (owners) of different peers.
const (
	tokA = "tokA-0123456789"
	tokB = "tokB-0123456789"
)

func newEnv(t *testing.T, opts agent.Options) *testEnv {
	t.Helper()
	if opts.DeviceName == "" {
		opts.DeviceName = "testbox"
	}
	if opts.Approver == nil {
		opts.Approver = approveAll{}
	}
	if opts.Executor == nil {
		opts.Executor = &scriptExecutor{}
	}
	srv := agent.NewServer(opts)
	srv.SetPublished(true)
	auth := &testAuth{}
	auth.Add(tokA, "grantA", "laptop")
	auth.Add(tokB, "grantB", "phone")
	mux := http.NewServeMux()
	mux.Handle("POST "+agent.RPCPath, auth.Wrap(srv))
	mux.Handle("GET "+agent.CardPath, srv.CardHandler())
	hs := httptest.NewServer(mux)
	env := &testEnv{srv: srv, hs: hs, auth: auth, tr: &http.Transport{}}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		env.tr.CloseIdleConnections()
		hs.Close()
	})
	return env
}

// httpClient has no timeout (a2a-go's default 3 min would cut streams).
func (e *testEnv) httpClient() *http.Client { return &http.Client{Transport: e.tr} }

// bearer is a CallInterceptor adding the grant token.
type bearer struct {
	a2aclient.PassthroughInterceptor
	token string
}

func (b bearer) Before(ctx context.Context, req *a2aclient.Request) (context.Context, error) {
	req.Meta.Append("Authorization", "Bearer "+b.token)
	return ctx, nil
}

// client resolves the card and builds the official a2a-go client from it.
func (e *testEnv) client(t *testing.T, token string) *a2aclient.Client {
	t.Helper()
	ctx := context.Background()
	card, err := agentcard.NewResolver(e.httpClient()).Resolve(ctx, e.hs.URL)
	if err != nil {
		t.Fatalf("resolve card: %v", err)
	}
	c, err := a2aclient.NewFromCard(ctx, card,
		a2aclient.WithJSONRPCTransport(e.httpClient()),
		a2aclient.WithConfig(a2aclient.Config{PreferredTransports: []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC}}),
		a2aclient.WithInterceptors(bearer{token: token}))
	if err != nil {
		t.Fatalf("NewFromCard: %v", err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c
}

// approveAll is a policy-allow approver (no person decided).
type approveAll struct{}

func (approveAll) ApproveTask(context.Context, agent.TaskApproval) agent.Decision {
	return agent.Decision{Approved: true}
}

// manualApprover hands each request to the test, which decides. It is a
// QueueingApprover: it calls Queued as it hands a request over.
type manualApprover struct {
	reqs chan pendingApproval
}

func (m *manualApprover) ReportsQueued() bool { return true }

type pendingApproval struct {
	agent.TaskApproval
	answer chan agent.Decision
}

func newManualApprover() *manualApprover {
	return &manualApprover{reqs: make(chan pendingApproval, 16)}
}

func (m *manualApprover) ApproveTask(ctx context.Context, a agent.TaskApproval) agent.Decision {
	p := pendingApproval{TaskApproval: a, answer: make(chan agent.Decision, 1)}
	a.Queued()
	select {
	case m.reqs <- p:
	case <-ctx.Done():
		return agent.Decision{Reason: "withdrawn"}
	}
	select {
	case d := <-p.answer:
		return d
	case <-ctx.Done():
		return agent.Decision{Reason: "withdrawn"}
	}
}

func (m *manualApprover) next(t *testing.T) pendingApproval {
	t.Helper()
	select {
	case p := <-m.reqs:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no approval request within 10s")
		return pendingApproval{}
	}
}

// scriptExecutor is meshtray's side of a delegation test; it reads the
// first word of a message's text:
//
//	echo X     artifact "echo" with X, then completed "done"
//	ask        input-required "what?"; the answer X completes with artifact X
//	sleep      working, then waits for ctx (cancel)
//	fail X     failed X
type scriptExecutor struct{}

func (x *scriptExecutor) Execute(ctx context.Context, ex *agent.Execution) error {
	if v, ok := ex.Value().(string); ok && v == "asked" {
		ex.Artifact("answer", a2a.TextPart{Text: text(ex.Message())})
		ex.Complete("thanks")
		return nil
	}
	cmd, arg, _ := strings.Cut(text(ex.Message()), " ")
	switch cmd {
	case "echo":
		ex.Artifact("echo", a2a.TextPart{Text: arg})
		ex.Complete("done")
	case "ask":
		ex.SetValue("asked")
		ex.InputRequired("what?")
	case "sleep":
		ex.Working("sleeping")
		<-ctx.Done()
		return ctx.Err()
	case "fail":
		ex.Fail(arg)
	default:
		ex.Complete("unknown script " + cmd)
	}
	return nil
}

type staticManifest nodes.Manifest

func (m staticManifest) Manifest() nodes.Manifest { return nodes.Manifest(m) }

var testManifest = staticManifest{
	Device: nodes.Device{ID: "DEV", Name: "testbox", OS: "Debian GNU/Linux 12 (x86_64)"},
	Capabilities: []nodes.Capability{
		{Name: "device.info", Description: "Describe this device.", Effects: nodes.EffectRead, Available: true,
			Params: json.RawMessage(`{"type":"object","properties":{}}`)},
	},
}

func text(m *a2a.Message) string {
	var b strings.Builder
	for _, p := range m.Parts {
		if tp, ok := p.(a2a.TextPart); ok {
			b.WriteString(tp.Text)
		}
	}
	return b.String()
}

func userMsg(s string) *a2a.Message {
	return a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: s})
}

// answerTo builds the next message of task.
func answerTo(task *a2a.Task, parts ...a2a.Part) *a2a.Message {
	m := a2a.NewMessage(a2a.MessageRoleUser, parts...)
	m.TaskID, m.ContextID = task.ID, task.ContextID
	return m
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

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
