//go:build linux

package tray

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"meshtray/app"
)

// TestTrayMenuOverDBus drives the tray through the real StatusNotifierItem
// and com.canonical.dbusmenu protocol, as a desktop panel does: a private
// bus under Xvfb, a test-side StatusNotifierWatcher, the tray process
// (node included) registering with it, its menu read with GetLayout and
// clicked with Event "clicked" (the com.canonical.dbusmenu interface).
func TestTrayMenuOverDBus(t *testing.T) {
	d := startDesktop(t, true)
	notes := d.startNotifications(t)
	p := startTrayCmd(t, d.env(), t.TempDir(), nil)
	c := p.client(t)
	it := d.Watcher.waitItem(t, 20*time.Second)
	if it.Path != "/StatusNotifierItem" {
		t.Errorf("registered path %q, want /StatusNotifierItem", it.Path)
	}

	m := d.Watcher.waitMenu(t, it, 15*time.Second, "the full menu", func(m menuNode) bool {
		peers, ok := m.item(labelPeers)
		_, pub := m.item(labelPublish)
		return ok && pub && len(peers.Children) > 0
	})
	st, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"test-laptop — " + st.OS,
		"A2A off · not reachable from other devices",
		labelPublish, labelLAN, labelPeers,
		labelPair, labelDevices, "Approvals (0)…", labelManifest, labelActivity,
		labelAutostart, labelLogs, labelQuit,
	}
	if got := m.labels(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("menu labels:\n got %q\nwant %q", got, want)
	}
	status, _ := m.item(want[1])
	if status.Enabled {
		t.Error("the status line is clickable; want it disabled")
	}
	peers, _ := m.item(labelPeers)
	if got := peers.labels(); strings.Join(got, "|") != labelNoPeers+"|"+labelAllPeers {
		t.Errorf("Peers submenu: %q", got)
	}
	pub, _ := m.item(labelPublish)
	if pub.ToggleType != "checkmark" || pub.ToggleState != 0 {
		t.Errorf("Publish: toggle-type %q state %d, want an unchecked checkmark", pub.ToggleType, pub.ToggleState)
	}
	iconBefore := d.Watcher.iconPixmap(t, it)

	card := c.BaseURL() + "/.well-known/agent-card.json"
	if s := getStatus(t, card); s != http.StatusNotFound {
		t.Fatalf("card before publishing: %d, want 404", s)
	}
	d.Watcher.click(t, it, pub.ID)
	deadline := time.Now().Add(10 * time.Second)
	for getStatus(t, card) != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("the agent card did not go to 200 after the click")
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.Watcher.waitMenu(t, it, 10*time.Second, "Publish checked", func(m menuNode) bool {
		pub, ok := m.item(labelPublish)
		_, line := m.item("A2A on · not reachable from other devices")
		return ok && pub.ToggleState == 1 && line
	})
	if bytes.Equal(iconBefore, d.Watcher.iconPixmap(t, it)) {
		t.Error("the tray icon did not change when the card was published")
	}
	// The CLI and the tray are one state: `meshtray a2a off` unchecks it.
	if err := func() error { _, err := c.SetA2A(context.Background(), false); return err }(); err != nil {
		t.Fatal(err)
	}
	d.Watcher.waitMenu(t, it, 10*time.Second, "Publish unchecked after a2a off", func(m menuNode) bool {
		pub, ok := m.item(labelPublish)
		return ok && pub.ToggleState == 0
	})
	if s := getStatus(t, card); s != http.StatusNotFound {
		t.Fatalf("card after a2a off: %d, want 404", s)
	}

	// The header copies the device ID (X clipboard) and says so.
	d.Watcher.clickLabel(t, it, want[0]) // items are renumbered on every rebuild: find it again
	if n := notes.wait(t, 1, 10*time.Second)[0]; n.Summary != "Device ID copied" || n.Body != st.DeviceID {
		t.Errorf("notification %+v", n)
	}
	need(t, "xclip", "xclip")
	clip, err := xcmd(d, "xclip", "-o", "-selection", "clipboard").Output()
	if err != nil || string(clip) != st.DeviceID {
		t.Errorf("clipboard holds %q (%v), want the device ID %s", clip, err, st.DeviceID)
	}

	// Start at login writes the XDG autostart entry, with this state dir.
	d.Watcher.clickLabel(t, it, labelAutostart)
	entry := filepath.Join(d.Home, "autostart", app.AppID+".desktop")
	d.Watcher.waitMenu(t, it, 10*time.Second, "Start at login checked", func(m menuNode) bool {
		a, ok := m.item(labelAutostart)
		return ok && a.ToggleState == 1
	})
	b, err := os.ReadFile(entry)
	if err != nil {
		t.Fatalf("autostart entry: %v", err)
	}
	if !strings.Contains(string(b), "--state-dir "+p.StateDir) || !strings.Contains(string(b), "--keychain file") {
		t.Errorf("autostart Exec lacks the state dir or keychain:\n%s", b)
	}
	d.Watcher.clickLabel(t, it, labelAutostart)
	d.Watcher.waitMenu(t, it, 10*time.Second, "Start at login unchecked", func(m menuNode) bool {
		a, ok := m.item(labelAutostart)
		return ok && a.ToggleState == 0
	})
	if _, err := os.Stat(entry); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("autostart entry still there after unticking: %v", err)
	}

	// Quit stops the node cleanly.
	d.Watcher.clickQuit(t, it)
	exited, err := p.exited(15 * time.Second)
	if !exited {
		t.Fatal("the tray did not exit after Quit")
	}
	if err != nil {
		t.Fatalf("tray exit after Quit: %v", err)
	}
	if _, err := os.Stat(filepath.Join(p.StateDir, "daemon.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("daemon.json left behind after Quit: %v", err)
	}
	if !strings.Contains(p.Logs(), "tray stopped") {
		t.Errorf("no clean stop in the logs")
	}
}

// TestTrayWithoutDisplayRunsNode: no display and no session bus → the tray
// says so once and the node keeps serving; SIGTERM stops it cleanly.
func TestTrayWithoutDisplayRunsNode(t *testing.T) {
	t.Parallel()
	p := startTrayCmd(t, (*desktop)(nil).env(), t.TempDir(), nil)
	c := p.client(t)
	_, err := c.Status(context.Background())
	if err != nil {
		t.Fatalf("the node does not answer without a display: %v", err)
	}
	if n := strings.Count(p.Logs(), "no tray: no display"); n != 1 {
		t.Errorf("the no-display notice appears %d times, want once:\n%s", n, p.Logs())
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if exited, err := p.exited(15 * time.Second); !exited || err != nil {
		t.Fatalf("stop on SIGTERM: exited %v, %v", exited, err)
	}
}

// runSecond runs `meshtray` (the tray) with env and returns its output; it
// must be refused: exit with ExitError within 30 s (a tray that starts
// instead is killed then, and fails the test).
func runSecond(t *testing.T, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append(args, "--port", "0", "--keychain", "file")...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the second tray was not refused: still running after 30 s\n%s", out)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != CLIExitError {
		t.Fatalf("second start: %v, want exit %d\n%s", err, CLIExitError, out)
	}
	return string(out)
}

// TestSecondTraySaysRunning: one tray per state dir; the second start says
// the tray is running, with its pid.
func TestSecondTraySaysRunning(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := append((*desktop)(nil).env(), userEnv(t)...)
	p := startTrayCmd(t, env, dir, nil)
	p.client(t)
	out := runSecond(t, env, "--state-dir", dir)
	want := "the meshtray tray is already running (pid " + strconv.Itoa(p.cmd.Process.Pid) + ")"
	if !strings.Contains(out, want) {
		t.Fatalf("second start says:\n%s\nwant it to contain %q", out, want)
	}
}

// TestOneTrayPerUser: "one instance per user": a second tray
// of the same user is refused on any state dir, naming the running one;
// another user's tray runs side by side.
func TestOneTrayPerUser(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := append((*desktop)(nil).env(), userEnv(t)...)
	p := startTrayCmd(t, env, dir, nil)
	p.client(t)
	other := t.TempDir()
	out := runSecond(t, env, "--state-dir", other)
	want := "the meshtray tray is already running (pid " + strconv.Itoa(p.cmd.Process.Pid) + ") on state dir " + dir
	if !strings.Contains(out, want) {
		t.Fatalf("a second tray on another state dir says:\n%s\nwant it to contain %q", out, want)
	}
	if _, err := os.Stat(filepath.Join(other, "daemon.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused tray started a node on %s: %v", other, err)
	}
	// Another user (its own runtime dir) runs its tray meanwhile.
	q := startTrayCmd(t, (*desktop)(nil).env(), other, nil)
	q.client(t)
}

// TestTrayOnHeadlessNode: the tray on a state dir whose node runs as
// `meshtray serve` says that node runs headless, with its pid (not that
// an icon is in the tray).
func TestTrayOnHeadlessNode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	startServe(t, nil, dir, "headless")
	info, err := app.ReadDaemonInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := runSecond(t, append((*desktop)(nil).env(), userEnv(t)...), "--state-dir", dir)
	want := fmt.Sprintf("the node of state dir %s is already running (headless, pid %d)", dir, info.PID)
	if !strings.Contains(out, want) || strings.Contains(out, "system tray") {
		t.Fatalf("tray on a served state dir says:\n%s\nwant it to contain %q", out, want)
	}
}

// TestQuitClosesWindows: Quit with a window open stops the UI process too,
// and the node cleanly.
func TestQuitClosesWindows(t *testing.T) {
	d := startDesktop(t, true)
	p := startTrayCmd(t, d.env(), t.TempDir(), nil)
	it := d.Watcher.waitItem(t, 20*time.Second)
	d.Watcher.clickLabel(t, it, labelDevices)
	win, _ := waitWindow(t, d, "Devices", 30*time.Second)
	settledShot(t, d, win, "devices", "the devices window")
	d.Watcher.clickQuit(t, it)
	exited, err := p.exited(20 * time.Second)
	if !exited || err != nil {
		t.Fatalf("Quit with a window open: exited %v, %v", exited, err)
	}
	// The tray waited for the UI process before exiting: no window left.
	waitNoWindow(t, d, "Devices", 2*time.Second)
}

// waitLog waits until the process's output contains s.
func waitLog(t *testing.T, p *trayProc, s string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(p.Logs(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the logs within %v:\n%s", s, d, p.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// assertStructured fails for every output line that is not a record of
// the node's structured (slog text) log.
func assertStructured(t *testing.T, logs string) {
	t.Helper()
	for _, l := range strings.Split(logs, "\n") {
		if l != "" && !strings.HasPrefix(l, "time=") {
			t.Errorf("unstructured output line: %q", l)
		}
	}
}

// TestLateTrayHost: no StatusNotifierWatcher at start (a panel that starts
// after the app at login) → the tray says so once, keeps the node and its
// windows working, and registers when a watcher appears.
func TestLateTrayHost(t *testing.T) {
	d := startDesktop(t, false)
	p := startTrayCmd(t, d.env(), t.TempDir(), nil)
	p.client(t)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.Logs(), "tray started") {
		if time.Now().After(deadline) {
			t.Fatalf("tray not started:\n%s", p.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := strings.Count(p.Logs(), "no tray host on the session bus"); n != 1 {
		t.Errorf("the no-tray-host notice appears %d times, want once", n)
	}
	// systray's own complaint (it failed to register) is a debug record of
	// the structured log, not a raw line next to the warning.
	waitLog(t, p, "failed to register", 10*time.Second)
	assertStructured(t, p.Logs())
	d.Watcher = startWatcher(t, d.Bus)
	it := d.Watcher.waitItem(t, 20*time.Second)
	d.Watcher.waitMenu(t, it, 15*time.Second, "the menu of a late registration", func(m menuNode) bool {
		_, ok := m.item(labelQuit)
		return ok
	})
}
