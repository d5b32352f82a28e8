package app_test

// Pending approvals and pairing requests across a restart (kill -9 and a
// graceful stop), and the audit trail of decisions, on real nodes with
// their real database.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/pairing"
	"meshtray/store"
)

// kill9 kills n as a crash would (no clean-up of any kind) and waits.
func kill9(t *testing.T, n *apptest.Node) {
	t.Helper()
	if err := n.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if exited, _ := n.Wait(15 * time.Second); !exited {
		t.Fatal("the node did not die")
	}
}

// openDB opens the database of a stopped node (what survived) and checks
// it: SQLite's integrity check and the audit chain.
func openDB(t *testing.T, stateDir string) *store.Store {
	t.Helper()
	db, err := store.Open(filepath.Join(stateDir, store.DefaultFile), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	if err := db.IntegrityCheck(ctx); err != nil {
		t.Fatalf("integrity_check: %v", err)
	}
	if _, err := db.Verify(ctx); err != nil {
		t.Fatalf("audit verify: %v", err)
	}
	return db
}

func auditApprovals(t *testing.T, db *store.Store) []store.Entry {
	t.Helper()
	es, err := db.Query(context.Background(), store.Filter{Kind: store.KindApproval, Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// rawClaim claims code as a phone does and returns the claim's answer
// (request id and poll token: the phone's secrets).
func rawClaim(t *testing.T, base, code, name string) pairing.ClaimResponse {
	t.Helper()
	var nonce [32]byte
	rand.Read(nonce[:])
	body, _ := json.Marshal(pairing.ClaimRequest{Code: code, Name: name, OS: "Android 15", Nonce: base64.RawURLEncoding.EncodeToString(nonce[:]),
		RequestedScopes: pairing.Scopes{pairing.ScopeAgent, pairing.ScopeNode}})
	st, _, resp := ptDo(t, base, ptReq{method: "POST", path: "/pair/claim", body: string(body)})
	if st != http.StatusOK {
		t.Fatalf("claim: %d %s", st, resp)
	}
	var cr pairing.ClaimResponse
	if err := json.Unmarshal([]byte(resp), &cr); err != nil || cr.PollToken == "" {
		t.Fatalf("claim answer %q: %v", resp, err)
	}
	return cr
}

// pollStatus is one long poll of GET /pair/status/{id} (up to 30 s).
func pollStatus(base string, cr pairing.ClaimResponse) (int, pairing.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/pair/status/"+cr.RequestID, nil)
	req.Header.Set("Authorization", "Bearer "+cr.PollToken)
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return 0, pairing.StatusResponse{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var st pairing.StatusResponse
	if resp.StatusCode == http.StatusOK {
		err = json.Unmarshal(b, &st)
	} else {
		err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	return resp.StatusCode, st, err
}

// pairCode starts a pairing code on n (`meshtray pair --json`).
func pairCode(t *testing.T, n *apptest.Node) string {
	t.Helper()
	var sess struct{ Code string }
	ptJSON(t, n, &sess, "pair")
	if sess.Code == "" {
		t.Fatal("pair --json printed no code")
	}
	return sess.Code
}

// TestPairingRequestSurvivesKill9: two phones claim codes; the node is
// killed (-9) and started again. Both requests are listed again with the
// same ids, without a SAS and saying why; one is denied and its phone's
// poll reads "denied"; the other cannot be approved before its phone polls
// again (the CLI says so plainly), then is approved and the phone collects
// a working token. The audit trail has both decisions, who and where.
func TestPairingRequestSurvivesKill9(t *testing.T) {
	n := ptStart(t, "issuer")
	dir := n.StateDir
	denied := rawClaim(t, n.BaseURL, pairCode(t, n), "phone-deny")
	approved := rawClaim(t, n.BaseURL, pairCode(t, n), "phone-approve")
	before := map[string]app.Approval{}
	for _, a := range pendingApprovals(t, n) {
		before[a.Peer] = a
	}
	if len(before) != 2 || before["phone-deny"].SAS == "" {
		t.Fatalf("pending before the kill: %+v", before)
	}
	kill9(t, n)

	n = apptest.StartNode(t, apptest.Options{StateDir: dir, Name: "issuer", Config: "tailscale = false\n"})
	after := map[string]app.Approval{}
	for _, a := range pendingApprovals(t, n) {
		after[a.Peer] = a
	}
	for name, b := range before {
		a, ok := after[name]
		if !ok || a.ID != b.ID || a.Kind != app.KindPairing || !a.Created.Equal(b.Created) || !a.Expires.Equal(b.Expires) ||
			a.SAS != "" || !a.Restored || !strings.Contains(a.Detail, "restarted") || a.DeviceID != b.DeviceID {
			t.Fatalf("after the restart %s is %+v; before it was %+v", name, a, b)
		}
	}
	if r := ptCLI(t, n, "approvals"); !strings.Contains(r.Stdout, after["phone-deny"].ID) || !strings.Contains(r.Stdout, "check code (SAS) was not kept") {
		t.Fatalf("approvals after the restart:\n%s", r.Stdout)
	}
	// `meshtray pair` shows a restored claim without an empty code.
	pc := startCLI(t, n, "pair")
	apptest.WaitFor(t, 20*time.Second, "meshtray pair to show the restored claims", func() bool {
		return strings.Count(pc.stdout.String(), "No verification code: this request was made before this device restarted.") == 2
	})
	if out := pc.stdout.String(); strings.Contains(out, "Verification code:  ") {
		t.Fatalf("meshtray pair shows an empty verification code:\n%s", out)
	}
	pc.cmd.Process.Signal(os.Interrupt)
	pc.wait(t, 20*time.Second)

	// Denied: delivered at once, the phone reads it.
	ptCLI(t, n, "deny", after["phone-deny"].ID)
	if code, st, err := pollStatus(n.BaseURL, denied); err != nil || st.Status != pairing.StatusDenied {
		t.Fatalf("the denied phone's poll: %d %+v %v", code, st, err)
	}

	// Approved before its phone came back: refused, saying why; nothing issued.
	id := after["phone-approve"].ID
	r := n.CLI("approve", id)
	if r.Code == 0 || !strings.Contains(r.Stderr, "has not polled since") || !strings.Contains(r.Stderr, "nothing was granted") {
		t.Fatalf("approve before the claimant polled: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if as := pendingApprovals(t, n); len(as) != 1 || as[0].ID != id {
		t.Fatalf("after the refused approval: %+v", as)
	}
	type polled struct {
		st  pairing.StatusResponse
		err error
	}
	got := make(chan polled, 1)
	go func() {
		for {
			code, st, err := pollStatus(n.BaseURL, approved)
			if err == nil && st.Status == pairing.StatusPending {
				continue
			}
			if code == http.StatusServiceUnavailable {
				continue
			}
			got <- polled{st, err}
			return
		}
	}()
	apptest.WaitFor(t, 20*time.Second, "the approval once the phone polls again", func() bool {
		return n.CLI("approve", id, "--scopes", "agent").Code == 0
	})
	p := <-got
	if p.err != nil || p.st.Status != pairing.StatusApproved || !pairing.ValidToken(p.st.Token) {
		t.Fatalf("the approved phone's poll: %+v %v", p.st, p.err)
	}
	if st, _, body := ptDo(t, n.BaseURL, ptReq{method: "GET", path: "/pair/whoami", token: p.st.Token}); st != http.StatusOK || !strings.Contains(body, p.st.GrantID) {
		t.Fatalf("whoami with the collected token: %d %s", st, body)
	}
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}

	db := openDB(t, dir)
	es := auditApprovals(t, db)
	var sawDeny, sawApprove bool
	for _, e := range es {
		switch {
		case strings.HasPrefix(e.Peer, "phone-deny") && e.Result == "denied":
			sawDeny = e.DecidedBy == "owner" && e.DecidedVia == store.WhereCLI && e.Via == "loopback"
		case strings.HasPrefix(e.Peer, "phone-approve") && e.Result == "approved":
			sawApprove = e.DecidedBy == "owner" && e.DecidedVia == store.WhereCLI && e.Params == "scopes agent"
		}
	}
	if !sawDeny || !sawApprove || len(es) != 2 {
		t.Fatalf("audit entries: %+v", es)
	}
	rows, _ := db.Approvals(context.Background())
	if len(rows) != 0 {
		t.Fatalf("rows left: %+v", rows)
	}
	// Nothing of the claim's secrets is in the database file.
	for _, secret := range []string{approved.PollToken, approved.SAS, denied.PollToken, denied.SAS, p.st.Token} {
		assertNotInFiles(t, dir, secret)
	}
}

// assertNotInFiles fails when secret is in the database or its WAL.
func assertNotInFiles(t *testing.T, dir, secret string) {
	t.Helper()
	for _, f := range []string{store.DefaultFile, store.DefaultFile + "-wal"} {
		b, err := readFileIfAny(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if secret != "" && strings.Contains(string(b), secret) {
			t.Fatalf("%s holds a secret of the pairing (%.4s…)", f, secret)
		}
	}
}

func readFileIfAny(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// TestKillWhileDecidingKeepsAcknowledgedDecisions: 24 delegations wait for
// the owner; the tray and the CLI decide them concurrently, and the node is
// killed (-9) in the middle. Every decision the node acknowledged is in
// the audit trail with its result and where it was made; no request is
// both decided and pending; integrity_check and the audit chain pass; the
// next start ends the requests nobody decided (their tasks did not
// survive) with an entry saying the node restarted.
func TestKillWhileDecidingKeepsAcknowledgedDecisions(t *testing.T) {
	n := apptest.StartNode(t, apptest.Options{Keychain: "file"})
	dir := n.StateDir
	n.CLI("a2a", "on")
	const grants, perGrant = 3, 8
	ctx, cancelSends := context.WithCancel(context.Background())
	defer cancelSends()
	var sends sync.WaitGroup
	tokens := map[string]string{} // grant id → its token
	for g := range grants {
		id, token := grantToken(t, n, "--name", fmt.Sprintf("agent-%d", g), "--scope", "agent")
		tokens[id] = token
		client := apptest.A2AClient(t, n.BaseURL, token)
		for range perGrant {
			sends.Add(1)
			go func() {
				defer sends.Done()
				client.SendMessage(ctx, &a2a.MessageSendParams{Message: deviceInfoMessage()})
			}()
		}
	}
	var pending []app.Approval
	apptest.WaitFor(t, 60*time.Second, "every delegation waiting", func() bool {
		pending = pendingApprovals(t, n)
		return len(pending) == grants*perGrant
	})
	time.Sleep(300 * time.Millisecond) // every task written (the engine's flushDelay; see sendWaiting)

	type decision struct {
		task, result, where string
	}
	var mu sync.Mutex
	var acked []decision
	var deciders sync.WaitGroup
	work := make(chan app.Approval, len(pending))
	for _, a := range pending {
		work <- a
	}
	close(work)
	for w := range 4 {
		deciders.Add(1)
		go func() {
			defer deciders.Done()
			for a := range work {
				approve := len(a.TaskID)%2 == 0
				d := decision{task: a.TaskID, result: "denied", where: store.WhereTray}
				var err error
				if w == 0 {
					// The real CLI: acknowledged when it exits 0.
					d.where = store.WhereCLI
					verb := "deny"
					if approve {
						verb, d.result = "approve", "approved"
					}
					if r := n.CLI(verb, a.ID); r.Code != 0 {
						err = errors.New(r.Stderr)
					}
				} else {
					ad := app.ApprovalDecision{Decision: app.DecisionDeny, Where: store.WhereTray}
					if approve {
						ad.Decision, d.result = app.DecisionApprove, "approved"
					}
					dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					err = n.Client.Decide(dctx, a.ID, ad)
					cancel()
				}
				if err != nil {
					return // the node died
				}
				mu.Lock()
				acked = append(acked, d)
				mu.Unlock()
			}
		}()
	}
	apptest.WaitFor(t, 60*time.Second, "a third of the decisions acknowledged", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= len(pending)/3
	})
	kill9(t, n)
	deciders.Wait()
	cancelSends()
	sends.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(acked) == len(pending) {
		t.Fatal("every decision was made before the kill: the test did not kill mid-way")
	}

	db := openDB(t, dir)
	byTask := map[string][]store.Entry{}
	for _, e := range auditApprovals(t, db) {
		byTask[e.TaskID] = append(byTask[e.TaskID], e)
	}
	for _, d := range acked {
		es := byTask[d.task]
		if len(es) != 1 || es[0].Result != d.result || es[0].DecidedVia != d.where || es[0].DecidedBy != "owner" {
			t.Errorf("acknowledged decision %+v: audit has %+v", d, es)
		}
	}
	rows, err := db.Approvals(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if len(byTask[r.TaskID]) != 0 {
			t.Errorf("task %s is both decided (%+v) and pending", r.TaskID, byTask[r.TaskID])
		}
	}
	if len(rows)+len(byTask) != len(pending) {
		t.Errorf("%d rows + %d decided tasks, want %d requests", len(rows), len(byTask), len(pending))
	}
	t.Logf("%d decisions acknowledged before the kill, %d recorded, %d requests pending", len(acked), len(byTask), len(rows))
	db.Close()

	// The next start: the requests nobody decided are listed again with
	// their ids (their tasks were restored waiting), the decided ones are
	// not asked again and their tasks end as decided.
	n = apptest.StartNode(t, apptest.Options{StateDir: dir, Keychain: "file"})
	want := map[string]bool{}
	for _, r := range rows {
		want[r.ID] = true
	}
	again := pendingApprovals(t, n)
	for _, a := range again {
		if !want[a.ID] || len(byTask[a.TaskID]) != 0 {
			t.Errorf("after the restart %s (task %s) is pending: not a request left undecided", a.ID, a.TaskID)
		}
	}
	if len(again) != len(rows) {
		t.Errorf("%d pending after the restart, want the %d left undecided", len(again), len(rows))
	}
	if r := n.CLI("audit", "verify"); r.Code != 0 {
		t.Errorf("meshtray audit verify after the kill: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	// An approved task restored before it ran runs now: let it end before
	// the graceful stop, which keeps a running task as it is.
	grantOf := map[string]string{}
	for _, a := range pending {
		grantOf[a.TaskID] = a.GrantID
	}
	for task, es := range byTask {
		if es[0].Result == "approved" {
			taskState(t, n, tokens[grantOf[task]], task)
		}
	}
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	db = openDB(t, dir)
	// A denied task ends rejected; an approved one ran: completed, or
	// failed "the node restarted while this ran" when the kill came
	// while it ran. Neither waits again.
	for task, es := range byTask {
		tk, err := db.Task(context.Background(), task)
		ok := err == nil && tk.State == store.StateRejected
		if es[0].Result == "approved" {
			ok = err == nil && (tk.State == store.StateCompleted || tk.State == store.StateFailed && strings.Contains(string(tk.Status), "restarted"))
		}
		if !ok {
			t.Errorf("task %s decided %s before the kill: after the restart %q %s, %v", task, es[0].Result, tk.State, tk.Status, err)
		}
	}
	rows2, _ := db.Approvals(context.Background())
	if len(rows2) != len(rows) {
		t.Errorf("a graceful stop changed the pending rows: %d, want %d", len(rows2), len(rows))
	}
	for _, e := range auditApprovals(t, db) {
		if e.DecidedBy == "node" {
			t.Errorf("a request ended unanswered across the restart and the graceful stop: %+v", e)
		}
	}
}

// sendWaiting sends a delegation that waits for the owner (the caller's
// connection is left to die with the node) and returns its approval.
func sendWaiting(t *testing.T, n *apptest.Node, token string, before int) app.Approval {
	t.Helper()
	client := apptest.A2AClient(t, n.BaseURL, token)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go client.SendMessage(ctx, &a2a.MessageSendParams{Message: deviceInfoMessage()})
	var got app.Approval
	apptest.WaitFor(t, 30*time.Second, "the delegation waiting for approval", func() bool {
		as := pendingApprovals(t, n)
		if len(as) > before {
			got = as[len(as)-1]
			return true
		}
		return false
	})
	// The engine writes a new task behind (within its 50 ms flushDelay);
	// the approval's row is committed before it is listed. A kill inside
	// that window loses the task, and the next start ends its approval
	// "the node restarted"; these tests kill after it.
	time.Sleep(300 * time.Millisecond)
	return got
}

// taskState polls the task on n (the caller asking again after the
// restart) until it is terminal.
func taskState(t *testing.T, n *apptest.Node, token, id string) *a2a.Task {
	t.Helper()
	client := apptest.A2AClient(t, n.BaseURL, token)
	var task *a2a.Task
	apptest.WaitFor(t, 30*time.Second, "task "+id+" to end", func() bool {
		got, err := client.GetTask(context.Background(), &a2a.TaskQueryParams{ID: a2a.TaskID(id)})
		if err != nil {
			t.Fatalf("tasks/get %s after the restart: %v", id, err)
		}
		task = got
		return got.Status.State.Terminal()
	})
	return task
}

func statusText(tk *a2a.Task) string {
	if tk.Status.Message == nil {
		return ""
	}
	var b strings.Builder
	for _, p := range tk.Status.Message.Parts {
		if tp, ok := p.(a2a.TextPart); ok {
			b.WriteString(tp.Text)
		}
	}
	return b.String()
}

// TestApprovalSurvivesRestartAndItsTaskCompletes: a delegation waits for
// the owner; the node is killed (-9) and started again: `meshtray
// approvals` lists the request with the same id, the owner approves it
// there, and its task completes for the caller asking with tasks/get. A
// second request across a graceful stop is listed again too (the stop did
// not refuse it) and denied: its task ends rejected saying so.
func TestApprovalSurvivesRestartAndItsTaskCompletes(t *testing.T) {
	n := apptest.StartNode(t, apptest.Options{Keychain: "file", Name: "laptop"})
	dir := n.StateDir
	n.CLI("a2a", "on")
	_, token := grantToken(t, n, "--name", "agent-1", "--scope", "agent")
	first := sendWaiting(t, n, token, 0)
	kill9(t, n)

	n = apptest.StartNode(t, apptest.Options{StateDir: dir, Keychain: "file", Name: "laptop"})
	var again app.Approval
	apptest.WaitFor(t, 20*time.Second, "the request listed again", func() bool {
		as := pendingApprovals(t, n)
		if len(as) == 1 {
			again = as[0]
		}
		return len(as) == 1
	})
	if again.ID != first.ID || again.TaskID != first.TaskID || !again.Created.Equal(first.Created) || !again.Expires.Equal(first.Expires) ||
		again.Summary != first.Summary || again.Peer != "agent-1" {
		t.Fatalf("after the kill: %+v\nbefore: %+v", again, first)
	}
	if r := ptCLI(t, n, "approvals"); !strings.Contains(r.Stdout, first.ID) || !strings.Contains(r.Stdout, "agent-1") {
		t.Fatalf("meshtray approvals after the restart:\n%s", r.Stdout)
	}
	ptCLI(t, n, "approve", first.ID)
	host, _ := os.Hostname()
	if tk := taskState(t, n, token, first.TaskID); tk.Status.State != a2a.TaskStateCompleted || !strings.Contains(mustJSON(t, tk.Artifacts), host) {
		t.Fatalf("the approved task after the restart: %s %q %s", tk.Status.State, statusText(tk), mustJSON(t, tk.Artifacts))
	}

	second := sendWaiting(t, n, token, 0)
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	n = apptest.StartNode(t, apptest.Options{StateDir: dir, Keychain: "file", Name: "laptop"})
	apptest.WaitFor(t, 20*time.Second, "the request listed again after a graceful stop", func() bool {
		as := pendingApprovals(t, n)
		return len(as) == 1 && as[0].ID == second.ID && as[0].TaskID == second.TaskID
	})
	ptCLI(t, n, "deny", second.ID)
	if tk := taskState(t, n, token, second.TaskID); tk.Status.State != a2a.TaskStateRejected || !strings.Contains(statusText(tk), "denied by the owner") {
		t.Fatalf("the denied task after the restart: %s %q", tk.Status.State, statusText(tk))
	}
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}

	db := openDB(t, dir)
	es := auditApprovals(t, db)
	if len(es) != 2 || es[0].TaskID != first.TaskID || es[0].Result != "approved" || es[1].TaskID != second.TaskID ||
		es[1].Result != "denied" || es[1].Params != "denied by the owner" {
		t.Fatalf("audit entries: %+v", es)
	}
	for _, e := range es {
		if e.DecidedBy != "owner" || e.DecidedVia != store.WhereCLI || e.Peer != "agent-1" || e.Via != "loopback" {
			t.Fatalf("audit entry %+v: want decided by the owner in the CLI, asked by agent-1 over loopback", e)
		}
	}
}

// TestApprovalDeadlinePassedWhileDown: a delegation's deadline passes while
// the node is down; after the start it is not asked again: its task is
// rejected saying why, and the audit trail has the refusal as a timeout.
func TestApprovalDeadlinePassedWhileDown(t *testing.T) {
	const timeout = 3 * time.Second
	n := apptest.StartNode(t, apptest.Options{Keychain: "file", Config: fmt.Sprintf("approval_timeout = %q\n", timeout)})
	dir := n.StateDir
	n.CLI("a2a", "on")
	_, token := grantToken(t, n, "--name", "agent-1", "--scope", "agent")
	a := sendWaiting(t, n, token, 0)
	kill9(t, n)
	time.Sleep(time.Until(a.Expires) + 100*time.Millisecond)

	n = apptest.StartNode(t, apptest.Options{StateDir: dir, Keychain: "file"})
	if as := pendingApprovals(t, n); len(as) != 0 {
		t.Fatalf("pending after the deadline passed: %+v", as)
	}
	tk := taskState(t, n, token, a.TaskID)
	if tk.Status.State != a2a.TaskStateRejected || !strings.Contains(statusText(tk), "deadline passed") {
		t.Fatalf("task past its deadline: %s %q", tk.Status.State, statusText(tk))
	}
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	es := auditApprovals(t, openDB(t, dir))
	if len(es) != 1 || es[0].TaskID != a.TaskID || es[0].Result != "denied" || es[0].DecidedVia != store.WhereTimeout ||
		!strings.Contains(es[0].Params, "deadline passed while the node was down") {
		t.Fatalf("audit entries: %+v", es)
	}
}

// TestRestoredApprovalDecidedByPolicyRunsUnderTheGrant: a delegation waits
// for the owner, who then sets its grant to allow; the node is killed (-9).
// At the start the restored request is decided by the grant's policy, and
// its task runs under the grant as it is now: device.info (itself allow)
// completes without a second, capability-level request that the stored
// caller (grant id and name only, no policy) would otherwise raise.
func TestRestoredApprovalDecidedByPolicyRunsUnderTheGrant(t *testing.T) {
	n := apptest.StartNode(t, apptest.Options{Keychain: "file", Name: "laptop"})
	dir := n.StateDir
	n.CLI("a2a", "on")
	id, token := grantToken(t, n, "--name", "agent-1", "--scope", "agent")
	first := sendWaiting(t, n, token, 0)
	ptCLI(t, n, "grant", "set", id, "--approval", "allow")
	kill9(t, n)

	n = apptest.StartNode(t, apptest.Options{StateDir: dir, Keychain: "file", Name: "laptop"})
	client := apptest.A2AClient(t, n.BaseURL, token)
	deadline := time.Now().Add(20 * time.Second)
	for {
		tk, err := client.GetTask(context.Background(), &a2a.TaskQueryParams{ID: a2a.TaskID(first.TaskID)})
		if err != nil {
			t.Fatalf("tasks/get after the restart: %v", err)
		}
		if tk.Status.State.Terminal() {
			if tk.Status.State != a2a.TaskStateCompleted {
				t.Fatalf("the task approved by policy after the restart: %s %q", tk.Status.State, statusText(tk))
			}
			break
		}
		if as := pendingApprovals(t, n); len(as) > 0 {
			t.Fatalf("the task approved by its grant's policy (allow) asks again after the restart: %s %q; pending: %+v",
				tk.Status.State, statusText(tk), as)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task approved by policy did not end: %s %q", tk.Status.State, statusText(tk))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if as := pendingApprovals(t, n); len(as) != 0 {
		t.Fatalf("pending after the task completed: %+v", as)
	}
}

// TestRestoredApprovalDecidedByPolicyIsDecidedOnce: a delegation kept
// waiting across a kill -9 and decided by its grant's policy at the start
// is decided once: its kept row goes with that decision, and the row's
// original deadline passing later records no second decision (a timeout
// denial of a task that already ran).
func TestRestoredApprovalDecidedByPolicyIsDecidedOnce(t *testing.T) {
	const timeout = 8 * time.Second
	cfg := fmt.Sprintf("approval_timeout = %q\n", timeout)
	n := apptest.StartNode(t, apptest.Options{Keychain: "file", Config: cfg})
	dir := n.StateDir
	n.CLI("a2a", "on")
	id, token := grantToken(t, n, "--name", "agent-1", "--scope", "agent")
	first := sendWaiting(t, n, token, 0)
	ptCLI(t, n, "grant", "set", id, "--approval", "allow")
	kill9(t, n)

	n = apptest.StartNode(t, apptest.Options{StateDir: dir, Keychain: "file", Config: cfg})
	if tk := taskState(t, n, token, first.TaskID); tk.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("the task approved by policy after the restart: %s %q", tk.Status.State, statusText(tk))
	}
	time.Sleep(time.Until(first.Expires) + time.Second)
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	db := openDB(t, dir)
	var got []store.Entry
	for _, e := range auditApprovals(t, db) {
		if e.TaskID == first.TaskID {
			got = append(got, e)
		}
	}
	if len(got) != 1 || got[0].Result != "approved" || got[0].DecidedVia != store.WherePolicy {
		t.Fatalf("audit entries of the task: want one approval by policy, got %+v", got)
	}
	if rows, err := db.Approvals(context.Background()); err != nil || len(rows) != 0 {
		t.Fatalf("approval rows left after the decision: %+v %v", rows, err)
	}
}

// TestRestoredApprovalKeepsWhereItCameFrom: a delegation listed again after
// a kill -9 still shows the address it came from (the popup's "via"
// line), as kept in its row, not only the listener.
func TestRestoredApprovalKeepsWhereItCameFrom(t *testing.T) {
	n := apptest.StartNode(t, apptest.Options{Keychain: "file"})
	dir := n.StateDir
	n.CLI("a2a", "on")
	_, token := grantToken(t, n, "--name", "agent-1", "--scope", "agent")
	first := sendWaiting(t, n, token, 0)
	if first.Addr == "" {
		t.Fatalf("the request before the restart has no address: %+v", first)
	}
	kill9(t, n)

	n = apptest.StartNode(t, apptest.Options{StateDir: dir, Keychain: "file"})
	var again []app.Approval
	apptest.WaitFor(t, 20*time.Second, "the request listed again", func() bool {
		again = pendingApprovals(t, n)
		return len(again) == 1
	})
	if again[0].ID != first.ID || again[0].Via != first.Via || again[0].Addr != first.Addr {
		t.Fatalf("after the restart: id %s via %q addr %q; before: id %s via %q addr %q",
			again[0].ID, again[0].Via, again[0].Addr, first.ID, first.Via, first.Addr)
	}
	if r := ptCLI(t, n, "approvals"); !strings.Contains(r.Stdout, "loopback "+first.Addr) {
		t.Fatalf("meshtray approvals after the restart does not say where the request came from:\n%s", r.Stdout)
	}
}
