package windows

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"fyne.io/fyne/v2"
	fyneapp "fyne.io/fyne/v2/app"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/dialog"
	"fyne.io/fyne/v2/widget"

	"meshtray/a2a/delegate"
	"meshtray/app"
	"meshtray/assets"
	"meshtray/mesh"
	"meshtray/nodes"
	"meshtray/pairing"
)

// Window titles; tests find the windows by them.
const (
	titleApprovals = "meshtray — Approval needed"
	titlePair      = "meshtray — Pair a device"
	titleDevices   = "meshtray — Devices"
	titlePeers     = "meshtray — Peers"
	titleManifest  = "meshtray — Node manifest"
	titleQuestions = "meshtray — Questions from agents"
	titleActivity  = "meshtray — Activity"
)

// UI is `meshtray-ui [WINDOW [ARG]]` (Main): the Fyne window process. It opens the
// windows named on the command line and those queued by the tray
// (POST /ui/take), follows the node's change notices, and returns when its
// last window closes, ctx ends, or the node goes away. WINDOW is one of
// approvals, pair, devices, peers, peer DEVICE-ID, manifest, questions,
// activity, send DEVICE [PATH...] (the paths are sent at once, as when
// dropped).
//
// With no display to open a window on, Fyne's GLFW driver panics at the
// first window; UI turns that into an error naming the display it tried,
// and puts the windows it took from the tray's queue back, so the tray's
// next UI process (it retries a few times) shows them.
func UI(ctx context.Context, c *app.Client, args []string) (err error) {
	reqs, sendPaths, err := parseUIArgs(args)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("pkg", "ui")
	a := fyneapp.NewWithID(app.AppID)
	a.SetIcon(fyne.NewStaticResource("meshtray.png", assets.IconNormal))
	u := newUIProc(ctx, a, c, log)
	defer u.stop()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cannot open a window on the display (DISPLAY=%q, WAYLAND_DISPLAY=%q): %v",
				os.Getenv("DISPLAY"), os.Getenv("WAYLAND_DISPLAY"), r)
			u.requeue()
		}
	}()
	if len(sendPaths) > 0 {
		u.openSend(reqs[0].Arg, sendPaths)
	} else {
		for _, r := range reqs {
			u.open(r)
		}
	}
	u.takeQueue()
	if len(u.wins) == 0 {
		return nil // nothing to show
	}
	u.start()
	a.Run()
	u.stopped.Store(true)
	return nil
}

func parseUIArgs(args []string) (reqs []app.UIRequest, sendPaths []string, err error) {
	if len(args) == 0 {
		return nil, nil, nil
	}
	r := app.UIRequest{Window: app.UIWindow(args[0])}
	if !r.Window.Valid() {
		return nil, nil, fmt.Errorf("ui %q: want approvals, pair, devices, peers, peer DEVICE-ID, manifest, questions, activity or send DEVICE [PATH...]", args[0])
	}
	switch {
	case r.Window == app.UIPeer:
		if len(args) != 2 {
			return nil, nil, errors.New("ui peer: give the peer's device ID")
		}
		r.Arg = args[1]
	case r.Window == app.UISend:
		if len(args) < 2 {
			return nil, nil, errors.New("ui send: give the device (its name or device ID), then any paths to send")
		}
		r.Arg = args[1]
		for _, p := range args[2:] {
			abs, err := filepath.Abs(p)
			if err != nil {
				return nil, nil, err
			}
			sendPaths = append(sendPaths, abs)
		}
		if len(sendPaths) > 0 {
			return []app.UIRequest{r}, sendPaths, nil // opened by openSend
		}
	case len(args) != 1:
		return nil, nil, fmt.Errorf("ui %s takes no argument", args[0])
	}
	return []app.UIRequest{r}, nil, nil
}

// uiProc is the running UI process: its windows and the goroutines that
// feed them. wins is touched only on the UI goroutine.
type uiProc struct {
	ctx    context.Context
	cancel context.CancelFunc
	a      fyne.App
	api    *app.Client
	log    *slog.Logger

	wins    map[string]*uiWin
	taken   []app.UIRequest // every request taken from the tray's queue; UI goroutine only
	stopped atomic.Bool     // the Fyne loop is ending: UI work is dropped
	wg      sync.WaitGroup
}

// uiWin is one open window and how it follows the node.
type uiWin struct {
	w        fyne.Window
	onEvents func(ts []app.EventType) // on the UI goroutine
	tick     func()                   // every second, on the UI goroutine
	// owns reports whether the pairing window shows a (pairing only).
	owns func(a app.Approval) bool
	// closed, when set, runs when the window closes.
	closed func()
	// drop, when set, takes paths dropped elsewhere for this window (send).
	drop func(paths []string)
}

func newUIProc(ctx context.Context, a fyne.App, api *app.Client, log *slog.Logger) *uiProc {
	ctx, cancel := context.WithCancel(ctx)
	return &uiProc{ctx: ctx, cancel: cancel, a: a, api: api, log: log, wins: map[string]*uiWin{}}
}

// start runs the watchers: change notices, the countdown tick, and ctx.
func (u *uiProc) start() {
	u.wg.Add(3)
	go func() {
		defer u.wg.Done()
		u.watch()
	}()
	go func() {
		defer u.wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-u.ctx.Done():
				return
			case <-t.C:
				u.do(func() {
					for _, w := range u.wins {
						if w.tick != nil {
							w.tick()
						}
					}
				})
			}
		}
	}()
	go func() {
		defer u.wg.Done()
		<-u.ctx.Done()
		u.do(func() {
			u.stopped.Store(true)
			u.a.Quit()
		})
	}()
}

func (u *uiProc) stop() {
	u.cancel()
	u.wg.Wait()
}

// do runs fn on the UI goroutine unless the loop is ending.
func (u *uiProc) do(fn func()) {
	if u.stopped.Load() {
		return
	}
	fyne.Do(func() {
		if !u.stopped.Load() {
			fn()
		}
	})
}

// bg runs work off the UI goroutine and then its result on it.
func (u *uiProc) bg(work func(ctx context.Context) func()) {
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		if ui := work(u.ctx); ui != nil && u.ctx.Err() == nil {
			u.do(ui)
		}
	}()
}

// watch follows GET /events; when the stream ends and the node no longer
// answers, the process ends.
func (u *uiProc) watch() {
	for u.ctx.Err() == nil {
		err := u.api.Events(u.ctx, func(ts []app.EventType) {
			u.do(func() { u.onEvents(ts) })
		})
		if u.ctx.Err() != nil {
			return
		}
		var st app.Status
		if serr := fetch(u.ctx, &st, u.api.Status); serr != nil {
			u.log.Info("the node is gone; closing the windows", "err", err)
			u.cancel()
			return
		}
		u.do(func() {
			u.onEvents([]app.EventType{app.EventUI, app.EventApprovals, app.EventStatus, app.EventPeers, app.EventGrants})
		})
		select {
		case <-u.ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (u *uiProc) onEvents(ts []app.EventType) {
	if slices.Contains(ts, app.EventUI) {
		u.takeQueue()
	}
	for _, w := range u.wins {
		if w.onEvents != nil {
			w.onEvents(ts)
		}
	}
}

// takeQueue opens the windows the tray asked for. It runs on the UI
// goroutine, so a request taken is a window shown.
func (u *uiProc) takeQueue() {
	var reqs []app.UIRequest
	if err := fetch(u.ctx, &reqs, u.api.TakeUI); err != nil {
		u.log.Warn("cannot read the window queue", "err", err)
		return
	}
	u.taken = append(u.taken, reqs...)
	for _, r := range reqs {
		u.open(r)
	}
}

// requeue gives the tray back the windows this process took and could not
// show (best effort: the process is about to exit).
func (u *uiProc) requeue() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, r := range u.taken {
		if err := send(ctx, func(ctx context.Context) error { return u.api.OpenUI(ctx, r) }); err != nil {
			u.log.Warn("cannot put a window back in the queue", "window", r.Window, "err", err)
		}
	}
}

// open shows the window r names, creating it or raising it.
func (u *uiProc) open(r app.UIRequest) {
	key := uiKey(r)
	if w, ok := u.wins[key]; ok {
		if r.Window == app.UIApprovals && w.onEvents != nil {
			w.onEvents([]app.EventType{app.EventApprovals})
		}
		w.w.Show()
		w.w.RequestFocus()
		return
	}
	var uw *uiWin
	switch r.Window {
	case app.UIApprovals:
		// Only when something is waiting that no other window shows, so
		// no empty popup flashes (one read on loopback).
		var as []app.Approval
		if err := fetch(u.ctx, &as, u.api.Approvals); err != nil || len(u.popupApprovals(as)) == 0 {
			return
		}
		uw = u.approvalsWindow()
	case app.UIPair:
		uw = u.pairWindow()
	case app.UIDevices:
		uw = u.devicesWindow()
	case app.UIPeers:
		uw = u.peersWindow()
	case app.UIPeer:
		uw = u.peerWindow(r.Arg)
	case app.UIManifest:
		uw = u.manifestWindow()
	case app.UIQuestions:
		uw = u.questionsWindow()
	case app.UIActivity:
		uw = u.activityWindow()
	case app.UISend:
		uw = u.sendWindow(r.Arg, nil)
	default:
		return
	}
	u.show(key, uw)
}

// uiKey names a window in uiProc.wins: one per kind, one per device for
// a peer and for sending.
func uiKey(r app.UIRequest) string {
	if r.Window == app.UIPeer || r.Window == app.UISend {
		return string(r.Window) + ":" + r.Arg
	}
	return string(r.Window)
}

// openSend opens "Send files…" to device and sends paths at once (a
// drop, or the command line); a send window already open for device gets
// them instead.
func (u *uiProc) openSend(device string, paths []string) {
	key := uiKey(app.UIRequest{Window: app.UISend, Arg: device})
	if w, ok := u.wins[key]; ok && w.drop != nil {
		w.drop(paths)
		w.w.Show()
		w.w.RequestFocus()
		return
	}
	u.show(key, u.sendWindow(device, paths))
}

// show registers uw under key and shows it.
func (u *uiProc) show(key string, uw *uiWin) {
	u.wins[key] = uw
	uw.w.SetOnClosed(func() {
		if uw.closed != nil {
			uw.closed()
		}
		delete(u.wins, key)
		if len(u.wins) == 0 {
			// Last window: take what was queued meanwhile, or end.
			u.takeQueue()
			if len(u.wins) == 0 {
				u.stopped.Store(true)
			}
		}
	})
	uw.w.Show()
	uw.w.RequestFocus()
}

// follow makes uw a window titled title showing root at size, filled by
// refresh now and again whenever the node publishes the event type on.
func (u *uiProc) follow(uw *uiWin, title string, root fyne.CanvasObject, size fyne.Size, refresh func(), on app.EventType) {
	uw.w = u.newWindow(title, root)
	uw.w.Resize(size)
	uw.onEvents = func(ts []app.EventType) {
		if slices.Contains(ts, on) {
			refresh()
		}
	}
	refresh()
}

func (u *uiProc) newWindow(title string, content fyne.CanvasObject) fyne.Window {
	w := u.a.NewWindow(title)
	w.SetContent(content)
	w.SetIcon(u.a.Icon())
	return w
}

// --- approvals ---

func (u *uiProc) approvalsWindow() *uiWin {
	uw := &uiWin{}
	var v *approvalView
	v = newApprovalView(func(a app.Approval, d app.ApprovalDecision) {
		d.Where = app.WhereTray // the audit trail says where the owner decided
		u.bg(func(ctx context.Context) func() {
			err := send(ctx, func(ctx context.Context) error { return u.api.Decide(ctx, a.ID, d) })
			return func() {
				if err != nil {
					var ae *app.APIError
					if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
						err = errors.New("it was already decided or it expired")
					}
					v.failed(a.ID, err)
				}
			}
		})
	})
	uw.w = u.newWindow(titleApprovals, v.root)
	uw.w.Resize(fyne.NewSize(540, 460))
	var refresh func()
	ticks := 0
	uw.tick = func() {
		v.tick()
		// Re-read the queue every resyncTicks s as well: a decision made
		// elsewhere between this window's first read and the moment its
		// change-notice stream was connected sends no notice it could see,
		// and the popup must not show a decided request.
		if ticks++; ticks%resyncTicks == 0 {
			refresh()
		}
	}
	refresh = func() {
		u.bg(func(ctx context.Context) func() {
			var as []app.Approval
			if err := fetch(ctx, &as, u.api.Approvals); err != nil {
				u.log.Warn("cannot read approvals", "err", err)
				return nil
			}
			return func() {
				as = u.popupApprovals(as)
				if len(as) == 0 {
					uw.w.Close() // decided elsewhere: nothing left to show
					return
				}
				v.set(as)
				uw.w.SetTitle(approvalsTitle(len(as)))
			}
		})
	}
	uw.onEvents = func(ts []app.EventType) {
		if slices.Contains(ts, app.EventApprovals) {
			refresh()
		}
	}
	refresh()
	return uw
}

// resyncTicks is how often (in 1 s ticks) the popup re-reads its queue
// without a change notice.
const resyncTicks = 2

// approvalsTitle is the popup's window title: the queue's length shows in
// the task bar (and tests read it) when more than one waits.
func approvalsTitle(n int) string {
	if n > 1 {
		return fmt.Sprintf("%s (%d waiting)", titleApprovals, n)
	}
	return titleApprovals
}

// popupApprovals leaves out the pairing claim the pairing window shows
// (or is about to: a claim of its code).
func (u *uiProc) popupApprovals(as []app.Approval) []app.Approval {
	pw, ok := u.wins[string(app.UIPair)]
	if !ok || pw.owns == nil {
		return as
	}
	return slices.DeleteFunc(slices.Clone(as), pw.owns)
}

// --- pairing ---

func (u *uiProc) pairWindow() *uiWin {
	uw := &uiWin{}
	var v *pairView
	var started time.Time
	var decided string // the claim we approved, waiting for its grant
	var claimant app.Approval
	newCode := func() {
		v.loading()
		decided = ""
		if uw.w != nil {
			uw.w.SetTitle(titlePair)
		}
		u.bg(func(ctx context.Context) func() {
			var ps app.PairingSession
			err := fetch(ctx, &ps, u.api.StartPairing)
			return func() {
				if err != nil {
					v.failed("Could not make a pairing code: " + err.Error())
					return
				}
				started = time.Now().Add(-2 * time.Second)
				v.setSession(ps)
			}
		})
	}
	checkPaired := func() {
		a := claimant
		u.bg(func(ctx context.Context) func() {
			var d app.Devices
			if err := fetch(ctx, &d, u.api.Devices); err != nil {
				return nil
			}
			for _, g := range d.Issued {
				if (a.DeviceID != "" && g.PeerID == a.DeviceID) || (a.DeviceID == "" && g.Name == a.Peer && !g.Created.Before(a.Created)) {
					return func() {
						if decided == a.ID {
							decided = ""
							v.paired(a, g.Scopes)
							uw.w.SetTitle("meshtray — Paired with " + a.Peer)
						}
					}
				}
			}
			return nil
		})
	}
	v = newPairView(pairCallbacks{
		NewCode: newCode,
		Decide: func(a app.Approval, approve bool, sc pairing.Scopes) {
			d := app.ApprovalDecision{Decision: app.DecisionDeny}
			if approve {
				d = app.ApprovalDecision{Decision: app.DecisionApprove, Scopes: sc}
				decided, claimant = a.ID, a
			}
			d.Where = app.WhereTray
			u.bg(func(ctx context.Context) func() {
				err := send(ctx, func(ctx context.Context) error { return u.api.Decide(ctx, a.ID, d) })
				return func() {
					switch {
					case err != nil:
						decided = ""
						v.failed("Could not send your decision: " + err.Error())
					case approve:
						checkPaired()
					default:
						v.failed("Pairing denied.")
					}
				}
			})
		},
		LANOn: func() {
			u.bg(func(ctx context.Context) func() {
				on := true
				err := send(ctx, func(ctx context.Context) error {
					_, err := u.api.UpdateConfig(ctx, app.ConfigUpdate{LAN: &on})
					return err
				})
				return func() {
					if err != nil {
						v.failed("Could not turn on the local network: " + err.Error())
						return
					}
					newCode()
				}
			})
		},
		Close: func() { uw.w.Close() },
	})
	uw.w = u.newWindow(titlePair, v.root)
	uw.w.Resize(fyne.NewSize(500, 600))
	uw.tick = v.tick
	uw.owns = func(a app.Approval) bool {
		if a.Kind != app.KindPairing {
			return false
		}
		switch v.state {
		case pairClaim:
			return a.ID == v.claim.ID
		case pairCode:
			return !a.Created.Before(started)
		}
		return false
	}
	uw.onEvents = func(ts []app.EventType) {
		if slices.Contains(ts, app.EventGrants) && decided != "" {
			checkPaired()
		}
		if slices.Contains(ts, app.EventStatus) && v.state == pairCode {
			// Listeners come and go (LAN switched off, the tailnet up): the
			// QR code must name an address that answers now.
			u.bg(func(ctx context.Context) func() {
				var b app.PairingBases
				if err := fetch(ctx, &b, u.api.PairingBases); err != nil {
					return nil
				}
				return func() {
					if v.state != pairCode {
						return
					}
					ps := v.session
					ps.SetURLs(b)
					if !slices.Equal(ps.URLs, v.session.URLs) {
						v.setSession(ps)
					}
				}
			})
		}
		if !slices.Contains(ts, app.EventApprovals) || (v.state != pairCode && v.state != pairClaim) {
			return
		}
		u.bg(func(ctx context.Context) func() {
			var as []app.Approval
			if err := fetch(ctx, &as, u.api.Approvals); err != nil {
				return nil
			}
			return func() {
				for _, a := range as {
					if a.Kind == app.KindPairing && !a.Created.Before(started) {
						if v.state == pairCode || (v.state == pairClaim && v.claim.ID == a.ID) {
							v.setClaim(a)
							if pop, ok := u.wins[string(app.UIApprovals)]; ok {
								pop.onEvents([]app.EventType{app.EventApprovals})
							}
							return
						}
					}
				}
				if v.state == pairClaim && decided != v.claim.ID {
					v.claimGone()
				}
			}
		})
	}
	newCode()
	return uw
}

// --- devices ---

func (u *uiProc) devicesWindow() *uiWin {
	uw := &uiWin{}
	var v *devicesView
	refresh := func() {
		u.bg(func(ctx context.Context) func() {
			var d app.Devices
			if err := fetch(ctx, &d, u.api.Devices); err != nil {
				return func() { dialog.ShowError(err, uw.w) }
			}
			return func() { v.set(d) }
		})
	}
	send := func(g pairing.Grant, upd app.GrantUpdate) {
		u.bg(func(ctx context.Context) func() {
			var tok app.GrantToken
			err := fetch(ctx, &tok, func(ctx context.Context) (app.GrantToken, error) { return u.api.UpdateGrant(ctx, g.ID, upd) })
			return func() {
				if err != nil {
					dialog.ShowError(err, uw.w)
					return
				}
				if tok.Token != "" {
					showToken(uw.w, g.Name, tok.Token)
				}
				refresh()
			}
		})
	}
	v = newDevicesView(devicesCallbacks{
		Action: func(g pairing.Grant, action string) {
			switch action {
			case app.ActionRevoke:
				dialog.ShowConfirm("Revoke "+g.Name+"?", "Its token stops working at once, for good. To use this device again it must pair again.",
					func(ok bool) {
						if ok {
							send(g, app.GrantUpdate{Action: action})
						}
					}, uw.w)
			case app.ActionRotate:
				dialog.ShowConfirm("Rotate the token of "+g.Name+"?", rotateText(g),
					func(ok bool) {
						if ok {
							send(g, app.GrantUpdate{Action: action})
						}
					}, uw.w)
			default:
				send(g, app.GrantUpdate{Action: action})
			}
		},
		Policy:    func(g pairing.Grant, p pairing.Policy) { send(g, app.GrantUpdate{Approval: p}) },
		SendFiles: func(g pairing.Grant) { u.open(app.UIRequest{Window: app.UISend, Arg: g.Name}) },
	})
	u.follow(uw, titleDevices, v.root, fyne.NewSize(620, 520), refresh, app.EventGrants)
	return uw
}

// showToken shows a rotated token once, with a copy button.
func showToken(parent fyne.Window, name, token string) {
	e := widget.NewEntry()
	e.SetText(token)
	e.OnChanged = func(string) { e.SetText(token) }
	copyBtn := widget.NewButton("Copy", func() { fyne.CurrentApp().Clipboard().SetContent(token) })
	content := container.NewVBox(
		wrapLabel("The new token of "+name+" is shown this once. Copy it to where it is used."),
		container.NewBorder(nil, nil, nil, copyBtn, e),
	)
	d := dialog.NewCustom("New token", "Done", newFixedWidth(440, content), parent)
	d.Show()
}

// --- peers ---

func (u *uiProc) peersWindow() *uiWin {
	uw := &uiWin{}
	v := newPeersView(func(p mesh.Peer) { u.open(app.UIRequest{Window: app.UIPeer, Arg: p.ID}) })
	refresh := func() {
		u.bg(func(ctx context.Context) func() {
			var ps []mesh.Peer
			if err := fetch(ctx, &ps, u.api.Peers); err != nil {
				return nil
			}
			return func() { v.set(ps) }
		})
	}
	u.follow(uw, titlePeers, v.root, fyne.NewSize(580, 480), refresh, app.EventPeers)
	return uw
}

func (u *uiProc) peerWindow(id string) *uiWin {
	uw := &uiWin{}
	var v *peerView
	refreshTasks := func() {
		u.bg(func(ctx context.Context) func() {
			var ts []delegate.OutboundTask
			if err := fetch(ctx, &ts, u.api.Outbound); err != nil {
				return nil
			}
			ts = slices.DeleteFunc(ts, func(t delegate.OutboundTask) bool { return t.Agent != id })
			return func() { v.setTasks(ts) }
		})
	}
	v = newPeerView(func(text string) {
		u.bg(func(ctx context.Context) func() {
			req := app.DelegateRequest{DelegateRequest: delegate.DelegateRequest{Agent: id, MessageInput: delegate.MessageInput{Text: text}}}
			err := send(ctx, func(ctx context.Context) error { _, err := u.api.Delegate(ctx, req); return err })
			return func() {
				v.sent(err)
				refreshTasks()
			}
		})
	})
	v.files = func() { u.open(app.UIRequest{Window: app.UISend, Arg: id}) }
	uw.w = u.newWindow("meshtray — "+pairing.ShortID(id), v.root)
	uw.w.Resize(fyne.NewSize(580, 560))
	// Files dropped on the peer's window are sent to it.
	uw.w.SetOnDropped(func(_ fyne.Position, us []fyne.URI) {
		if ps := droppedPaths(us); len(ps) > 0 {
			u.openSend(id, ps)
		}
	})
	var manifest *nodes.Manifest
	var merr string
	refresh := func(withManifest bool) {
		u.bg(func(ctx context.Context) func() {
			var ps []mesh.Peer
			if err := fetch(ctx, &ps, u.api.Peers); err != nil {
				return nil
			}
			i := slices.IndexFunc(ps, func(p mesh.Peer) bool { return p.ID == id })
			if i < 0 {
				return func() {
					v.set(mesh.Peer{ID: id, Name: pairing.ShortID(id)}, nil, "This device is not in the peer table any more.")
				}
			}
			p := ps[i]
			var m nodes.Manifest
			var errText string
			if withManifest {
				if err := fetch(ctx, &m, func(ctx context.Context) (nodes.Manifest, error) { return u.api.PeerManifest(ctx, id) }); err != nil {
					errText = err.Error()
					var ae *app.APIError
					switch {
					case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
						errText = "It has not given this device access. To see what it offers, pair: choose Pair a device… on it, then run meshtray pair --join with the address it shows, here."
					case errors.As(err, &ae) && ae.Status == http.StatusForbidden:
						errText = "It gave this device no access to its capabilities (the node scope), so they are not shown. Its owner can pair again and give node."
					}
				}
			}
			return func() {
				uw.w.SetTitle("meshtray — " + p.Name)
				if withManifest {
					manifest, merr = nil, errText
					if errText == "" {
						manifest = &m
					}
				}
				v.set(p, manifest, merr)
			}
		})
	}
	uw.onEvents = func(ts []app.EventType) {
		if slices.Contains(ts, app.EventPeers) || slices.Contains(ts, app.EventGrants) {
			refresh(slices.Contains(ts, app.EventGrants))
		}
		if slices.Contains(ts, app.EventTasks) {
			refreshTasks()
		}
	}
	v.set(mesh.Peer{ID: id, Name: pairing.ShortID(id)}, nil, "")
	refresh(true)
	refreshTasks()
	return uw
}

// --- questions of delegated tasks ---

func (u *uiProc) questionsWindow() *uiWin {
	uw := &uiWin{}
	var v *questionsView
	refresh := func() {
		u.bg(func(ctx context.Context) func() {
			var ts []delegate.OutboundTask
			if err := fetch(ctx, &ts, u.api.Outbound); err != nil {
				u.log.Warn("cannot read the delegated tasks", "err", err)
				return nil
			}
			ts = slices.DeleteFunc(ts, func(t delegate.OutboundTask) bool { return !app.WaitsForOwner(string(t.State)) })
			return func() { v.set(ts) }
		})
	}
	v = newQuestionsView(func(t delegate.OutboundTask, text string) {
		u.bg(func(ctx context.Context) func() {
			req := app.AnswerRequest{MessageInput: delegate.MessageInput{Text: text}}
			err := send(ctx, func(ctx context.Context) error { _, err := u.api.Answer(ctx, t.ID, req); return err })
			return func() {
				v.answered(t.ID, err)
				refresh()
			}
		})
	})
	u.follow(uw, titleQuestions, v.root, fyne.NewSize(560, 480), refresh, app.EventTasks)
	return uw
}

// --- manifest ---

func (u *uiProc) manifestWindow() *uiWin {
	uw := &uiWin{}
	var v *manifestView
	refresh := func() {
		u.bg(func(ctx context.Context) func() {
			var m nodes.Manifest
			if err := fetch(ctx, &m, u.api.Manifest); err != nil {
				return func() { dialog.ShowError(err, uw.w) }
			}
			return func() { v.set(m) }
		})
	}
	v = newManifestView(func(name string, p pairing.Policy) {
		u.bg(func(ctx context.Context) func() {
			err := send(ctx, func(ctx context.Context) error {
				_, err := u.api.UpdateConfig(ctx, app.ConfigUpdate{CapabilityPolicies: map[string]pairing.Policy{name: p}})
				return err
			})
			return func() {
				if err != nil {
					dialog.ShowError(err, uw.w)
				}
				refresh()
			}
		})
	})
	u.follow(uw, titleManifest, v.root, fyne.NewSize(620, 600), refresh, app.EventStatus)
	return uw
}

// rotateText is the confirmation of a token rotation: where the new token
// goes. A paired meshtray receives it; a grant with no device behind it (a
// phone paired through its page, a token minted for a script) does not.
func rotateText(g pairing.Grant) string {
	if g.PeerID != "" {
		return "The old token stops working. The paired device receives the new one."
	}
	return "The old token stops working at once. The new one is shown once, to copy to the script or agent that uses it.\n" +
		"A phone paired through its page cannot receive it: it will have to pair again."
}
