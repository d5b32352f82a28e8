package windows

import (
	"context"
	"errors"
	"io"
	"slices"
	"strconv"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/widget"

	"meshtray/app"
	"meshtray/textsafe"
)

// activityLimit is how many of the newest audit entries the Activity
// window keeps (the CLI reads the rest: meshtray audit).
const activityLimit = 500

// allDevices is the device filter that shows every entry.
const allDevices = "All devices"

// activityView shows the newest audit entries, newest first, filtered by
// the device (the entry's peer: the caller, the grant's holder, the
// pairing device). It takes entries (add) and knows nothing of HTTP. Every
// text is escaped (textsafe.EscapeInvisible): names and parameters come
// from other devices.
type activityView struct {
	entries []app.AuditEntry // oldest first, at most activityLimit
	shown   []app.AuditEntry // newest first, after the filter
	device  string           // allDevices or a peer name

	filter *widget.Select
	count  *widget.Label
	list   *widget.List
	root   fyne.CanvasObject
}

func newActivityView() *activityView {
	v := &activityView{device: allDevices}
	v.filter = widget.NewSelect([]string{allDevices}, nil)
	v.filter.SetSelected(allDevices)
	v.count = plainLabel("")
	v.list = widget.NewList(
		func() int { return len(v.shown) },
		func() fyne.CanvasObject {
			return container.NewVBox(boldLabel("who · what"), plainLabel("time · kind · result · where"))
		},
		func(i widget.ListItemID, o fyne.CanvasObject) {
			if i < 0 || i >= len(v.shown) {
				return
			}
			top, bottom := activityLines(v.shown[i])
			rows := o.(*fyne.Container).Objects
			rows[0].(*widget.Label).SetText(top)
			rows[1].(*widget.Label).SetText(bottom)
		},
	)
	head := container.NewVBox(
		heading("Activity"),
		mutedLabel("Decisions, capability runs, grant and pairing changes, A2A and LAN switches, newest first. `meshtray audit` shows all of it; `meshtray audit verify` checks nothing was changed."),
		container.NewBorder(nil, nil, plainLabel("Device:"), v.count, v.filter),
	)
	v.root = container.NewPadded(container.NewBorder(head, nil, nil, nil, v.list))
	v.filter.OnChanged = func(s string) {
		if s == "" {
			s = allDevices
		}
		v.device = s
		v.render()
	}
	v.render()
	return v
}

// activityLines are an entry's two lines: who and what; when, kind,
// result and where.
func activityLines(e app.AuditEntry) (string, string) {
	top := textsafe.EscapeInvisible(e.Who() + " · " + e.What())
	bottom := textsafe.EscapeInvisible(e.Time.Local().Format("2006-01-02 15:04:05") + " · " + e.Kind + " · " + e.ResultText() + " · " + e.Where())
	return clipRunes(top, 160), clipRunes(bottom, 160)
}

func clipRunes(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// add appends entries (in the order written); the oldest go beyond
// activityLimit.
func (v *activityView) add(es ...app.AuditEntry) {
	for _, e := range es {
		if n := len(v.entries); n > 0 && e.Seq <= v.entries[n-1].Seq {
			continue // already shown (a reconnected stream)
		}
		v.entries = append(v.entries, e)
	}
	if over := len(v.entries) - activityLimit; over > 0 {
		v.entries = slices.Delete(v.entries, 0, over)
	}
	v.render()
}

// devices are the filter's choices: every peer named in the entries.
func (v *activityView) devices() []string {
	seen := map[string]bool{}
	out := []string{allDevices}
	for i := len(v.entries) - 1; i >= 0; i-- {
		p := v.entries[i].Peer
		if p == "" || seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, textsafe.EscapeInvisible(p))
	}
	slices.Sort(out[1:])
	return out
}

func (v *activityView) render() {
	v.shown = v.shown[:0]
	for i := len(v.entries) - 1; i >= 0; i-- {
		e := v.entries[i]
		if v.device == allDevices || textsafe.EscapeInvisible(e.Peer) == v.device {
			v.shown = append(v.shown, e)
		}
	}
	v.filter.SetOptions(v.devices())
	switch n := len(v.shown); {
	case len(v.entries) == 0:
		v.count.SetText("nothing recorded yet")
	case n == 1:
		v.count.SetText("1 entry")
	default:
		v.count.SetText(strconv.Itoa(n) + " entries")
	}
	v.list.Refresh()
}

// activityWindow is the Activity window: the newest audit entries, then
// each new one as the node writes it (GET /audit/follow), until the window
// closes.
func (u *uiProc) activityWindow() *uiWin {
	uw := &uiWin{}
	v := newActivityView()
	uw.w = u.newWindow(titleActivity, v.root)
	uw.w.Resize(fyne.NewSize(760, 560))
	ctx, cancel := context.WithCancel(u.ctx)
	uw.closed = cancel
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		defer cancel()
		for ctx.Err() == nil {
			err := u.followActivity(ctx, v)
			if ctx.Err() != nil {
				return
			}
			u.log.Warn("the activity stream ended", "err", err)
			select { // the node restarting, or a hiccup: try again
			case <-ctx.Done():
				return
			case <-time.After(2 * time.Second):
			}
		}
	}()
	return uw
}

// followActivity reads the audit stream into v until it ends.
func (u *uiProc) followActivity(ctx context.Context, v *activityView) error {
	s, err := u.api.FollowAudit(ctx, app.AuditQuery{Latest: true, Limit: activityLimit})
	if err != nil {
		return err
	}
	defer s.Close()
	// Entries come as fast as the node writes them: hand them to the UI
	// goroutine in batches, not one call each.
	batch := make(chan app.AuditEntry, 64)
	done := make(chan error, 1)
	go func() {
		defer close(batch)
		for {
			e, err := s.Next()
			if err != nil {
				done <- err
				return
			}
			select {
			case batch <- e:
			case <-ctx.Done():
				done <- ctx.Err()
				return
			}
		}
	}()
	for e := range batch {
		es := []app.AuditEntry{e}
	more:
		for len(es) < activityLimit {
			select {
			case e, ok := <-batch:
				if !ok {
					break more
				}
				es = append(es, e)
			default:
				break more
			}
		}
		u.do(func() { v.add(es...) })
	}
	err = <-done
	if errors.Is(err, io.EOF) {
		return errors.New("the node ended the stream")
	}
	return err
}
