package delegate

// Which transport a call to another agent takes: a proxy only for HTTPS,
// plain HTTP only to loopback or a known tailnet peer.

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

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
