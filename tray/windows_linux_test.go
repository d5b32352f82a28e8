//go:build linux

package tray

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/nodes"
)

// cli runs `meshtray args... --state-dir DIR` (this binary, tray wired in)
// with env; wrap is an argv prefix (ip netns exec NS).
func cli(t *testing.T, env, wrap []string, dir string, args ...string) string {
	t.Helper()
	argv := append(append(append([]string{}, wrap...), os.Args[0]), append(args, "--state-dir", dir)...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("meshtray %v: %v\n%s%s", args, err, out, stderr)
	}
	return string(out)
}

// TestPopupApprovesDelegation: the popup under Xvfb (DESIGN.md, "Testing on
// real parts"): a real
// delegation from the official a2a-go client makes the tray start the UI
// process, whose popup is screenshotted, checked, and approved through its
// Approve button (an X pointer click); the task then completes.
func TestPopupApprovesDelegation(t *testing.T) {
	d := startDesktop(t, true)
	notes := d.startNotifications(t)
	dir := t.TempDir()
	p := startTrayCmd(t, d.env(), dir, nil)
	c := p.client(t)
	d.Watcher.waitItem(t, 20*time.Second)
	cli(t, d.env(), nil, dir, "a2a", "on")
	token := strings.TrimSpace(cli(t, d.env(), nil, dir, "grant", "create", "--name", "Alice's phone", "--scope", "agent"))

	client := apptest.A2AClient(t, c.BaseURL(), token)
	type result struct {
		res a2a.SendMessageResult
		err error
	}
	done := make(chan result, 1)
	text := "Please run device.info and tell me how much memory this laptop has free right now. " +
		"This message is long on purpose, to check that the popup wraps it instead of cutting it off."
	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: text}, a2a.DataPart{Data: map[string]any{"capability": "device.info"}})
	go func() {
		res, err := client.SendMessage(context.Background(), &a2a.MessageSendParams{Message: msg})
		done <- result{res, err}
	}()

	win, seen := waitWindow(t, d, "Approval needed", 30*time.Second)
	as, err := c.Approvals(context.Background())
	if err != nil || len(as) != 1 {
		t.Fatalf("approvals: %v %+v", err, as)
	}
	t.Logf("popup mapped %v after the approval was created", seen.Sub(as[0].Created).Round(time.Millisecond))
	// ... and a desktop notification said who asks.
	if n := notes.wait(t, 1, 10*time.Second)[0]; n.App != "meshtray" || n.Summary != "Delegation from Alice's phone" || !strings.Contains(n.Body, "Open meshtray to approve") || n.Icon == "" {
		t.Errorf("notification %+v", n)
	}
	_, x, y := buttonShot(t, d, win, "popup-delegation", "the approval popup")
	clickAt(t, d, win, x, y)

	var res result
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("message/send did not return after Approve was clicked")
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	task, ok := res.res.(*a2a.Task)
	if !ok || task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("result %#v, want a completed task", res.res)
	}
	if len(task.Artifacts) == 0 {
		t.Fatal("completed without the device.info artifact")
	}
	// Decided: the popup closes, and with it the UI process.
	waitNoWindow(t, d, "Approval needed", 10*time.Second)
}

// TestPopupClosesWhenDecidedElsewhere: several delegations at once queue
// in one popup, never a storm of windows; a decision made in the CLI closes
// its entry; with nothing left the popup closes.
func TestPopupClosesWhenDecidedElsewhere(t *testing.T) {
	d := startDesktop(t, true)
	dir := t.TempDir()
	p := startTrayCmd(t, d.env(), dir, nil)
	c := p.client(t)
	cli(t, d.env(), nil, dir, "a2a", "on")
	token := strings.TrimSpace(cli(t, d.env(), nil, dir, "grant", "create", "--name", "agent-x", "--scope", "agent"))
	client := apptest.A2AClient(t, c.BaseURL(), token)
	const n = 3
	// Every window titled "Approval needed" is counted from before the
	// first delegation until the popup closes: never more than one.
	watch := watchWindows(d, "Approval needed")
	done := make(chan error, n)
	for range n {
		go func() {
			_, err := client.SendMessage(context.Background(), &a2a.MessageSendParams{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.DataPart{Data: map[string]any{"capability": "device.info"}})})
			done <- err
		}()
	}
	// The one popup shows the whole queue: its title counts it.
	win, _ := waitWindow(t, d, fmt.Sprintf(`Approval needed \(%d waiting\)`, n), 30*time.Second)
	as, err := c.Approvals(context.Background())
	if err != nil || len(as) != n {
		t.Fatalf("approvals: %v %+v", err, as)
	}
	settledShot(t, d, win, "popup-queue", "the queued popup")
	for i, a := range as {
		cli(t, d.env(), nil, dir, "deny", a.ID)
		// The denied entry leaves the popup; the popup stays while any is
		// left (its title says how many).
		switch left := n - 1 - i; {
		case left > 1:
			waitWindow(t, d, fmt.Sprintf(`Approval needed \(%d waiting\)`, left), 10*time.Second)
		case left == 1:
			waitWindow(t, d, `Approval needed$`, 10*time.Second)
		}
	}
	waitNoWindow(t, d, "Approval needed", 10*time.Second)
	if most := watch.most(); most != 1 {
		t.Fatalf("%d approval windows at once for %d delegations, want one", most, n)
	}
	for range n {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("message/send did not return after the denial")
		}
	}
}

// netns is a network namespace made for one test, with loopback up and a
// veth pair inside it (10.213.0.1/24 and .2) standing for a LAN: every
// packet of the test stays inside it.
func netns(t *testing.T) []string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root (CI runs as root)")
	}
	need(t, "ip", "iproute2")
	b := make([]byte, 4)
	rand.Read(b)
	ns := "mttray-" + hex.EncodeToString(b)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	ip("netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	ip("-n", ns, "link", "set", "lo", "up")
	ip("-n", ns, "link", "add", "lan0", "type", "veth", "peer", "name", "lan1")
	ip("-n", ns, "addr", "add", "10.213.0.1/24", "dev", "lan0")
	ip("-n", ns, "addr", "add", "10.213.0.2/24", "dev", "lan1")
	ip("-n", ns, "link", "set", "lan0", "up")
	ip("-n", ns, "link", "set", "lan1", "up")
	return []string{"ip", "netns", "exec", ns}
}

// TestPairingWindow is the pairing window under Xvfb: "Pair a device…"
// from the tray menu opens the pairing window in the UI process; its QR
// code (decoded from the screenshot, as a phone's camera would) carries
// the LAN pairing URL; a second meshtray joins with it; the window shows
// the claim and its SAS, is approved through its button, and says
// "Paired with". Everything runs in a network namespace of its own, since
// the LAN listener and mDNS must not touch the machine's interfaces.
func TestPairingWindow(t *testing.T) {
	wrap := netns(t)
	need(t, "zbarimg", "zbar-tools")
	d := startDesktop(t, true)
	dir := t.TempDir()
	p := startTrayCmd(t, d.env(), dir, wrap)
	it := d.Watcher.waitItem(t, 30*time.Second)
	cli(t, d.env(), wrap, dir, "lan", "on")

	d.Watcher.clickLabel(t, it, labelPair)
	win, _ := waitWindow(t, d, "Pair a device", 30*time.Second)
	// The code arrives a moment after the window: read the QR code as a
	// phone's camera would, once it is drawn.
	var url string
	pollShot(t, d, win, "pair-1-code", "QR code readable in the pairing window", 15*time.Second, func(shot string, img image.Image) bool {
		out, err := exec.Command("zbarimg", "--raw", "-q", shot).Output()
		url = strings.TrimSpace(string(out))
		return err == nil && url != "" && blankness(img) == ""
	})
	if !strings.HasPrefix(url, "https://10.213.0.") || !strings.Contains(url, "/pair#c=") || !strings.Contains(url, "&fp=") {
		t.Fatalf("QR code holds %q, want the LAN pairing URL", url)
	}
	// The QR code follows the listeners: with LAN reachability off its
	// address no longer answers, so the window shows none; back on, the
	// same code's LAN URL is back.
	cli(t, d.env(), wrap, dir, "lan", "off")
	pollShot(t, d, win, "pair-1b-lan-off", "no QR code once LAN is off", 15*time.Second, func(shot string, _ image.Image) bool {
		qr, _ := exec.Command("zbarimg", "--raw", "-q", shot).Output()
		return len(qr) == 0
	})
	cli(t, d.env(), wrap, dir, "lan", "on")
	pollShot(t, d, win, "pair-1c-lan-on", "the QR code back once LAN is on", 15*time.Second, func(shot string, _ image.Image) bool {
		qr, _ := exec.Command("zbarimg", "--raw", "-q", shot).Output()
		return strings.TrimSpace(string(qr)) == url
	})

	// A second meshtray (headless, same namespace) claims the code.
	bdir := t.TempDir()
	startServe(t, wrap, bdir, "node-b")
	joined := make(chan string, 1)
	go func() {
		argv := append(append([]string{}, wrap...), os.Args[0], "pair", "--join", url, "--give", "none", "--json", "--state-dir", bdir)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = (*desktop)(nil).env()
		o, err := cmd.CombinedOutput()
		if err != nil {
			joined <- "error: " + err.Error() + "\n" + string(o)
			return
		}
		joined <- string(o)
	}()

	// The claim shows in the pairing window (not in a second popup).
	deadline := time.Now().Add(30 * time.Second)
	var as []app.Approval
	for len(as) == 0 {
		select {
		case out := <-joined:
			t.Fatalf("the join ended before the owner decided: %s", out)
		case <-time.After(100 * time.Millisecond):
		}
		if err := json.Unmarshal([]byte(cli(t, d.env(), wrap, dir, "approvals", "--json")), &as); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("no pairing request reached the node")
		}
	}
	if len(as) != 1 || as[0].Kind != app.KindPairing || as[0].Peer != "node-b" {
		t.Fatalf("approvals: %+v", as)
	}
	pollShot(t, d, win, "pair-2-claim", "claim in place of the QR code", time.Until(deadline), func(shot string, _ image.Image) bool {
		qr, _ := exec.Command("zbarimg", "--raw", "-q", shot).Output()
		return len(qr) == 0
	})
	_, x, y := buttonShot(t, d, win, "pair-2-claim", "the claim with its Approve")
	clickAt(t, d, win, x, y)

	select {
	case out := <-joined:
		if strings.HasPrefix(out, "error:") {
			t.Fatalf("join failed: %s", out)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the join did not finish after Approve")
	}
	var devs app.Devices
	if err := json.Unmarshal([]byte(cli(t, d.env(), wrap, dir, "devices", "--json")), &devs); err != nil {
		t.Fatal(err)
	}
	if len(devs.Issued) != 1 || devs.Issued[0].Name != "node-b" {
		t.Fatalf("issued grants after pairing: %+v", devs.Issued)
	}
	// "Paired with <name>": the window says so, in its title too.
	if w, _ := waitWindow(t, d, "Paired with node-b", 15*time.Second); w != win {
		t.Fatalf("window %s says paired, want the pairing window %s", w, win)
	}
	settledShot(t, d, win, "pair-3-paired", "the paired message")
	if len(visibleWindowsNamed(d, "Approval needed")) != 0 {
		t.Error("a separate approval popup opened for the pairing the pairing window showed")
	}

	// The other side now holds a grant from this device: its peer window
	// reads this device's manifest through GET /ui/peers/{id}/manifest
	// (pinned HTTPS to the LAN address, with the held token).
	var bdevs app.Devices
	if err := json.Unmarshal([]byte(cli(t, d.env(), wrap, bdir, "devices", "--json")), &bdevs); err != nil || len(bdevs.Held) != 1 {
		t.Fatalf("node-b's held grants: %v %+v", err, bdevs.Held)
	}
	info, err := app.ReadDaemonInfo(bdir)
	if err != nil {
		t.Fatal(err)
	}
	hdr := filepath.Join(t.TempDir(), "auth")
	if err := os.WriteFile(hdr, []byte("Authorization: Bearer "+info.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	need(t, "curl", "curl")
	argv := append(append([]string{}, wrap...), "curl", "-sS", "--fail-with-body", "-H", "@"+hdr,
		fmt.Sprintf("http://127.0.0.1:%d/ui/peers/%s/manifest", info.Port, bdevs.Held[0].PeerID))
	mout, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("peer manifest from node-b: %v %s", err, mout)
	}
	var m nodes.Manifest
	if err := json.Unmarshal(mout, &m); err != nil || m.Device.Name != "test-laptop" || len(m.Capabilities) == 0 {
		t.Fatalf("peer manifest: %v %s", err, mout)
	}
	p.stop()
}

// startServe runs `meshtray serve` (headless) in wrap's namespace.
func startServe(t *testing.T, wrap []string, dir, name string) {
	t.Helper()
	argv := append(append([]string{}, wrap...), os.Args[0], "serve", "--state-dir", dir, "--port", "0",
		"--keychain", "file", "--name", name, "--log-level", "debug")
	p := startProc(t, name, (*desktop)(nil).env(), dir, argv)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(dir + "/daemon.json"); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not start:\n%s", name, p.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func visibleWindowsNamed(d *desktop, title string) []string {
	out, _ := xcmd(d, "xdotool", "search", "--onlyvisible", "--name", title).Output()
	return strings.Fields(string(out))
}

// TestPopupDecidedWhileOpening: a delegation decided from the CLI the
// moment its popup appears (before the UI process's change-notice stream
// may be connected) still closes the popup: it re-reads its queue on its
// own. Three rounds, each with a fresh UI process.
func TestPopupDecidedWhileOpening(t *testing.T) {
	d := startDesktop(t, true)
	dir := t.TempDir()
	p := startTrayCmd(t, d.env(), dir, nil)
	c := p.client(t)
	cli(t, d.env(), nil, dir, "a2a", "on")
	token := strings.TrimSpace(cli(t, d.env(), nil, dir, "grant", "create", "--name", "quick", "--scope", "agent"))
	client := apptest.A2AClient(t, c.BaseURL(), token)
	for round := range 3 {
		done := make(chan error, 1)
		go func() {
			_, err := client.SendMessage(context.Background(), &a2a.MessageSendParams{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.DataPart{Data: map[string]any{"capability": "device.info"}})})
			done <- err
		}()
		waitWindow(t, d, "Approval needed", 30*time.Second)
		as, err := c.Approvals(context.Background())
		if err != nil || len(as) != 1 {
			t.Fatalf("round %d: approvals: %v %+v", round, err, as)
		}
		cli(t, d.env(), nil, dir, "approve", as[0].ID)
		if err := <-done; err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		waitNoWindow(t, d, "Approval needed", 10*time.Second)
	}
}

// TestUIWithoutDisplay: meshtray-ui with no X server behind DISPLAY
// exits with an error that names the display, not a GLFW panic trace.
func TestUIWithoutDisplay(t *testing.T) {
	dir := t.TempDir()
	startServe(t, nil, dir, "no-display")
	const display = ":9731"
	if _, err := os.Stat("/tmp/.X11-unix/X9731"); err == nil {
		t.Skip("an X server socket exists for " + display)
	}
	c, err := app.Dial(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A window the tray asked for: the failed UI process puts it back.
	pair := app.UIRequest{Window: app.UIPair}
	if err := c.OpenUI(ctx, pair); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, uiExe(t), "--state-dir", dir)
	cmd.Env = (*desktop)(nil).env("DISPLAY=" + display)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("meshtray-ui without a display: %v, want exit status 1\n%s", err, out)
	}
	if !strings.Contains(string(out), `cannot open a window on the display (DISPLAY=":9731"`) {
		t.Errorf("output does not say it cannot open a window on %s:\n%s", display, out)
	}
	if strings.Contains(string(out), "goroutine 1") || strings.Contains(string(out), "panic:") {
		t.Errorf("output is a panic trace:\n%s", out)
	}
	queued, err := c.PendingUI(ctx)
	if err != nil || !slices.Equal(queued, []app.UIRequest{pair}) {
		t.Errorf("window queue after the failed UI process: %v %+v, want the pairing window back", err, queued)
	}
}
