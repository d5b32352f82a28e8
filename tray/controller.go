package tray

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"reflect"
	"slices"
	"strings"
	"time"

	"meshtray/a2a/delegate"
	"meshtray/app"
	"meshtray/mesh"
)

// Timing of the tray's event loop.
const (
	// debounce gathers the change notices of one burst into one render
	// after the burst's first (rendered at once): at most one render per
	// debounce.
	debounce = 80 * time.Millisecond
	// callTimeout bounds one control-API call (loopback).
	callTimeout = 10 * time.Second
)

// menuRenderer shows menu models: systray in the tray, a recorder in tests.
type menuRenderer interface {
	render(ctx context.Context, m menuModel)
}

// controlAPI is what the tray uses of app.Client.
type controlAPI interface {
	Status(ctx context.Context) (app.Status, error)
	Peers(ctx context.Context) ([]mesh.Peer, error)
	Approvals(ctx context.Context) ([]app.Approval, error)
	Outbound(ctx context.Context) ([]delegate.OutboundTask, error)
	SetA2A(ctx context.Context, enabled bool) (app.A2AStatus, error)
	UpdateConfig(ctx context.Context, u app.ConfigUpdate) (app.Settings, error)
	OpenUI(ctx context.Context, r app.UIRequest) error
	PendingUI(ctx context.Context) ([]app.UIRequest, error)
	Events(ctx context.Context, fn func([]app.EventType)) error
	ReceivedFiles(ctx context.Context) ([]app.ReceivedTransfer, error)
}

// autostarter is tray/autostart's Entry.
type autostarter interface {
	Enabled() (bool, error)
	Enable() error
	Disable() error
}

// controller is the tray's one event loop: it reads the node's state,
// renders the menu, runs clicks, announces new approvals and keeps the UI
// process around while it is needed. Only its goroutine (run) touches its
// fields.
type controller struct {
	api       controlAPI
	menu      menuRenderer
	ui        uiOpener
	autostart autostarter
	notify    func(ctx context.Context, title, body string)
	// notifyFiles shows that files arrived, with an "Open folder" action
	// opening dir.
	notifyFiles func(ctx context.Context, title, body, dir string)
	copyText    func(string) error
	openPath    func(string) error
	quit        func()
	log         *slog.Logger
	// settled, when set, runs once after the first menu render: start-up
	// is over (the node and the menu are up).
	settled func()

	clicks chan action

	last     *menuModel
	status   app.Status
	seen     map[string]bool   // approval ids already announced
	asked    map[string]string // delegated task id -> the question already announced
	received map[string]bool   // received transfers (task ids) already announced; nil before the first read
	failures int               // consecutive failed refreshes, for logging once
}

// uiOpener opens windows in the UI process.
type uiOpener interface {
	open(ctx context.Context, r app.UIRequest) error
	// missing is the path of the UI process's executable when it is
	// missing, else "".
	missing() string
}

func (c *controller) run(ctx context.Context) {
	wake := make(chan struct{}, 1)
	filesWake := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.watch(ctx, wake, filesWake)
	}()
	defer func() { <-done }()
	c.refresh(ctx)
	last := time.Now() // of the last refresh
	var timer *time.Timer
	var fire <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case <-wake:
			// The first notice after a quiet spell renders at once (a new
			// approval's popup waits for no timer); the rest of its burst
			// is gathered into one render debounce later.
			if timer != nil {
				break
			}
			if wait := debounce - time.Since(last); wait > 0 {
				timer = time.NewTimer(wait)
				fire = timer.C
				break
			}
			c.refresh(ctx)
			last = time.Now()
		case <-fire:
			timer, fire = nil, nil
			c.refresh(ctx)
			last = time.Now()
		case a := <-c.clicks:
			c.handle(ctx, a)
			c.refresh(ctx)
			last = time.Now()
		case <-filesWake:
			c.announceReceived(ctx)
		}
	}
}

// watch follows the node's change notices and wakes the loop (coalesced).
// A dropped stream is retried with a growing pause (1 s to 30 s).
func (c *controller) watch(ctx context.Context, wake, filesWake chan<- struct{}) {
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	pokeFiles := func() {
		select {
		case filesWake <- struct{}{}:
		default:
		}
	}
	pause := time.Second
	for ctx.Err() == nil {
		start := time.Now()
		err := c.api.Events(ctx, func(ts []app.EventType) {
			if slices.Contains(ts, app.EventFiles) {
				pokeFiles()
			}
			for _, t := range ts {
				switch t {
				case app.EventStatus, app.EventApprovals, app.EventPeers, app.EventGrants, app.EventTasks:
					poke()
					return
				}
			}
		})
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > time.Minute {
			pause = time.Second
		}
		c.log.Debug("change notices interrupted; retrying", "err", err, "in", pause)
		poke() // re-read what may have changed meanwhile
		pokeFiles()
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, 30*time.Second)
	}
}

// fetch runs one control-API call f (bounded by callTimeout) and, when it
// succeeds, keeps its answer in out.
func fetch[T any](ctx context.Context, out *T, f func(context.Context) (T, error)) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	v, err := f(ctx)
	if err == nil {
		*out = v
	}
	return err
}

// send runs one control-API call f that answers nothing, bounded by
// callTimeout.
func send(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return f(ctx)
}

// refresh reads a snapshot, renders the menu when it changed, and handles
// new approvals.
func (c *controller) refresh(ctx context.Context) {
	var s snapshot
	var approvals []app.Approval
	err := errors.Join(
		fetch(ctx, &s.Status, c.api.Status),
		fetch(ctx, &s.Peers, c.api.Peers),
		fetch(ctx, &approvals, c.api.Approvals),
	)
	if err != nil {
		if ctx.Err() == nil && c.failures == 0 {
			c.log.Warn("cannot read the node's state", "err", err)
		}
		c.failures++
		return
	}
	c.failures = 0
	if s.Peers == nil {
		s.Peers = []mesh.Peer{}
	}
	s.Status.PendingApprovals = len(approvals) // the list is fresher than the count
	// The questions of delegated tasks: read only while some wait or were
	// announced (to forget them), not on every task event.
	var waiting []delegate.OutboundTask
	questionsOK := false
	if s.Status.OutboundWaiting > 0 || len(c.asked) > 0 {
		var all []delegate.OutboundTask
		if err := fetch(ctx, &all, c.api.Outbound); err != nil {
			c.log.Debug("cannot read the delegated tasks", "err", err)
		} else {
			waiting = slices.DeleteFunc(all, func(t delegate.OutboundTask) bool { return !app.WaitsForOwner(string(t.State)) })
			s.Status.OutboundWaiting = len(waiting)
			questionsOK = true
		}
	}
	c.status = s.Status
	s.UIMissing = c.ui.missing()
	if c.autostart != nil {
		on, err := c.autostart.Enabled()
		s.Autostart, s.AutostartOK = on, err == nil
	}
	// New approvals first: their popup starts before the menu's rebuild.
	c.announce(ctx, approvals)
	m := buildMenu(s)
	if c.last == nil || !reflect.DeepEqual(*c.last, m) {
		c.menu.render(ctx, m)
		c.last = &m
		if c.settled != nil {
			c.settled()
			c.settled = nil
		}
	}
	if questionsOK {
		c.announceQuestions(ctx, waiting)
	}
}

// announceQuestions sends one notification per question a delegated task
// asks: a task is announced again only when it asks
// something new.
func (c *controller) announceQuestions(ctx context.Context, waiting []delegate.OutboundTask) {
	if c.asked == nil {
		c.asked = make(map[string]string)
	}
	keep := make(map[string]bool, len(waiting))
	for _, t := range waiting {
		keep[t.ID] = true
		if q, ok := c.asked[t.ID]; ok && q == t.Message {
			continue
		}
		c.asked[t.ID] = t.Message
		title, body := questionNotice(t)
		c.notify(ctx, title, body)
	}
	for id := range c.asked {
		if !keep[id] {
			delete(c.asked, id)
		}
	}
}

// maxNoticeQuestion bounds the question quoted in a notification (runes).
const maxNoticeQuestion = 240

// questionNotice is the desktop notification of a delegated task that
// waits for the owner.
func questionNotice(t delegate.OutboundTask) (title, body string) {
	who := t.AgentName
	if who == "" {
		who = "An agent"
	}
	title = who + " asks"
	q := strings.TrimSpace(t.Message)
	if q == "" {
		q = "It needs your input (" + string(t.State) + ")."
	}
	if r := []rune(q); len(r) > maxNoticeQuestion {
		q = string(r[:maxNoticeQuestion]) + "…"
	}
	if t.Request != "" {
		q += "\nAbout: " + t.Request
	}
	return title, q + "\nAnswer it from the meshtray menu: Questions from agents…"
}

// announce sends a notification for each approval not seen before and
// asks the UI process to show the popup.
func (c *controller) announce(ctx context.Context, as []app.Approval) {
	if c.seen == nil {
		c.seen = make(map[string]bool)
	}
	var fresh []app.Approval
	for _, a := range as {
		if !c.seen[a.ID] {
			c.seen[a.ID] = true
			fresh = append(fresh, a)
		}
	}
	// Forget decided ones, so the set stays as small as the queue.
	for id := range c.seen {
		if !slices.ContainsFunc(as, func(a app.Approval) bool { return a.ID == id }) {
			delete(c.seen, id)
		}
	}
	if len(fresh) == 0 {
		return
	}
	if err := c.ui.open(ctx, app.UIRequest{Window: app.UIApprovals}); err != nil {
		c.log.Warn("cannot open the approval window", "err", err)
	}
	for _, a := range fresh {
		title, body := approvalNotice(a)
		c.notify(ctx, title, body)
	}
}

// announceReceived notifies each received transfer not announced yet
// (GET /files/received, newest first). The first read only learns what
// is there: those arrived before the tray watched.
func (c *controller) announceReceived(ctx context.Context) {
	var rs []app.ReceivedTransfer
	if err := fetch(ctx, &rs, c.api.ReceivedFiles); err != nil {
		c.log.Debug("cannot read the received files", "err", err)
		return
	}
	first := c.received == nil
	if first {
		c.received = make(map[string]bool)
	}
	keep := make(map[string]bool, len(rs))
	for i := len(rs) - 1; i >= 0; i-- { // oldest first
		r := rs[i]
		keep[r.TaskID] = true
		if c.received[r.TaskID] {
			continue
		}
		c.received[r.TaskID] = true
		if !first && c.notifyFiles != nil {
			title, body := receivedNotice(r)
			c.notifyFiles(ctx, title, body, r.Result.Dir)
		}
	}
	for id := range c.received {
		if !keep[id] {
			delete(c.received, id)
		}
	}
}

// maxNoticeFiles is how many saved paths a notification names.
const maxNoticeFiles = 3

// receivedNotice is the desktop notification of a received transfer.
func receivedNotice(r app.ReceivedTransfer) (title, body string) {
	who := r.Peer
	if who == "" {
		who = "a device"
	}
	fs := r.Result.Files
	if len(fs) == 1 {
		title = path.Base(fs[0].Path) + " from " + who
	} else {
		title = fmt.Sprintf("%d files from %s", len(fs), who)
	}
	var lines []string
	for i, f := range fs {
		if i == maxNoticeFiles {
			lines = append(lines, fmt.Sprintf("… and %d more", len(fs)-i))
			break
		}
		lines = append(lines, f.Path)
	}
	return title, strings.Join(lines, "\n") + "\nSaved in " + r.Result.Dir
}

// approvalNotice is the desktop notification of one approval.
func approvalNotice(a app.Approval) (title, body string) {
	who := a.Peer
	if who == "" {
		who = "a device"
	}
	switch a.Kind {
	case app.KindDelegation:
		title = "Delegation from " + who
	case app.KindCapability:
		title = "Capability call from " + who
	case app.KindPairing:
		title = who + " wants to pair"
	default:
		title = "Approval needed: " + who
	}
	body = a.Summary
	if a.SAS != "" {
		body += "\nCode on both screens: " + a.SAS
	}
	return title, body + "\nOpen meshtray to approve or deny."
}

// handle runs one click.
func (c *controller) handle(ctx context.Context, a action) {
	var err error
	switch a.kind {
	case actCopyID:
		err = c.copyText(c.status.DeviceID)
		if err == nil {
			c.notify(ctx, "Device ID copied", c.status.DeviceID)
		}
	case actToggleA2A:
		err = send(ctx, func(ctx context.Context) error { _, err := c.api.SetA2A(ctx, !c.status.A2A.Enabled); return err })
	case actToggleLAN:
		on := !c.status.LAN
		err = send(ctx, func(ctx context.Context) error {
			_, err := c.api.UpdateConfig(ctx, app.ConfigUpdate{LAN: &on})
			return err
		})
	case actOpenPeer:
		err = c.ui.open(ctx, app.UIRequest{Window: app.UIPeer, Arg: a.arg})
	case actOpenPeers:
		err = c.ui.open(ctx, app.UIRequest{Window: app.UIPeers})
	case actPair:
		err = c.ui.open(ctx, app.UIRequest{Window: app.UIPair})
	case actDevices:
		err = c.ui.open(ctx, app.UIRequest{Window: app.UIDevices})
	case actApprovals:
		err = c.ui.open(ctx, app.UIRequest{Window: app.UIApprovals})
	case actManifest:
		err = c.ui.open(ctx, app.UIRequest{Window: app.UIManifest})
	case actActivity:
		err = c.ui.open(ctx, app.UIRequest{Window: app.UIActivity})
	case actQuestions:
		err = c.ui.open(ctx, app.UIRequest{Window: app.UIQuestions})
	case actAutostart:
		if c.autostart == nil {
			return
		}
		on, _ := c.autostart.Enabled()
		if on {
			err = c.autostart.Disable()
		} else {
			err = c.autostart.Enable()
		}
		c.last = nil // the file is not a node event: render anew
	case actOpenLogs:
		err = c.openPath(c.status.LogDir)
	case actQuit:
		c.quit()
		return
	}
	if err != nil {
		c.log.Warn("menu action failed", "action", a.kind, "err", err)
		c.notify(ctx, "meshtray", fmt.Sprintf("That did not work: %v", err))
	}
}
