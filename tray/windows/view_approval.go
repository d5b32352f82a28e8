package windows

import (
	"fmt"
	"strings"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"
	"github.com/dustin/go-humanize"

	"meshtray/app"
	"meshtray/pairing"
	"meshtray/textsafe"
)

// approvalView is the approval popup: the pending approvals queue in one
// window, one approval shown at a time with "1 of 3" and arrows.
// It takes values (set) and reports decisions through onDecide; it
// knows nothing of HTTP.
type approvalView struct {
	onDecide func(a app.Approval, d app.ApprovalDecision)

	items []app.Approval
	cur   string // id of the approval shown
	// scopesFor and alwaysFor are the approvals the choices were reset for.
	scopesFor, alwaysFor string
	busy                 map[string]bool // decisions sent, answer not yet seen
	now                  func() time.Time

	title     *widget.Label
	position  *widget.Label
	prev      *widget.Button
	next      *widget.Button
	from      *widget.Label
	via       *widget.Label
	summary   *widget.Label
	detail    *widget.Label
	detailBox *container.Scroll
	files     *widget.Label // a transfer's files, total and folder
	filesBox  *fyne.Container
	sasBox    *fyne.Container
	sas       *widget.Label
	scopesBox *fyne.Container
	scopes    *widget.CheckGroup
	always    *widget.Check
	left      *widget.Label
	errText   *widget.Label
	approve   *widget.Button
	deny      *widget.Button
	root      fyne.CanvasObject
}

func newApprovalView(onDecide func(app.Approval, app.ApprovalDecision)) *approvalView {
	v := &approvalView{onDecide: onDecide, busy: map[string]bool{}, now: time.Now}
	v.title = heading("")
	v.position = mutedLabel("")
	v.position.Wrapping = fyne.TextWrapOff
	v.prev = widget.NewButtonWithIcon("", theme.NavigateBackIcon(), func() { v.step(-1) })
	v.next = widget.NewButtonWithIcon("", theme.NavigateNextIcon(), func() { v.step(1) })
	v.from = wrapLabel("")
	v.via = wrapLabel("")
	v.summary = wrapLabel("")
	v.summary.TextStyle = fyne.TextStyle{Bold: true}
	v.detail = wrapLabel("")
	v.detail.TextStyle = fyne.TextStyle{Monospace: true}
	v.detailBox = container.NewVScroll(v.detail)
	v.detailBox.SetMinSize(fyne.NewSize(0, 90))
	v.files = wrapLabel("")
	v.files.TextStyle = fyne.TextStyle{Monospace: true}
	filesScroll := container.NewVScroll(v.files)
	filesScroll.SetMinSize(fyne.NewSize(0, 120))
	v.filesBox = container.NewVBox(boldLabel("Files"), filesScroll)
	v.sas = widget.NewLabel("")
	v.sas.TextStyle = fyne.TextStyle{Monospace: true, Bold: true}
	v.sas.SizeName = theme.SizeNameHeadingText
	v.sasBox = container.NewVBox(
		mutedLabel("Check that the other device shows the same code:"),
		container.NewCenter(v.sas),
	)
	approveWarn, syncWarn := newApproveWarning()
	v.scopes = widget.NewCheckGroup(allScopeLabels(), syncWarn)
	v.scopesBox = container.NewVBox(boldLabel("Allow it to"), v.scopes, approveWarn)
	v.always = widget.NewCheck("Always allow from this device", nil)
	v.left = mutedLabel("")
	v.left.Wrapping = fyne.TextWrapOff
	v.errText = wrapLabel("")
	v.errText.Importance = widget.DangerImportance
	v.errText.Hide()
	v.approve = widget.NewButtonWithIcon("Approve", theme.ConfirmIcon(), func() { v.decide(true) })
	v.approve.Importance = widget.HighImportance
	v.deny = widget.NewButtonWithIcon("Deny", theme.CancelIcon(), func() { v.decide(false) })

	top := container.NewBorder(nil, nil, nil, container.NewHBox(v.position, v.prev, v.next), v.title)
	who := formRows(fieldName("From"), v.from, fieldName("Via"), v.via)
	what := container.NewVBox(fieldName("Asks"), v.summary, v.detailBox)
	body := container.NewVBox(top, widget.NewSeparator(), who, widget.NewSeparator(), what,
		v.filesBox, v.sasBox, v.scopesBox, v.always, v.errText)
	bottom := container.NewVBox(widget.NewSeparator(),
		container.NewHBox(v.left, layout.NewSpacer(), v.deny, v.approve))
	v.root = container.NewPadded(newFixedWidth(500, container.NewBorder(nil, bottom, nil, nil, container.NewVScroll(body))))
	v.render()
	return v
}

// set shows a new snapshot of the queue, keeping the approval on screen
// when it is still pending.
func (v *approvalView) set(items []app.Approval) {
	v.items = items
	for id := range v.busy {
		if v.index(id) < 0 {
			delete(v.busy, id)
		}
	}
	if v.index(v.cur) < 0 {
		v.cur = ""
		if len(items) > 0 {
			v.cur = items[0].ID
		}
		v.errText.Hide()
	}
	v.render()
}

func (v *approvalView) index(id string) int {
	for i, a := range v.items {
		if a.ID == id {
			return i
		}
	}
	return -1
}

// current returns the approval on screen.
func (v *approvalView) current() (app.Approval, bool) {
	i := v.index(v.cur)
	if i < 0 {
		return app.Approval{}, false
	}
	return v.items[i], true
}

func (v *approvalView) step(d int) {
	i := v.index(v.cur)
	if i < 0 || len(v.items) == 0 {
		return
	}
	i = (i + d + len(v.items)) % len(v.items)
	v.cur = v.items[i].ID
	v.errText.Hide()
	v.render()
}

func (v *approvalView) decide(approve bool) {
	a, ok := v.current()
	if !ok || v.busy[a.ID] {
		return
	}
	d := app.ApprovalDecision{Decision: app.DecisionDeny}
	if approve {
		d.Decision = app.DecisionApprove
		if a.Kind == app.KindPairing {
			d.Scopes = scopesFromLabels(v.scopes.Selected)
		}
		if offersAlways(a) {
			d.Always = v.always.Checked
		}
	}
	v.busy[a.ID] = true
	v.errText.Hide()
	v.render()
	v.onDecide(a, d)
}

// failed shows why a decision did not go through and lets the owner retry.
func (v *approvalView) failed(id string, err error) {
	delete(v.busy, id)
	if id == v.cur {
		v.errText.SetText("Could not send your decision: " + err.Error())
		v.errText.Show()
	}
	v.render()
}

// tick updates the countdown.
func (v *approvalView) tick() {
	if a, ok := v.current(); ok {
		v.left.SetText("Expires: " + countdown(v.now(), a.Expires))
	}
}

func (v *approvalView) render() {
	a, ok := v.current()
	if !ok {
		v.title.SetText("Nothing waiting for you")
		v.position.SetText("")
		for _, o := range []fyne.CanvasObject{v.prev, v.next, v.sasBox, v.scopesBox, v.always, v.detailBox, v.filesBox} {
			o.Hide()
		}
		v.from.SetText("")
		v.via.SetText("")
		v.summary.SetText("")
		v.left.SetText("")
		v.approve.Disable()
		v.deny.Disable()
		return
	}
	i := v.index(a.ID)
	v.title.SetText(approvalTitle(a))
	if len(v.items) > 1 {
		v.position.SetText(fmt.Sprintf("%d of %d", i+1, len(v.items)))
		v.prev.Show()
		v.next.Show()
	} else {
		v.position.SetText("")
		v.prev.Hide()
		v.next.Hide()
	}
	v.from.SetText(fromText(a))
	via := viaText(a.Via, a.Addr, a.TailnetUser, a.TailnetNode)
	if via == "" {
		via = "—"
	}
	v.via.SetText(via)
	v.summary.SetText(a.Summary)
	detail := strings.TrimSpace(a.Detail)
	if detail != "" && detail != strings.TrimSpace(a.Summary) {
		v.detail.SetText(escapeLines(detail))
		v.detailBox.Show()
		v.detailBox.ScrollToTop()
	} else {
		v.detail.SetText("")
		v.detailBox.Hide()
	}
	if a.Kind == app.KindFiles {
		v.files.SetText(filesText(a))
		v.filesBox.Show()
	} else {
		v.files.SetText("")
		v.filesBox.Hide()
	}
	if a.Kind == app.KindPairing {
		v.sas.SetText(groupSAS(a.SAS))
		v.sasBox.Show()
		if v.scopes.Selected == nil || v.scopesFor != a.ID {
			v.scopes.SetSelected(scopeLabels(pairing.DefaultPairingScopes(a.Scopes)))
			v.scopesFor = a.ID
		}
		v.scopesBox.Show()
	} else {
		v.sasBox.Hide()
		v.scopesBox.Hide()
	}
	if offersAlways(a) {
		if v.alwaysFor != a.ID {
			v.always.SetChecked(false)
			v.alwaysFor = a.ID
		}
		v.always.SetText(alwaysLabel(a))
		v.always.Show()
	} else {
		v.always.Hide()
	}
	if v.busy[a.ID] {
		v.approve.Disable()
		v.deny.Disable()
	} else {
		v.approve.Enable()
		v.deny.Enable()
	}
	v.tick()
}

// offersAlways reports whether the popup offers "Always allow from this
// device" for a: only for a delegation from a grant, where it
// sets that grant's policy to allow. A capability call's approval does not
// offer it: allowing the whole grant from one call's popup would allow
// every capability and every delegation of that device at once.
//
// For files it is "Always allow files from this device": the grant's files
// policy, apart from its delegation policy.
func offersAlways(a app.Approval) bool {
	return (a.Kind == app.KindDelegation || a.Kind == app.KindFiles) && a.GrantID != ""
}

// alwaysLabel names what "always allow" covers: the device when the grant
// belongs to a paired device, else the grant (a token minted for a script
// or an agent is not a device).
func alwaysLabel(a app.Approval) string {
	if a.Kind == app.KindFiles {
		if a.DeviceID != "" {
			return "Always allow files from this device"
		}
		return "Always allow files from this grant (" + textsafe.EscapeInvisible(a.Peer) + ")"
	}
	if a.DeviceID != "" {
		return "Always allow from this device"
	}
	return "Always allow this grant (" + textsafe.EscapeInvisible(a.Peer) + ")"
}

// approvalTitle is the popup's headline for a.
func approvalTitle(a app.Approval) string {
	who := a.Peer
	if who == "" {
		who = "a device"
	}
	switch a.Kind {
	case app.KindDelegation:
		return "Delegation from " + who
	case app.KindCapability:
		if a.GrantID == "" {
			return "A capability call on this device"
		}
		return "Capability call from " + who
	case app.KindPairing:
		return who + " wants to pair"
	case app.KindFiles:
		return "Files from " + who
	}
	return "Request from " + who
}

// fromText is "alice-phone · ABCDEFG · Android 14".
func fromText(a app.Approval) string {
	parts := []string{a.Peer}
	if a.Peer == "" {
		parts = []string{"unknown"}
	}
	if a.DeviceID != "" {
		parts = append(parts, "device "+pairing.ShortID(a.DeviceID))
	}
	if a.OS != "" {
		parts = append(parts, a.OS)
	}
	return strings.Join(parts, " · ")
}

// escapeLines shows text from a requester as it is, line by line: every
// invisible rune but line breaks and tabs (bidirectional overrides that
// reorder what the owner reads, zero-width characters, carriage returns)
// becomes a visible \uXXXX escape, as the CLI and the one-line summary
// show them (textsafe.EscapeInvisibleText; Trojan Source, CVE-2021-42574).
func escapeLines(s string) string { return textsafe.EscapeInvisibleText(s) }

// filesText lists a transfer's files, one a line with its size (the paths
// come escaped from the node; escaped again here, which changes nothing in
// an escaped text), then the count and total and the folder they go to.
func filesText(a app.Approval) string {
	var b strings.Builder
	for _, f := range a.Files {
		fmt.Fprintf(&b, "%s  (%s)\n", textsafe.EscapeInvisible(f.Path), humanize.IBytes(uint64(f.Size)))
	}
	if a.FilesMore > 0 {
		fmt.Fprintf(&b, "… and %d more\n", a.FilesMore)
	}
	n := len(a.Files) + a.FilesMore
	noun := "files"
	if n == 1 {
		noun = "file"
	}
	fmt.Fprintf(&b, "\n%d %s, %s in all\nSaved in %s", n, noun, humanize.IBytes(uint64(a.TotalSize)), textsafe.EscapeInvisible(a.Dir))
	return b.String()
}
