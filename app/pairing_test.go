package app_test

// App-level pairing and attack tests (remote listeners, the pairing flow, bad
// input) on real nodes:
// what the pairing package unit-tests, checked here through the wiring of
// a running `meshtray serve` (routes, listeners, CLI, keychain, logs).

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/keychain"
	"meshtray/pairing"
)

// ptJSON runs `meshtray args... --json` on n and decodes its stdout.
func ptJSON(t *testing.T, n *apptest.Node, out any, args ...string) {
	t.Helper()
	r := n.CLI(append(args, "--json")...)
	if r.Code != 0 {
		t.Fatalf("meshtray %s: exit %d\n%s%s", strings.Join(args, " "), r.Code, r.Stdout, r.Stderr)
	}
	if err := json.Unmarshal([]byte(r.Stdout), out); err != nil {
		t.Fatalf("meshtray %s --json printed %q: %v", strings.Join(args, " "), r.Stdout, err)
	}
}

// ptCLI runs `meshtray args...` on n and fails unless it exits 0.
func ptCLI(t *testing.T, n *apptest.Node, args ...string) apptest.Result {
	t.Helper()
	r := n.CLI(args...)
	if r.Code != 0 {
		t.Fatalf("meshtray %s: exit %d\n%s%s", strings.Join(args, " "), r.Code, r.Stdout, r.Stderr)
	}
	return r
}

// ptStart starts a node with Tailscale off (nothing of this machine's
// tailnet is touched) on the shared private Secret Service.
func ptStart(t *testing.T, name string, extra ...string) *apptest.Node {
	t.Helper()
	return apptest.StartNode(t, apptest.Options{Name: name, Config: "tailscale = false\n", Args: extra})
}

// ptID is `meshtray id --json` of n.
type ptID struct{ ID, Fingerprint, Name string }

func ptIdentity(t *testing.T, n *apptest.Node) ptID {
	t.Helper()
	var id ptID
	ptJSON(t, n, &id, "id")
	return id
}

// ptBackground runs `meshtray args...` in the background; wait returns its result.
func ptBackground(t *testing.T, args ...string) (wait func() apptest.Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	return ptBackgroundCmd(t, apptest.Command(ctx, nil, args...), cancel)
}

// ptBackgroundCmd starts cmd (built with a context that cancel ends) and
// returns a func waiting for its result. Cleanup kills it if nobody waited.
func ptBackgroundCmd(t *testing.T, cmd *exec.Cmd, cancel context.CancelFunc) (wait func() apptest.Result) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan apptest.Result, 1)
	go func() {
		err := cmd.Wait()
		cancel()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			code = -1
		}
		done <- apptest.Result{Stdout: out.String(), Stderr: errb.String(), Code: code}
	}()
	var res *apptest.Result
	t.Cleanup(func() {
		if res == nil {
			cancel()
			<-done
		}
	})
	return func() apptest.Result {
		if res == nil {
			r := <-done
			res = &r
		}
		return *res
	}
}

// ptPairing is one full CLI pairing of b (claimant) with a (issuer).
type ptPairing struct {
	Code, SAS, URL string
	Join           apptest.Result // b's `pair --join` output
	Start          apptest.Result // a's `pair --json` output
}

// ptPairByCLI runs the CLI flow: a `pair --json`, b `pair --join -
// --give GIVE` with the URL on stdin (waits for the owner), a `approvals --json`, a `approve ID
// --scopes SCOPES`. url overrides the URL b joins (a's loopback one by
// default); code overrides the code.
func ptPairByCLI(t *testing.T, a, b *apptest.Node, scopes, give string) ptPairing {
	t.Helper()
	var p ptPairing
	var sess struct {
		URL         string   `json:"url"`
		URLs        []string `json:"urls"`
		Code        string   `json:"code"`
		Fingerprint string   `json:"fingerprint"`
	}
	p.Start = ptCLI(t, a, "pair", "--json")
	if err := json.Unmarshal([]byte(p.Start.Stdout), &sess); err != nil {
		t.Fatalf("pair --json: %q: %v", p.Start.Stdout, err)
	}
	p.Code, p.URL = sess.Code, sess.URLs[len(sess.URLs)-1]
	// The URL goes in on stdin (--join -): the code in it stays out of the
	// process list, where other users of the machine could read it.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cmd := apptest.Command(ctx, nil, "pair", "--join", "-", "--give", give, "--state-dir", b.StateDir)
	cmd.Stdin = strings.NewReader(p.URL + "\n")
	wait := ptBackgroundCmd(t, cmd, cancel)
	if argv, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid)); err == nil && strings.Contains(string(argv), p.Code) {
		t.Errorf("the one-time code is in the joining process's argv: %q", argv)
	}
	var pa app.Approval
	apptest.WaitFor(t, 30*time.Second, "the pairing request on "+a.StateDir, func() bool {
		var as []app.Approval
		ptJSON(t, a, &as, "approvals")
		for _, x := range as {
			if x.Kind == app.KindPairing {
				pa = x
				return true
			}
		}
		return false
	})
	p.SAS = pa.SAS
	ptCLI(t, a, "approve", pa.ID, "--scopes", scopes)
	p.Join = wait()
	if p.Join.Code != 0 {
		t.Fatalf("pair --join: exit %d\n%s%s", p.Join.Code, p.Join.Stdout, p.Join.Stderr)
	}
	if !strings.Contains(p.Join.Stdout, "Verification code: "+p.SAS[:3]+" "+p.SAS[3:]) {
		t.Fatalf("the joining CLI showed another verification code than the owner's %s:\n%s", p.SAS, p.Join.Stdout)
	}
	return p
}

// ptNodeKeychain opens n's items in the shared private Secret Service:
// service "meshtray:<8 hex of sha256(abs state dir)>" (ARCHITECTURE.md,
// keychain), the node's own lock file.
func ptNodeKeychain(t *testing.T, stateDir string) keychain.Store {
	t.Helper()
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256([]byte(abs))
	ks, err := keychain.OpenOS("meshtray:"+hex.EncodeToString(h[:4]), filepath.Join(stateDir, "keychain.lock"))
	if err != nil {
		t.Fatalf("open the node's keychain: %v", err)
	}
	return ks
}

// ptHeldToken reads the raw token n holds from peer (keychain item held/<id>).
func ptHeldToken(t *testing.T, n *apptest.Node, peerID string) string {
	t.Helper()
	v, err := ptNodeKeychain(t, n.StateDir).Get("held/" + peerID)
	if err != nil {
		t.Fatalf("held/%s: %v", peerID, err)
	}
	var rec struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(v, &rec); err != nil || !strings.HasPrefix(rec.Token, "mt1_") {
		t.Fatalf("held/%s has no token: %v", peerID, err)
	}
	return rec.Token
}

// call sends one request with an optional bearer token, Host and Origin.
type ptReq struct {
	method, path, body string
	token              string
	host, origin, site string // Host header, Origin, Sec-Fetch-Site
}

func ptDo(t *testing.T, base string, r ptReq) (int, http.Header, string) {
	t.Helper()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.method, base+r.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if r.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	if r.host != "" {
		req.Host = r.host
	}
	if r.origin != "" {
		req.Header.Set("Origin", r.origin)
	}
	if r.site != "" {
		req.Header.Set("Sec-Fetch-Site", r.site)
	}
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, resp.Header, string(b)
}

// TestRebindingAndCrossSiteOnEveryRoute: on the loopback listener every
// route, public ones and the phone page included, refuses a Host that is
// not localhost (DNS rebinding) and every state-changing route refuses a
// cross-site Origin or Sec-Fetch-Site (CSRF), whatever credential the
// request carries; the same request with the right Host and no foreign
// origin gets its normal answer, so the check is the refusal's only cause.
func TestRebindingAndCrossSiteOnEveryRoute(t *testing.T) {
	n := ptStart(t, "desk")
	ptCLI(t, n, "a2a", "on")
	d, err := app.ReadDaemonInfo(n.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	var full app.GrantToken
	ptJSON(t, n, &full, "grant", "create", "--name", "admin", "--scope", "full")
	owner, grant := d.Token, full.Token
	port := strconv.Itoa(n.Port)

	routes := []struct {
		method, path, body, token string
		want                      int // the normal answer
	}{
		{"GET", "/status", "", owner, 200},
		{"GET", "/a2a/status", "", owner, 200},
		{"POST", "/a2a/status", `{"enabled":true}`, owner, 200},
		{"GET", "/config", "", owner, 200},
		{"POST", "/config", `{}`, owner, 200},
		{"GET", "/approvals", "", owner, 200},
		{"POST", "/approvals/nope", `{"decision":"deny"}`, owner, 404},
		{"GET", "/nodes/devices", "", owner, 200},
		{"POST", "/nodes/devices/nope", `{"action":"pause"}`, owner, 404},
		{"GET", "/mesh/peers", "", owner, 200},
		{"POST", "/mesh/peers", `{}`, owner, 400},
		{"POST", "/pair/sessions", "", owner, 201},
		{"POST", "/pair/join", `{}`, owner, 200}, // NDJSON: the error is a line of the answer
		{"GET", "/status", "", grant, 200},       // a full grant reaches the admin surface
		{"GET", "/nodes/manifest", "", grant, 200},
		{"POST", "/nodes/invoke", `{"capability":"nope"}`, grant, 404},
		{"POST", "/a2a/v1", `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"nope"}}`, grant, 200},
		{"GET", "/pair/whoami", "", grant, 200},
		{"GET", "/pair", "", "", 200},
		{"GET", "/pair/app/pair.js", "", "", 200},
		{"GET", "/pair/issuer", "", "", 200},
		{"POST", "/pair/claim", `{}`, "", 400},
		{"GET", "/pair/status/nope", "", "", 404},
		{"POST", "/pair/revoked", `{}`, "", 202},
		{"GET", "/mesh/hello", "", "", 200},
		{"GET", "/.well-known/agent-card.json", "", "", 200},
	}
	// The claim, status and revocation-notice routes share a per-source
	// rate limit: there, 429 is a normal answer too (not a 403).
	limited := map[string]bool{"/pair/claim": true, "/pair/status/nope": true, "/pair/revoked": true}
	for _, rt := range routes {
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			normal := func(got int) bool {
				return got == rt.want || (limited[rt.path] && got == http.StatusTooManyRequests)
			}
			base := ptReq{method: rt.method, path: rt.path, body: rt.body, token: rt.token}
			if got, _, body := ptDo(t, n.BaseURL, base); !normal(got) {
				t.Fatalf("normal request: HTTP %d, want %d: %s", got, rt.want, body)
			}
			for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.1.evil.example:" + port, "localhost.evil.example", "[::2]:" + port} {
				r := base
				r.host = host
				if got, _, _ := ptDo(t, n.BaseURL, r); got != http.StatusForbidden {
					t.Errorf("Host %s: HTTP %d, want 403", host, got)
				}
			}
			for _, host := range []string{"localhost:" + port, "LOCALHOST", "[::1]:" + port} {
				r := base
				r.host = host
				if got, _, _ := ptDo(t, n.BaseURL, r); !normal(got) {
					t.Errorf("Host %s: HTTP %d, want %d", host, got, rt.want)
				}
			}
			if rt.method == "GET" {
				return
			}
			for _, x := range []struct{ origin, site string }{
				{"https://evil.example", ""},
				{"http://127.0.0.1:" + strconv.Itoa(n.Port+1), ""}, // another local port is another origin
				{"null", ""},
				{"", "cross-site"},
				{"https://evil.example", "cross-site"},
			} {
				r := base
				r.origin, r.site = x.origin, x.site
				if got, _, _ := ptDo(t, n.BaseURL, r); got != http.StatusForbidden {
					t.Errorf("Origin %q Sec-Fetch-Site %q: HTTP %d, want 403", x.origin, x.site, got)
				}
			}
			r := base
			r.origin, r.site = "http://127.0.0.1:"+port, "same-origin"
			if got, _, _ := ptDo(t, n.BaseURL, r); !normal(got) {
				t.Errorf("same-origin request: HTTP %d, want %d", got, rt.want)
			}
		})
	}
}

// TestCLIPairingKeepsSecretsOutOfLogs runs a full CLI pairing of two nodes
// (`pair --json`, `pair --join`, `approvals`, `approve`, mutual) and then
// greps both nodes' logs (debug level) for every secret of the flow: the
// code, the SAS, both grant tokens and both control tokens. It also checks
// that no token reaches the CLI's own output.
func TestCLIPairingKeepsSecretsOutOfLogs(t *testing.T) {
	a := ptStart(t, "alpha")
	b := ptStart(t, "bravo")
	p := ptPairByCLI(t, a, b, "agent,node", "agent")
	ida, idb := ptIdentity(t, a), ptIdentity(t, b)

	var da, db app.Devices
	ptJSON(t, a, &da, "devices")
	ptJSON(t, b, &db, "devices")
	if len(da.Issued) != 1 || da.Issued[0].PeerID != idb.ID || len(da.Held) != 1 || da.Held[0].PeerID != idb.ID {
		t.Fatalf("alpha's devices after a mutual pairing: %+v", da)
	}
	if len(db.Issued) != 1 || db.Issued[0].PeerID != ida.ID || len(db.Held) != 1 || db.Held[0].PeerID != ida.ID {
		t.Fatalf("bravo's devices after a mutual pairing: %+v", db)
	}
	tokAB := ptHeldToken(t, b, ida.ID) // alpha's grant, held by bravo
	tokBA := ptHeldToken(t, a, idb.ID) // bravo's grant, held by alpha
	// The held tokens work where they were issued.
	for _, c := range []struct {
		node *apptest.Node
		tok  string
	}{{a, tokAB}, {b, tokBA}} {
		if st, _, body := ptDo(t, c.node.BaseURL, ptReq{method: "GET", path: "/pair/whoami", token: c.tok}); st != 200 {
			t.Fatalf("a held token is refused by its issuer: %d %s", st, body)
		}
	}
	ctlA, _ := app.ReadDaemonInfo(a.StateDir)
	ctlB, _ := app.ReadDaemonInfo(b.StateDir)
	secrets := map[string]string{
		"pairing code": p.Code, "alpha's grant token": tokAB, "bravo's grant token": tokBA,
		"alpha's control token": ctlA.Token, "bravo's control token": ctlB.Token,
	}
	a.Stop()
	b.Stop()
	sasRE := regexp.MustCompile(`(^|\D)` + p.SAS + `(\D|$)`)
	for name, logs := range map[string]string{"alpha": a.Logs(), "bravo": b.Logs()} {
		// The log covers the flow (else the check would prove nothing).
		if !strings.Contains(logs, "paired") || !strings.Contains(logs, "grant issued") {
			t.Fatalf("%s's log does not record the pairing\n%s", name, logs)
		}
		for what, s := range secrets {
			if strings.Contains(logs, s) {
				t.Errorf("%s's log contains the %s", name, what)
			}
		}
		if sasRE.MatchString(logs) {
			t.Errorf("%s's log contains the SAS %s", name, p.SAS)
		}
	}
	for what, s := range secrets {
		if what == "pairing code" {
			continue // `pair` prints it: that is its job
		}
		for _, out := range []string{p.Start.Stdout, p.Start.Stderr, p.Join.Stdout, p.Join.Stderr} {
			if strings.Contains(out, s) {
				t.Errorf("a pairing CLI printed the %s", what)
			}
		}
	}
}

// ptPhoneClaim pairs like the phone page does, in Go: a claim with a fresh
// nonce, the SAS checked, the owner's approval through the CLI, the token
// collected from the status long-poll.
func ptPhoneClaim(t *testing.T, n *apptest.Node, name string, scopes string) (grantID, token string) {
	t.Helper()
	cr := ptPhoneApprove(t, n, name, scopes)
	st, _, resp := ptDo(t, n.BaseURL, ptReq{method: "GET", path: "/pair/status/" + cr.RequestID, token: cr.PollToken})
	var sr pairing.StatusResponse
	json.Unmarshal([]byte(resp), &sr)
	if st != 200 || sr.Status != pairing.StatusApproved || sr.Token == "" {
		t.Fatalf("status after approval: %d %s", st, resp)
	}
	return sr.GrantID, sr.Token
}

// ptApproveUncollected claims and approves like ptPhoneClaim, and never
// collects the token; it returns the grant's ID (from the approval's
// answer in the node's log of decisions: the devices list once collected).
func ptApproveUncollected(t *testing.T, n *apptest.Node, name string, scopes string) string {
	t.Helper()
	ptPhoneApprove(t, n, name, scopes)
	var id string
	apptest.WaitFor(t, 10*time.Second, "the approval's grant in the log", func() bool {
		logs := n.Logs()
		i := strings.Index(logs, "pairing request approved")
		if i < 0 {
			return false
		}
		line := logs[i:]
		if j := strings.IndexByte(line, '\n'); j >= 0 {
			line = line[:j]
		}
		k := strings.Index(line, "grant.id=")
		if k < 0 {
			return false
		}
		id = strings.Fields(line[k+len("grant.id="):])[0]
		return true
	})
	return id
}

// ptPhoneApprove claims n's new code like the phone page and approves the
// request through the CLI; it returns the claim's answer (request id, poll
// token) for collecting the token.
func ptPhoneApprove(t *testing.T, n *apptest.Node, name string, scopes string) pairing.ClaimResponse {
	t.Helper()
	var sess struct {
		Code        string `json:"code"`
		Fingerprint string `json:"fingerprint"`
	}
	ptJSON(t, n, &sess, "pair")
	var nonce [32]byte
	rand.Read(nonce[:])
	c := pairing.ClaimRequest{Code: sess.Code, Name: name, OS: "Android 14", Nonce: base64.RawURLEncoding.EncodeToString(nonce[:]),
		RequestedScopes: pairing.Scopes{pairing.ScopeAgent, pairing.ScopeNode}}
	body, _ := json.Marshal(c)
	st, _, resp := ptDo(t, n.BaseURL, ptReq{method: "POST", path: "/pair/claim", body: string(body)})
	if st != 200 {
		t.Fatalf("claim: %d %s", st, resp)
	}
	var cr pairing.ClaimResponse
	json.Unmarshal([]byte(resp), &cr)
	if pairing.SAS(sess.Fingerprint, "", c.Nonce, cr.ServerNonce, cr.RequestID) != cr.SAS {
		t.Fatal("the claim's SAS is not the one the phone computes")
	}
	var pa app.Approval
	apptest.WaitFor(t, 20*time.Second, "the phone's pairing request", func() bool {
		var as []app.Approval
		ptJSON(t, n, &as, "approvals")
		for _, x := range as {
			if x.Kind == app.KindPairing && x.Peer == name {
				pa = x
				return true
			}
		}
		return false
	})
	ptCLI(t, n, "approve", pa.ID, "--scopes", scopes)
	return cr
}

// TestRestartKeepsEveryGrant stops a node and starts it again on the same
// state dir with the real Secret Service: the identity, every issued grant
// (a phone's, a CLI-minted one, a paused one, a paired meshtray's) with its
// scopes and status, and the grant it holds from its peer all survive, and
// every token works (or is refused, if paused) exactly as before.
func TestRestartKeepsEveryGrant(t *testing.T) {
	a := ptStart(t, "alpha")
	b := ptStart(t, "bravo")
	ptPairByCLI(t, b, a, "agent", "agent,node") // a claims b's code: a holds b's grant, b holds a's
	phoneID, phoneTok := ptPhoneClaim(t, a, "pixel", "agent,node")
	var minted, paused app.GrantToken
	ptJSON(t, a, &minted, "grant", "create", "--name", "script", "--scope", "node")
	ptJSON(t, a, &paused, "grant", "create", "--name", "old laptop", "--scope", "agent")
	ptCLI(t, a, "grant", "pause", paused.ID)
	idA, idB := ptIdentity(t, a), ptIdentity(t, b)
	tokBA := ptHeldToken(t, b, idA.ID) // a's grant held by b

	var before app.Devices
	ptJSON(t, a, &before, "devices")
	if len(before.Issued) != 4 || len(before.Held) != 1 {
		t.Fatalf("before the restart: %+v", before)
	}
	if err := a.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	a2 := apptest.StartNode(t, apptest.Options{Name: "alpha", StateDir: a.StateDir, Config: "tailscale = false\n"})
	if id := ptIdentity(t, a2); id != idA {
		t.Fatalf("identity after restart %+v, want %+v", id, idA)
	}
	var after app.Devices
	ptJSON(t, a2, &after, "devices")
	key := func(g pairing.Grant) string {
		return fmt.Sprint(g.ID, g.PeerID, g.Name, g.OS, g.Scopes, g.Status, g.Policy, g.Created.UnixNano())
	}
	if !slices.Equal(ptSorted(before.Issued, key), ptSorted(after.Issued, key)) {
		t.Errorf("issued grants changed across the restart:\nbefore %+v\nafter  %+v", before.Issued, after.Issued)
	}
	if len(after.Held) != 1 || after.Held[0].PeerID != idB.ID || !slices.Equal(after.Held[0].Scopes, before.Held[0].Scopes) {
		t.Errorf("held grants after restart %+v, want %+v", after.Held, before.Held)
	}
	if tok := ptHeldToken(t, a2, idB.ID); ptWhoami(t, b, tok) != 200 {
		t.Error("the grant alpha holds from bravo no longer works after alpha's restart")
	}
	for _, c := range []struct {
		what, tok, grant string
		want             int
	}{
		{"the phone's token", phoneTok, phoneID, 200},
		{"the CLI-minted token", minted.Token, minted.ID, 200},
		{"bravo's token", tokBA, "", 200},
		{"the paused token", paused.Token, paused.ID, 401},
	} {
		st, _, body := ptDo(t, a2.BaseURL, ptReq{method: "GET", path: "/pair/whoami", token: c.tok})
		if st != c.want {
			t.Errorf("%s after restart: HTTP %d, want %d: %s", c.what, st, c.want, body)
		}
		if c.want == 200 && c.grant != "" && !strings.Contains(body, `"grant_id":"`+c.grant+`"`) {
			t.Errorf("%s authenticates as another grant: %s", c.what, body)
		}
	}
}

func ptWhoami(t *testing.T, n *apptest.Node, tok string) int {
	t.Helper()
	st, _, _ := ptDo(t, n.BaseURL, ptReq{method: "GET", path: "/pair/whoami", token: tok})
	return st
}

func ptSorted[T any](xs []T, f func(T) string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	slices.Sort(out)
	return out
}

// TestPausedAndRevokedRefusedEverywhere: a paused or revoked grant is
// refused with 401 on every surface it reached, on the very next request
// after the CLI returns, and a resumed one works again.
func TestPausedAndRevokedRefusedEverywhere(t *testing.T) {
	n := ptStart(t, "desk")
	ptCLI(t, n, "a2a", "on")
	phoneID, phoneTok := ptPhoneClaim(t, n, "pixel", "agent,node")
	var full app.GrantToken
	ptJSON(t, n, &full, "grant", "create", "--name", "admin", "--scope", "full")

	rpc := `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"nope"}}`
	surfaces := []struct {
		method, path, body string
		fullOnly           bool
		want               int // while active
	}{
		{"POST", "/a2a/v1", rpc, false, 200},
		{"GET", "/nodes/manifest", "", false, 200},
		{"POST", "/nodes/invoke", `{"capability":"nope"}`, false, 404},
		{"GET", "/pair/whoami", "", false, 200},
		{"POST", "/pair/reciprocate", `{}`, false, 403}, // a phone's grant is bound to no device
		{"GET", "/status", "", true, 200},
		{"GET", "/nodes/devices", "", true, 200},
		{"POST", "/a2a/status", `{"enabled":true}`, true, 200},
	}
	check := func(t *testing.T, tok string, isFull bool, phase string, want func(active int) int, desc string) {
		t.Helper()
		for _, s := range surfaces {
			if s.fullOnly && !isFull {
				continue
			}
			w := want(s.want)
			st, h, body := ptDo(t, n.BaseURL, ptReq{method: s.method, path: s.path, body: s.body, token: tok})
			if st != w {
				t.Errorf("%s: %s %s: HTTP %d, want %d: %s", phase, s.method, s.path, st, w, body)
				continue
			}
			if st == 401 {
				c := h.Get("WWW-Authenticate")
				if !strings.HasPrefix(c, `Bearer realm="meshtray"`) || (desc != "" && !strings.Contains(c, desc)) {
					t.Errorf("%s: %s %s: challenge %q, want one with %q", phase, s.method, s.path, c, desc)
				}
			}
		}
	}
	active := func(w int) int { return w }
	refused := func(int) int { return 401 }
	for _, g := range []struct {
		name, id, tok string
		full          bool
	}{{"phone", phoneID, phoneTok, false}, {"full", full.ID, full.Token, true}} {
		t.Run(g.name, func(t *testing.T) {
			check(t, g.tok, g.full, "active", active, "")
			ptCLI(t, n, "grant", "pause", g.id)
			check(t, g.tok, g.full, "paused", refused, `error_description="grant paused"`)
			ptCLI(t, n, "grant", "resume", g.id)
			check(t, g.tok, g.full, "resumed", active, "")
			ptCLI(t, n, "grant", "revoke", g.id)
			check(t, g.tok, g.full, "revoked", refused, `error="invalid_token"`)
			var d app.Devices
			ptJSON(t, n, &d, "devices")
			if slices.ContainsFunc(d.Issued, func(x pairing.Grant) bool { return x.ID == g.id }) {
				t.Errorf("revoked grant %s still listed", g.id)
			}
		})
	}
}

// TestFullGrantCannotConsent: a grant with scope full reads the admin
// surface but cannot decide approvals (its own delegation included), mint
// or change grants, start a pairing, set approval policies or redirect
// approved work: those stay with the owner at the device (403). Without
// this a full grant approved its own delegation and minted a grant that
// kept working after the full grant was revoked.
func TestFullGrantCannotConsent(t *testing.T) {
	n := ptStart(t, "desk")
	ptCLI(t, n, "a2a", "on")
	var full app.GrantToken
	ptJSON(t, n, &full, "grant", "create", "--name", "admin", "--scope", "full")
	tok := full.Token

	// Its own delegation waits for approval...
	sent := make(chan string, 1)
	go func() {
		_, _, body := ptDo(t, n.BaseURL, ptReq{method: "POST", path: "/a2a/v1", token: tok,
			body: `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"data","data":{"capability":"device.info"}}]}}}`})
		sent <- body
	}()
	var as []app.Approval
	apptest.WaitFor(t, 20*time.Second, "the delegation's approval", func() bool {
		code, _, body := ptDo(t, n.BaseURL, ptReq{method: "GET", path: "/approvals", token: tok})
		return code == 200 && json.Unmarshal([]byte(body), &as) == nil && len(as) == 1
	})
	if as[0].GrantID != full.ID {
		t.Fatalf("approval %+v is not the full grant's", as[0])
	}
	for _, r := range []ptReq{
		{method: "POST", path: "/approvals/" + as[0].ID, body: `{"decision":"approve"}`},
		{method: "POST", path: "/nodes/devices", body: `{"name":"minted","scopes":["full"]}`},
		{method: "POST", path: "/nodes/devices/" + full.ID, body: `{"approval":"allow"}`},
		{method: "POST", path: "/config", body: `{"capability_policies":{"device.info":"allow"}}`},
		{method: "POST", path: "/pair/sessions"},
		{method: "POST", path: "/pair/join", body: `{}`},
		{method: "POST", path: "/a2a/forward", body: `{"token":"x"}`},
	} {
		r.token = tok
		if code, _, body := ptDo(t, n.BaseURL, r); code != http.StatusForbidden || !strings.Contains(body, "only this device's owner") {
			t.Errorf("%s %s with a full grant: HTTP %d %s, want 403", r.method, r.path, code, body)
		}
	}
	if got := n.CLI("grant", "list", "--json"); !strings.Contains(got.Stdout, full.ID) || strings.Contains(got.Stdout, "minted") {
		t.Errorf("grants after the refused mint:\n%s", got.Stdout)
	}
	// The owner decides, and the log says so.
	ptCLI(t, n, "deny", as[0].ID)
	select {
	case body := <-sent:
		if !strings.Contains(body, `"rejected"`) {
			t.Errorf("the denied delegation: %s", body)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("message/send did not return after the owner denied")
	}
	apptest.WaitFor(t, 10*time.Second, "the decision in the log", func() bool {
		return strings.Contains(n.Logs(), `msg="approval decided" id=`+as[0].ID) && strings.Contains(n.Logs(), "decision=deny")
	})
}
