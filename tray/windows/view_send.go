package windows

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"unicode"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/dialog"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"
	"github.com/dustin/go-humanize"

	"meshtray/app"
	"meshtray/files"
	"meshtray/mesh"
	"meshtray/pairing"
)

// titleSend is the start of the "Send files…" window's title; the device's
// name follows.
const titleSend = "meshtray — Send files to "

// maxSendRows bounds the per-file progress rows (a folder of thousands
// of files shows the first ones and a count).
const maxSendRows = 50

// sendCallbacks is what the send view asks for.
type sendCallbacks struct {
	AddFiles  func() // open the file chooser
	AddFolder func() // open the folder chooser
	Send      func(paths []string)
	Cancel    func()
}

// sendView is the "Send files…" window: the chosen files and folders,
// then the transfer's state and progress (app.SendEvent) and its result.
type sendView struct {
	cb      sendCallbacks
	device  string // the device's name as shown
	paths   []string
	sending bool

	heading  *widget.Label
	intro    *widget.Label
	list     *fyne.Container
	state    *widget.Label
	total    *widget.ProgressBar
	totalTxt *widget.Label
	rows     *fyne.Container
	bars     map[int]*widget.ProgressBar
	result   *widget.Label
	sendBtn  *widget.Button
	addBtn   *widget.Button
	dirBtn   *widget.Button
	stopBtn  *widget.Button
	root     fyne.CanvasObject
}

func newSendView(device string, cb sendCallbacks) *sendView {
	v := &sendView{cb: cb, device: device, list: container.NewVBox(), rows: container.NewVBox(), bars: map[int]*widget.ProgressBar{}}
	v.state = wrapLabel("")
	v.state.Hide()
	v.total = widget.NewProgressBar()
	v.total.Hide()
	v.totalTxt = mutedLabel("")
	v.totalTxt.Hide()
	v.result = wrapLabel("")
	v.result.TextStyle = fyne.TextStyle{Monospace: true}
	v.result.Hide()
	v.addBtn = widget.NewButtonWithIcon("Add files…", theme.FileIcon(), func() { cb.AddFiles() })
	v.dirBtn = widget.NewButtonWithIcon("Add folder…", theme.FolderIcon(), func() { cb.AddFolder() })
	v.sendBtn = widget.NewButtonWithIcon("Send", theme.MailSendIcon(), func() {
		if len(v.paths) > 0 && !v.sending {
			cb.Send(slices.Clone(v.paths))
		}
	})
	v.sendBtn.Importance = widget.HighImportance
	v.stopBtn = widget.NewButtonWithIcon("Cancel", theme.CancelIcon(), func() { cb.Cancel() })
	v.stopBtn.Hide()
	v.heading = heading("Send files to " + device)
	v.intro = mutedLabel(sendIntro(device))
	v.root = container.NewPadded(newFixedWidth(500, container.NewVScroll(container.NewVBox(
		v.heading,
		v.intro,
		container.NewHBox(v.addBtn, v.dirBtn, layout.NewSpacer(), v.stopBtn, v.sendBtn),
		v.list,
		widget.NewSeparator(),
		v.state, v.total, v.totalTxt, v.rows, v.result,
	))))
	v.renderList()
	return v
}

// setDevice names the device in the heading, the explanation and the
// states to come (its name, once looked up).
func (v *sendView) setDevice(name string) {
	v.device = name
	v.heading.SetText("Send files to " + name)
	v.intro.SetText(sendIntro(name))
}

func sendIntro(device string) string {
	return "Drop files or folders on this window, or add them here. The owner of " + device + " approves them there; a phone downloads them from its meshtray page."
}

// sendDeviceLabel is how the window names device before its name is
// known: a device ID (56 characters) as its short form, a phone's grant
// name as it is.
func sendDeviceLabel(device string) string {
	if len(device) == len(pairing.DeviceID{}.String()) {
		return pairing.ShortID(device)
	}
	return device
}

// add puts paths on the list (each once); false when a transfer runs.
func (v *sendView) add(paths ...string) bool {
	if v.sending {
		return false
	}
	for _, p := range paths {
		if p != "" && !slices.Contains(v.paths, p) {
			v.paths = append(v.paths, p)
		}
	}
	v.renderList()
	return true
}

func (v *sendView) renderList() {
	var objs []fyne.CanvasObject
	if len(v.paths) == 0 {
		objs = append(objs, mutedLabel("Nothing chosen yet."))
	}
	for _, p := range v.paths {
		l := widget.NewLabel(filepath.Base(p) + "   " + filepath.Dir(p))
		l.Truncation = fyne.TextTruncateEllipsis
		objs = append(objs, container.NewBorder(nil, nil, widget.NewIcon(theme.DocumentIcon()), nil, l))
	}
	v.list.Objects = objs
	v.list.Refresh()
	if len(v.paths) == 0 || v.sending {
		v.sendBtn.Disable()
	} else {
		v.sendBtn.Enable()
	}
}

// started shows the transfer under way.
func (v *sendView) started() {
	v.sending = true
	v.addBtn.Disable()
	v.dirBtn.Disable()
	v.stopBtn.Show()
	v.state.SetText("Asking " + v.device + "…")
	v.state.Show()
	v.total.SetValue(0)
	v.total.Show()
	v.totalTxt.Hide()
	v.rows.Objects = nil
	v.rows.Refresh()
	v.bars = map[int]*widget.ProgressBar{}
	v.result.Hide()
	v.renderList()
}

// event applies one line of the transfer's stream.
func (v *sendView) event(ev app.SendEvent) {
	switch ev.Type {
	case app.SendEventState:
		v.state.SetText(sendStateText(v.device, ev.State, ev.Message))
	case app.SendEventProgress:
		if ev.Total > 0 {
			v.total.SetValue(float64(ev.TotalDone) / float64(ev.Total))
			v.totalTxt.SetText(fmt.Sprintf("%s of %s", humanize.IBytes(uint64(ev.TotalDone)), humanize.IBytes(uint64(ev.Total))))
			v.totalTxt.Show()
		}
		bar, ok := v.bars[ev.File]
		if !ok {
			if len(v.bars) >= maxSendRows {
				return
			}
			bar = widget.NewProgressBar()
			v.bars[ev.File] = bar
			v.rows.Add(container.NewBorder(nil, nil, plainLabel(ev.Path), nil, bar))
		}
		if ev.Size > 0 {
			bar.SetValue(float64(ev.Done) / float64(ev.Size))
		} else {
			bar.SetValue(1)
		}
	}
}

// finished shows the result (err: the transfer could not start or its
// stream broke).
func (v *sendView) finished(res app.SendResult, err error) {
	v.sending = false
	v.stopBtn.Hide()
	v.addBtn.Enable()
	v.dirBtn.Enable()
	switch {
	case err != nil:
		v.state.SetText("Not sent: " + err.Error())
		v.state.Importance = widget.DangerImportance
	case res.State == "completed":
		v.state.SetText(sendStateText(v.device, res.State, res.Message))
		v.state.Importance = widget.SuccessImportance
		v.total.SetValue(1)
		var b strings.Builder
		if res.Dir != "" {
			b.WriteString("Saved in " + res.Dir + ":\n")
		}
		for i, f := range res.Files {
			if i == maxSendRows {
				fmt.Fprintf(&b, "… and %d more\n", len(res.Files)-i)
				break
			}
			b.WriteString(f.Path + "\n")
		}
		if sk := res.Skipped; sk != nil && sk.Count > 0 {
			writeNotSent(&b, fmt.Sprintf("Not sent, %d links or special files:", sk.Count), *sk)
		}
		if rf := res.Refused; rf != nil && rf.Count > 0 {
			writeNotSent(&b, fmt.Sprintf("Not sent, %d with a name %s would refuse:", rf.Count, v.device), *rf)
		}
		v.result.SetText(strings.TrimSpace(b.String()))
		v.result.Show()
		v.paths = nil
	default:
		v.state.SetText(sendStateText(v.device, res.State, res.Message))
		v.state.Importance = widget.DangerImportance
	}
	v.state.Refresh()
	v.renderList()
}

// sendStateText is a transfer state as the window says it.
func sendStateText(device, state, msg string) string {
	var s string
	switch state {
	case "submitted":
		s = "Waiting for approval on " + device + "…"
	case "working":
		s = "Sending…"
		if msg != "" {
			return sentence(msg) // "offered to …" says more than "Sending…"
		}
	case "completed":
		s = "✓ Sent."
	case "rejected":
		s = "Declined on " + device + "."
	case "canceled":
		s = "Cancelled."
	case "failed":
		s = "Failed."
	default:
		s = state
	}
	if msg != "" && state != "submitted" {
		s += " " + sentence(msg)
	}
	return s
}

// sentence is msg with a capital first letter and a full stop.
func sentence(msg string) string {
	r := []rune(strings.TrimSpace(msg))
	if len(r) == 0 {
		return ""
	}
	r[0] = unicode.ToUpper(r[0])
	if !strings.ContainsRune(".!?…", r[len(r)-1]) {
		r = append(r, '.')
	}
	return string(r)
}

// writeNotSent adds a paragraph to b: the heading, then the first
// maxSendRows entries of ns (path and why) and how many more there are.
func writeNotSent(b *strings.Builder, heading string, ns files.NotSent) {
	b.WriteString("\n" + heading + "\n")
	for i, e := range ns.Entries {
		if i == maxSendRows {
			break
		}
		b.WriteString(e.Path + " (" + e.Why + ")\n")
	}
	if more := ns.Count - min(len(ns.Entries), maxSendRows); more > 0 {
		fmt.Fprintf(b, "… and %d more\n", more)
	}
}

// droppedPaths are the local paths of dropped items (file: URIs only).
func droppedPaths(us []fyne.URI) []string {
	var out []string
	for _, u := range us {
		if u != nil && u.Scheme() == "file" && u.Path() != "" {
			out = append(out, u.Path())
		}
	}
	return out
}

// sendWindow is "Send files…" to device (a device ID, or a phone's grant
// name). paths, when given (a drop on the peer window, or the command
// line), are sent at once. Closing the window while a transfer runs
// cancels it.
func (u *uiProc) sendWindow(device string, paths []string) *uiWin {
	uw := &uiWin{}
	var v *sendView
	var cancel context.CancelFunc
	send := func(ps []string) {
		if cancel != nil {
			return
		}
		ctx, stop := context.WithCancel(u.ctx)
		cancel = stop
		v.started()
		u.bg(func(context.Context) func() {
			res, err := u.api.SendFiles(ctx, device, ps, func(ev app.SendEvent) {
				u.do(func() { v.event(ev) })
			})
			var ae *app.APIError
			if errors.As(err, &ae) {
				err = errors.New(ae.Message)
			}
			return func() {
				stop()
				cancel = nil
				v.finished(res, err)
			}
		})
	}
	name := sendDeviceLabel(device)
	v = newSendView(name, sendCallbacks{
		AddFiles: func() {
			d := dialog.NewFileOpen(func(r fyne.URIReadCloser, err error) {
				if err != nil || r == nil {
					return
				}
				p := r.URI().Path()
				r.Close()
				v.add(p)
			}, uw.w)
			d.Resize(fyne.NewSize(560, 420))
			d.Show()
		},
		AddFolder: func() {
			d := dialog.NewFolderOpen(func(l fyne.ListableURI, err error) {
				if err != nil || l == nil {
					return
				}
				v.add(l.Path())
			}, uw.w)
			d.Resize(fyne.NewSize(560, 420))
			d.Show()
		},
		Send: send,
		Cancel: func() {
			if cancel != nil {
				cancel()
			}
		},
	})
	uw.w = u.newWindow(titleSend+name, v.root)
	uw.w.Resize(fyne.NewSize(540, 480))
	uw.drop = func(ps []string) {
		if len(ps) > 0 && v.add(ps...) {
			send(slices.Clone(v.paths))
		}
	}
	uw.w.SetOnDropped(func(_ fyne.Position, us []fyne.URI) { uw.drop(droppedPaths(us)) })
	uw.closed = func() {
		if cancel != nil {
			cancel()
		}
	}
	// The device's name, for the title and the texts.
	u.bg(func(ctx context.Context) func() {
		n := u.deviceName(ctx, device)
		if n == "" {
			return nil
		}
		return func() {
			v.setDevice(n)
			uw.w.SetTitle(titleSend + n)
		}
	})
	if len(paths) > 0 {
		v.add(paths...)
		send(slices.Clone(v.paths))
	}
	return uw
}

// deviceName names the device ref is (a device ID among the peers, else
// ref itself, a grant's name).
func (u *uiProc) deviceName(ctx context.Context, ref string) string {
	var ps []mesh.Peer
	if err := fetch(ctx, &ps, u.api.Peers); err == nil {
		for _, p := range ps {
			if p.ID == ref && p.Name != "" {
				return p.Name
			}
		}
	}
	if len(ref) == len(pairing.DeviceID{}.String()) {
		return pairing.ShortID(ref)
	}
	return ""
}
