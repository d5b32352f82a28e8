//go:build linux

package tray

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	realOnce sync.Once
	realExe  string
	realErr  error
)

// realMeshtray is meshtray as `make build` builds it on Linux: main.go
// with CGO_ENABLED=0 (built once per test binary).
func realMeshtray(t *testing.T) string {
	t.Helper()
	realOnce.Do(func() {
		realExe = filepath.Join(programs(t), "meshtray-real")
		realErr = goBuild(realExe, false, "", "CGO_ENABLED=0")
	})
	if realErr != nil {
		t.Fatal(realErr)
	}
	return realExe
}

// TestMeshtrayLinksNoFyne: the meshtray executable (CLI, node, tray
// menu) builds without cgo and links neither Fyne nor OpenGL; only
// meshtray-ui does.
func TestMeshtrayLinksNoFyne(t *testing.T) {
	exe := realMeshtray(t)
	out, err := exec.Command("go", "version", "-m", exe).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, out)
	}
	for _, mod := range []string{"fyne.io/fyne/v2", "github.com/go-gl/"} {
		if strings.Contains(string(out), "\t"+mod) {
			t.Errorf("meshtray links %s:\n%s", mod, out)
		}
	}
	if !strings.Contains(string(out), "\tfyne.io/systray") {
		t.Errorf("meshtray does not link fyne.io/systray (is the tray wired in?):\n%s", out)
	}
	if !strings.Contains(string(out), "CGO_ENABLED=0") {
		t.Errorf("meshtray was not built with CGO_ENABLED=0:\n%s", out)
	}
	ui, err := exec.Command("go", "version", "-m", uiExe(t)).CombinedOutput()
	if err != nil || !strings.Contains(string(ui), "\tfyne.io/fyne/v2") {
		t.Errorf("meshtray-ui does not link Fyne: %v\n%s", err, ui)
	}
}

// TestCommandsPrintNothingFromFyne: in the C.UTF-8 locale of container
// images and servers (and LANGUAGE unset), no command of the meshtray
// executable prints anything from Fyne ("Fyne error: Error parsing user
// locale C"), against no node and against a running one.
func TestCommandsPrintNothingFromFyne(t *testing.T) {
	exe := realMeshtray(t)
	var env []string
	for _, kv := range (*desktop)(nil).env() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "LANG", "LANGUAGE", "LC_ALL", "LC_MESSAGES", envTrayMain:
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "LANG=C.UTF-8")
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, exe, args...)
		cmd.Env = env
		out, _ := cmd.CombinedOutput() // some fail (no node): only the output counts
		if ctx.Err() != nil {
			t.Fatalf("meshtray %v did not end in 60 s\n%s", args, out)
		}
		return string(out)
	}
	none, dir := t.TempDir(), t.TempDir() // no node runs in none
	check := func(what, out string) {
		t.Helper()
		// The state dirs are named after this test: they are not Fyne's.
		rest := strings.NewReplacer(none, "NONE", dir, "DIR").Replace(out)
		if strings.Contains(strings.ToLower(rest), "fyne") {
			t.Errorf("%s prints something from Fyne:\n%s", what, out)
		}
	}
	for _, args := range [][]string{
		{"--help"}, {"version"}, {"serve", "--help"}, {"status", "--help"},
		{"status", "--state-dir", none}, {"a2a", "on", "--state-dir", none}, {"peers", "--state-dir", none},
	} {
		out := run(args...)
		if args[0] == "--help" && !strings.Contains(out, "Usage:") {
			t.Errorf("meshtray --help printed no usage:\n%s", out)
		}
		check("meshtray "+strings.Join(args, " "), out)
	}
	// A running node (the tray without a display runs the node alone):
	// its own log, and commands that reach it.
	p := startProc(t, "meshtray", env, dir, []string{exe, "--state-dir", dir, "--port", "0", "--keychain", "file", "--name", "c-locale"})
	p.client(t)
	for _, args := range [][]string{{"status"}, {"a2a", "on"}, {"a2a", "off"}, {"devices"}, {"approvals"}} {
		out := run(append(args, "--state-dir", dir)...)
		check("meshtray "+strings.Join(args, " ")+" (node running)", out)
	}
	p.stop()
	check("the meshtray node's log", p.Logs())
}

// TestMissingUIInMenuAndLog: a tray whose meshtray-ui is not next to its
// executable says so in its log and, as disabled items naming the missing
// file and how to get it, in its real D-Bus menu; a click on a window item
// says why nothing opens. Once meshtray-ui is put there, the item goes and
// the window opens.
func TestMissingUIInMenuAndLog(t *testing.T) {
	d := startDesktop(t, true)
	bin := t.TempDir()
	exe := filepath.Join(bin, "meshtray")
	if err := linkOrCopy(trayExe(t), exe); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(bin, UIProgram)
	dir := t.TempDir()
	p := startProc(t, "tray", d.env(), dir, []string{exe, "--state-dir", dir, "--port", "0",
		"--keychain", "file", "--name", "no-ui-laptop", "--log-level", "debug"})
	c := p.client(t)
	it := d.Watcher.waitItem(t, 20*time.Second)
	m := d.Watcher.waitMenu(t, it, 10*time.Second, "the missing meshtray-ui", func(m menuNode) bool {
		_, ok := m.item(uiMissingLabel(missing))
		return ok
	})
	item, _ := m.item(uiMissingLabel(missing))
	hint, ok := m.item(uiMissingHintLabel)
	if item.Enabled || !ok || hint.Enabled || !strings.Contains(hint.Label, "make build") {
		t.Errorf("missing meshtray-ui: items %+v and %+v (ok %v), want both disabled, the second saying how to get it", item, hint, ok)
	}
	if !strings.Contains(p.Logs(), "no windows: "+missing+" is missing") {
		t.Errorf("the log does not name the missing %s:\n%s", missing, p.Logs())
	}
	d.Watcher.clickLabel(t, it, labelDevices)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.Logs(), "menu action failed") || !strings.Contains(p.Logs(), "the windows need "+missing+", which is missing") {
		if time.Now().After(deadline) {
			t.Fatalf("a click on %s with meshtray-ui missing logged no reason:\n%s", labelDevices, p.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Put it there: the next refresh drops the items, the click opens.
	if err := linkOrCopy(uiExe(t), missing); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetA2A(context.Background(), true); err != nil {
		t.Fatal(err) // a change notice, so the tray renders again
	}
	// The menu in its final state (A2A on, no missing item): no render
	// after it renumbers the items under the click below.
	d.Watcher.waitMenu(t, it, 10*time.Second, "no missing-meshtray-ui item", func(m menuNode) bool {
		_, there := m.item(uiMissingLabel(missing))
		pub, ok := m.item(labelPublish)
		_, line := m.item("A2A on · not reachable from other devices")
		return ok && pub.ToggleState == 1 && line && !there
	})
	d.Watcher.clickLabel(t, it, labelDevices)
	waitWindow(t, d, "Devices", 30*time.Second)
}
