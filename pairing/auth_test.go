package pairing

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"meshtray/jsonout"
	"meshtray/keychain"
)

// taggedServer is a real HTTP server on 127.0.0.1 whose connections carry
// listener tag l, as app's listeners do.
func taggedServer(t *testing.T, l Listener, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return WithListener(ctx, l)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// whoAmI echoes the Principal the middleware set.
var whoAmI = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	p, ok := PrincipalFrom(r.Context())
	if !ok {
		jsonout.Write(w, 200, map[string]any{"principal": false})
		return
	}
	out := map[string]any{"principal": true, "local": p.Local, "grant": p.Grant.ID, "listener": p.Listener, "remote_loopback": p.RemoteAddr.Addr().IsLoopback()}
	if p.Tailnet != nil {
		out["tailnet_user"] = p.Tailnet.User
	}
	jsonout.Write(w, 200, out)
})

type authFixture struct {
	g                                     *Grants
	auth                                  *Auth
	agentTok, nodeTok, fullTok, pausedTok string
	revokedTok, bothTok, approveTok       string
	agentID                               string
	whoisCalls                            atomic.Int64
	control                               string
}

func newAuthFixture(t *testing.T) *authFixture {
	t.Helper()
	f := &authFixture{g: newGrants(t, keychain.NewMemory()), control: "ctl-" + randomString(24)}
	var gr Grant
	gr, f.agentTok = mustIssue(t, f.g, "agent", ScopeAgent)
	f.agentID = gr.ID
	_, f.nodeTok = mustIssue(t, f.g, "node", ScopeNode)
	_, f.bothTok = mustIssue(t, f.g, "both", ScopeAgent, ScopeNode)
	_, f.fullTok = mustIssue(t, f.g, "full", ScopeFull)
	_, f.approveTok = mustIssue(t, f.g, "approve", ScopeApprove)
	gr, f.pausedTok = mustIssue(t, f.g, "paused", ScopeFull)
	if err := f.g.Pause(gr.ID); err != nil {
		t.Fatal(err)
	}
	gr, f.revokedTok = mustIssue(t, f.g, "revoked", ScopeFull)
	if err := f.g.Revoke(gr.ID); err != nil {
		t.Fatal(err)
	}
	f.auth = &Auth{
		Grants:       f.g,
		ControlToken: func() string { return f.control },
		WhoIs: func(ctx context.Context, addr netip.AddrPort) *TailnetIdentity {
			f.whoisCalls.Add(1)
			return &TailnetIdentity{User: "alice@example.com", Node: "laptop"}
		},
	}
	return f
}

func (f *authFixture) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/a2a/v1", f.auth.Require(ScopeAgent, whoAmI))
	mux.Handle("/nodes/manifest", f.auth.Require(ScopeNode, whoAmI))
	mux.Handle("/config", f.auth.Local(whoAmI))
	mux.Handle("/remote/approvals", f.auth.Require(ScopeApprove, whoAmI))
	mux.Handle("/pair/whoami", f.auth.AnyGrant(whoAmI))
	mux.Handle("/pair/claim", f.auth.Public(whoAmI))
	return mux
}

type call struct {
	method, path, token, host, origin, fetchSite string
}

func do(t *testing.T, base string, c call) (*http.Response, map[string]any) {
	t.Helper()
	if c.method == "" {
		c.method = "GET"
	}
	req, err := http.NewRequest(c.method, base+c.path, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.host != "" {
		req.Host = c.host
	}
	if c.origin != "" {
		req.Header.Set("Origin", c.origin)
	}
	if c.fetchSite != "" {
		req.Header.Set("Sec-Fetch-Site", c.fetchSite)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var body map[string]any
	json.Unmarshal(b, &body)
	return resp, body
}

// TestScopeTable is the 401-versus-403 table across scopes, statuses and
// surfaces, on a real server.
func TestScopeTable(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t)
	for _, l := range []Listener{ListenerLoopback, ListenerLAN} {
		srv := taggedServer(t, l, f.mux())
		toks := map[string]string{
			"none": "", "garbage": "abc", "agent": f.agentTok, "node": f.nodeTok, "both": f.bothTok,
			"full": f.fullTok, "paused": f.pausedTok, "revoked": f.revokedTok, "control": f.control,
			"approve": f.approveTok,
		}
		// want[path][token] = status
		controlOnLoop := 200
		if l != ListenerLoopback {
			controlOnLoop = 401
		}
		// approve reaches only its own routes, and full does not reach
		// them: no scope implies approve.
		want := map[string]map[string]int{
			"/a2a/v1":           {"none": 401, "garbage": 401, "agent": 200, "node": 403, "both": 200, "full": 200, "paused": 401, "revoked": 401, "control": 401, "approve": 403},
			"/nodes/manifest":   {"none": 401, "garbage": 401, "agent": 403, "node": 200, "both": 200, "full": 200, "paused": 401, "revoked": 401, "control": 401, "approve": 403},
			"/config":           {"none": 401, "garbage": 401, "agent": 403, "node": 403, "both": 403, "full": 200, "paused": 401, "revoked": 401, "control": controlOnLoop, "approve": 403},
			"/remote/approvals": {"none": 401, "garbage": 401, "agent": 403, "node": 403, "both": 403, "full": 403, "paused": 401, "revoked": 401, "control": 401, "approve": 200},
			"/pair/whoami":      {"none": 401, "garbage": 401, "agent": 200, "node": 200, "both": 200, "full": 200, "paused": 401, "revoked": 401, "control": 401, "approve": 200},
			"/pair/claim":       {"none": 200, "garbage": 200, "agent": 200, "node": 200, "both": 200, "full": 200, "paused": 200, "revoked": 200, "control": 200, "approve": 200},
		}
		for path, row := range want {
			for name, status := range row {
				t.Run(fmt.Sprintf("%s%s/%s", l, path, name), func(t *testing.T) {
					resp, body := do(t, srv.URL, call{path: path, token: toks[name]})
					if resp.StatusCode != status {
						t.Fatalf("status %d, want %d (body %v)", resp.StatusCode, status, body)
					}
					ch := resp.Header.Get("WWW-Authenticate")
					switch status {
					case 401:
						if !strings.HasPrefix(ch, `Bearer realm="meshtray"`) {
							t.Errorf("401 without Bearer challenge: %q", ch)
						}
						if gotPaused := challengeParam(ch, "error_description") == pausedDescription; gotPaused != (name == "paused") {
							t.Errorf("paused marker = %v in %q", gotPaused, ch)
						}
					case 403:
						if challengeParam(ch, "error") != "insufficient_scope" {
							t.Errorf("403 challenge %q", ch)
						}
					case 200:
						if path != "/pair/claim" && body["principal"] != true {
							t.Errorf("no principal: %v", body)
						}
						if name == "control" && path == "/config" && body["local"] != true {
							t.Errorf("control token not the local owner: %v", body)
						}
					}
					if status >= 400 && body["error"] == nil {
						t.Errorf("error response without JSON error: %v", body)
					}
				})
			}
		}
	}
}

func TestTokenOnlyFromHeader(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t)
	srv := taggedServer(t, ListenerLAN, f.mux())
	for _, q := range []string{"access_token", "token", "bearer"} {
		resp, _ := do(t, srv.URL, call{path: "/a2a/v1?" + q + "=" + f.agentTok})
		if resp.StatusCode != 401 {
			t.Errorf("token in ?%s= accepted: %d", q, resp.StatusCode)
		}
	}
	for _, h := range []string{"Basic " + f.agentTok, f.agentTok, "Bearer" + f.agentTok, "Bearer  " + f.agentTok + "x"} {
		req, _ := http.NewRequest("GET", srv.URL+"/a2a/v1", nil)
		req.Header.Set("Authorization", h)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("Authorization %q… accepted: %d", h[:8], resp.StatusCode)
		}
	}
	req, _ := http.NewRequest("GET", srv.URL+"/a2a/v1", nil)
	req.Header.Set("Authorization", "bearer "+f.agentTok) // scheme is case-insensitive
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("lower-case scheme refused: %d", resp.StatusCode)
	}
}

// TestDNSRebindingAndCSRF: on loopback, a foreign Host is refused; on every
// listener a cross-site state-changing call is refused; both 403 before
// any token is looked at.
func TestDNSRebindingAndCSRF(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t)
	loop := taggedServer(t, ListenerLoopback, f.mux())
	lan := taggedServer(t, ListenerLAN, f.mux())
	port := loop.URL[strings.LastIndex(loop.URL, ":")+1:]
	for _, tc := range []struct {
		name string
		base string
		c    call
		want int
	}{
		{"loopback 127.0.0.1", loop.URL, call{path: "/config", token: f.control, host: "127.0.0.1:" + port}, 200},
		{"loopback localhost", loop.URL, call{path: "/config", token: f.control, host: "localhost:" + port}, 200},
		{"loopback LOCALHOST no port", loop.URL, call{path: "/config", token: f.control, host: "LOCALHOST"}, 200},
		{"loopback [::1]", loop.URL, call{path: "/config", token: f.control, host: "[::1]:" + port}, 200},
		{"rebinding name", loop.URL, call{path: "/config", token: f.control, host: "evil.example:" + port}, 403},
		{"rebinding public claim", loop.URL, call{method: "POST", path: "/pair/claim", host: "evil.example:" + port}, 403},
		{"rebinding grant", loop.URL, call{path: "/a2a/v1", token: f.agentTok, host: "attacker.test"}, 403},
		{"localhost. with dot", loop.URL, call{path: "/config", token: f.control, host: "localhost.:" + port}, 403},
		{"sub.localhost", loop.URL, call{path: "/config", token: f.control, host: "a.localhost:" + port}, 403},
		{"other loopback ip", loop.URL, call{path: "/config", token: f.control, host: "127.0.0.2:" + port}, 403},
		{"lan any host", lan.URL, call{path: "/a2a/v1", token: f.agentTok, host: "laptop.tailnet.ts.net:47654"}, 200},
		{"csrf origin", loop.URL, call{method: "POST", path: "/config", token: f.control, origin: "https://evil.example"}, 403},
		{"csrf null origin", loop.URL, call{method: "POST", path: "/config", token: f.control, origin: "null"}, 403},
		{"csrf fetch-site cross-site", loop.URL, call{method: "POST", path: "/config", token: f.control, fetchSite: "cross-site"}, 403},
		{"csrf fetch-site same-site", loop.URL, call{method: "PUT", path: "/config", token: f.control, fetchSite: "same-site"}, 403},
		{"csrf on lan", lan.URL, call{method: "POST", path: "/a2a/v1", token: f.agentTok, origin: "http://evil.example"}, 403},
		{"csrf on public", lan.URL, call{method: "POST", path: "/pair/claim", origin: "http://evil.example"}, 403},
		{"same origin post", loop.URL, call{method: "POST", path: "/config", token: f.control, origin: "http://127.0.0.1:" + port}, 200},
		{"same-origin fetch", loop.URL, call{method: "POST", path: "/config", token: f.control, fetchSite: "same-origin"}, 200},
		{"no origin (CLI)", loop.URL, call{method: "DELETE", path: "/config", token: f.control}, 200},
		{"cross-site GET passes the CSRF check", loop.URL, call{path: "/config", token: f.control, origin: "https://evil.example"}, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := do(t, tc.base, tc.c)
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d (%v)", resp.StatusCode, tc.want, body)
			}
		})
	}
}

func TestLocalOwner(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t)
	loop := taggedServer(t, ListenerLoopback, f.mux())
	tail := taggedServer(t, ListenerTailnet, f.mux())
	_, body := do(t, loop.URL, call{path: "/config", token: f.control})
	if body["local"] != true || body["listener"] != "loopback" {
		t.Errorf("local owner principal: %v", body)
	}
	// The control token is worthless off loopback, even from a loopback peer.
	if resp, _ := do(t, tail.URL, call{path: "/config", token: f.control}); resp.StatusCode != 401 {
		t.Errorf("control token on the tailnet listener: %d", resp.StatusCode)
	}
	// A full grant reaches the admin surface everywhere, as itself.
	_, body = do(t, tail.URL, call{path: "/config", token: f.fullTok})
	if body["local"] != false || body["grant"] == "" || body["tailnet_user"] != "alice@example.com" {
		t.Errorf("full grant on tailnet: %v", body)
	}
	// No control token configured: nothing matches, not even an empty one.
	f.control = ""
	for _, tok := range []string{"", " ", "x"} {
		req, _ := http.NewRequest("GET", loop.URL+"/config", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("empty control token, bearer %q: %d", tok, resp.StatusCode)
		}
	}
}

func TestWhoIsOnlyOnTailnet(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t)
	for _, tc := range []struct {
		l     Listener
		token string
		calls int64
	}{
		{ListenerLoopback, "agent", 0},
		{ListenerLAN, "agent", 0},
		{ListenerTailnet, "", 0}, // unauthenticated: no LocalAPI call spent
		{ListenerTailnet, "agent", 1},
	} {
		srv := taggedServer(t, tc.l, f.mux())
		before := f.whoisCalls.Load()
		tok := ""
		if tc.token != "" {
			tok = f.agentTok
		}
		_, body := do(t, srv.URL, call{path: "/a2a/v1", token: tok})
		if n := f.whoisCalls.Load() - before; n != tc.calls {
			t.Errorf("%s token=%q: %d WhoIs calls, want %d", tc.l, tc.token, n, tc.calls)
		}
		if tc.calls == 1 && (body["tailnet_user"] != "alice@example.com" || body["grant"] != f.agentID) {
			t.Errorf("tailnet principal: %v", body)
		}
	}
}

// TestUntaggedListener: without a tag, a loopback peer gets the loopback
// rules (Host check) and a non-loopback one never the local owner.
func TestUntaggedListener(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t)
	srv := httptest.NewServer(f.mux())
	defer srv.Close()
	if resp, _ := do(t, srv.URL, call{path: "/config", token: f.control, host: "evil.example"}); resp.StatusCode != 403 {
		t.Errorf("untagged loopback with a foreign Host: %d", resp.StatusCode)
	}
	if _, body := do(t, srv.URL, call{path: "/config", token: f.control}); body["listener"] != "loopback" {
		t.Errorf("untagged loopback: %v", body)
	}
	for _, remote := range []string{"192.0.2.7:5555", "[2001:db8::1]:443"} {
		r := httptest.NewRequest("GET", "/config", nil)
		r.RemoteAddr = remote
		r.Header.Set("Authorization", "Bearer "+f.control)
		w := httptest.NewRecorder()
		f.mux().ServeHTTP(w, r)
		if w.Code != 401 {
			t.Errorf("control token from untagged %s: %d", remote, w.Code)
		}
	}
}

func TestPauseRevokeImmediateOverHTTP(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t)
	srv := taggedServer(t, ListenerLAN, f.mux())
	if resp, _ := do(t, srv.URL, call{path: "/a2a/v1", token: f.agentTok}); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	f.g.Pause(f.agentID)
	if resp, _ := do(t, srv.URL, call{path: "/a2a/v1", token: f.agentTok}); resp.StatusCode != 401 {
		t.Fatalf("after Pause: %s", resp.Status)
	}
	f.g.Resume(f.agentID)
	if resp, _ := do(t, srv.URL, call{path: "/a2a/v1", token: f.agentTok}); resp.StatusCode != 200 {
		t.Fatalf("after Resume: %s", resp.Status)
	}
	f.g.Revoke(f.agentID)
	if resp, _ := do(t, srv.URL, call{path: "/a2a/v1", token: f.agentTok}); resp.StatusCode != 401 {
		t.Fatalf("after Revoke: %s", resp.Status)
	}
}

func TestHTTPStatus(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]int{
		nil: 200, ErrUnknownToken: 401, ErrPaused: 401, ErrScope: 403, ErrBadCode: 403,
		fmt.Errorf("x: %w", ErrInvalid): 400, ErrNoGrant: 404, ErrNoRequest: 404, ErrDecided: 409,
		ErrIdentityChanged: 409, ErrExpired: 410, ErrRateLimited: 429, ErrBusy: 503, io.EOF: 500,
	} {
		if got := HTTPStatus(err); got != want {
			t.Errorf("HTTPStatus(%v) = %d, want %d", err, got, want)
		}
	}
}

func BenchmarkRequire(b *testing.B) {
	g := newGrants(b, keychain.NewMemory())
	_, tok := mustIssue(b, g, "hot", ScopeAgent)
	a := &Auth{Grants: g}
	h := a.Require(ScopeAgent, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := httptest.NewRequest("POST", "http://127.0.0.1:47654/a2a/v1", nil)
		r = r.WithContext(WithListener(r.Context(), ListenerLoopback))
		r.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		for pb.Next() {
			h.ServeHTTP(w, r)
		}
	})
}

// TestOwnerOnly: the owner-only routes (approvals, grants, pairing,
// approval policies) admit the local owner and refuse every grant, scope
// full included, with 403; a grant that could decide them could approve its
// own delegations or mint tokens that outlive its revocation.
func TestOwnerOnly(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t)
	mux := http.NewServeMux()
	mux.Handle("/approvals/x", f.auth.Owner(whoAmI))
	loop := taggedServer(t, ListenerLoopback, mux)
	tail := taggedServer(t, ListenerTailnet, mux)
	if resp, body := do(t, loop.URL, call{method: "POST", path: "/approvals/x", token: f.control}); resp.StatusCode != 200 || body["local"] != true {
		t.Errorf("local owner: %d %v", resp.StatusCode, body)
	}
	for _, c := range []struct {
		name   string
		base   string
		token  string
		status int
	}{
		{"full grant on loopback", loop.URL, f.fullTok, 403},
		{"full grant on the tailnet", tail.URL, f.fullTok, 403},
		{"agent grant", loop.URL, f.agentTok, 403},
		{"no token", loop.URL, "", 401},
		{"wrong control token", loop.URL, "ctl-wrong", 401},
		{"control token off loopback", tail.URL, f.control, 401},
		{"revoked grant", loop.URL, f.revokedTok, 401},
	} {
		resp, body := do(t, c.base, call{method: "POST", path: "/approvals/x", token: c.token})
		if resp.StatusCode != c.status {
			t.Errorf("%s: %d, want %d (%v)", c.name, resp.StatusCode, c.status, body)
		}
		if c.status == 403 && body["error"] != OwnerOnlyMessage {
			t.Errorf("%s: error %v, want the owner-only message", c.name, body["error"])
		}
	}
}

// TestRefusalsLogged: a refused request that carried a token is logged at
// info (an owner can see tokens being guessed), at most refusalLogBurst
// per window; the next window's first record counts those left at debug.
// A request with no token at all stays at debug.
func TestRefusalsLogged(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t)
	var buf syncBuffer
	f.auth.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv := taggedServer(t, ListenerTailnet, f.mux())
	do(t, srv.URL, call{path: "/a2a/v1"}) // no token: debug
	for range refusalLogBurst + 3 {
		do(t, srv.URL, call{path: "/a2a/v1", token: f.revokedTok})
	}
	if n := strings.Count(buf.String(), `msg="request refused"`); n != refusalLogBurst {
		t.Fatalf("%d info records of refusals, want %d:\n%s", n, refusalLogBurst, buf.String())
	}
	if strings.Contains(buf.String(), f.revokedTok) {
		t.Fatal("a refused token is in the log")
	}
	// The next window: the first record says how many were not logged.
	f.auth.refusalMu.Lock()
	f.auth.refusalWindow = f.auth.refusalWindow.Add(-refusalLogWindow)
	f.auth.refusalMu.Unlock()
	do(t, srv.URL, call{path: "/a2a/v1", token: f.revokedTok})
	if !strings.Contains(buf.String(), "earlier_refusals_not_logged=3") {
		t.Fatalf("no count of the refusals left at debug:\n%s", buf.String())
	}
}

func TestBearerToken(t *testing.T) {
	t.Parallel()
	tok := "mt1_0123456789abcdef_" + strings.Repeat("A", 43)
	for _, tt := range []struct {
		name, header  string
		want          string
		wantPresent   bool
		noHeaderAtAll bool
	}{
		{name: "none", noHeaderAtAll: true},
		{name: "bearer", header: "Bearer " + tok, want: tok, wantPresent: true},
		{name: "scheme any case", header: "bEARER " + tok, want: tok, wantPresent: true},
		{name: "spaces around the token", header: "Bearer   " + tok + "  ", want: tok, wantPresent: true},
		{name: "other scheme", header: "Basic dXNlcjpwYXNz", wantPresent: true},
		{name: "no token", header: "Bearer", wantPresent: true},
		{name: "512 bytes", header: "Bearer " + tok + strings.Repeat(" ", 512-7-len(tok)), want: tok, wantPresent: true},
		{name: "over 512 bytes", header: "Bearer " + tok + strings.Repeat(" ", 513-7-len(tok)), wantPresent: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			if !tt.noHeaderAtAll {
				r.Header.Set("Authorization", tt.header)
			}
			got, present := BearerToken(r)
			if got != tt.want || present != tt.wantPresent {
				t.Fatalf("BearerToken(%q) = %q, %v; want %q, %v", tt.header, got, present, tt.want, tt.wantPresent)
			}
		})
	}
}
