package delegate

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
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
