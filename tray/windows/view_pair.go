package windows

import (
	"image"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"
	qrcode "github.com/skip2/go-qrcode"

	"meshtray/app"
	"meshtray/pairing"
)

// pairCallbacks are what the pairing window asks of the node.
type pairCallbacks struct {
	NewCode func()                                                // start a new pairing session
	Decide  func(a app.Approval, approve bool, sc pairing.Scopes) // the owner's answer to a claim
	LANOn   func()                                                // make this device reachable on the LAN
	Close   func()
}

// pairState is what the pairing window shows.
type pairState int

const (
	pairLoading pairState = iota
	pairCode              // the QR code, the code, the URL, a countdown
	pairClaim             // a device claimed the code: SAS, approve or deny
	pairDone              // "Paired with <name>"
	pairFailed            // an error, with "Try again"
)

// pairView is the "Pair a device…" window.
type pairView struct {
	cb    pairCallbacks
	now   func() time.Time
	state pairState

	session app.PairingSession
	claim   app.Approval

	// code state
	intro    *widget.Label
	qr       *canvas.Image
	qrBox    *fyne.Container
	code     *widget.Label
	url      *widget.Entry
	hint     *widget.Label
	lanBtn   *widget.Button
	left     *widget.Label
	codeBody fyne.CanvasObject
	// claim state
	claimTitle  *widget.Label
	claimFrom   *widget.Label
	sas         *canvas.Text
	scopes      *widget.CheckGroup
	approveWarn *widget.Label
	approve     *widget.Button
	deny        *widget.Button
	claimBody   fyne.CanvasObject
	// done / failed / loading
	message   *widget.Label
	msgIcon   *widget.Icon
	msgDetail *widget.Label
	msgBody   fyne.CanvasObject
	again     *widget.Button
	closeBtn  *widget.Button

	stack *fyne.Container
	root  fyne.CanvasObject
}

func newPairView(cb pairCallbacks) *pairView {
	v := &pairView{cb: cb, now: time.Now}
	v.qr = canvas.NewImageFromImage(image.NewGray(image.Rect(0, 0, 1, 1)))
	v.qr.FillMode = canvas.ImageFillContain
	v.qr.ScaleMode = canvas.ImageScalePixels
	v.qr.SetMinSize(fyne.NewSize(220, 220))
	v.qrBox = container.NewCenter(v.qr)
	v.code = widget.NewLabel("")
	v.code.TextStyle = fyne.TextStyle{Monospace: true, Bold: true}
	v.code.SizeName = theme.SizeNameHeadingText
	v.url = widget.NewEntry()
	v.url.Wrapping = fyne.TextWrapBreak
	v.url.MultiLine = true
	v.url.SetMinRowsVisible(3)
	v.url.OnChanged = func(string) { v.url.SetText(v.session.URL) } // read-only but selectable
	copyURL := widget.NewButtonWithIcon("Copy", theme.ContentCopyIcon(), func() {
		if a := fyne.CurrentApp(); a != nil {
			a.Clipboard().SetContent(v.url.Text)
		}
	})
	v.hint = wrapLabel("")
	v.hint.Importance = widget.WarningImportance
	v.lanBtn = widget.NewButton("Make this device reachable on the local network", func() {
		if v.cb.LANOn != nil {
			v.cb.LANOn()
		}
	})
	v.left = mutedLabel("")
	v.intro = wrapLabel("")
	v.codeBody = container.NewVBox(
		v.intro,
		v.lanBtn,
		v.qrBox,
		container.NewHBox(layout.NewSpacer(), fieldName("One-time code"), v.code, layout.NewSpacer()),
		container.NewBorder(nil, nil, nil, copyURL, v.url),
		v.hint,
		v.left,
	)

	v.claimTitle = heading("")
	v.claimFrom = wrapLabel("")
	v.sas = bigText("", 40)
	var syncWarn func([]string)
	v.approveWarn, syncWarn = newApproveWarning()
	v.scopes = widget.NewCheckGroup(allScopeLabels(), syncWarn)
	v.approve = widget.NewButtonWithIcon("Approve", theme.ConfirmIcon(), func() {
		v.approve.Disable()
		v.deny.Disable()
		v.cb.Decide(v.claim, true, scopesFromLabels(v.scopes.Selected))
	})
	v.approve.Importance = widget.HighImportance
	v.deny = widget.NewButtonWithIcon("Deny", theme.CancelIcon(), func() {
		v.approve.Disable()
		v.deny.Disable()
		v.cb.Decide(v.claim, false, nil)
	})
	v.claimBody = container.NewVBox(
		v.claimTitle, v.claimFrom, widget.NewSeparator(),
		mutedLabel("Both screens must show the same code. If they differ, deny: someone else is trying to pair."),
		container.NewCenter(v.sas),
		widget.NewSeparator(),
		boldLabel("Allow it to"), v.scopes, v.approveWarn,
		container.NewHBox(layout.NewSpacer(), v.deny, v.approve),
	)

	v.message = heading("")
	v.message.Alignment = fyne.TextAlignCenter
	v.again = widget.NewButton("Pair another device", func() { v.cb.NewCode() })
	v.closeBtn = widget.NewButton("Close", func() {
		if v.cb.Close != nil {
			v.cb.Close()
		}
	})
	v.msgIcon = widget.NewIcon(theme.ConfirmIcon())
	v.msgDetail = wrapLabel("")
	v.msgDetail.Alignment = fyne.TextAlignCenter
	v.msgBody = container.NewVBox(layout.NewSpacer(),
		container.NewCenter(container.NewGridWrap(fyne.NewSize(64, 64), v.msgIcon)),
		v.message, v.msgDetail,
		container.NewHBox(layout.NewSpacer(), v.closeBtn, v.again, layout.NewSpacer()), layout.NewSpacer())

	v.stack = container.NewStack(v.codeBody, v.claimBody, v.msgBody)
	v.root = container.NewPadded(newFixedWidth(460, v.stack))
	v.loading()
	return v
}

func (v *pairView) show(o fyne.CanvasObject) {
	for _, x := range v.stack.Objects {
		if x == o {
			x.Show()
		} else {
			x.Hide()
		}
	}
}

// loading shows that a code is being made.
func (v *pairView) loading() {
	v.state = pairLoading
	v.message.SetText("Making a pairing code…")
	v.msgIcon.Hide()
	v.msgDetail.Hide()
	v.again.Hide()
	v.closeBtn.Hide()
	v.show(v.msgBody)
}

// setSession shows a new pairing code.
func (v *pairView) setSession(s app.PairingSession) {
	v.session = s
	v.state = pairCode
	v.code.SetText(groupCode(s.Code))
	target := s.URL
	if target != "" {
		v.qr.Image = qrImage(target)
		v.qr.Refresh()
		v.qrBox.Show()
		v.intro.SetText("On the other device, scan this code with the camera, or open the address below. On another computer running meshtray: meshtray pair --join ADDRESS")
		v.hint.Hide()
		v.lanBtn.Hide()
	} else {
		// Not reachable from another device: no QR a phone could use.
		v.qrBox.Hide()
		v.intro.SetText("Other devices cannot reach this one yet: make it reachable on the local network, or use Tailscale.")
		v.hint.SetText("The address above works only for a second meshtray on this computer (meshtray pair --join ADDRESS).")
		v.hint.Show()
		v.lanBtn.Show()
		if len(s.URLs) > 0 {
			target = s.URLs[len(s.URLs)-1]
		}
	}
	v.session.URL = target
	v.url.SetText(target)
	v.tick()
	v.show(v.codeBody)
}

// setClaim shows a device's claim of the code (a pairing approval).
func (v *pairView) setClaim(a app.Approval) {
	if v.state == pairClaim && v.claim.ID == a.ID {
		return
	}
	v.claim = a
	v.state = pairClaim
	v.claimTitle.SetText(approvalTitle(a))
	from := fromText(a)
	if via := viaText(a.Via, a.Addr, a.TailnetUser, a.TailnetNode); via != "" {
		from += "\n" + via
	}
	v.claimFrom.SetText(from)
	v.sas.Text = groupSAS(a.SAS)
	if a.SAS == "" {
		v.sas.Text = "no code: asked before a restart" // its detail says what to check instead
	}
	v.sas.Color = theme.Color(theme.ColorNameForeground)
	v.sas.Refresh()
	v.scopes.SetSelected(scopeLabels(pairing.DefaultPairingScopes(a.Scopes)))
	v.approve.Enable()
	v.deny.Enable()
	v.show(v.claimBody)
}

// claimGone is called when the claim left the queue without our decision
// (decided elsewhere, expired): back to the code, which is spent, so a new
// one is made.
func (v *pairView) claimGone() {
	if v.state == pairClaim {
		v.failed("The request was answered elsewhere or expired.")
	}
}

// paired shows the end of a pairing: who, and what it may do now.
func (v *pairView) paired(a app.Approval, granted pairing.Scopes) {
	v.state = pairDone
	v.message.SetText("Paired with " + a.Peer)
	v.msgIcon.SetResource(theme.NewSuccessThemedResource(theme.ConfirmIcon()))
	v.msgIcon.Show()
	who := fromText(a)
	v.msgDetail.SetText(who + "\nIt may now: " + scopesText(granted) + ".\nPause, revoke or change it any time in Devices… (tray menu).")
	v.msgDetail.Show()
	v.again.SetText("Pair another device")
	v.again.Show()
	v.closeBtn.Show()
	v.show(v.msgBody)
}

// failed shows an error or a refusal, with a way to start again.
func (v *pairView) failed(msg string) {
	v.state = pairFailed
	v.message.SetText(msg)
	v.msgIcon.SetResource(theme.NewWarningThemedResource(theme.WarningIcon()))
	v.msgIcon.Show()
	v.msgDetail.Hide()
	v.again.SetText("New code")
	v.again.Show()
	v.closeBtn.Show()
	v.show(v.msgBody)
}

// tick updates the countdown; an expired code offers a new one.
func (v *pairView) tick() {
	if v.state != pairCode {
		return
	}
	if !v.session.Expires.After(v.now()) {
		v.failed("This code has expired.")
		return
	}
	v.left.SetText("Works once · " + countdown(v.now(), v.session.Expires))
}

// qrImage encodes s as a QR code image (medium error correction).
func qrImage(s string) image.Image {
	q, err := qrcode.New(s, qrcode.Medium)
	if err != nil {
		return image.NewGray(image.Rect(0, 0, 1, 1))
	}
	q.DisableBorder = false
	return q.Image(330)
}
