package app

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	agent "meshtray/a2a"
	"meshtray/keychain"
	"meshtray/pairing"
)

// TestTrackGrantWorkReadsTheBearerAsAuthDoes: the grant-work tracker reads
// the Authorization header through pairing.BearerToken, so it keeps no
// context for a header the auth middleware would not look at (over its
// 512-byte bound), and none on the A2A endpoint.
func TestTrackGrantWorkReadsTheBearerAsAuthDoes(t *testing.T) {
	t.Parallel()
	grants, err := pairing.NewGrants(keychain.NewMemory(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer grants.Close()
	g, tok, err := grants.Issue(pairing.IssueRequest{Name: "phone", Scopes: pairing.Scopes{pairing.ScopeNode}})
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{}
	tracked := func(path, auth string) bool {
		t.Helper()
		var live int
		h := n.trackGrantWork(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.work.mu.Lock()
			live = len(n.work.live[g.ID])
			n.work.mu.Unlock()
		}))
		r := httptest.NewRequest(http.MethodPost, path, nil)
		r.Header.Set("Authorization", auth)
		h.ServeHTTP(httptest.NewRecorder(), r)
		return live > 0
	}
	for _, tt := range []struct {
		name, path, auth string
		want             bool
	}{
		{"bearer", "/nodes/invoke", "Bearer " + tok, true},
		{"scheme any case", "/nodes/invoke", "BEARER " + tok, true},
		{"padded to the bound", "/nodes/invoke", "Bearer " + tok + strings.Repeat(" ", 512-7-len(tok)), true},
		{"over the bound", "/nodes/invoke", "Bearer " + tok + strings.Repeat(" ", 513-7-len(tok)), false},
		{"other scheme", "/nodes/invoke", "Token " + tok, false},
		{"a2a endpoint", agent.RPCPath, "Bearer " + tok, false},
	} {
		if got := tracked(tt.path, tt.auth); got != tt.want {
			t.Errorf("%s: tracked %v, want %v", tt.name, got, tt.want)
		}
	}
}
