package windows

import (
	"encoding/json"
	"fmt"
	"image/color"
	"slices"
	"strings"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"
	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/a2a/delegate"
	"meshtray/app"
	"meshtray/mesh"
	"meshtray/nodes"
	"meshtray/pairing"
)

var (
	colorOK    = color.NRGBA{0x2e, 0x7d, 0x32, 0xff}
	colorWarn  = color.NRGBA{0xb2, 0x6a, 0x00, 0xff}
	colorMuted = color.NRGBA{0x60, 0x6a, 0x78, 0xff}
	colorInfo  = color.NRGBA{0x1e, 0x5a, 0xa8, 0xff}
)

var policyOptions = []string{string(pairing.PolicyAsk), string(pairing.PolicyAllow), string(pairing.PolicyDeny)}

// devicesCallbacks act on grants.
type devicesCallbacks struct {
	// Action pauses, resumes, revokes or rotates a grant.
	Action func(g pairing.Grant, action string)
	// Policy sets a grant's approval policy for delegations.
	Policy func(g pairing.Grant, p pairing.Policy)
	// SendFiles opens "Send files…" to a phone paired through its page.
	SendFiles func(g pairing.Grant)
}

// devicesView lists the grants this device issued (with their controls)
// and the grants other devices gave it.
type devicesView struct {
	cb   devicesCallbacks
	now  func() time.Time
	list *fyne.Container
	root fyne.CanvasObject
}

func newDevicesView(cb devicesCallbacks) *devicesView {
	v := &devicesView{cb: cb, now: time.Now, list: container.NewVBox()}
	v.root = container.NewPadded(newFixedWidth(560, container.NewVScroll(v.list)))
	v.set(app.Devices{})
	return v
}

func (v *devicesView) set(d app.Devices) {
	objs := []fyne.CanvasObject{heading("Devices and agents this device gave access to")}
	if len(d.Issued) == 0 {
		objs = append(objs, mutedLabel("None yet. Pair a device from the tray menu (Pair a device…), or mint a grant with: meshtray grant create --name NAME --scopes agent"))
	}
	issued := slices.Clone(d.Issued)
	slices.SortStableFunc(issued, func(a, b pairing.Grant) int { return strings.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name)) })
	for _, g := range issued {
		objs = append(objs, v.grantCard(g), widget.NewSeparator())
	}
	objs = append(objs, heading("Devices that gave this one access"))
	if len(d.Held) == 0 {
		objs = append(objs, mutedLabel("None yet."))
	}
	for _, h := range d.Held {
		line := h.Name
		if h.OS != "" {
			line += " · " + h.OS
		}
		sub := fmt.Sprintf("device %s · may use: %s · since %s", pairing.ShortID(h.PeerID), scopesText(h.Scopes), h.Created.Local().Format("2 Jan 2006"))
		objs = append(objs, container.NewVBox(boldLabel(line), mutedLabel(sub)), widget.NewSeparator())
	}
	v.list.Objects = objs
	v.list.Refresh()
}

func scopesText(s pairing.Scopes) string {
	if len(s) == 0 {
		return "nothing"
	}
	return strings.ReplaceAll(s.String(), ",", ", ")
}

func (v *devicesView) grantCard(g pairing.Grant) fyne.CanvasObject {
	name := boldLabel(g.Name)
	status := badge("active", colorOK)
	if g.Status == pairing.StatusPaused {
		status = badge("paused", colorWarn)
	}
	var details []string
	if g.OS != "" {
		details = append(details, g.OS)
	}
	if g.PeerID != "" {
		details = append(details, "device "+pairing.ShortID(g.PeerID))
	}
	details = append(details, "may use: "+scopesText(g.Scopes), "last used "+ago(v.now(), g.LastUsed))
	policy := widget.NewSelect(policyOptions, nil)
	p := g.Policy
	if p == "" {
		p = pairing.PolicyAsk
	}
	policy.SetSelected(string(p))
	policy.OnChanged = func(s string) {
		if s != string(p) {
			v.cb.Policy(g, pairing.Policy(s))
		}
	}
	pause := widget.NewButtonWithIcon("Pause", theme.MediaPauseIcon(), func() { v.cb.Action(g, app.ActionPause) })
	if g.Status == pairing.StatusPaused {
		pause = widget.NewButtonWithIcon("Resume", theme.MediaPlayIcon(), func() { v.cb.Action(g, app.ActionResume) })
	}
	rotate := widget.NewButtonWithIcon("Rotate token", theme.ViewRefreshIcon(), func() { v.cb.Action(g, app.ActionRotate) })
	revoke := widget.NewButtonWithIcon("Revoke", theme.DeleteIcon(), func() { v.cb.Action(g, app.ActionRevoke) })
	revoke.Importance = widget.DangerImportance
	head := container.NewHBox(name, container.NewCenter(status))
	// A phone paired through its page (no device ID) downloads files from
	// its page: offer them from here.
	if g.PeerID == "" && g.Scopes.Has(pairing.ScopeAgent) && v.cb.SendFiles != nil {
		head.Add(layout.NewSpacer())
		head.Add(widget.NewButtonWithIcon("Send files…", theme.UploadIcon(), func() { v.cb.SendFiles(g) }))
	}
	card := container.NewVBox(
		head,
		mutedLabel(strings.Join(details, " · ")),
	)
	if g.Scopes.Has(pairing.ScopeApprove) {
		warn := wrapLabel("May approve or deny requests made to this computer (never its own).")
		warn.Importance = widget.WarningImportance
		card.Add(warn)
	}
	card.Add(container.NewHBox(fieldName("Delegations:"), policy, layout.NewSpacer(), pause, rotate, revoke))
	return card
}

// peersView lists the peer table.
type peersView struct {
	open func(p mesh.Peer)
	now  func() time.Time
	list *fyne.Container
	root fyne.CanvasObject
}

func newPeersView(open func(mesh.Peer)) *peersView {
	v := &peersView{open: open, now: time.Now, list: container.NewVBox()}
	v.root = container.NewPadded(newFixedWidth(520, container.NewVScroll(v.list)))
	v.set(nil)
	return v
}

func (v *peersView) set(ps []mesh.Peer) {
	objs := []fyne.CanvasObject{heading("Devices found")}
	if len(ps) == 0 {
		objs = append(objs, mutedLabel("No devices found yet. Other meshtray devices show up here when this one is reachable on the local network (tray menu) or on your tailnet."))
	}
	for _, p := range ps {
		name := p.Name
		if name == "" {
			name = pairing.ShortID(p.ID)
		}
		// A long name is cut with an ellipsis instead of widening the
		// window; the badges keep their place on the right.
		title := boldLabel(name)
		title.Truncation = fyne.TextTruncateEllipsis
		var tags []fyne.CanvasObject
		if p.Online {
			tags = append(tags, container.NewCenter(badge("online", colorOK)))
		} else {
			tags = append(tags, container.NewCenter(badge("offline", colorMuted)))
		}
		if p.Paired {
			tags = append(tags, container.NewCenter(badge("paired", colorInfo)))
		}
		if p.A2A && p.Online { // what it published when last seen says nothing of now
			tags = append(tags, container.NewCenter(badge("A2A", colorInfo)))
		}
		var src []string
		for _, s := range p.Sources {
			src = append(src, s.Label())
		}
		sub := fmt.Sprintf("%s · seen via %s · %s", p.OS, strings.Join(src, ", "), ago(v.now(), p.LastSeen))
		if len(src) == 0 {
			sub = p.OS + " · paired, not seen since meshtray started"
		}
		peer := p
		open := widget.NewButton("Open", func() { v.open(peer) })
		head := container.NewBorder(nil, nil, nil, container.NewHBox(tags...), title)
		objs = append(objs, container.NewBorder(nil, nil, nil, container.NewCenter(open),
			container.NewVBox(head, mutedLabel(sub))), widget.NewSeparator())
	}
	v.list.Objects = objs
	v.list.Refresh()
}

// peerView shows one peer and, when it gave this device a grant, its
// manifest; when it also publishes A2A, a box to send it a message and the
// tasks sent to it.
type peerView struct {
	now     func() time.Time
	send    func(text string)
	files   func() // "Send files…"
	list    *fyne.Container
	entry   *widget.Entry
	sendBtn *widget.Button
	sendErr *widget.Label
	tasks   *fyne.Container
	msgBox  fyne.CanvasObject
	root    fyne.CanvasObject
}

func newPeerView(send func(text string)) *peerView {
	v := &peerView{now: time.Now, send: send, list: container.NewVBox(), tasks: container.NewVBox()}
	v.entry = widget.NewMultiLineEntry()
	v.entry.SetPlaceHolder("Ask it to do something, e.g. run device.info")
	v.entry.SetMinRowsVisible(3)
	v.entry.Wrapping = fyne.TextWrapWord
	v.sendErr = wrapLabel("")
	v.sendErr.Importance = widget.DangerImportance
	v.sendErr.Hide()
	v.sendBtn = widget.NewButtonWithIcon("Send", theme.MailSendIcon(), func() {
		text := strings.TrimSpace(v.entry.Text)
		if text == "" || v.send == nil {
			return
		}
		v.sendErr.Hide()
		v.sendBtn.Disable()
		v.send(text)
	})
	v.msgBox = container.NewVBox(widget.NewSeparator(), heading("Send it a message (A2A)"),
		mutedLabel("Its owner approves each task on that device."),
		v.entry, container.NewHBox(layout.NewSpacer(), v.sendBtn), v.sendErr, v.tasks)
	v.root = container.NewPadded(newFixedWidth(520, container.NewVScroll(v.list)))
	return v
}

// sent reports the outcome of a send: nil clears the box.
func (v *peerView) sent(err error) {
	v.sendBtn.Enable()
	if err != nil {
		v.sendErr.SetText("Not sent: " + err.Error())
		v.sendErr.Show()
		return
	}
	v.entry.SetText("")
}

// setTasks shows the tasks sent to this peer, newest first.
func (v *peerView) setTasks(ts []delegate.OutboundTask) {
	slices.SortStableFunc(ts, func(a, b delegate.OutboundTask) int { return b.Updated.Compare(a.Updated) })
	var objs []fyne.CanvasObject
	for i, t := range ts {
		if i == 10 {
			break
		}
		head := container.NewHBox(container.NewCenter(badge(string(t.State), stateColor(string(t.State)))), boldLabel(t.Request))
		row := []fyne.CanvasObject{head}
		if t.Message != "" {
			row = append(row, wrapLabel(t.Message))
		}
		if t.Error != "" {
			l := wrapLabel(t.Error)
			l.Importance = widget.DangerImportance
			row = append(row, l)
		}
		for _, a := range t.Artifacts {
			if txt := partsText(a.Parts); txt != "" {
				l := monoLabel(txt)
				row = append(row, l)
			}
		}
		objs = append(objs, container.NewVBox(row...))
	}
	v.tasks.Objects = objs
	v.tasks.Refresh()
}

// partsText is the text of A2A parts: text parts as they are, data parts
// as JSON, files by name; bounded for the window.
func partsText(parts a2a.ContentParts) string {
	var b strings.Builder
	for _, p := range parts {
		switch p := p.(type) {
		case a2a.TextPart:
			b.WriteString(p.Text + "\n")
		case a2a.DataPart:
			j, _ := json.Marshal(p.Data)
			b.Write(j)
			b.WriteByte('\n')
		case a2a.FilePart:
			b.WriteString("[file]\n")
		}
	}
	s := strings.TrimSpace(b.String())
	if r := []rune(s); len(r) > 600 {
		s = string(r[:600]) + "…"
	}
	return s
}

func stateColor(s string) color.Color {
	switch s {
	case "completed":
		return colorOK
	case "failed", "rejected", "canceled":
		return color.NRGBA{0xb7, 0x1c, 0x1c, 0xff}
	case "input-required", "auth-required":
		return colorWarn
	}
	return colorInfo
}

// set shows p; m is its manifest when fetched, merr why not.
func (v *peerView) set(p mesh.Peer, m *nodes.Manifest, merr string) {
	name := p.Name
	if name == "" {
		name = pairing.ShortID(p.ID)
	}
	var addrs []string
	for _, s := range p.Sources {
		for _, a := range p.Addrs[s] {
			addrs = append(addrs, a+" ("+s.Label()+")")
		}
	}
	state := "offline"
	if p.Online {
		state = "online"
	}
	if p.Paired {
		state += ", paired"
	}
	if p.A2A {
		state += ", publishes an A2A agent card"
	}
	objs := []fyne.CanvasObject{
		heading(name),
		formRows(
			fieldName("System"), wrapLabel(p.OS),
			fieldName("Device ID"), monoLabel(p.ID),
			fieldName("State"), wrapLabel(state),
			fieldName("Addresses"), wrapLabel(strings.Join(addrs, "\n")),
			fieldName("Last seen"), wrapLabel(ago(v.now(), p.LastSeen)),
		),
		widget.NewSeparator(),
		heading("What it offers"),
	}
	switch {
	case m != nil:
		objs = append(objs, capabilityRows(m.Capabilities, nil)...)
	case merr != "":
		objs = append(objs, mutedLabel(merr))
	default:
		objs = append(objs, mutedLabel("Asking it…"))
	}
	if p.Paired && v.files != nil {
		objs = append(objs, widget.NewSeparator(), heading("Files"),
			mutedLabel("Drop files on this window to send them, or choose them:"),
			container.NewHBox(widget.NewButtonWithIcon("Send files…", theme.UploadIcon(), v.files)))
	}
	if p.A2A && p.Paired {
		objs = append(objs, v.msgBox)
	}
	v.list.Objects = objs
	v.list.Refresh()
}

func monoLabel(s string) *widget.Label {
	l := wrapLabel(s)
	l.Wrapping = fyne.TextWrapBreak
	l.TextStyle = fyne.TextStyle{Monospace: true}
	return l
}

// manifestView shows this node's capabilities with a policy choice each.
type manifestView struct {
	setPolicy func(name string, p pairing.Policy)
	list      *fyne.Container
	root      fyne.CanvasObject
}

func newManifestView(setPolicy func(string, pairing.Policy)) *manifestView {
	v := &manifestView{setPolicy: setPolicy, list: container.NewVBox()}
	v.root = container.NewPadded(newFixedWidth(560, container.NewVScroll(v.list)))
	return v
}

func (v *manifestView) set(m nodes.Manifest) {
	objs := []fyne.CanvasObject{
		heading(m.Device.Name + " — " + m.Device.OS),
		mutedLabel("What paired devices and agents may ask this device to do, and whether you are asked first. A device's own policy (Devices…) can only make it stricter."),
		widget.NewSeparator(),
	}
	objs = append(objs, capabilityRows(m.Capabilities, v.setPolicy)...)
	v.list.Objects = objs
	v.list.Refresh()
}

// capabilityRows lists capabilities; with setPolicy, each has a policy
// choice, otherwise the policy is shown as text.
func capabilityRows(cs []nodes.Capability, setPolicy func(string, pairing.Policy)) []fyne.CanvasObject {
	var objs []fyne.CanvasObject
	if len(cs) == 0 {
		return []fyne.CanvasObject{mutedLabel("No capabilities.")}
	}
	for _, c := range cs {
		tags := []fyne.CanvasObject{boldLabel(c.Name), container.NewCenter(badge(string(c.Effects), effectColor(c.Effects)))}
		if !c.Available {
			tags = append(tags, container.NewCenter(badge("unavailable", colorMuted)))
		}
		row := []fyne.CanvasObject{container.NewHBox(tags...), wrapLabel(c.Description)}
		if !c.Available && c.Reason != "" {
			row = append(row, mutedLabel("Unavailable: "+c.Reason))
		}
		p := c.Approval
		if p == "" {
			p = pairing.PolicyAsk
		}
		if setPolicy != nil {
			sel := widget.NewSelect(policyOptions, nil)
			sel.SetSelected(string(p))
			name := c.Name
			sel.OnChanged = func(s string) {
				if s != string(p) {
					setPolicy(name, pairing.Policy(s))
				}
			}
			row = append(row, container.NewHBox(fieldName("When asked:"), sel, plainLabel(policyHelp(p))))
		} else {
			row = append(row, mutedLabel("When asked: "+policyHelp(p)))
		}
		objs = append(objs, container.NewVBox(row...), widget.NewSeparator())
	}
	return objs
}

func policyHelp(p pairing.Policy) string {
	switch p {
	case pairing.PolicyAllow:
		return "runs without asking"
	case pairing.PolicyDeny:
		return "always refused"
	}
	return "asks you first"
}

func effectColor(e nodes.Effect) color.Color {
	switch e {
	case nodes.EffectRead:
		return colorOK
	case nodes.EffectWrite:
		return colorWarn
	case nodes.EffectExec:
		return color.NRGBA{0xb7, 0x1c, 0x1c, 0xff}
	}
	return colorMuted
}
