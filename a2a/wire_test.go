package a2a

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
)

// What goes on the wire: the card's shape and JSON-RPC notifications
// (jsonout keeps HTML characters as written).

func getBody(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return b
}

func TestCardJSONAsWritten(t *testing.T) {
	t.Parallel()
	m := testManifest
	m.Capabilities = append(m.Capabilities[:0:0], m.Capabilities...)
	m.Capabilities[0].Description = "Show a <b>desktop</b> notification & wait."
	env := newEnv(t, Options{Manifest: m})
	raw := getBody(t, env.hs.URL+CardPath)
	for _, esc := range []string{`\u003c`, `\u003e`, `\u0026`} {
		if strings.Contains(string(raw), esc) {
			t.Errorf("the card has HTML escapes (%s): %s", esc, raw)
		}
	}
	if !strings.Contains(string(raw), `\"params\":{\"title\":\"<title>\"}`) || !strings.Contains(string(raw), "<b>desktop</b> notification & wait.") {
		t.Errorf("the card does not show the example and description as written: %s", raw)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	// AgentCard 0.3.0 has no top-level extensions: they belong in
	// capabilities.extensions.
	if _, ok := top["extensions"]; ok {
		t.Error("the card has a top-level extensions field")
	}
	var caps struct {
		Extensions []a2a.AgentExtension `json:"extensions"`
	}
	if err := json.Unmarshal(top["capabilities"], &caps); err != nil || len(caps.Extensions) != 1 || caps.Extensions[0].URI != ManifestExtensionURI {
		t.Fatalf("capabilities.extensions = %+v (%v)", caps.Extensions, err)
	}
}

func TestTasksOnTheWireAsWritten(t *testing.T) {
	t.Parallel()
	env := newEnv(t, Options{})
	// The text: HTML characters, and the six characters \u003c themselves.
	const say = `a<b>&c \u003c`
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "message/send",
		"params": map[string]any{"message": map[string]any{"kind": "message", "messageId": "m", "role": "user",
			"parts": []any{map[string]any{"kind": "text", "text": "echo " + say}}}}})
	raw := rawHTTP(t, env, tokA, string(body))
	if strings.Contains(string(raw), `\u003c`+"b") || !strings.Contains(string(raw), `"text":"a<b>&c \\u003c"`) {
		t.Fatalf("answer: %s", raw)
	}
	var resp struct {
		Result a2a.Task `json:"result"`
	}
	if err := json.Unmarshal(raw, &resp); err != nil {
		t.Fatal(err)
	}
	if got := resp.Result.Artifacts[0].Parts[0].(a2a.TextPart).Text; got != say {
		t.Fatalf("the artifact's text came back as %q, want %q", got, say)
	}
	// The same over a stream.
	sbody := strings.Replace(string(body), `"message/send"`, `"message/stream"`, 1)
	sraw := rawHTTP(t, env, tokA, sbody)
	if strings.Contains(string(sraw), `\u003c`+"b") || !strings.Contains(string(sraw), `a<b>&c`) {
		t.Fatalf("stream: %s", sraw)
	}
}

func TestNotificationsGetNoReply(t *testing.T) {
	t.Parallel()
	ap := newManualApprover()
	env := newEnv(t, Options{Approver: ap})
	tests := []struct {
		name string
		body string
	}{
		{"message/send", `{"jsonrpc":"2.0","method":"message/send","params":` + sendParams + `}`},
		{"message/stream", `{"jsonrpc":"2.0","method":"message/stream","params":` + sendParams + `}`},
		{"tasks/get", `{"jsonrpc":"2.0","method":"tasks/get","params":{"id":"x"}}`},
		{"unknown method", `{"jsonrpc":"2.0","method":"nope"}`},
		{"params not an object", `{"jsonrpc":"2.0","method":"tasks/get","params":[1]}`},
	}
	for _, tc := range tests {
		code, _, body := plainPost(t, env, http.MethodPost, tc.body)
		if code != http.StatusNoContent || body != "" {
			t.Errorf("%s notification: HTTP %d %q, want 204 and no body", tc.name, code, body)
		}
	}
	if ts := env.srv.Tasks(); len(ts) != 0 {
		t.Fatalf("a notification created tasks: %+v", ts)
	}
	select {
	case pa := <-ap.reqs:
		t.Fatalf("the owner was asked about a notification: %+v", pa.TaskApproval)
	default:
	}
	// Not a request object at all: answered with id null (§5), id or not.
	raw := rawHTTP(t, env, tokA, `{"jsonrpc":"2.0","method":1}`)
	if errorCode(t, raw) != CodeInvalidRequest || !strings.Contains(string(raw), `"id":null`) {
		t.Fatalf("invalid request without id: %s", raw)
	}
	// An id of null is a request, answered.
	raw = rawHTTP(t, env, tokA, `{"jsonrpc":"2.0","id":null,"method":"tasks/get","params":{"id":"x"}}`)
	if errorCode(t, raw) != CodeTaskNotFound {
		t.Fatalf("id null: %s", raw)
	}
}
