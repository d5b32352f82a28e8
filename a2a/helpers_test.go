package a2a

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"
	"go.uber.org/goleak"

	"meshtray/a2a/a2atest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testAuth is the stand-in for pairing's auth middleware (a2atest.Auth).
type testAuth = a2atest.Auth

// testEnv is a Server on a real loopback listener behind testAuth.
type testEnv struct {
	srv  *Server
	hs   *httptest.Server
	auth *testAuth
	tr   *http.Transport
	// restored is what Restore did (Options.Store set).
	restored Restored
}

// Tokens every env knows: two grants (owners) of different peers.
const (
	tokA = "tokA-0123456789"
	tokB = "tokB-0123456789"
)

func newEnv(t *testing.T, opts Options) *testEnv {
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
	srv := NewServer(opts)
	srv.SetPublished(true)
	var restored Restored
	if opts.Store != nil {
		var err error
		if restored, err = srv.Restore(context.Background()); err != nil {
			t.Fatalf("Restore: %v", err)
		}
	}
	auth := &testAuth{}
	auth.Add(tokA, "grantA", "laptop")
	auth.Add(tokB, "grantB", "phone")
	mux := http.NewServeMux()
	mux.Handle("POST "+RPCPath, auth.Wrap(srv))
	mux.Handle("GET "+CardPath, srv.CardHandler())
	hs := httptest.NewServer(mux)
	env := &testEnv{srv: srv, hs: hs, auth: auth, tr: &http.Transport{}, restored: restored}
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

// httpClient has no timeout (a2a-go's default 3 min would cut streams) and
// its own transport, closed at cleanup.
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
	return e.clientIntercepted(t, bearer{token: token})
}

// clientIntercepted is client with another interceptor in place of the
// token's.
func (e *testEnv) clientIntercepted(t *testing.T, ic a2aclient.CallInterceptor) *a2aclient.Client {
	t.Helper()
	ctx := context.Background()
	card, err := agentcard.NewResolver(e.httpClient()).Resolve(ctx, e.hs.URL)
	if err != nil {
		t.Fatalf("resolve card: %v", err)
	}
	c, err := a2aclient.NewFromCard(ctx, card,
		a2aclient.WithJSONRPCTransport(e.httpClient()),
		a2aclient.WithConfig(a2aclient.Config{PreferredTransports: []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC}}),
		a2aclient.WithInterceptors(ic))
	if err != nil {
		t.Fatalf("NewFromCard: %v", err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c
}

// approveAll is a policy-allow approver (no person decided).
type approveAll struct{}

func (approveAll) ApproveTask(context.Context, TaskApproval) Decision {
	return Decision{Approved: true}
}

// manualApprover hands each request to the test, which decides. It is a
// QueueingApprover: it calls Queued as it hands a request over.
type manualApprover struct {
	reqs chan pendingApproval
}

func (m *manualApprover) ReportsQueued() bool { return true }

type pendingApproval struct {
	TaskApproval
	ctx    context.Context
	answer chan Decision
}

func newManualApprover() *manualApprover {
	return &manualApprover{reqs: make(chan pendingApproval, 16)}
}

func (m *manualApprover) ApproveTask(ctx context.Context, a TaskApproval) Decision {
	p := pendingApproval{TaskApproval: a, ctx: ctx, answer: make(chan Decision, 1)}
	a.Queued()
	select {
	case m.reqs <- p:
	case <-ctx.Done():
		return Decision{Reason: "withdrawn"}
	}
	select {
	case d := <-p.answer:
		return d
	case <-ctx.Done():
		return Decision{Reason: "withdrawn"}
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

// scriptExecutor interprets the first word of a message's text:
//
//	echo X     artifact "echo" with X, then completed "done"
//	ask        input-required "what?"; the answer X completes with artifact X
//	sleep      working, then waits for ctx (cancel); records the stop
//	fail X     failed X
//	err X      returns an error X without reporting
//	panic      panics
//	chunks N   one artifact in N appended chunks, then completed
//	ignore     working, then ignores ctx until release is closed
type scriptExecutor struct {
	stopped  chan a2a.TaskID // sleep reports its stop here (buffered by tests)
	started  chan a2a.TaskID // sleep reports its start here
	release  chan struct{}   // ignore waits for it
	mu       sync.Mutex
	approved []string // ApprovedSummary seen per turn
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

func (x *scriptExecutor) Execute(ctx context.Context, ex *Execution) error {
	x.mu.Lock()
	x.approved = append(x.approved, ex.ApprovedSummary())
	x.mu.Unlock()
	v, _ := ex.Value().(string)
	if v == "" {
		ex.DecodeValue(&v) // restored from the database
	}
	if v == "asked" {
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
		if x.started != nil {
			x.started <- ex.TaskID()
		}
		<-ctx.Done()
		if x.stopped != nil {
			x.stopped <- ex.TaskID()
		}
		return ctx.Err()
	case "fail":
		ex.Fail(arg)
	case "err":
		return errors.New(arg)
	case "panic":
		panic("scripted panic")
	case "chunks":
		var n int
		fmt.Sscan(arg, &n)
		id := ex.Artifact("chunks", a2a.TextPart{Text: "0"})
		for i := 1; i < n; i++ {
			if err := ex.AppendArtifact(id, i == n-1, a2a.TextPart{Text: fmt.Sprint(i)}); err != nil {
				return err
			}
		}
		ex.Complete("")
	case "ignore":
		ex.Working("ignoring cancel")
		if x.started != nil {
			x.started <- ex.TaskID()
		}
		<-x.release
	default:
		ex.Complete("unknown script " + cmd)
	}
	return nil
}

func userMsg(s string) *a2a.Message {
	return a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: s})
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

// errCode extracts the JSON-RPC code the a2a-go client saw, via its
// sentinel mapping.
func errIs(err error, target error) bool { return errors.Is(err, target) }
