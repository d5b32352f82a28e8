package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/app/cli"
	"meshtray/pairing"
)

// grantToken mints a grant through the CLI and returns its id and token.
func grantToken(t *testing.T, n *apptest.Node, args ...string) (id, token string) {
	t.Helper()
	r := n.CLI(append([]string{"grant", "create", "--json"}, args...)...)
	if r.Code != 0 {
		t.Fatalf("grant create: exit %d: %s", r.Code, r.Stderr)
	}
	var tok app.GrantToken
	if err := json.Unmarshal([]byte(r.Stdout), &tok); err != nil || tok.Token == "" {
		t.Fatalf("grant create --json printed %q: %v", r.Stdout, err)
	}
	return tok.ID, tok.Token
}

// pendingApprovals reads `meshtray approvals --json`.
func pendingApprovals(t *testing.T, n *apptest.Node) []app.Approval {
	t.Helper()
	r := n.CLI("approvals", "--json")
	if r.Code != 0 {
		t.Fatalf("approvals: exit %d: %s", r.Code, r.Stderr)
	}
	var as []app.Approval
	if err := json.Unmarshal([]byte(r.Stdout), &as); err != nil {
		t.Fatalf("approvals --json printed %q: %v", r.Stdout, err)
	}
	return as
}

// waitApproval waits for one pending approval of kind and returns it.
func waitApproval(t *testing.T, n *apptest.Node, kind app.ApprovalKind) app.Approval {
	t.Helper()
	var got app.Approval
	apptest.WaitFor(t, 20*time.Second, "a pending "+string(kind)+" approval", func() bool {
		for _, a := range pendingApprovals(t, n) {
			if a.Kind == kind {
				got = a
				return true
			}
		}
		return false
	})
	return got
}

func httpGet(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func deviceInfoMessage() *a2a.Message {
	return a2a.NewMessage(a2a.MessageRoleUser, a2a.DataPart{Data: map[string]any{"capability": "device.info"}})
}

// TestServeEndToEnd is the headless node end to end: start the node, switch A2A on,
// hand a token to an agent, and the official a2a-go client delegates
// device.info, approved by the owner from the CLI, and gets the result; the
// grant and the A2A setting survive a restart (real Secret Service).
func TestServeEndToEnd(t *testing.T) {
	stateDir := t.TempDir()
	n := apptest.StartNode(t, apptest.Options{StateDir: stateDir, Name: "laptop"})

	if code, _ := httpGet(t, n.BaseURL+"/.well-known/agent-card.json"); code != http.StatusNotFound {
		t.Fatalf("card while unpublished: HTTP %d, want 404", code)
	}
	grantID, token := grantToken(t, n, "--name", "agent-1", "--scope", "agent")
	_, nodeToken := grantToken(t, n, "--name", "phone", "--scope", "node")

	if r := n.CLI("a2a", "on"); r.Code != 0 || !strings.Contains(r.Stdout, "published") {
		t.Fatalf("a2a on: exit %d: %s %s", r.Code, r.Stdout, r.Stderr)
	}
	code, body := httpGet(t, n.BaseURL+"/.well-known/agent-card.json")
	if code != http.StatusOK {
		t.Fatalf("card while published: HTTP %d", code)
	}
	var card a2a.AgentCard
	if err := json.Unmarshal(body, &card); err != nil {
		t.Fatal(err)
	}
	if card.ProtocolVersion != "0.3.0" || card.URL != n.BaseURL+"/a2a/v1" || card.Name != "laptop" || !card.Capabilities.Streaming {
		t.Fatalf("card = %+v", card)
	}

	// Refusals at the real auth middleware: no token 401, node-only grant 403.
	for _, tc := range []struct {
		token string
		want  int
	}{{"", http.StatusUnauthorized}, {"mt1_0000000000000000_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", http.StatusUnauthorized}, {nodeToken, http.StatusForbidden}} {
		req, _ := http.NewRequest(http.MethodPost, n.BaseURL+"/a2a/v1", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"x"}}`))
		req.Header.Set("Content-Type", "application/json")
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("token %.8q: HTTP %d, want %d", tc.token, resp.StatusCode, tc.want)
		}
		if tc.want == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("401 without a Bearer challenge: %q", resp.Header.Get("WWW-Authenticate"))
		}
	}

	client := apptest.A2AClient(t, n.BaseURL, token)
	type result struct {
		res a2a.SendMessageResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := client.SendMessage(context.Background(), &a2a.MessageSendParams{Message: deviceInfoMessage()})
		done <- result{res, err}
	}()
	ap := waitApproval(t, n, app.KindDelegation)
	if ap.GrantID != grantID || ap.Peer != "agent-1" || !strings.Contains(ap.Summary, "device.info") || ap.Via != "loopback" {
		t.Fatalf("approval = %+v", ap)
	}
	if r := n.CLI("approve", ap.ID); r.Code != 0 {
		t.Fatalf("approve: exit %d: %s", r.Code, r.Stderr)
	}
	var res result
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("message/send did not return after approval")
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	task, ok := res.res.(*a2a.Task)
	if !ok || task.Status.State != a2a.TaskStateCompleted || len(task.Artifacts) == 0 {
		t.Fatalf("result = %#v", res.res)
	}
	host, _ := os.Hostname()
	if !strings.Contains(mustJSON(t, task.Artifacts), host) {
		t.Fatalf("artifact does not carry the host name %q: %s", host, mustJSON(t, task.Artifacts))
	}
	if len(pendingApprovals(t, n)) != 0 {
		t.Fatal("approval still pending after the decision")
	}

	// A restart keeps the grant (OS keychain) and the A2A setting.
	if err := n.Stop(); err != nil {
		t.Fatalf("stop: %v\n%s", err, n.Logs())
	}
	n2 := apptest.StartNode(t, apptest.Options{StateDir: stateDir, Name: "laptop"})
	if r := n2.CLI("a2a", "status", "--json"); !strings.Contains(r.Stdout, `"enabled": true`) {
		t.Fatalf("a2a setting lost across restart: %s", r.Stdout)
	}
	r := n2.CLI("grant", "list", "--json")
	var grants []map[string]any
	if err := json.Unmarshal([]byte(r.Stdout), &grants); err != nil || len(grants) != 2 {
		t.Fatalf("grants after restart: %s (%v)", r.Stdout, err)
	}
	if r := n2.CLI("grant", "set", grantID, "--approval", "allow"); r.Code != 0 {
		t.Fatalf("grant set: %s", r.Stderr)
	}
	res2, err := apptest.A2AClient(t, n2.BaseURL, token).SendMessage(context.Background(), &a2a.MessageSendParams{Message: deviceInfoMessage()})
	if err != nil {
		t.Fatalf("token after restart: %v", err)
	}
	if tk, ok := res2.(*a2a.Task); !ok || tk.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("after restart with policy allow: %#v", res2)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSecondServeRefused(t *testing.T) {
	n := apptest.StartNode(t, apptest.Options{Keychain: "file"})
	r := apptest.RunCLI(t, nil, "serve", "--state-dir", n.StateDir, "--port", "0", "--keychain", "file")
	want := fmt.Sprintf("already running (pid %d)", n.Cmd.Process.Pid)
	if r.Code == 0 || !strings.Contains(r.Stderr, want) {
		t.Fatalf("second serve: exit %d, stderr %q; want non-zero and %q", r.Code, r.Stderr, want)
	}
}

// TestNoOSKeychain: with no Secret Service reachable, serve refuses and
// names --keychain file (exit 3); a config file that says file starts.
func TestNoOSKeychain(t *testing.T) {
	env := []string{"DBUS_SESSION_BUS_ADDRESS=unix:path=" + t.TempDir() + "/no-bus"}
	r := apptest.RunCLI(t, env, "serve", "--state-dir", t.TempDir(), "--port", "0")
	if r.Code != cli.ExitNoKeychain || !strings.Contains(r.Stderr, "--keychain file") {
		t.Fatalf("exit %d, stderr %q; want %d naming --keychain file", r.Code, r.Stderr, cli.ExitNoKeychain)
	}
	n := apptest.StartNode(t, apptest.Options{Keychain: "config", Config: `keychain = "file"`, Env: env})
	if r := n.CLI("status"); r.Code != 0 {
		t.Fatalf("status: %s", r.Stderr)
	}
	if _, err := os.Stat(n.StateDir + "/keychain.json"); err != nil {
		t.Fatalf("file keychain not used: %v", err)
	}
}

func TestCLINotRunning(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"status"}, {"approvals", "--json"}, {"grant", "list"}, {"a2a", "on"}} {
		r := apptest.RunCLI(t, nil, append(args, "--state-dir", dir)...)
		if r.Code != cli.ExitNotRunning || !strings.Contains(r.Stderr, "not running") || !strings.Contains(r.Stderr, "meshtray serve") {
			t.Errorf("%v: exit %d, stderr %q", args, r.Code, r.Stderr)
		}
	}
	r := apptest.RunCLI(t, nil, "grant", "create", "--scope", "agent,bogus", "--name", "x", "--state-dir", dir)
	if r.Code != cli.ExitUsage {
		t.Errorf("bad scope: exit %d, want %d (usage): %s", r.Code, cli.ExitUsage, r.Stderr)
	}
}

// TestShutdownStopsLiveTasksAndKeepsThem: SIGTERM kills a running task's
// work and ends its stream with the restarting error, not with a final
// state the task never reaches (the database keeps it as written); the
// node exits 0; after the restart the task reads failed, "the node
// restarted while this ran".
func TestShutdownStopsLiveTasksAndKeepsThem(t *testing.T) {
	n := apptest.StartNode(t, apptest.Options{Keychain: "file", Config: "[[nodes.run]]\nname = \"sleep\"\n"})
	_, token := grantToken(t, n, "--name", "runner", "--scope", "agent", "--approval", "allow")
	n.CLI("a2a", "on")
	// system.run is under policy ask by default; the owner allows it.
	if err := n.Client.Do(context.Background(), http.MethodPost, "/config", app.ConfigUpdate{
		CapabilityPolicies: map[string]pairing.Policy{"system.run": "allow"}}, nil); err != nil {
		t.Fatal(err)
	}
	client := apptest.A2AClient(t, n.BaseURL, token)
	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.DataPart{Data: map[string]any{
		"capability": "system.run", "params": map[string]any{"argv": []string{"sleep", "60"}}}})
	events := make(chan a2a.Event, 64)
	var streamErr error
	go func() {
		defer close(events)
		for ev, err := range client.SendStreamingMessage(context.Background(), &a2a.MessageSendParams{Message: msg}) {
			if err != nil {
				streamErr = err
				return
			}
			events <- ev
		}
	}()
	var sleepPID int
	apptest.WaitFor(t, 20*time.Second, "sleep 60 running under the node", func() bool {
		sleepPID = childSleep(n.Cmd.Process.Pid)
		return sleepPID > 0
	})
	if err := n.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var taskID a2a.TaskID
	for ev := range events {
		if su, ok := ev.(*a2a.TaskStatusUpdateEvent); ok && su.Final {
			t.Fatalf("the stream got a final %s; the node keeps the task for its restart", su.Status.State)
		}
		if ti, ok := ev.(a2a.TaskInfoProvider); ok {
			taskID = ti.TaskInfo().TaskID
		}
	}
	if streamErr == nil || !strings.Contains(streamErr.Error(), "restarting") {
		t.Fatalf("the stream ended with %v, want the restarting error", streamErr)
	}
	exited, err := n.Wait(15 * time.Second)
	if !exited || err != nil {
		t.Fatalf("node after SIGTERM: exited %v, err %v\n%s", exited, err, n.Logs())
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(sleepPID)); err == nil {
		t.Fatalf("sleep (pid %d) still running after shutdown", sleepPID)
	}
	if _, err := os.Stat(n.StateDir + "/daemon.json"); !os.IsNotExist(err) {
		t.Fatalf("daemon.json left behind: %v", err)
	}
	if taskID == "" {
		t.Fatal("no event named the task")
	}
	n = apptest.StartNode(t, apptest.Options{StateDir: n.StateDir, Keychain: "file", Config: "[[nodes.run]]\nname = \"sleep\"\n"})
	tk := taskState(t, n, token, string(taskID))
	if tk.Status.State != a2a.TaskStateFailed || !strings.Contains(statusText(tk), "restarted") {
		t.Fatalf("after the restart the task is %s %q, want failed, restarted", tk.Status.State, statusText(tk))
	}
}

// childSleep returns the pid of a `sleep` process whose parent is ppid, 0
// when there is none.
func childSleep(ppid int) int {
	if pids := childSleeps(ppid); len(pids) > 0 {
		return pids[0]
	}
	return 0
}

// TestControlSurfaceDefences: the control token is required; a rebound Host
// and a cross-site Origin are refused even with it.
func TestControlSurfaceDefences(t *testing.T) {
	n := apptest.StartNode(t, apptest.Options{Keychain: "file"})
	d, err := app.ReadDaemonInfo(n.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(n.StateDir + "/daemon.json")
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("daemon.json mode: %v %v", fi.Mode(), err)
	}
	cases := []struct {
		name, method, path, host, origin, token string
		want                                    int
	}{
		{"owner", "GET", "/status", "", "", d.Token, 200},
		{"no token", "GET", "/status", "", "", "", 401},
		{"wrong token", "GET", "/approvals", "", "", "not-the-token", 401},
		{"rebound host", "GET", "/status", "evil.example:" + strconv.Itoa(n.Port), "", d.Token, 403},
		{"cross-site post", "POST", "/a2a/status", "", "https://evil.example", d.Token, 403},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader
			if tc.method == "POST" {
				body = strings.NewReader(`{"enabled":true}`)
			}
			req, _ := http.NewRequest(tc.method, n.BaseURL+tc.path, body)
			if tc.host != "" {
				req.Host = tc.host
			}
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("HTTP %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
	if r := n.CLI("a2a", "status", "--json"); !strings.Contains(r.Stdout, `"enabled": false`) {
		t.Fatalf("a refused cross-site POST changed the setting: %s", r.Stdout)
	}
}

// TestNodeInProcess runs the node in this process (as the tray does) and
// closes it: TestMain's goroutine leak check then proves Close left nothing.
func TestNodeInProcess(t *testing.T) {
	cfg := app.Defaults()
	cfg.StateDir = t.TempDir()
	cfg.Port = 0
	cfg.Keychain = app.KeychainFile
	cfg.Name = "inproc"
	n, err := app.NewNode(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	c := n.LocalClient()
	var st app.Status
	if err := c.Do(ctx, http.MethodGet, "/status", nil, &st); err != nil {
		t.Fatal(err)
	}
	if st.Name != "inproc" || st.DeviceID == "" || st.OS == "" {
		t.Fatalf("status = %+v", st)
	}
	// An open event stream must not hold Close up. Its first notice names
	// every kind of change, so a subscriber re-reads what it read before
	// connecting.
	evDone := make(chan error, 1)
	first := make(chan []app.EventType, 1)
	go func() {
		evDone <- c.Events(ctx, func(ts []app.EventType) {
			select {
			case first <- ts:
			default:
			}
		})
	}()
	select {
	case ts := <-first:
		if !slices.Contains(ts, app.EventApprovals) || !slices.Contains(ts, app.EventStatus) {
			t.Fatalf("first change notice = %v, want every kind", ts)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no first change notice")
	}
	if _, err := n.SetA2A(true); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-evDone:
	case <-time.After(10 * time.Second):
		t.Fatal("event stream still open after Close")
	}
	if err := n.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestApprovalsShowRequestSafely: `meshtray approvals` shows the whole
// request (the detail, not only a cut summary) and escapes the control
// characters a caller put in it, so the owner's terminal shows what arrived
// instead of obeying it (ANSI/OSC sequences, carriage returns).
func TestApprovalsShowRequestSafely(t *testing.T) {
	n := apptest.StartNode(t, apptest.Options{Keychain: "file"})
	_, token := grantToken(t, n, "--name", "agent-x", "--scope", "agent")
	n.CLI("a2a", "on")
	client := apptest.A2AClient(t, n.BaseURL, token)
	text := "please run device.info \x1b]52;c;ZXZpbA==\x07\rinnocent\nsecond line of the request"
	go client.SendMessage(context.Background(), &a2a.MessageSendParams{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: text})})
	ap := waitApproval(t, n, app.KindDelegation)
	r := n.CLI("approvals")
	if r.Code != 0 {
		t.Fatalf("approvals: exit %d: %s", r.Code, r.Stderr)
	}
	if strings.ContainsAny(r.Stdout, "\x1b\x07\r") {
		t.Fatalf("control characters reached the terminal: %q", r.Stdout)
	}
	for _, want := range []string{ap.ID, `\u001B]52;c;ZXZpbA==\u0007`, "second line of the request", "agent-x", "meshtray approve " + ap.ID} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("approvals output lacks %q:\n%s", want, r.Stdout)
		}
	}
	t.Logf("approvals shows:\n%s", r.Stdout)
	n.CLI("deny", ap.ID)
}

// TestWaitingForApprovalOnlyWhenAsked: a caller is told "waiting for
// approval" only when its task really waits for the owner (policy ask), not
// when the grant's policy lets it run at once.
func TestWaitingForApprovalOnlyWhenAsked(t *testing.T) {
	n := apptest.StartNode(t, apptest.Options{Keychain: "file"})
	n.CLI("a2a", "on")
	statusTexts := func(token string, approve bool) []string {
		t.Helper()
		var texts []string
		done := make(chan struct{})
		go func() {
			defer close(done)
			client := apptest.A2AClient(t, n.BaseURL, token)
			for ev, err := range client.SendStreamingMessage(context.Background(), &a2a.MessageSendParams{Message: deviceInfoMessage()}) {
				if err != nil {
					return
				}
				var st a2a.TaskStatus
				switch e := ev.(type) {
				case *a2a.Task:
					st = e.Status
				case *a2a.TaskStatusUpdateEvent:
					st = e.Status
				}
				if st.Message != nil {
					for _, p := range st.Message.Parts {
						if tp, ok := p.(a2a.TextPart); ok {
							texts = append(texts, tp.Text)
						}
					}
				}
			}
		}()
		if approve {
			n.CLI("approve", waitApproval(t, n, app.KindDelegation).ID)
		}
		<-done
		return texts
	}
	_, allowTok := grantToken(t, n, "--name", "trusted", "--scope", "agent", "--approval", "allow")
	for _, s := range statusTexts(allowTok, false) {
		if strings.Contains(s, "waiting for approval") {
			t.Fatalf("policy allow: the caller was told %q", s)
		}
	}
	_, askTok := grantToken(t, n, "--name", "asking", "--scope", "agent")
	texts := statusTexts(askTok, true)
	if !slices.ContainsFunc(texts, func(s string) bool { return strings.Contains(s, "waiting for approval") }) {
		t.Fatalf("policy ask: status texts %q lack the wait", texts)
	}
}
