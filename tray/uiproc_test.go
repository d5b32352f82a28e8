package tray

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"meshtray/app"
)

// TestUIProgramPath: the window process is looked for next to the tray's
// own executable (".exe" on Windows), and found missing unless it is an
// executable regular file there.
func TestUIProgramPath(t *testing.T) {
	t.Parallel()
	exe, want := "/usr/local/bin/meshtray", "/usr/local/bin/meshtray-ui"
	if runtime.GOOS == "windows" {
		exe, want = `C:\meshtray\meshtray.exe`, `C:\meshtray\meshtray-ui.exe`
	}
	if got := uiProgramPath(exe); got != want {
		t.Errorf("uiProgramPath(%s) = %s, want %s", exe, got, want)
	}
	dir := t.TempDir()
	cfg := app.Defaults()
	cfg.StateDir = dir
	l := &uiLauncher{argv: uiArgv(filepath.Join(dir, "meshtray"), cfg)}
	ui := uiProgramPath(filepath.Join(dir, "meshtray"))
	if got := l.missing(); got != ui {
		t.Errorf("missing() with no file = %q, want %q", got, ui)
	}
	if err := os.Mkdir(ui, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := l.missing(); got != ui {
		t.Errorf("missing() with a directory there = %q, want %q", got, ui)
	}
	os.Remove(ui)
	if err := os.WriteFile(ui, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := l.missing(); runtime.GOOS != "windows" && got != ui {
		t.Errorf("missing() with a non-executable file = %q, want %q", got, ui)
	}
	if err := os.Chmod(ui, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := l.missing(); got != "" {
		t.Errorf("missing() with the program there = %q, want \"\"", got)
	}
	if l.argv[1] != "--state-dir" || l.argv[2] != dir {
		t.Errorf("argv %q", l.argv)
	}
}
