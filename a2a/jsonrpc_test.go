package a2a

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"
)

const sendParams = `{"message":{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"text","text":"echo hi"}]}}`

// TestMalformedRequests posts raw bodies over a real loopback connection:
// every JSON-RPC error is HTTP 200 with Content-Type application/json (an
// SSE stream of one event for a streaming method), the right code, and the
// request's id when it could be read (null otherwise).
func TestMalformedRequests(t *testing.T) {
	t.Parallel()
	env := newEnv(t, Options{MaxBodyBytes: 4096})
	tests := []struct {
		name   string
		body   string
		code   int
		wantID string // raw JSON of the id in the answer
	}{
		{"bad JSON", `{"jsonrpc":"2.0","id":1,"method":`, CodeParseError, "null"},
		{"not JSON at all", `hello`, CodeParseError, "null"},
		{"empty body", ``, CodeParseError, "null"},
		{"jsonrpc 1.0", `{"jsonrpc":"1.0","id":1,"method":"tasks/get","params":{"id":"x"}}`, CodeInvalidRequest, "1"},
		{"jsonrpc missing", `{"id":"a","method":"tasks/get","params":{"id":"x"}}`, CodeInvalidRequest, `"a"`},
		{"jsonrpc as number", `{"jsonrpc":2.0,"id":"a","method":"tasks/get"}`, CodeInvalidRequest, `"a"`},
		{"method missing", `{"jsonrpc":"2.0","id":2}`, CodeInvalidRequest, "2"},
		{"method empty", `{"jsonrpc":"2.0","id":2,"method":""}`, CodeInvalidRequest, "2"},
		{"method not a string", `{"jsonrpc":"2.0","id":2,"method":42}`, CodeInvalidRequest, "2"},
		{"object id", `{"jsonrpc":"2.0","id":{"a":1},"method":"tasks/get","params":{"id":"x"}}`, CodeInvalidRequest, "null"},
		{"array id", `{"jsonrpc":"2.0","id":[1],"method":"tasks/get","params":{"id":"x"}}`, CodeInvalidRequest, "null"},
		{"boolean id", `{"jsonrpc":"2.0","id":true,"method":"tasks/get","params":{"id":"x"}}`, CodeInvalidRequest, "null"},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"x"}}]`, CodeInvalidRequest, "null"},
		{"empty batch", `[]`, CodeInvalidRequest, "null"},
		{"scalar request", `"tasks/get"`, CodeInvalidRequest, "null"},
		{"unknown method", `{"jsonrpc":"2.0","id":3,"method":"tasks/list","params":{}}`, CodeMethodNotFound, "3"},
		{"1.0 method name", `{"jsonrpc":"2.0","id":3,"method":"SendMessage","params":{}}`, CodeMethodNotFound, "3"},
		{"params an array", `{"jsonrpc":"2.0","id":4,"method":"tasks/get","params":["x"]}`, CodeInvalidParams, "4"},
		{"params wrong type", `{"jsonrpc":"2.0","id":4,"method":"tasks/get","params":{"id":5}}`, CodeInvalidParams, "4"},
		{"get without id", `{"jsonrpc":"2.0","id":4,"method":"tasks/get","params":{}}`, CodeInvalidParams, "4"},
		{"negative historyLength", `{"jsonrpc":"2.0","id":4,"method":"tasks/get","params":{"id":"x","historyLength":-1}}`, CodeInvalidParams, "4"},
		{"send without message", `{"jsonrpc":"2.0","id":5,"method":"message/send","params":{}}`, CodeInvalidParams, "5"},
		{"send, part without kind", `{"jsonrpc":"2.0","id":5,"method":"message/send","params":{"message":{"messageId":"m","role":"user","parts":[{"text":"x"}]}}}`, CodeInvalidParams, "5"},
		{"send, no parts", `{"jsonrpc":"2.0","id":5,"method":"message/send","params":{"message":{"messageId":"m","role":"user","parts":[]}}}`, CodeInvalidParams, "5"},
		{"send, agent role", `{"jsonrpc":"2.0","id":5,"method":"message/send","params":{"message":{"messageId":"m","role":"agent","parts":[{"kind":"text","text":"x"}]}}}`, CodeInvalidParams, "5"},
		{"send, no messageId", `{"jsonrpc":"2.0","id":5,"method":"message/send","params":{"message":{"role":"user","parts":[{"kind":"text","text":"x"}]}}}`, CodeInvalidParams, "5"},
		{"stream without message", `{"jsonrpc":"2.0","id":6,"method":"message/stream","params":{}}`, CodeInvalidParams, "6"},
		{"resubscribe to an unknown task", `{"jsonrpc":"2.0","id":6,"method":"tasks/resubscribe","params":{"id":"nope"}}`, CodeTaskNotFound, "6"},
		{"resubscribe without id", `{"jsonrpc":"2.0","id":6,"method":"tasks/resubscribe","params":{}}`, CodeInvalidParams, "6"},
		{"id of 257 bytes", `{"jsonrpc":"2.0","id":"` + strings.Repeat("i", 255) + `","method":"tasks/get","params":{"id":"x"}}`, CodeInvalidRequest, "null"},
		{"id of 256 bytes kept", `{"jsonrpc":"2.0","id":"` + strings.Repeat("i", 254) + `","method":"tasks/get","params":{"id":"x"}}`, CodeTaskNotFound, `"` + strings.Repeat("i", 254) + `"`},
		{"id not UTF-8", "{\"jsonrpc\":\"2.0\",\"id\":\"\xff\xfe\",\"method\":\"tasks/get\",\"params\":{\"id\":\"x\"}}", CodeInvalidRequest, "null"},
		{"stream, id over the bound", `{"jsonrpc":"2.0","id":"` + strings.Repeat("i", 3000) + `","method":"message/stream","params":` + sendParams + `}`, CodeInvalidRequest, "null"},
		{"cancel without id", `{"jsonrpc":"2.0","id":6,"method":"tasks/cancel"}`, CodeInvalidParams, "6"},
		{"unknown task", `{"jsonrpc":"2.0","id":"u","method":"tasks/get","params":{"id":"nope"}}`, CodeTaskNotFound, `"u"`},
		{"push config get", `{"jsonrpc":"2.0","id":7,"method":"tasks/pushNotificationConfig/get","params":{"id":"x"}}`, CodePushNotSupported, "7"},
		{"push config delete", `{"jsonrpc":"2.0","id":7,"method":"tasks/pushNotificationConfig/delete","params":{"id":"x","pushNotificationConfigId":"y"}}`, CodePushNotSupported, "7"},
		{"oversize body", `{"jsonrpc":"2.0","id":8,"method":"message/send","params":{"message":{"kind":"message","messageId":"m","role":"user","parts":[{"kind":"text","text":"` + strings.Repeat("x", 5000) + `"}]}}}`, CodeInvalidRequest, "null"},
		{"big number id kept exactly", `{"jsonrpc":"2.0","id":12345678901234567890,"method":"nope"}`, CodeMethodNotFound, "12345678901234567890"},
		{"null id", `{"jsonrpc":"2.0","id":null,"method":"nope"}`, CodeMethodNotFound, "null"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw := rawHTTP(t, env, tokA, tc.body)
			if !utf8.Valid(raw) {
				t.Fatalf("answer is not UTF-8: %q", raw)
			}
			if stream := strings.Contains(tc.body, `"message/stream"`) || strings.Contains(tc.body, `"tasks/resubscribe"`); stream {
				evs := sseEvents(t, raw)
				if len(evs) != 1 {
					t.Fatalf("streaming method's error: %d events in %q", len(evs), raw)
				}
				raw = evs[0]
			}
			var resp struct {
				JSONRPC string          `json:"jsonrpc"`
				ID      json.RawMessage `json:"id"`
				Result  json.RawMessage `json:"result"`
				Error   *rpcError       `json:"error"`
			}
			if err := json.Unmarshal(raw, &resp); err != nil {
				t.Fatalf("answer is not JSON: %s", raw)
			}
			if resp.JSONRPC != "2.0" || resp.Error == nil || resp.Result != nil {
				t.Fatalf("answer %s", raw)
			}
			if resp.Error.Code != tc.code {
				t.Errorf("code %d (%s), want %d", resp.Error.Code, resp.Error.Message, tc.code)
			}
			if string(resp.ID) != tc.wantID {
				t.Errorf("id %s, want %s", resp.ID, tc.wantID)
			}
			if resp.Error.Message == "" {
				t.Error("empty error message")
			}
		})
	}
}

func TestNonPostAndMissingPrincipal(t *testing.T) {
	t.Parallel()
	srv := NewServer(Options{Executor: &scriptExecutor{}, Approver: approveAll{}})
	defer srv.Shutdown(t.Context())

	rec := newRecorder()
	req, _ := http.NewRequest("GET", RPCPath, nil)
	srv.ServeHTTP(rec, req)
	if rec.status != http.StatusMethodNotAllowed || rec.hdr.Get("Allow") != "POST" {
		t.Errorf("GET: %d %v", rec.status, rec.hdr)
	}

	// Without the auth middleware there is no principal: an internal
	// error, never an anonymous task.
	rec = newRecorder()
	req, _ = http.NewRequest("POST", RPCPath, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"message/send","params":`+sendParams+`}`))
	srv.ServeHTTP(rec, req)
	if rec.status != 200 || errorCode(t, rec.buf.Bytes()) != CodeInternalError {
		t.Errorf("no principal: %d %s", rec.status, rec.buf.Bytes())
	}
	if len(srv.Tasks()) != 0 {
		t.Error("a task was created without a principal")
	}
}

// TestSSEFraming checks the raw stream: text/event-stream, single-line
// "data: " events each a full JSON-RPC response with the request's id.
func TestSSEFraming(t *testing.T) {
	t.Parallel()
	env := newEnv(t, Options{})
	req, _ := http.NewRequest("POST", env.hs.URL+RPCPath, strings.NewReader(`{"jsonrpc":"2.0","id":"s-1","method":"message/stream","params":`+sendParams+`}`))
	req.Header.Set("Authorization", "Bearer "+tokA)
	resp, err := env.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	body, err := io.ReadAll(resp.Body) // ends: the server closes after final
	if err != nil {
		t.Fatal(err)
	}
	evs := sseEvents(t, body)
	if len(evs) != 4 { // task, working, artifact, completed
		t.Fatalf("%d events:\n%s", len(evs), body)
	}
	for i, ev := range evs {
		var r struct {
			JSONRPC string `json:"jsonrpc"`
			ID      string `json:"id"`
			Result  struct {
				Kind  string `json:"kind"`
				Final *bool  `json:"final"`
			} `json:"result"`
		}
		if err := json.Unmarshal(ev, &r); err != nil || r.JSONRPC != "2.0" || r.ID != "s-1" {
			t.Fatalf("event %d: %s", i, ev)
		}
		wantKind := []string{"task", "status-update", "artifact-update", "status-update"}[i]
		if r.Result.Kind != wantKind {
			t.Errorf("event %d kind %q, want %q", i, r.Result.Kind, wantKind)
		}
		if r.Result.Kind == "status-update" && (r.Result.Final == nil || *r.Result.Final != (i == 3)) {
			t.Errorf("event %d final = %v", i, r.Result.Final)
		}
	}
}

// FuzzDecodeRequest: the decoder never panics, and when it accepts a body
// the result is consistent (a method, an id that is valid JSON of an
// allowed type, params an object or absent); when it refuses, the error
// has a JSON-RPC envelope code and an id that is valid JSON.
func FuzzDecodeRequest(f *testing.F) {
	seeds := []string{
		`{"jsonrpc":"2.0","id":1,"method":"message/send","params":` + sendParams + `}`,
		`{"jsonrpc":"2.0","id":"x","method":"tasks/get","params":{"id":"t","historyLength":2}}`,
		`{"jsonrpc":"2.0","id":null,"method":"tasks/cancel","params":null}`,
		`[{"jsonrpc":"2.0"}]`, `{"id":{}}`, `{"jsonrpc":"2.0","method":1}`, `"`, `{`, ``, `{"jsonrpc":"2.0","id":-1e9,"method":"a"}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, id, e := decodeRequest(body)
		if !json.Valid(id) {
			t.Fatalf("id %q is not JSON", id)
		}
		if e != nil {
			switch e.Code {
			case CodeParseError, CodeInvalidRequest, CodeInvalidParams:
			default:
				t.Fatalf("envelope error code %d", e.Code)
			}
			if e.Code == CodeInvalidParams && (req == nil || req.Method == "") {
				t.Fatal("invalid params without a method")
			}
			if !utf8.ValidString(e.Message) && e.Code != CodeParseError {
				t.Fatalf("message %q", e.Message)
			}
			return
		}
		if req.Method == "" {
			t.Fatal("accepted without a method")
		}
		switch id[0] {
		case '"', 'n', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		default:
			t.Fatalf("accepted id %s", id)
		}
		if len(req.Params) > 0 && req.Params[0] != '{' {
			t.Fatalf("accepted params %s", req.Params)
		}
		// The responses built for it, in either version, are one valid JSON
		// object each, in valid UTF-8.
		for _, ver := range []protoVersion{v03, v10} {
			if out := appendResponse(nil, ver, req.ID, []byte(`{}`), nil); !json.Valid(out) || !utf8.Valid(out) {
				t.Fatalf("response %q is not JSON", out)
			}
			if out := appendResponse(nil, ver, req.ID, nil, newRPCError(CodeMethodNotFound, "method not found: %q", truncate(req.Method, 64))); !json.Valid(out) || !utf8.Valid(out) {
				t.Fatalf("error response %q is not JSON", out)
			}
		}
		if len(id) > MaxIDBytes {
			t.Fatalf("accepted an id of %d bytes", len(id))
		}
	})
}
