package delegate

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestCardRefusalReadsWhole: the refusal `agents add` prints for a card
// meshtray cannot authenticate to keeps its own words ("bearer tokens
// only") through the redaction meant for credentials an agent echoes,
// while a credential after "Bearer" is still redacted.
func TestCardRefusalReadsWhole(t *testing.T) {
	t.Parallel()
	var base string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"name":"Cloud","description":"d","version":"1","protocolVersion":"0.3.0",
			"url":"` + base + `/a2a","preferredTransport":"JSONRPC","capabilities":{},
			"defaultInputModes":["text/plain"],"defaultOutputModes":["text/plain"],
			"skills":[{"id":"s","name":"s","description":"d","tags":["t"]}],
			"securitySchemes":{"google":{"type":"oauth2","flows":{"clientCredentials":{"tokenUrl":"https://x.example/t","scopes":{}}}}},
			"security":[{"google":[]}]}`))
	}))
	t.Cleanup(srv.Close)
	base = srv.URL
	a, _ := newAgents(t, AgentsOptions{})
	_, err := a.Add(context.Background(), srv.URL, "")
	if err == nil || !strings.Contains(err.Error(), `requires OAuth 2.0 ("google"); meshtray sends bearer tokens only`) {
		t.Fatalf("Add = %v; want the whole refusal", err)
	}
	for _, echo := range []string{"Authorization: Bearer sk-live-4f9a", "bearer eyJhbGciOiJIUzI1NiJ9.e30.x", "Bearer abcdefghijklmnopqrstuvwxyz"} {
		if got := redact("agent said: "+echo, ""); strings.Contains(got, echo[strings.LastIndex(echo, " ")+1:]) {
			t.Errorf("redact(%q) = %q: the credential is still there", echo, got)
		}
	}
}
