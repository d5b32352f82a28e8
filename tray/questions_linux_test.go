//go:build linux

package tray

import (
	"context"
	"encoding/json"
	"fmt"
	"image"
	"strings"
	"testing"
	"time"

	"meshtray/a2a/delegate"
	"meshtray/app"
)

// TestQuestionsWindowAnswers is an agent's question in the tray: a task this device
// delegated to another meshtray (a real headless node on loopback, added
// as an agent by URL with a grant it issued) goes input-required; the tray
// says so in its status line, notifies once with the question, and its
// menu opens the questions window, where the answer is typed (X key
// events) and sent; the task then completes and the menu lets go of it.
func TestQuestionsWindowAnswers(t *testing.T) {
	d := startDesktop(t, true)
	notes := d.startNotifications(t)
	need(t, "xdotool", "xdotool")

	// The agent: a headless meshtray publishing A2A, whose grant for this
	// device is on policy allow (no approval popup on that side).
	bdir := t.TempDir()
	startServe(t, nil, bdir, "bee")
	cli(t, d.env(), nil, bdir, "a2a", "on")
	token := strings.TrimSpace(cli(t, d.env(), nil, bdir, "grant", "create", "--name", "laptop", "--scope", "agent", "--approval", "allow"))
	binfo, err := app.ReadDaemonInfo(bdir)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	p := startTrayCmd(t, d.env(), dir, nil)
	c := p.client(t)
	it := d.Watcher.waitItem(t, 20*time.Second)
	ctx := context.Background()
	ag, err := c.AddAgent(ctx, app.AgentRequest{URL: fmt.Sprintf("http://127.0.0.1:%d", binfo.Port), Token: token})
	if err != nil {
		t.Fatalf("add the agent: %v", err)
	}
	task, err := c.Delegate(ctx, app.DelegateRequest{DelegateRequest: delegate.DelegateRequest{Agent: ag.ID, MessageInput: delegate.MessageInput{Text: "hello there"}}})
	if err != nil {
		t.Fatalf("delegate: %v", err)
	}
	get := func() delegate.OutboundTask {
		t.Helper()
		v, err := c.OutboundTask(ctx, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	deadline := time.Now().Add(30 * time.Second)
	for get().State != "input-required" {
		if time.Now().After(deadline) {
			t.Fatalf("the delegated task did not ask: %+v", get())
		}
		time.Sleep(20 * time.Millisecond)
	}

	// One notification, with the question.
	n := notes.wait(t, 1, 10*time.Second)[0]
	if n.Summary != ag.Name+" asks" || !strings.Contains(n.Body, "device.info") || !strings.Contains(n.Body, "About: hello there") {
		t.Fatalf("notification %+v (agent %q)", n, ag.Name)
	}
	// The status line and the menu item.
	d.Watcher.waitMenu(t, it, 10*time.Second, "the question in the menu", func(m menuNode) bool {
		_, line := m.find(func(l string) bool { return strings.HasSuffix(l, " · 1 question from an agent") })
		_, item := m.item(questionsLabel(1))
		return line && item
	})
	d.Watcher.clickLabel(t, it, questionsLabel(1))
	win, _ := waitWindow(t, d, "Questions from agents", 30*time.Second)
	// The answer box is left of the Answer button (the window's one
	// primary-coloured button): click into it, type, send.
	img, x, y := buttonShot(t, d, win, "questions-1-asked", "the questions window")
	clickAt(t, d, win, 60, y)
	if out, err := xcmd(d, "xdotool", "type", "--delay", "20", "device.info").CombinedOutput(); err != nil {
		t.Fatalf("xdotool type: %v %s", err, out)
	}
	// The typed text is on screen before it is sent.
	var prev image.Image
	pollShot(t, d, win, "questions-2-typed", "the typed answer on screen", 15*time.Second, func(_ string, now image.Image) bool {
		ok := !sameImage(img, now) && sameImage(prev, now)
		prev = now
		return ok
	})
	clickAt(t, d, win, x, y)

	// The task resumes on the agent (its owner's approval, if it asks
	// one for the capability call, is given from its CLI) and completes.
	deadline = time.Now().Add(60 * time.Second)
	for {
		v := get()
		if v.State == "completed" {
			break
		}
		if v.State == "failed" || v.State == "rejected" || v.State == "canceled" || time.Now().After(deadline) {
			t.Fatalf("after the answer: %+v", v)
		}
		var as []app.Approval
		if err := json.Unmarshal([]byte(cli(t, d.env(), nil, bdir, "approvals", "--json")), &as); err == nil {
			for _, a := range as {
				cli(t, d.env(), nil, bdir, "approve", a.ID)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.Watcher.waitMenu(t, it, 10*time.Second, "no question in the menu", func(m menuNode) bool {
		_, item := m.item(questionsLabel(1))
		_, line := m.find(func(l string) bool { return strings.Contains(l, "question") })
		_, quit := m.item(labelQuit)
		return quit && !item && !line
	})
	settledShot(t, d, win, "questions-3-answered", "the emptied questions window")
	if got := notes.wait(t, 1, time.Second); len(got) != 1 {
		t.Fatalf("%d notifications for one question, want one: %+v", len(got), got)
	}
}
