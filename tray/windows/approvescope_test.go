package windows

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"

	"meshtray/app"
	"meshtray/pairing"
)

// warningShown reports whether the approve warning is visible under root.
func warningShown(root fyne.CanvasObject) bool {
	shown := false
	walk(root, func(o fyne.CanvasObject) {
		if l, ok := o.(*widget.Label); ok && l.Text == approveWarning && l.Visible() {
			shown = true
		}
	})
	return shown
}

// saveCapture writes the window's rendering to the test's artifact dir.
func saveCapture(t *testing.T, w fyne.Window, name string) {
	t.Helper()
	f, err := os.Create(filepath.Join(t.ArtifactDir(), name+".png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w.Content().Refresh()
	if err := png.Encode(f, w.Canvas().Capture()); err != nil {
		t.Fatal(err)
	}
}

// TestApproveScopeChoice: a pairing asking for approve gets it only when
// the owner ticks it, in the popup and in the pairing window, and ticking
// it shows what it means.
func TestApproveScopeChoice(t *testing.T) {
	newTestApp(t)
	pair := app.Approval{ID: "P1", Kind: app.KindPairing, Peer: "Bo’s phone", Via: "lan",
		Summary: "pair with Bo’s phone, asking for agent,approve", Scopes: pairing.Scopes{pairing.ScopeAgent, pairing.ScopeApprove},
		SAS: "123456", Expires: time.Now().Add(5 * time.Minute)}

	var got []app.ApprovalDecision
	v := newApprovalView(func(_ app.Approval, d app.ApprovalDecision) { got = append(got, d) })
	w := test.NewTempWindow(t, v.root)
	w.Resize(fyne.NewSize(540, 620))
	v.set([]app.Approval{pair})
	if sel := scopesFromLabels(v.scopes.Selected); sel.String() != "agent" {
		t.Errorf("pre-selected %q: approve must never be pre-selected", sel)
	}
	if warningShown(v.root) {
		t.Error("the approve warning shows while approve is not ticked")
	}
	v.scopes.SetSelected(scopeLabels(pairing.Scopes{pairing.ScopeAgent, pairing.ScopeApprove}))
	if !warningShown(v.root) {
		t.Error("ticking approve shows no warning")
	}
	saveCapture(t, w, "popup-approve-ticked")
	test.Tap(button(t, v.root, "Approve"))
	if len(got) != 1 || got[0].Scopes.String() != "agent,approve" {
		t.Fatalf("decision %+v, want agent,approve", got)
	}

	var decided pairing.Scopes
	pv := newPairView(pairCallbacks{Decide: func(_ app.Approval, _ bool, sc pairing.Scopes) { decided = sc }})
	pw := test.NewTempWindow(t, pv.root)
	pw.Resize(fyne.NewSize(500, 700))
	pv.setClaim(pair)
	if warningShown(pv.root) || scopesFromLabels(pv.scopes.Selected).String() != "agent" {
		t.Errorf("pairing window: approve pre-selected or warned before it is ticked (%v)", pv.scopes.Selected)
	}
	pv.scopes.SetSelected(allScopeLabels())
	if !warningShown(pv.root) {
		t.Error("pairing window: ticking approve shows no warning")
	}
	saveCapture(t, pw, "pair-approve-ticked")
	test.Tap(button(t, pv.root, "Approve"))
	if sc, _ := pairing.NormalizeScopes(decided); sc.String() != "agent,approve,full,node" {
		t.Errorf("pairing window granted %q", decided)
	}
}
