package app_test

// Approving from another device (the approve scope): the rules of the
// remote approval routes on a real node, and `approvals/approve/deny --on`
// between two real nodes.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/app/cli"
	"meshtray/pairing"
	"meshtray/store"
)

// raGrant mints a grant on n with scopes and returns its ID and token.
func raGrant(t *testing.T, n *apptest.Node, name, scopes string) (id, token string) {
	t.Helper()
	var tok struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, n, "grant", "create", "--name", name, "--scope", scopes, "--json").Stdout), &tok); err != nil || tok.Token == "" {
		t.Fatalf("grant create %s: %+v %v", name, tok, err)
	}
	return tok.ID, tok.Token
}

// raList is GET /remote/approvals with token.
func raList(t *testing.T, n *apptest.Node, token string) (int, app.RemoteApprovals, string) {
	t.Helper()
	st, _, body := ptDo(t, n.BaseURL, ptReq{method: "GET", path: "/remote/approvals", token: token})
	var ra app.RemoteApprovals
	if st == 200 {
		if err := json.Unmarshal([]byte(body), &ra); err != nil {
			t.Fatalf("GET /remote/approvals: %q: %v", body, err)
		}
	}
	return st, ra, body
}

// raDecide is POST /remote/approvals/{id} with token and a raw body.
func raDecide(t *testing.T, n *apptest.Node, token, id, body string) (int, string) {
	t.Helper()
	st, _, out := ptDo(t, n.BaseURL, ptReq{method: "POST", path: "/remote/approvals/" + id, token: token, body: body})
	return st, out
}

func raFind(ra app.RemoteApprovals, id string) (app.RemoteApproval, bool) {
	for _, a := range ra.Approvals {
		if a.ID == id {
			return a, true
		}
	}
	return app.RemoteApproval{}, false
}

func deviceInfo() *a2a.Message {
	return a2a.NewMessage(a2a.MessageRoleUser, a2a.DataPart{Data: map[string]any{"capability": "device.info"}})
}

// finalState is the state of the last event of a task's stream.
func finalState(t *testing.T, events <-chan a2a.Event, what string) a2a.TaskState {
	t.Helper()
	switch ev := lastEvent(t, events, 30*time.Second, what).(type) {
	case *a2a.TaskStatusUpdateEvent:
		return ev.Status.State
	case *a2a.Task:
		return ev.Status.State
	case nil:
		t.Fatalf("%s: no event", what)
	}
	return ""
}

// TestRemoteApprovalRules: a grant with the approve scope lists and decides
// the requests waiting on a node over its peer routes; every other grant,
// full included, gets 403 there; no grant decides a request it made; a
// pairing is denied remotely but never approved; "always allow" only for
// a delegation; the decision is logged as made on that device.
func TestRemoteApprovalRules(t *testing.T) {
	t.Parallel()
	n := ptStart(t, "Ada’s laptop")
	mustCLI(t, n, "a2a", "on")
	agentID, agentTok := raGrant(t, n, "ci-agent", "agent")
	approverID, approverTok := raGrant(t, n, "approver", "approve")
	selfID, selfTok := raGrant(t, n, "agent-and-approver", "agent,approve")
	_, fullTok := raGrant(t, n, "admin", "full,agent,node")

	// The approve scope is shown where grants are listed.
	if out := mustCLI(t, n, "grant", "list").Stdout; !strings.Contains(out, "agent,approve") ||
		!strings.Contains(out, "approve: agent-and-approver, approver may approve or deny the requests made to this device") {
		t.Errorf("grant list does not show the approve scope plainly:\n%s", out)
	}

	// A delegation from another grant waits.
	first := streamTask(t, n, agentTok, deviceInfo())
	da := approvalOf(t, n, app.KindDelegation)
	if da.GrantID != agentID {
		t.Fatalf("delegation approval %+v, want ci-agent's", da)
	}

	// Only approve reaches the routes: not agent, not full, not none.
	for name, tok := range map[string]string{"agent": agentTok, "full": fullTok} {
		if st, _, body := raList(t, n, tok); st != http.StatusForbidden || !strings.Contains(body, "does not reach") {
			t.Errorf("GET /remote/approvals with a %s grant: %d %s, want 403", name, st, body)
		}
		if st, body := raDecide(t, n, tok, da.ID, `{"decision":"approve"}`); st != http.StatusForbidden {
			t.Errorf("POST /remote/approvals/ID with a %s grant: %d %s, want 403", name, st, body)
		}
	}
	if st, _, _ := raList(t, n, ""); st != http.StatusUnauthorized {
		t.Errorf("GET /remote/approvals without a token: %d, want 401", st)
	}
	// ... and approve reaches nothing else.
	if st, _, _ := ptDo(t, n.BaseURL, ptReq{method: "GET", path: "/approvals", token: approverTok}); st != http.StatusForbidden {
		t.Errorf("an approve grant on the owner's GET /approvals: %d, want 403", st)
	}
	if st, _, _ := ptDo(t, n.BaseURL, ptReq{method: "POST", path: "/approvals/" + da.ID, token: approverTok, body: `{"decision":"approve"}`}); st != http.StatusForbidden {
		t.Errorf("an approve grant on the owner's POST /approvals/ID: %d, want 403", st)
	}

	st, ra, body := raList(t, n, approverTok)
	if st != 200 || ra.Device != "Ada’s laptop" || ra.Now.IsZero() {
		t.Fatalf("GET /remote/approvals: %d %s", st, body)
	}
	v, ok := raFind(ra, da.ID)
	if !ok || v.Own || !v.CanApprove || !v.CanDeny || !v.CanAlways || v.Peer != "ci-agent" || v.Summary != da.Summary ||
		v.TaskID != da.TaskID || !v.Expires.Equal(da.Expires) || !v.Expires.After(ra.Now) {
		t.Errorf("the delegation as the approver sees it: %+v (owner's: %+v)", v, da)
	}

	// A grant's own request: listed, marked, not decidable by it.
	own := streamTask(t, n, selfTok, deviceInfo())
	var oa app.Approval
	apptest.WaitFor(t, 20*time.Second, "the approver's own delegation", func() bool {
		as := grantApprovals(t, n, selfID)
		if len(as) == 1 {
			oa = as[0]
		}
		return len(as) == 1
	})
	_, ra, _ = raList(t, n, selfTok)
	if v, ok := raFind(ra, oa.ID); !ok || !v.Own || v.CanApprove || v.CanDeny || v.Note == "" {
		t.Errorf("its own request as the grant sees it: %+v", v)
	}
	for _, d := range []string{"approve", "deny"} {
		if st, body := raDecide(t, n, selfTok, oa.ID, `{"decision":"`+d+`"}`); st != http.StatusForbidden || !strings.Contains(body, "made that request itself") {
			t.Errorf("%s of its own request: %d %s, want 403 saying why", d, st, body)
		}
	}
	// Another approver may deny it.
	if st, body := raDecide(t, n, approverTok, oa.ID, `{"decision":"deny"}`); st != http.StatusNoContent {
		t.Fatalf("deny from the approver: %d %s", st, body)
	}
	if s := finalState(t, own, "the denied delegation"); s != a2a.TaskStateRejected {
		t.Errorf("denied remotely: the task ended %s, want rejected", s)
	}

	// A pairing: denied remotely, never approved.
	var sess struct {
		Code string `json:"code"`
	}
	ptJSON(t, n, &sess, "pair")
	pa := phoneClaim(t, n, sess.Code, "Mallory’s phone")
	_, ra, _ = raList(t, n, approverTok)
	if v, ok := raFind(ra, pa.ID); !ok || v.CanApprove || !v.CanDeny || v.SAS != "" || v.Kind != app.KindPairing {
		t.Errorf("a pairing as the approver sees it: %+v (the SAS stays on the two screens)", v)
	}
	if st, body := raDecide(t, n, approverTok, pa.ID, `{"decision":"approve"}`); st != http.StatusForbidden || !strings.Contains(body, "pairing is approved only at the device") {
		t.Errorf("remote approval of a pairing: %d %s, want 403", st, body)
	}
	if st, _ := raDecide(t, n, approverTok, pa.ID, `{"decision":"approve","scopes":["full"]}`); st != http.StatusBadRequest {
		t.Errorf("remote approval with scopes: %d, want 400", st)
	}
	if st, body := raDecide(t, n, approverTok, pa.ID, `{"decision":"deny"}`); st != http.StatusNoContent {
		t.Fatalf("remote denial of a pairing: %d %s", st, body)
	}
	for _, a := range pendingApprovals(t, n) {
		if a.ID == pa.ID {
			t.Errorf("the denied pairing is still pending")
		}
	}
	for _, g := range devicesOf(t, n).Issued {
		if g.Name == "Mallory’s phone" {
			t.Errorf("a remotely denied pairing left a grant: %+v", g)
		}
	}

	// "Always allow" goes with an approval of a delegation; the approval
	// runs the task and sets ci-agent's policy.
	if st, _ := raDecide(t, n, approverTok, da.ID, `{"decision":"deny","always":true}`); st != http.StatusBadRequest {
		t.Errorf("deny with always: %d, want 400", st)
	}
	if st, _ := raDecide(t, n, approverTok, da.ID, `{"decision":"maybe"}`); st != http.StatusBadRequest {
		t.Errorf("an unknown decision: %d, want 400", st)
	}
	if st, body := raDecide(t, n, approverTok, da.ID, `{"decision":"approve","always":true}`); st != http.StatusNoContent {
		t.Fatalf("remote approval: %d %s", st, body)
	}
	if s := finalState(t, first, "the approved delegation"); s != a2a.TaskStateCompleted {
		t.Errorf("approved remotely: the task ended %s, want completed", s)
	}
	for _, g := range devicesOf(t, n).Issued {
		if g.ID == agentID && g.Policy != pairing.PolicyAllow {
			t.Errorf("always allow from the approver left ci-agent's policy %s", g.Policy)
		}
	}
	if st, body := raDecide(t, n, approverTok, da.ID, `{"decision":"approve"}`); st != http.StatusNotFound {
		t.Errorf("deciding it again: %d %s, want 404", st, body)
	}

	// A capability call under policy ask: approved remotely, never with
	// "always" (the popup does not offer it there).
	mustCLI(t, n, "manifest", "set", "device.info", "ask")
	_, nodeTok := raGrant(t, n, "script", "node")
	call := invoke(t, n, nodeTok, `{"capability":"device.info"}`)
	ca := approvalOf(t, n, app.KindCapability)
	_, ra, _ = raList(t, n, approverTok)
	if v, ok := raFind(ra, ca.ID); !ok || !v.CanApprove || v.CanAlways {
		t.Errorf("a capability call as the approver sees it: %+v", v)
	}
	if st, body := raDecide(t, n, approverTok, ca.ID, `{"decision":"approve","always":true}`); st != http.StatusBadRequest {
		t.Errorf("always allow on a capability call: %d %s, want 400", st, body)
	}
	if st, body := raDecide(t, n, approverTok, ca.ID, `{"decision":"approve"}`); st != http.StatusNoContent {
		t.Fatalf("remote approval of a capability call: %d %s", st, body)
	}
	select {
	case st := <-call:
		if st != http.StatusOK {
			t.Errorf("the capability call approved remotely answered %d", st)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the capability call approved remotely did not return")
	}

	// Each decision is logged and audited as made on that device (no
	// device ID: a grant minted here counts as the phone kind, by its
	// grant ID).
	logs := n.Logs()
	if !strings.Contains(logs, "approval decided on another device") || !strings.Contains(logs, "where=phone by="+approverID) {
		t.Errorf("the node's log does not say where and by whom the remote decisions were made")
	}
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	raAudited(t, n.StateDir, map[string]string{da.ID: "approved", oa.ID: "denied", pa.ID: "denied", ca.ID: "approved"}, store.WherePhone, approverID)
}

// raAudited checks the audit trail of the stopped node in stateDir: each
// approval of want (its ID's summary) has one entry with that result,
// decided via where by by.
func raAudited(t *testing.T, stateDir string, want map[string]string, where, by string) {
	t.Helper()
	got := map[string]int{}
	for _, e := range auditApprovals(t, openDB(t, stateDir)) {
		if e.DecidedVia == where && e.DecidedBy == by {
			got[e.Result]++
		}
	}
	wantN := map[string]int{}
	for _, r := range want {
		wantN[r]++
	}
	for r, n := range wantN {
		if got[r] != n {
			t.Errorf("audit: %d %s entries decided via %s by %s, want %d (all: %v)", got[r], r, where, by, n, got)
		}
	}
}

func devicesOf(t *testing.T, n *apptest.Node) app.Devices {
	t.Helper()
	var d app.Devices
	if err := json.Unmarshal([]byte(mustCLI(t, n, "devices", "--json").Stdout), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// raFeed opens GET /remote/approvals/events with token and returns a
// function reading its next `approvals` snapshot (an error at the stream's
// end).
func raFeed(t *testing.T, n *apptest.Node, token string) func(d time.Duration) (app.RemoteApprovals, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.BaseURL+"/remote/approvals/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	hc := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("feed: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	t.Cleanup(func() { resp.Body.Close() })
	type result struct {
		ra  app.RemoteApprovals
		err error
	}
	ch := make(chan result, 16)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == "approvals":
				var ra app.RemoteApprovals
				err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ra)
				ch <- result{ra, err}
			case line == "":
				event = ""
			}
		}
		ch <- result{err: io.EOF}
	}()
	return func(d time.Duration) (app.RemoteApprovals, error) {
		select {
		case r, ok := <-ch:
			if !ok {
				return app.RemoteApprovals{}, io.EOF
			}
			return r.ra, r.err
		case <-time.After(d):
			return app.RemoteApprovals{}, fmt.Errorf("no event within %v", d)
		}
	}
}

// TestRemoteApprovalFeed: the live feed sends the queue at once and again
// on every change, a grant keeps at most 4 feeds open (a fifth ends its
// oldest), and pausing the grant ends its feeds.
func TestRemoteApprovalFeed(t *testing.T) {
	t.Parallel()
	n := ptStart(t, "laptop")
	mustCLI(t, n, "a2a", "on")
	_, agentTok := raGrant(t, n, "ci-agent", "agent")
	approverID, approverTok := raGrant(t, n, "phone", "approve")

	next := raFeed(t, n, approverTok)
	ra, err := next(10 * time.Second)
	if err != nil || ra.Device != "laptop" || len(ra.Approvals) != 0 {
		t.Fatalf("first snapshot: %+v %v", ra, err)
	}
	events := streamTask(t, n, agentTok, deviceInfo())
	ra, err = next(20 * time.Second)
	if err != nil || len(ra.Approvals) != 1 || ra.Approvals[0].Peer != "ci-agent" || !ra.Approvals[0].CanApprove {
		t.Fatalf("snapshot after a delegation: %+v %v", ra, err)
	}
	id := ra.Approvals[0].ID
	if st, body := raDecide(t, n, approverTok, id, `{"decision":"approve"}`); st != http.StatusNoContent {
		t.Fatalf("approve: %d %s", st, body)
	}
	ra, err = next(20 * time.Second)
	if err != nil || len(ra.Approvals) != 0 {
		t.Fatalf("snapshot after the decision: %+v %v", ra, err)
	}
	if s := finalState(t, events, "the approved task"); s != a2a.TaskStateCompleted {
		t.Errorf("task ended %s", s)
	}

	// Four more feeds of the same grant: the first one is ended.
	var more []func(time.Duration) (app.RemoteApprovals, error)
	for range 4 {
		f := raFeed(t, n, approverTok)
		if _, err := f(10 * time.Second); err != nil {
			t.Fatalf("first snapshot of another feed: %v", err)
		}
		more = append(more, f)
	}
	if _, err := next(10 * time.Second); err != io.EOF {
		t.Errorf("the oldest of 5 feeds of one grant: %v, want ended", err)
	}

	// Pausing the grant ends its feeds.
	mustCLI(t, n, "grant", "pause", approverID)
	for i, f := range more {
		if _, err := f(10 * time.Second); err != io.EOF {
			t.Errorf("feed %d after the pause: %v, want ended", i, err)
		}
	}
}

// TestApproveOnAnotherMeshtray: a meshtray that holds an approve grant on
// another decides its requests from the CLI (`approvals --on`, `approve
// --on`, `deny --on`), through its own node over the pinned HTTPS with that
// grant; it cannot decide its own delegation; a device that gave no approve
// scope is refused.
func TestApproveOnAnotherMeshtray(t *testing.T) {
	t.Parallel()
	laptop := ptStart(t, "laptop")
	desktop := ptStart(t, "desktop")
	mustCLI(t, laptop, "a2a", "on")
	// desktop joins laptop's code; laptop grants it agent and approve and
	// gets agent back.
	ptPairByCLI(t, laptop, desktop, "agent,approve", "agent")
	lid, did := ptIdentity(t, laptop), ptIdentity(t, desktop)

	if out := mustCLI(t, laptop, "devices").Stdout; !strings.Contains(out, "agent,approve") || !strings.Contains(out, "approve: desktop may approve or deny the requests made to this device") {
		t.Errorf("laptop's devices do not show desktop's approve scope:\n%s", out)
	}
	if out := mustCLI(t, desktop, "devices").Stdout; !strings.Contains(out, "approve: this device may decide the requests made to laptop") {
		t.Errorf("desktop's devices do not say it may approve on laptop:\n%s", out)
	}

	// A delegation from another grant of laptop waits; desktop lists it.
	_, agentTok := raGrant(t, laptop, "ci-agent", "agent")
	events := streamTask(t, laptop, agentTok, deviceInfo())
	da := approvalOf(t, laptop, app.KindDelegation)
	out := mustCLI(t, desktop, "approvals", "--on", "laptop").Stdout
	for _, want := range []string{"Waiting on laptop (" + pairing.ShortID(lid.ID) + ")", da.ID + "  delegation from ci-agent",
		"expires:  in ", "meshtray approve --on laptop " + da.ID + " [--always] | meshtray deny --on laptop " + da.ID} {
		if !strings.Contains(out, want) {
			t.Errorf("approvals --on laptop lacks %q:\n%s", want, out)
		}
	}
	var ra app.RemoteApprovals
	if err := json.Unmarshal([]byte(mustCLI(t, desktop, "approvals", "--on", pairing.ShortID(lid.ID), "--json").Stdout), &ra); err != nil ||
		ra.DeviceID != lid.ID || len(ra.Approvals) != 1 || ra.Approvals[0].ID != da.ID {
		t.Fatalf("approvals --on SHORTID --json: %+v %v", ra, err)
	}
	if r := desktop.CLI("approve", "--on", "laptop", da.ID, "--scopes", "agent"); r.Code != cli.ExitUsage ||
		!strings.Contains(r.Stderr, "--scopes applies only to pairing requests; "+da.ID+" is a delegation request") || strings.Contains(r.Stderr, "pairing is approved") {
		t.Errorf("approve --on a delegation with --scopes: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if got := mustCLI(t, desktop, "approve", "--on", "laptop", da.ID).Stdout; !strings.Contains(got, "approved "+da.ID+" on laptop: delegation from ci-agent") {
		t.Errorf("approve --on said %q", got)
	}
	if s := finalState(t, events, "the delegation approved from desktop"); s != a2a.TaskStateCompleted {
		t.Errorf("approved from desktop: the task ended %s, want completed", s)
	}
	if logs := laptop.Logs(); !strings.Contains(logs, "where=device by="+pairing.ShortID(did.ID)) {
		t.Errorf("laptop's log does not record the decision as made on desktop (%s)", pairing.ShortID(did.ID))
	}

	// desktop's own delegation to laptop: listed as its own, not decidable.
	del := startCLI(t, desktop, "delegate", "laptop", "device.info")
	own := approvalOf(t, laptop, app.KindDelegation)
	out = mustCLI(t, desktop, "approvals", "--on", "laptop").Stdout
	if !strings.Contains(out, own.ID) || !strings.Contains(out, "not here: this device made it") {
		t.Errorf("its own request in approvals --on:\n%s", out)
	}
	r := desktop.CLI("approve", "--on", "laptop", own.ID)
	if r.Code == 0 || !strings.Contains(r.Stderr, "made that request itself") {
		t.Errorf("approve --on of its own request: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	// Another grant's request is denied from desktop; its own is denied by
	// laptop's owner.
	events = streamTask(t, laptop, agentTok, deviceInfo())
	var second app.Approval
	apptest.WaitFor(t, 20*time.Second, "ci-agent's second delegation", func() bool {
		for _, a := range pendingApprovals(t, laptop) {
			if a.Peer == "ci-agent" {
				second = a
				return true
			}
		}
		return false
	})
	if got := mustCLI(t, desktop, "deny", "--on", "laptop", second.ID).Stdout; !strings.Contains(got, "denied "+second.ID+" on laptop") {
		t.Errorf("deny --on said %q", got)
	}
	if s := finalState(t, events, "the delegation denied from desktop"); s != a2a.TaskStateRejected {
		t.Errorf("denied from desktop: the task ended %s, want rejected", s)
	}
	decide(t, laptop, own.ID, false)
	if r := del.wait(t, 60*time.Second); r.Code == 0 {
		t.Errorf("desktop's own delegation ran: %s", r.Stdout)
	}

	// laptop holds only agent from desktop: no approvals --on desktop.
	r = laptop.CLI("approvals", "--on", "desktop")
	if r.Code == 0 || !strings.Contains(r.Stderr, "gave this device agent, not approve") {
		t.Errorf("approvals --on a device that gave no approve: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if r := laptop.CLI("approvals", "--on", "nobody"); r.Code == 0 || !strings.Contains(r.Stderr, `named "nobody" among the paired devices`) {
		t.Errorf("approvals --on an unknown device: exit %d\n%s", r.Code, r.Stderr)
	}

	// laptop's audit trail records both decisions as made on desktop.
	if err := laptop.Stop(); err != nil {
		t.Fatal(err)
	}
	raAudited(t, laptop.StateDir, map[string]string{da.ID: "approved", second.ID: "denied"}, store.WhereDevice, pairing.ShortID(did.ID))
}
