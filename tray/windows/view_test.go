package windows

import (
	"errors"
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"meshtray/app"
	"meshtray/pairing"
)

// The view tests use Fyne's test driver (one current app per process, so
// they do not run in parallel).

// newTestApp is Fyne's test app with the real default theme (the test
// theme has no bold monospace face, which the codes use).
func newTestApp(t *testing.T) {
	a := test.NewTempApp(t)
	a.Settings().SetTheme(theme.DefaultTheme())
}

// walk visits every object under o.
func walk(o fyne.CanvasObject, f func(fyne.CanvasObject)) {
	f(o)
	switch x := o.(type) {
	case *fyne.Container:
		for _, c := range x.Objects {
			walk(c, f)
		}
	case *container.Scroll:
		walk(x.Content, f)
	case *fixedWidth:
		walk(x.content, f)
	}
}

// button finds the visible button labelled text.
func button(t *testing.T, root fyne.CanvasObject, text string) *widget.Button {
	t.Helper()
	var found *widget.Button
	walk(root, func(o fyne.CanvasObject) {
		if b, ok := o.(*widget.Button); ok && found == nil && b.Text == text && b.Visible() {
			found = b
		}
	})
	if found == nil {
		t.Fatalf("no visible button %q", text)
	}
	return found
}

func TestApprovalViewQueueAndDecisions(t *testing.T) {
	newTestApp(t)
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	type decided struct {
		a app.Approval
		d app.ApprovalDecision
	}
	var got []decided
	v := newApprovalView(func(a app.Approval, d app.ApprovalDecision) { got = append(got, decided{a, d}) })
	v.now = func() time.Time { return now }
	w := test.NewTempWindow(t, v.root)
	w.Resize(fyne.NewSize(540, 460))

	delegation := app.Approval{ID: "D1", Kind: app.KindDelegation, GrantID: "g1", Peer: "Alice's phone",
		DeviceID: "ABCDEFGHIJKLMNOP", OS: "Android 15", Via: "tailnet", Addr: "100.64.0.7",
		TailnetUser: "alice@example.com", TailnetNode: "alice-phone",
		Summary: "device.info", Detail: "How much memory is free?", Expires: now.Add(95 * time.Second)}
	pair := app.Approval{ID: "P1", Kind: app.KindPairing, Peer: "desk", DeviceID: "ZYXWVUTSRQPONML",
		OS: "Debian GNU/Linux 12 (x86_64)", Via: "lan", Summary: "pair with desk, asking for agent,node,full",
		Scopes: pairing.Scopes{pairing.ScopeAgent, pairing.ScopeNode, pairing.ScopeFull}, SAS: "123456",
		Expires: now.Add(10 * time.Minute)}
	v.set([]app.Approval{delegation, pair})

	if v.title.Text != "Delegation from Alice's phone" || v.position.Text != "1 of 2" {
		t.Fatalf("title %q position %q", v.title.Text, v.position.Text)
	}
	if v.from.Text != "Alice's phone · device ABCDEFG · Android 15" {
		t.Errorf("from = %q", v.from.Text)
	}
	if v.via.Text != "over the tailnet · alice@example.com on alice-phone · 100.64.0.7" {
		t.Errorf("via = %q", v.via.Text)
	}
	if v.left.Text != "Expires: 1:35 left" {
		t.Errorf("countdown = %q", v.left.Text)
	}
	if !v.always.Visible() || v.sasBox.Visible() || v.scopesBox.Visible() {
		t.Error("a delegation shows 'Always allow' and neither SAS nor scopes")
	}
	now = now.Add(35 * time.Second)
	v.tick()
	if v.left.Text != "Expires: 1:00 left" {
		t.Errorf("countdown after 35 s = %q", v.left.Text)
	}

	test.Tap(v.always)
	test.Tap(button(t, v.root, "Approve"))
	if len(got) != 1 || got[0].a.ID != "D1" || got[0].d.Decision != app.DecisionApprove || !got[0].d.Always {
		t.Fatalf("decisions after Approve with Always: %+v", got)
	}
	if !v.approve.Disabled() || !v.deny.Disabled() {
		t.Error("buttons stay enabled while the decision is in flight")
	}
	test.Tap(v.approve) // a second click while busy sends nothing
	if len(got) != 1 {
		t.Fatalf("a busy approval was decided twice: %+v", got)
	}

	// The node's answer: D1 is gone; the pairing request is shown.
	v.set([]app.Approval{pair})
	if v.title.Text != "desk wants to pair" || v.position.Text != "" || v.prev.Visible() {
		t.Fatalf("after D1 left: title %q position %q", v.title.Text, v.position.Text)
	}
	if v.sas.Text != "123 456" || !v.sasBox.Visible() {
		t.Errorf("SAS = %q", v.sas.Text)
	}
	if v.always.Visible() {
		t.Error("a pairing offers 'Always allow'")
	}
	// full is asked for but never pre-selected.
	if sel := scopesFromLabels(v.scopes.Selected); sel.String() != "agent,node" {
		t.Errorf("pre-selected scopes %q, want agent,node", sel)
	}
	v.scopes.SetSelected(scopeLabels(pairing.Scopes{pairing.ScopeNode}))
	test.Tap(button(t, v.root, "Approve"))
	if len(got) != 2 || got[1].d.Scopes.String() != "node" || got[1].d.Always {
		t.Fatalf("pairing decision: %+v", got[1])
	}
	// The send failed: the owner sees why and can try again.
	v.failed("P1", errors.New("it was already decided or it expired"))
	if !v.errText.Visible() || !strings.Contains(v.errText.Text, "already decided") || v.approve.Disabled() {
		t.Errorf("after a failed send: error %q visible %v, approve disabled %v", v.errText.Text, v.errText.Visible(), v.approve.Disabled())
	}
	test.Tap(button(t, v.root, "Deny"))
	if len(got) != 3 || got[2].d.Decision != app.DecisionDeny || len(got[2].d.Scopes) != 0 {
		t.Fatalf("deny: %+v", got[2])
	}

	v.set(nil)
	if !v.approve.Disabled() || v.title.Text != "Nothing waiting for you" {
		t.Errorf("empty queue: title %q, approve enabled %v", v.title.Text, !v.approve.Disabled())
	}
}

func TestApprovalViewSteps(t *testing.T) {
	newTestApp(t)
	v := newApprovalView(func(app.Approval, app.ApprovalDecision) {})
	test.NewTempWindow(t, v.root)
	var as []app.Approval
	for _, id := range []string{"A", "B", "C"} {
		as = append(as, app.Approval{ID: id, Kind: app.KindCapability, Peer: "peer " + id, Summary: "clipboard.read", Expires: time.Now().Add(time.Minute)})
	}
	v.set(as)
	test.Tap(v.next)
	test.Tap(v.next)
	if a, _ := v.current(); a.ID != "C" || v.position.Text != "3 of 3" {
		t.Fatalf("after two steps: %s %q", a.ID, v.position.Text)
	}
	test.Tap(v.next)
	if a, _ := v.current(); a.ID != "A" {
		t.Fatalf("next wraps around: %s", a.ID)
	}
	test.Tap(v.prev)
	if a, _ := v.current(); a.ID != "C" {
		t.Fatalf("prev wraps around: %s", a.ID)
	}
	// A new snapshot keeps the approval on screen when it is still there.
	v.set(append([]app.Approval{{ID: "Z", Kind: app.KindDelegation, Expires: time.Now().Add(time.Minute)}}, as...))
	if a, _ := v.current(); a.ID != "C" || v.position.Text != "4 of 4" {
		t.Fatalf("after a new arrival: %s %q", a.ID, v.position.Text)
	}
	// A capability call without a grant (the owner's own) cannot be "always".
	if v.always.Visible() {
		t.Error("'Always allow' for a call with no grant")
	}
}

// TestApprovalViewAlwaysOnlyForDelegations: "Always allow from this
// device" sets the grant's policy to allow, so it is offered (and sent)
// for a delegation from a grant only: never for a capability call, which
// would allow the whole grant from one call's popup, nor for pairing or
// the owner's own calls.
func TestApprovalViewAlwaysOnlyForDelegations(t *testing.T) {
	newTestApp(t)
	tests := []struct {
		name   string
		a      app.Approval
		offers bool
	}{
		{"delegation from a paired device", app.Approval{Kind: app.KindDelegation, GrantID: "g1", Peer: "phone", DeviceID: "ABCDEFG"}, true},
		{"delegation from a minted grant", app.Approval{Kind: app.KindDelegation, GrantID: "g2", Peer: "curl-agent"}, true},
		{"capability call from a grant", app.Approval{Kind: app.KindCapability, GrantID: "g1", Peer: "phone", Summary: "clipboard.read"}, false},
		{"capability call of the owner", app.Approval{Kind: app.KindCapability, Peer: "this device", Summary: "clipboard.read"}, false},
		{"pairing", app.Approval{Kind: app.KindPairing, Peer: "desk", SAS: "123456"}, false},
		{"files from a paired device", app.Approval{Kind: app.KindFiles, GrantID: "g3", Peer: "phone", DeviceID: "ABCDEFG"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []app.ApprovalDecision
			v := newApprovalView(func(_ app.Approval, d app.ApprovalDecision) { got = append(got, d) })
			test.NewTempWindow(t, v.root)
			a := tt.a
			a.ID, a.Expires = "X1", time.Now().Add(time.Minute)
			v.set([]app.Approval{a})
			if v.always.Visible() != tt.offers {
				t.Fatalf("'Always allow' visible = %v, want %v", v.always.Visible(), tt.offers)
			}
			// It names what it covers: a token minted for a script is not a device.
			if want := map[string]string{"g1": "Always allow from this device", "g2": "Always allow this grant (curl-agent)", "g3": "Always allow files from this device"}[a.GrantID]; tt.offers && v.always.Text != want {
				t.Errorf("label %q, want %q", v.always.Text, want)
			}
			v.always.SetChecked(true) // even if set behind the owner's back
			test.Tap(button(t, v.root, "Approve"))
			if len(got) != 1 || got[0].Always != tt.offers {
				t.Fatalf("decision %+v, want always=%v", got, tt.offers)
			}
		})
	}
}

func TestPairViewStates(t *testing.T) {
	newTestApp(t)
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	var newCodes, lanOn int
	var decided []pairing.Scopes
	var denied int
	v := newPairView(pairCallbacks{
		NewCode: func() { newCodes++ },
		Decide: func(a app.Approval, approve bool, sc pairing.Scopes) {
			if approve {
				decided = append(decided, sc)
			} else {
				denied++
			}
		},
		LANOn: func() { lanOn++ },
	})
	v.now = func() time.Time { return now }
	test.NewTempWindow(t, v.root)
	if v.state != pairLoading || !v.msgBody.Visible() {
		t.Fatal("a new pairing window starts by making a code")
	}

	// Reachable: QR code of the LAN URL, the code grouped, a countdown.
	v.setSession(app.PairingSession{URL: "https://192.0.2.4:47654/pair#c=ABCDEFGH&fp=00", Code: "ABCDEFGH",
		URLs:    []string{"https://192.0.2.4:47654/pair#c=ABCDEFGH&fp=00", "http://127.0.0.1:47654/pair#c=ABCDEFGH&fp=00"},
		Expires: now.Add(10 * time.Minute)})
	if !v.codeBody.Visible() || !v.qrBox.Visible() || v.hint.Visible() || v.lanBtn.Visible() {
		t.Fatal("reachable: want the QR code and no hint")
	}
	if v.code.Text != "ABCD EFGH" || v.url.Text != "https://192.0.2.4:47654/pair#c=ABCDEFGH&fp=00" {
		t.Errorf("code %q url %q", v.code.Text, v.url.Text)
	}
	if b := v.qr.Image.Bounds(); b.Dx() < 200 {
		t.Errorf("QR image %v", b)
	}
	if v.left.Text != "Works once · 10:00 left" {
		t.Errorf("countdown %q", v.left.Text)
	}
	test.Type(v.url, "x") // read-only: typing changes nothing
	if v.url.Text != "https://192.0.2.4:47654/pair#c=ABCDEFGH&fp=00" {
		t.Errorf("the URL can be edited: %q", v.url.Text)
	}

	// Not reachable: no QR (a phone could not use it), the hint, the LAN button.
	v.setSession(app.PairingSession{Code: "JKLMNPQR", URLs: []string{"http://127.0.0.1:47654/pair#c=JKLMNPQR&fp=00"}, Expires: now.Add(10 * time.Minute)})
	if v.qrBox.Visible() || !v.hint.Visible() || !v.lanBtn.Visible() || v.url.Text != "http://127.0.0.1:47654/pair#c=JKLMNPQR&fp=00" {
		t.Fatal("unreachable: want the hint, the LAN button and the loopback URL, no QR")
	}
	test.Tap(v.lanBtn)
	if lanOn != 1 {
		t.Error("the LAN button did not ask to turn the LAN on")
	}

	// A claim: SAS, claimant, scopes without full; approve with a choice.
	claim := app.Approval{ID: "P9", Kind: app.KindPairing, Peer: "phone", OS: "Android 15", Via: "lan", Addr: "192.0.2.9",
		SAS: "042917", Scopes: pairing.Scopes{pairing.ScopeAgent, pairing.ScopeNode, pairing.ScopeFull}}
	v.setClaim(claim)
	if v.state != pairClaim || !v.claimBody.Visible() || v.codeBody.Visible() {
		t.Fatal("a claim replaces the code")
	}
	if v.sas.Text != "042 917" || v.claimTitle.Text != "phone wants to pair" ||
		v.claimFrom.Text != "phone · Android 15\nover the local network · 192.0.2.9" {
		t.Errorf("claim: sas %q title %q from %q", v.sas.Text, v.claimTitle.Text, v.claimFrom.Text)
	}
	if sel := scopesFromLabels(v.scopes.Selected); sel.String() != "agent,node" {
		t.Errorf("pre-selected %q", sel)
	}
	test.Tap(button(t, v.root, "Approve"))
	if len(decided) != 1 || decided[0].String() != "agent,node" || !v.approve.Disabled() {
		t.Fatalf("approve: %v, disabled %v", decided, v.approve.Disabled())
	}
	v.paired(claim, pairing.Scopes{pairing.ScopeAgent, pairing.ScopeNode})
	if v.state != pairDone || v.message.Text != "Paired with phone" || !strings.Contains(v.msgDetail.Text, "agent, node") {
		t.Errorf("paired: %q %q", v.message.Text, v.msgDetail.Text)
	}
	test.Tap(button(t, v.root, "Pair another device"))
	if newCodes != 1 {
		t.Error("'Pair another device' made no new code")
	}

	// Expiry: the countdown ends in "expired" with a new-code button.
	v.setSession(app.PairingSession{URL: "https://192.0.2.4:47654/pair#c=STUVWXYZ&fp=00", Code: "STUVWXYZ", Expires: now.Add(time.Second)})
	now = now.Add(2 * time.Second)
	v.tick()
	if v.state != pairFailed || v.message.Text != "This code has expired." {
		t.Fatalf("after expiry: state %d %q", v.state, v.message.Text)
	}
	test.Tap(button(t, v.root, "New code"))
	if newCodes != 2 {
		t.Error("'New code' made no new code")
	}

	// A claim decided elsewhere sends the window back to a fresh start.
	v.setSession(app.PairingSession{URL: "https://192.0.2.4:47654/pair#c=STUVWXYZ&fp=00", Code: "STUVWXYZ", Expires: now.Add(time.Minute)})
	v.setClaim(claim)
	test.Tap(button(t, v.root, "Deny"))
	if denied != 1 {
		t.Error("Deny sent nothing")
	}
	v.claimGone()
	if v.state != pairFailed {
		t.Error("a vanished claim leaves the window waiting")
	}
}

// TestApprovalDetailShowsHiddenCharacters: a bidirectional override in a
// delegation's text cannot reorder what the owner reads in the popup (it
// read "Backup finished OK complete" for "...\u202eetelpmoc\u202c"): it is
// shown as an escape, and the lines stay lines.
func TestApprovalDetailShowsHiddenCharacters(t *testing.T) {
	newTestApp(t)
	v := newApprovalView(func(app.Approval, app.ApprovalDecision) {})
	v.set([]app.Approval{{ID: "A", Kind: app.KindDelegation, Peer: "agent", Summary: "Backup finished OK \\u202Eetelpmoc\\u202C",
		Detail: "Backup finished OK \u202eetelpmoc\u202c\nplease approve\u200b now\r", Expires: time.Now().Add(time.Minute)}})
	want := "Backup finished OK \\u202Eetelpmoc\\u202C\nplease approve\\u200B now"
	if v.detail.Text != want {
		t.Fatalf("detail %q, want %q", v.detail.Text, want)
	}
}

// TestApprovalViewFiles: a transfer's popup shows the sender, every file
// with its size (hidden characters visible), how many more, the total and
// the folder they go to.
func TestApprovalViewFiles(t *testing.T) {
	newTestApp(t)
	v := newApprovalView(func(app.Approval, app.ApprovalDecision) {})
	test.NewTempWindow(t, v.root)
	v.set([]app.Approval{{ID: "F1", Kind: app.KindFiles, GrantID: "g1", Peer: "ant", DeviceID: "ABCDEFG",
		Summary: "send 2 files (1.5 GiB): a.mp4, x", Expires: time.Now().Add(time.Minute),
		Files:     []app.ApprovalFile{{Path: "Trip/a.mp4", Size: 3 << 29}, {Path: "evil\u202etxt.exe", Size: 10}},
		FilesMore: 3, TotalSize: 3<<29 + 10 + 300, Dir: "/home/me/Downloads/meshtray"}})
	if v.title.Text != "Files from ant" || !v.filesBox.Visible() {
		t.Fatalf("title %q, files shown %v", v.title.Text, v.filesBox.Visible())
	}
	for _, want := range []string{"Trip/a.mp4  (1.5 GiB)", "evil\\u202Etxt.exe  (10 B)", "… and 3 more", "5 files, 1.5 GiB in all", "Saved in /home/me/Downloads/meshtray"} {
		if !strings.Contains(v.files.Text, want) {
			t.Errorf("files text lacks %q:\n%s", want, v.files.Text)
		}
	}
	v.set([]app.Approval{{ID: "D1", Kind: app.KindDelegation, GrantID: "g1", Peer: "ant", Summary: "device.info", Expires: time.Now().Add(time.Minute)}})
	if v.filesBox.Visible() {
		t.Error("files shown for a delegation")
	}
}
