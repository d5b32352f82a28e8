package app_test

import (
	"net/http"
	"strings"
	"testing"

	"meshtray/app/apptest"
)

// TestA2AOffLooksAbsent: with A2A switched off the JSON-RPC endpoint is as
// absent as the card (404), for a valid agent grant and for a caller with
// no token or a wrong one (a 401 challenge would say an agent lives here);
// switched on, the grant reaches it and the others get 401.
func TestA2AOffLooksAbsent(t *testing.T) {
	n := apptest.StartNode(t, apptest.Options{Keychain: "file", Config: "tailscale = false\n"})
	_, token := grantToken(t, n, "--name", "agent", "--scope", "agent")
	call := func(token string) int {
		req, _ := http.NewRequest(http.MethodPost, n.BaseURL+"/a2a/v1", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"x"}}`))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, step := range []struct {
		a2a              string
		want, wantNoAuth int
	}{{"off", 404, 404}, {"on", 200, 401}, {"off", 404, 404}} {
		ptCLI(t, n, "a2a", step.a2a)
		if got := call(token); got != step.want {
			t.Errorf("A2A %s: POST /a2a/v1 with an agent grant: %d, want %d", step.a2a, got, step.want)
		}
		for _, bad := range []string{"", "mt1_notatoken"} {
			if got := call(bad); got != step.wantNoAuth {
				t.Errorf("A2A %s: POST /a2a/v1 with token %q: %d, want %d", step.a2a, bad, got, step.wantNoAuth)
			}
		}
		if st, _ := httpGet(t, n.BaseURL+"/.well-known/agent-card.json"); st != step.want {
			t.Errorf("A2A %s: card %d, want %d", step.a2a, st, step.want)
		}
	}
}
