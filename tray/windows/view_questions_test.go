package windows

import (
	"errors"
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"

	"meshtray/a2a/delegate"
)

// TestQuestionsView: each waiting task shows its question and an answer
// box; a draft survives refreshes; an answer is sent once, the box locked
// until the node answered; a failure says why and lets the owner retry.
func TestQuestionsView(t *testing.T) {
	newTestApp(t)
	type sent struct{ id, text string }
	var got []sent
	v := newQuestionsView(func(o delegate.OutboundTask, text string) { got = append(got, sent{o.ID, text}) })
	w := test.NewTempWindow(t, v.root)
	w.Resize(fyne.NewSize(560, 480))
	if len(v.entries) != 0 || len(v.list.Objects) != 2 {
		t.Fatalf("empty view: %d boxes, %d objects", len(v.entries), len(v.list.Objects))
	}
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	ts := []delegate.OutboundTask{
		{ID: "T2", AgentName: "bee", Request: "second", State: "auth-required", Message: "Sign in first.", Updated: now.Add(time.Second)},
		{ID: "T1", AgentName: "bee", Request: "hello there", State: "input-required", Message: "Which capability?", Updated: now},
	}
	v.set(ts)
	if len(v.entries) != 2 || v.tasks[0].ID != "T1" {
		t.Fatalf("%d answer boxes, first %s; want 2, the oldest first", len(v.entries), v.tasks[0].ID)
	}
	test.Type(v.entries["T1"], "device.info")
	v.set(ts) // a task event while typing
	if v.entries["T1"].Text != "device.info" {
		t.Fatalf("draft lost on refresh: %q", v.entries["T1"].Text)
	}
	test.Tap(v.buttons["T2"]) // empty: nothing sent
	test.Tap(v.buttons["T1"])
	test.Tap(v.buttons["T1"]) // busy: sent once
	if len(got) != 1 || got[0] != (sent{"T1", "device.info"}) {
		t.Fatalf("answers sent: %+v", got)
	}
	if !v.buttons["T1"].Disabled() || !v.entries["T1"].Disabled() {
		t.Error("the answer box stays editable while the answer is in flight")
	}
	v.answered("T1", errors.New("agent unreachable"))
	if v.buttons["T1"].Disabled() || v.entries["T1"].Text != "device.info" || !strings.Contains(v.errs["T1"], "agent unreachable") {
		t.Fatalf("after a failed answer: disabled %v text %q err %q", v.buttons["T1"].Disabled(), v.entries["T1"].Text, v.errs["T1"])
	}
	test.Tap(v.buttons["T1"])
	v.answered("T1", nil)
	if len(got) != 2 || v.entries["T1"].Text != "" || v.errs["T1"] != "" {
		t.Fatalf("after the answer went through: sent %+v text %q err %q", got, v.entries["T1"].Text, v.errs["T1"])
	}
	// The agent moved on: the task leaves the list, and its box with it.
	v.set(ts[:1])
	if _, ok := v.entries["T1"]; ok || len(v.entries) != 1 {
		t.Fatalf("boxes after T1 left: %v", v.entries)
	}
}
