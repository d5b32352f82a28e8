//go:build linux

package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/pairing"
	"meshtray/store"
)

// phRPC calls the node's A2A 0.3 JSON-RPC surface from inside its
// namespace with token and returns the result.
func (e *phoneEnv) phRPC(token, method string, params any) json.RawMessage {
	e.t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.node.base+"/a2a/v1", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.node.hc.Do(req)
	if err != nil {
		e.t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Result == nil {
		e.t.Fatalf("%s: %d %s", method, resp.StatusCode, b)
	}
	return out.Result
}

// phDelegate sends "device.info" with token without waiting
// (blocking: false) and returns the task's ID.
func (e *phoneEnv) phDelegate(token string) string {
	e.t.Helper()
	return e.phSend(token, map[string]any{"kind": "data", "data": map[string]any{"capability": "device.info"}})
}

// phSend sends a message of one part with token without waiting and
// returns the task's ID.
func (e *phoneEnv) phSend(token string, part map[string]any) string {
	e.t.Helper()
	msg := map[string]any{"kind": "message", "messageId": strconv.FormatInt(time.Now().UnixNano(), 36), "role": "user",
		"parts": []any{part}}
	var task struct {
		ID string `json:"id"`
	}
	json.Unmarshal(e.phRPC(token, "message/send", map[string]any{"message": msg, "configuration": map[string]any{"blocking": false}}), &task)
	if task.ID == "" {
		e.t.Fatal("message/send answered no task")
	}
	return task.ID
}

// phTaskState waits until task id (of token) reaches a terminal state and
// returns it.
func (e *phoneEnv) phTaskState(token, id string) string {
	e.t.Helper()
	var state string
	apptest.WaitFor(e.t, 30*time.Second, "task "+id+" to end", func() bool {
		var task struct {
			Status struct {
				State string `json:"state"`
			} `json:"status"`
		}
		json.Unmarshal(e.phRPC(token, "tasks/get", map[string]any{"id": id}), &task)
		state = task.Status.State
		switch state {
		case "completed", "failed", "rejected", "canceled":
			return true
		}
		return false
	})
	return state
}

// TestPhoneApproves: a phone paired with the approve scope lists the
// requests waiting on the computer live, with their countdown, and
// approves or denies them from the page; the tasks complete or are
// rejected; its own request is listed as its own with no buttons, and the
// node refuses it deciding it; a grant without approve gets 403 on the
// routes.
func TestPhoneApproves(t *testing.T) {
	e := newPhoneEnv(t)
	e.node.MustAPI("POST", "/a2a/status", map[string]any{"enabled": true}, nil)
	phoneID := e.pairPhoneWith(pairing.ScopeAgent, pairing.ScopeNode, pairing.ScopeApprove)
	e.b.Visible("approvals-card", 20*time.Second)
	e.b.WaitJS("the empty list", `document.getElementById("approvals-status").textContent === "Nothing is waiting."`, 20*time.Second)
	if got := e.text("remote-scopes"); !strings.Contains(got, "its approval queue") {
		t.Errorf("the remote's scope line %q does not name approve", got)
	}
	e.b.Screenshot("approvals-empty")

	var agent app.GrantToken
	e.node.MustAPI("POST", "/nodes/devices", app.GrantRequest{Name: "ci-agent", Scopes: pairing.Scopes{pairing.ScopeAgent}}, &agent)

	// 1. A delegation from another grant: listed live, with its countdown.
	task := e.phDelegate(agent.Token)
	e.b.WaitJS("the delegation listed", `document.querySelectorAll("#approvals-list li.approval").length === 1`, 20*time.Second)
	item := `document.querySelector("#approvals-list li.approval")`
	if got := phoneEval[string](e.b, item+`.querySelector(".approval-title").textContent`); got != "Delegation from ci-agent" {
		t.Errorf("title %q", got)
	}
	if got := phoneEval[string](e.b, item+`.querySelector(".approval-summary").textContent`); !strings.Contains(got, "device.info") {
		t.Errorf("summary %q, want the capability", got)
	}
	left := phoneEval[string](e.b, item+`.querySelector(".approval-left").textContent`)
	if !regexp.MustCompile(`^(\d+ min \d\d s|\d+ s) left$`).MatchString(left) {
		t.Errorf("countdown %q", left)
	}
	ms := func() int {
		v, _ := strconv.Atoi(phoneEval[string](e.b, item+`.querySelector(".approval-left").dataset.ms`))
		return v
	}
	before := ms()
	if before <= 0 || before > 120_000 {
		t.Errorf("countdown at %d ms, want within the 120 s approval timeout", before)
	}
	e.b.WaitJS("the countdown moving", item+`.querySelector(".approval-left").dataset.ms < `+strconv.Itoa(before-1500), 10*time.Second)
	if phoneEval[int](e.b, item+`.querySelectorAll("button").length`) != 2 || !phoneEval[bool](e.b, `!!`+item+`.querySelector(".approval-always")`) {
		t.Error("a delegation from another grant shows no Approve, Deny and Always allow")
	}
	e.b.Screenshot("approvals-waiting")
	e.b.Do("approve from the phone", chromedp.Click(chromedp.CSS(`#approvals-list li.approval .approval-approve`)))
	if s := e.phTaskState(agent.Token, task); s != "completed" {
		t.Errorf("the task approved from the phone ended %s, want completed", s)
	}
	e.b.WaitJS("the list empty again", `document.querySelectorAll("#approvals-list li.approval").length === 0`, 20*time.Second)

	// 2. Deny a request whose text holds markup and a bidirectional
	// override: shown as the text it is, the override visible.
	task = e.phSend(agent.Token, map[string]any{"kind": "text", "text": "<img src=x id=injected> invoice\u202Efdp.exe"})
	e.b.WaitJS("the second delegation listed", `document.querySelectorAll("#approvals-list li.approval").length === 1`, 20*time.Second)
	if n := phoneEval[int](e.b, `document.querySelectorAll("#approvals-list img, #injected").length`); n != 0 {
		t.Errorf("the request's text became %d elements on the page", n)
	}
	if got := phoneEval[string](e.b, item+`.querySelector(".approval-summary").textContent`); got != `<img src=x id=injected> invoice\u202Efdp.exe` {
		t.Errorf("summary shown as %q, want the text with the override escaped", got)
	}
	e.b.Screenshot("approvals-markup")
	e.b.Do("deny from the phone", chromedp.Click(chromedp.CSS(`#approvals-list li.approval .approval-deny`)))
	if s := e.phTaskState(agent.Token, task); s != "rejected" {
		t.Errorf("the task denied from the phone ended %s, want rejected", s)
	}
	e.b.WaitJS("the list empty again", `document.querySelectorAll("#approvals-list li.approval").length === 0`, 20*time.Second)
	if logs := e.node.Logs(); !strings.Contains(logs, "where=phone by="+phoneID) {
		t.Errorf("the node's log does not record the decisions as made on the phone (grant %s)", phoneID)
	}

	// 3. The phone's own request: listed as its own, no buttons, and the
	// node refuses the phone deciding it.
	e.b.Do("send an A2A message from the phone",
		chromedp.SendKeys(chromedp.ID("a2a-text"), "device.info"),
		chromedp.Click(chromedp.ID("a2a-btn")))
	e.b.WaitJS("its own request listed", `document.querySelectorAll("#approvals-list li.approval.own").length === 1`, 20*time.Second)
	own := `document.querySelector("#approvals-list li.approval.own")`
	if n := phoneEval[int](e.b, own+`.querySelectorAll("button").length`); n != 0 {
		t.Errorf("its own request shows %d buttons", n)
	}
	if got := phoneEval[string](e.b, own+`.querySelector(".badge").textContent`); got != "Your request" {
		t.Errorf("own request badge %q", got)
	}
	e.b.Screenshot("approvals-own")
	id := phoneEval[string](e.b, own+`.dataset.id`)
	refused := phoneEval[string](e.b, `(async () => {
		const rec = JSON.parse(localStorage.getItem("meshtray.grant." + `+phJS(e.ps.DeviceID)+`));
		const r = await fetch("/remote/approvals/" + `+phJS(id)+`, {method: "POST", headers: {Authorization: "Bearer " + rec.token, "Content-Type": "application/json"}, body: JSON.stringify({decision: "approve"})});
		return r.status + " " + (await r.json()).error;
	})()`)
	if !strings.HasPrefix(refused, "403 ") || !strings.Contains(refused, "made that request itself") {
		t.Errorf("the phone deciding its own request: %q, want 403 saying why", refused)
	}
	e.decide(id, app.DecisionApprove)
	e.b.WaitJS("its task completed", `document.getElementById("task-state").dataset.state === "completed"`, 30*time.Second)

	// 4. A grant without approve gets 403 on the routes.
	for _, path := range []string{"/remote/approvals", "/remote/approvals/events"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.node.base+path, nil)
		req.Header.Set("Authorization", "Bearer "+agent.Token)
		resp, err := e.node.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		cancel()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("GET %s with an agent grant: %d, want 403", path, resp.StatusCode)
		}
	}
	e.b.CheckClean()

	// The audit trail records the phone's two decisions as made on it.
	e.node.Stop()
	raAudited(t, e.node.StateDir, map[string]string{"first": "approved", "second": "denied"}, store.WherePhone, phoneID)
}

// TestPhoneFullScopeSaysWhatItGives: a phone paired with full reads what
// full gives (the agent, the capabilities, the settings), not
// "everything": full never includes approving, and the page offers no
// approval queue for it.
func TestPhoneFullScopeSaysWhatItGives(t *testing.T) {
	e := newPhoneEnv(t)
	e.pairPhoneWith(pairing.ScopeFull)
	got := e.text("remote-scopes")
	t.Logf("the remote's scope line: %q", got)
	if strings.Contains(got, "everything") || !strings.Contains(got, "its agent") || !strings.Contains(got, "its capabilities") ||
		!strings.Contains(got, "not approving") {
		t.Errorf("the scope line of a full grant: %q", got)
	}
	if phoneEval[bool](e.b, `!document.getElementById("approvals-card").hidden`) {
		t.Error("the approval queue is offered to a full grant")
	}
}
