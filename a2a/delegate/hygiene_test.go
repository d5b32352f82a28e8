package delegate

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
)

// What another agent's failures may put in our errors (which reach the
// owner's log, the terminal, and a forwarded task's caller): bounded, one
// line, no token, no upstream URL.

func TestAgentErrorsAreBounded(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("A", 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/junk": // a result a2a-go cannot read: it quotes the whole body
			w.Write([]byte(`{"jsonrpc":"2.0","id":"x","result":{"kind":"nonsense","blob":"` + huge + ` sekrit-token-123"}}`))
		case "/rpcerr": // a JSON-RPC error with a long, multi-line, echoing message
			w.Write([]byte(`{"jsonrpc":"2.0","id":"x","error":{"code":-32603,"message":"boom\n\u001b[31mred\u202e sekrit-token-123 ` + huge + `"}}`))
		}
	}))
	t.Cleanup(srv.Close)
	ctx := context.Background()
	for _, path := range []string{"/junk", "/rpcerr"} {
		rem, err := newRemote(ctx, "big", false, CardInfo{Name: "big", Endpoint: srv.URL + path}, &http.Transport{}, "sekrit-token-123", nil)
		if err != nil {
			t.Fatal(err)
		}
		err = rem.exchange(ctx, &a2a.MessageSendParams{Message: userMsg("hi")}, false, nil, func(a2a.Event) {})
		rem.Close()
		var ae *AgentError
		if !errors.As(err, &ae) {
			t.Fatalf("%s: %v is not an AgentError", path, err)
		}
		msg := err.Error()
		if len(msg) > maxCause+200 || strings.Contains(msg, "sekrit-token-123") || strings.ContainsAny(msg, "\n\x1b\u202e") {
			t.Fatalf("%s: error of %d bytes: %.400q", path, len(msg), msg)
		}
	}
}

// untrustedTLS is an https agent whose certificate this device does not
// trust (httptest's own CA).
func untrustedTLS(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes fail on purpose
	srv.StartTLS()
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	_, port, _ := net.SplitHostPort(u.Host)
	return srv, port
}

func TestAgentErrorsDropURLs(t *testing.T) {
	t.Parallel()
	srv, port := untrustedTLS(t)
	tr := newExternalTransport()
	defer tr.CloseIdleConnections()
	_, err := (&http.Client{Transport: tr}).Get(srv.URL + "/some/path")
	var ue *url.Error
	if !errors.As(err, &ue) {
		t.Fatalf("want a *url.Error, got %v", err)
	}
	err = classify("the agent", false, err)
	if !errors.Is(err, ErrAgentUnreachable) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("classify: %v", err)
	}
	if strings.Contains(err.Error(), port) || strings.Contains(err.Error(), "/some/path") {
		t.Fatalf("the error names the URL: %v", err)
	}
	if got := stripURLs(&url.Error{Op: "Post", URL: "https://h:1/x?y", Err: errors.New("EOF")}); got != "Post: EOF" {
		t.Fatalf("stripURLs = %q", got)
	}
}

func TestForwardCallerNeverSeesTheUpstreamAddress(t *testing.T) {
	t.Parallel()
	srv, port := untrustedTLS(t)
	env, _ := forwardEnv(t, nil, approveAll{}, ForwardOptions{URL: srv.URL})
	task := sendTask(t, context.Background(), env.client(t, tokA), userMsg("echo x"))
	msg := text(task.Status.Message)
	if task.Status.State != a2a.TaskStateFailed || !strings.Contains(msg, "certificate") || strings.Contains(msg, port) {
		t.Fatalf("the caller reads %s %q", task.Status.State, msg)
	}
}

func TestAgentProxyOnlyForHTTPS(t *testing.T) {
	t.Parallel()
	proxy, _ := url.Parse("http://proxy.example:3128")
	env := func(*http.Request) (*url.URL, error) { return proxy, nil }
	p := agentProxy(env)
	for _, tc := range []struct {
		url  string
		want *url.URL
	}{
		{"https://agent.example.com/a2a", proxy},
		{"http://127.0.0.1:8000/rpc", nil},
		{"http://100.101.102.103:8000/rpc", nil},
	} {
		req, _ := http.NewRequest("POST", tc.url, nil)
		got, err := p(req)
		if err != nil || got != tc.want {
			t.Errorf("proxy for %s = %v %v, want %v", tc.url, got, err, tc.want)
		}
	}
	if tr := newExternalTransport(); tr.Proxy == nil {
		t.Fatal("the external transport has no proxy function")
	} else if req, _ := http.NewRequest("GET", "http://100.101.102.103/", nil); func() bool { u, _ := tr.Proxy(req); return u != nil }() {
		t.Fatal("the external transport proxies plain http")
	}
}

// TestPlainHTTPNeedsAKnownTailnetPeer: without the node's word that an
// address is a tailnet peer's, plain http goes to loopback only (refused
// before any packet is sent).
func TestPlainHTTPNeedsAKnownTailnetPeer(t *testing.T) {
	t.Parallel()
	a, _ := newAgents(t, AgentsOptions{})
	if _, err := a.Add(context.Background(), "http://100.101.102.103:9/", ""); !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), "in clear") {
		t.Fatalf("Add of a CGNAT-range address in clear: %v", err)
	}
	if _, err := NewForwardExecutor(ForwardOptions{URL: "http://100.101.102.103:9"}); err == nil {
		t.Fatal("a forward upstream in clear outside loopback was accepted without the tailnet hook")
	}
	fw, err := NewForwardExecutor(ForwardOptions{URL: "http://100.101.102.103:9", IsTailnetAddr: func(netip.Addr) bool { return true }})
	if err != nil {
		t.Fatalf("a tailnet peer's address: %v", err)
	}
	fw.Close()
}
