package nodes

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"

	"meshtray/pairing"
)

// testAuth stands in for the pairing middleware: "Bearer <name>" picks a
// principal; no header sets none.
func testAuth(principals map[string]*pairing.Principal, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			if p := principals[tok]; p != nil {
				r = r.WithContext(pairing.WithPrincipal(r.Context(), p))
			}
		}
		h.ServeHTTP(w, r)
	})
}

func newTestServer(t *testing.T, r *Registry) *httptest.Server {
	t.Helper()
	principals := map[string]*pairing.Principal{
		"allow": grantCaller(pairing.PolicyAllow),
		"deny":  grantCaller(pairing.PolicyDeny),
		"local": {Local: true, Listener: pairing.ListenerLoopback},
	}
	mux := http.NewServeMux()
	mux.Handle("/nodes/manifest", testAuth(principals, r.ManifestHandler()))
	mux.Handle("/nodes/invoke", testAuth(principals, r.InvokeHandler()))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestHTTPHandlers(t *testing.T) {
	t.Parallel()
	allow := []RunRule{{Name: "sleep"}}
	if runtime.GOOS == "windows" {
		allow = nil
	}
	r := newTestRegistry(t, Options{RunAllow: allow})
	if err := r.SetPolicy(CapSystemRun, pairing.PolicyAllow); err != nil {
		t.Fatal(err)
	}
	srv := newTestServer(t, r)

	type httpCase struct {
		name        string
		method      string
		path        string
		token       string
		contentType string
		body        string
		status      int
		want        string   // substring of the body
		missing     []string // of an ErrorResponse
		invalid     []string
	}
	tests := []httpCase{
		{name: "manifest", method: "GET", path: "/nodes/manifest", token: "allow", status: 200, want: `"capabilities":[{"name":"device.info"`},
		{name: "manifest HEAD", method: "HEAD", path: "/nodes/manifest", token: "allow", status: 200},
		{name: "manifest POST", method: "POST", path: "/nodes/manifest", token: "allow", status: 405, want: `"error":"method not allowed"`},
		{name: "device.info", method: "POST", path: "/nodes/invoke", token: "allow", contentType: "application/json", body: `{"capability":"device.info"}`, status: 200, want: `"summary":"`},
		{name: "device.info, charset", method: "POST", path: "/nodes/invoke", token: "local", contentType: "application/json; charset=utf-8", body: `{"capability":"device.info","params":{}}`, status: 200, want: `"data":{"hostname":`},
		{name: "no caller", method: "POST", path: "/nodes/invoke", body: `{"capability":"device.info"}`, status: 401, want: `"error":"unauthenticated"`},
		{name: "GET invoke", method: "GET", path: "/nodes/invoke", token: "allow", status: 405},
		{name: "unknown capability", method: "POST", path: "/nodes/invoke", token: "allow", body: `{"capability":"camera.snap"}`, status: 404, want: `unknown capability`},
		{name: "missing param", method: "POST", path: "/nodes/invoke", token: "allow", body: `{"capability":"system.notify","params":{"body":"x"}}`, status: 400, missing: []string{"title"}},
		{name: "invalid param", method: "POST", path: "/nodes/invoke", token: "allow", body: `{"capability":"system.notify","params":{"title":1,"x":2}}`, status: 400, invalid: []string{"title: got number, want string", "x: unknown parameter"}},
		{name: "no capability", method: "POST", path: "/nodes/invoke", token: "allow", body: `{"params":{}}`, status: 400, missing: []string{"capability"}},
		{name: "bad JSON", method: "POST", path: "/nodes/invoke", token: "allow", body: `{"capability":`, status: 400},
		{name: "unknown field", method: "POST", path: "/nodes/invoke", token: "allow", body: `{"capability":"device.info","approved":true}`, status: 400},
		{name: "two objects", method: "POST", path: "/nodes/invoke", token: "allow", body: `{"capability":"device.info"} {}`, status: 400},
		{name: "form post", method: "POST", path: "/nodes/invoke", token: "allow", contentType: "application/x-www-form-urlencoded", body: `capability=device.info`, status: 415},
		{name: "too large", method: "POST", path: "/nodes/invoke", token: "allow", body: `{"capability":"clipboard.write","params":{"text":"` + strings.Repeat("x", MaxInvokeBody) + `"}}`, status: 413},
		{name: "unavailable", method: "POST", path: "/nodes/invoke", token: "allow", body: `{"capability":"clipboard.read"}`, status: 409, want: `no graphical session`},
		{name: "grant denies", method: "POST", path: "/nodes/invoke", token: "deny", body: `{"capability":"device.info"}`, status: 403, want: `call denied`},
	}
	if allow != nil {
		tests = append(tests, httpCase{name: "timeout", method: "POST", path: "/nodes/invoke", token: "allow",
			body: `{"capability":"system.run","params":{"argv":["sleep","10"],"timeout_s":0.2}}`, status: 504, want: `timed out`})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequest(tt.method, srv.URL+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
				t.Errorf("Cache-Control %q", cc)
			}
			if tt.method == "HEAD" {
				return
			}
			if !strings.Contains(string(body), tt.want) {
				t.Errorf("body %s lacks %s", body, tt.want)
			}
			if tt.status >= 400 {
				var e ErrorResponse
				if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
					t.Fatalf("error body %s: %v", body, err)
				}
				if !slices.Equal(e.Missing, tt.missing) || !slices.Equal(e.Invalid, tt.invalid) {
					t.Errorf("missing %q invalid %q, want %q %q", e.Missing, e.Invalid, tt.missing, tt.invalid)
				}
				return
			}
			if tt.path == "/nodes/invoke" {
				var res Result
				if err := json.Unmarshal(body, &res); err != nil || len(res.Data) == 0 || res.Summary == "" {
					t.Fatalf("result %s: %v", body, err)
				}
				checkResult(t, r, CapDeviceInfo, res)
			} else {
				var m Manifest
				if err := json.Unmarshal(body, &m); err != nil || len(m.Capabilities) != 5 {
					t.Fatalf("manifest %s: %v", body, err)
				}
			}
		})
	}
}

// TestInvokeJSONAsWritten: results go out as written, "<" and "&" not
// turned into \u003c and \u0026.
func TestInvokeJSONAsWritten(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("system.run with printf")
	}
	r := newTestRegistry(t, Options{RunAllow: []RunRule{{Name: "printf"}}})
	if err := r.SetPolicy(CapSystemRun, pairing.PolicyAllow); err != nil {
		t.Fatal(err)
	}
	srv := newTestServer(t, r)
	req, _ := http.NewRequest("POST", srv.URL+"/nodes/invoke", strings.NewReader(`{"capability":"system.run","params":{"argv":["printf","<b>&</b>"]}}`))
	req.Header.Set("Authorization", "Bearer allow")
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"stdout":"<b>&</b>"`) || strings.Contains(string(b), `\u003c`) {
		t.Fatalf("HTTP %d: %s", resp.StatusCode, b)
	}
}
