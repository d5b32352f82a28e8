package windows

import (
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"

	"meshtray/a2a/delegate"
	"meshtray/app"
	"meshtray/mesh"
	"meshtray/nodes"
	"meshtray/pairing"
)

// labels collects the visible labels' texts under root.
func labelTexts(root fyne.CanvasObject) string {
	var b strings.Builder
	walk(root, func(o fyne.CanvasObject) {
		if l, ok := o.(*widget.Label); ok && l.Visible() {
			b.WriteString(l.Text + "\n")
		}
	})
	return b.String()
}

// capture saves what the test driver renders of w under the test's
// artifact dir (go test -artifacts keeps it), to look at.
func capture(t *testing.T, w fyne.Window, name string) {
	t.Helper()
	img := w.Canvas().Capture()
	f, err := os.Create(filepath.Join(t.ArtifactDir(), name+".png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
}

func containsObj(root fyne.CanvasObject, o fyne.CanvasObject) bool {
	found := false
	walk(root, func(x fyne.CanvasObject) { found = found || x == o })
	return found
}

func selects(root fyne.CanvasObject) []*widget.Select {
	var out []*widget.Select
	walk(root, func(o fyne.CanvasObject) {
		if s, ok := o.(*widget.Select); ok {
			out = append(out, s)
		}
	})
	return out
}

func TestDevicesView(t *testing.T) {
	newTestApp(t)
	type act struct{ id, action string }
	var acts []act
	var policies []string
	v := newDevicesView(devicesCallbacks{
		Action: func(g pairing.Grant, a string) { acts = append(acts, act{g.ID, a}) },
		Policy: func(g pairing.Grant, p pairing.Policy) { policies = append(policies, g.ID+"="+string(p)) },
	})
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	v.now = func() time.Time { return now }
	test.NewTempWindow(t, v.root)
	if !strings.Contains(labelTexts(v.root), "None yet. Pair a device") {
		t.Error("an empty list explains how to add a device")
	}
	v.set(app.Devices{
		Issued: []pairing.Grant{
			{ID: "g2", Name: "zed-agent", Scopes: pairing.Scopes{pairing.ScopeAgent}, Policy: pairing.PolicyAllow, Status: pairing.StatusPaused},
			{ID: "g1", Name: "Alice's phone", PeerID: "PHONEID1234567", OS: "Android 15", Scopes: pairing.Scopes{pairing.ScopeAgent, pairing.ScopeNode},
				Policy: pairing.PolicyAsk, Status: pairing.StatusActive, LastUsed: now.Add(-5 * time.Minute)},
		},
		Held: []app.HeldView{{PeerID: "DESKID12345678", Name: "desk", OS: "Windows 11 (AMD64)", Scopes: pairing.Scopes{pairing.ScopeAgent},
			Created: time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)}},
	})
	txt := labelTexts(v.root)
	for _, want := range []string{
		"Alice's phone", "Android 15 · device PHONEID · may use: agent, node · last used 5 min ago",
		"zed-agent", "may use: agent · last used never",
		"desk · Windows 11 (AMD64)", "device DESKID1 · may use: agent · since 2 Nov 2026",
	} {
		if !strings.Contains(txt, want) {
			t.Errorf("devices window lacks %q:\n%s", want, txt)
		}
	}
	if strings.Index(txt, "Alice's phone") > strings.Index(txt, "zed-agent") {
		t.Error("grants are not sorted by name")
	}
	// Alice (active) has Pause, zed (paused) has Resume.
	test.Tap(button(t, v.root, "Pause"))
	test.Tap(button(t, v.root, "Resume"))
	if len(acts) != 2 || acts[0] != (act{"g1", app.ActionPause}) || acts[1] != (act{"g2", app.ActionResume}) {
		t.Fatalf("actions %+v", acts)
	}
	sels := selects(v.root)
	if len(sels) != 2 || sels[0].Selected != "ask" || sels[1].Selected != "allow" {
		t.Fatalf("policy selects: %d", len(sels))
	}
	sels[0].SetSelected("deny")
	sels[1].SetSelected("allow") // unchanged: nothing sent
	if strings.Join(policies, ",") != "g1=deny" {
		t.Errorf("policies sent: %v", policies)
	}
}

func TestPeersAndManifestViews(t *testing.T) {
	newTestApp(t)
	var opened []string
	pv := newPeersView(func(p mesh.Peer) { opened = append(opened, p.ID) })
	now := time.Now()
	pv.now = func() time.Time { return now }
	pw := test.NewTempWindow(t, pv.root)
	pw.Resize(fyne.NewSize(580, 300))
	pv.set([]mesh.Peer{
		{ID: "AAAAAAAAAA", Name: "desk", OS: "Windows 11 (AMD64)", Online: true, Paired: true, A2A: true,
			Sources: []mesh.Source{mesh.SourceMDNS, mesh.SourceTailscale}, LastSeen: now},
		{ID: "BBBBBBBBBB", Name: "old-laptop", OS: "macOS 15.1 (arm64)", Sources: []mesh.Source{mesh.SourceTailscale}, LastSeen: now.Add(-3 * time.Hour)},
	})
	capture(t, pw, "peers")
	if txt := labelTexts(pv.root); !strings.Contains(txt, "Windows 11 (AMD64) · seen via LAN, tailnet · just now") {
		t.Errorf("peer row:\n%s", txt)
	}
	test.Tap(button(t, pv.root, "Open"))
	if len(opened) != 1 || opened[0] != "AAAAAAAAAA" {
		t.Errorf("Open: %v", opened)
	}
	// A 64-character name is cut, not a wider window (it widened the
	// window to 1006 px); an offline peer shows no A2A badge.
	before := pv.root.MinSize().Width
	pv.set([]mesh.Peer{{ID: "CCCCCCCCCC", Name: strings.Repeat("Very long device name ", 3)[:64], OS: "Debian GNU/Linux 12 (x86_64)", A2A: true,
		Sources: []mesh.Source{mesh.SourceManual}, LastSeen: now}})
	if w := pv.root.MinSize().Width; w > before+1 {
		t.Errorf("a long name widens the peers window from %.0f to %.0f px", before, w)
	}
	badges := func() (out []string) {
		walk(pv.root, func(o fyne.CanvasObject) {
			if tx, ok := o.(*canvas.Text); ok {
				out = append(out, tx.Text)
			}
		})
		return out
	}
	if got := badges(); slices.Contains(got, "A2A") || !slices.Contains(got, "offline") {
		t.Errorf("offline peer's badges %v: want offline and no A2A", got)
	}

	var set []string
	mv := newManifestView(func(name string, p pairing.Policy) { set = append(set, name+"="+string(p)) })
	test.NewTempWindow(t, mv.root)
	mv.set(nodes.Manifest{Device: nodes.Device{Name: "laptop", OS: "Debian GNU/Linux 12 (x86_64)"}, Capabilities: []nodes.Capability{
		{Name: "device.info", Description: "Facts about this device.", Effects: nodes.EffectRead, Approval: pairing.PolicyAllow, Available: true},
		{Name: "system.run", Description: "Run an allowlisted program.", Effects: nodes.EffectExec, Approval: pairing.PolicyAsk, Available: false, Reason: "no allowlist in the config"},
	}})
	txt := labelTexts(mv.root)
	for _, want := range []string{"laptop — Debian GNU/Linux 12 (x86_64)", "device.info", "runs without asking", "system.run", "Unavailable: no allowlist in the config", "asks you first"} {
		if !strings.Contains(txt, want) {
			t.Errorf("manifest window lacks %q:\n%s", want, txt)
		}
	}
	sels := selects(mv.root)
	if len(sels) != 2 {
		t.Fatalf("%d policy selects", len(sels))
	}
	sels[1].SetSelected("deny")
	if strings.Join(set, ",") != "system.run=deny" {
		t.Errorf("policy set: %v", set)
	}

	// A peer's manifest is read-only.
	var sentTexts []string
	peer := newPeerView(func(text string) { sentTexts = append(sentTexts, text) })
	peerWin := test.NewTempWindow(t, peer.root)
	peerWin.Resize(fyne.NewSize(580, 700))
	peer.set(mesh.Peer{ID: "AAAAAAAAAA", Name: "desk", OS: "Windows 11 (AMD64)", Online: true, Sources: []mesh.Source{mesh.SourceMDNS},
		Addrs: map[mesh.Source][]string{mesh.SourceMDNS: {"192.0.2.7:47654"}}}, &nodes.Manifest{Capabilities: []nodes.Capability{
		{Name: "clipboard.read", Effects: nodes.EffectRead, Approval: pairing.PolicyAsk, Available: true}}}, "")
	if len(selects(peer.root)) != 0 {
		t.Error("a peer's policies are editable here")
	}
	if txt := labelTexts(peer.root); !strings.Contains(txt, "192.0.2.7:47654 (LAN)") || !strings.Contains(txt, "clipboard.read") {
		t.Errorf("peer window:\n%s", txt)
	}
	if peer.msgBox.Visible() && containsObj(peer.list, peer.msgBox) {
		t.Error("a message box for a peer that does not publish A2A")
	}
	// A paired peer publishing A2A: send it a message, see its task.
	peer.set(mesh.Peer{ID: "AAAAAAAAAA", Name: "desk", Paired: true, A2A: true, Online: true}, nil, "")
	if !containsObj(peer.list, peer.msgBox) {
		t.Fatal("no message box for a paired A2A peer")
	}
	test.Type(peer.entry, "run device.info")
	test.Tap(peer.sendBtn)
	if strings.Join(sentTexts, "|") != "run device.info" || !peer.sendBtn.Disabled() {
		t.Fatalf("sent %q, button disabled %v", sentTexts, peer.sendBtn.Disabled())
	}
	peer.sent(nil)
	if peer.entry.Text != "" || peer.sendBtn.Disabled() {
		t.Error("a sent message stays in the box")
	}
	var ts []delegate.OutboundTask
	if err := json.Unmarshal([]byte(`[{"id":"t1","agent":"AAAAAAAAAA","request":"run device.info","state":"completed",
		"artifacts":[{"name":"device.info","parts":[{"kind":"text","text":"desk: 16 GiB free"}]}],"updated":"2026-11-30T10:00:00Z"}]`), &ts); err != nil {
		t.Fatal(err)
	}
	peer.setTasks(ts)
	capture(t, peerWin, "peer")
	if txt := labelTexts(peer.root); !strings.Contains(txt, "desk: 16 GiB free") || !strings.Contains(txt, "run device.info") {
		t.Errorf("task not shown:\n%s", txt)
	}
	peer.set(mesh.Peer{ID: "AAAAAAAAAA", Name: "desk"}, nil, "It has not given this device access")
	if txt := labelTexts(peer.root); !strings.Contains(txt, "It has not given this device access") {
		t.Errorf("peer window without a grant:\n%s", txt)
	}
}
