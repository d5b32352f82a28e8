package autostart

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestDesktopEntryQuoting(t *testing.T) {
	t.Parallel()
	e := Entry{ID: "io.meshtray.app", Name: "meshtray", Comment: "Your devices as one mesh",
		Exec: []string{"/opt/mesh tray/meshtray", "--state-dir", `/home/a "b"/$x\y`, "50%"}}
	got := DesktopEntry(e)
	want := "[Desktop Entry]\nType=Application\nName=meshtray\nComment=Your devices as one mesh\n" +
		`Exec="/opt/mesh tray/meshtray" --state-dir "/home/a \\"b\\"/\\$x\\\\y" 50%%` + "\n" +
		"Terminal=false\nX-GNOME-Autostart-enabled=true\n"
	if got != want {
		t.Fatalf("desktop entry:\n%s\nwant:\n%s", got, want)
	}
}

func TestLaunchAgentEscapes(t *testing.T) {
	t.Parallel()
	got := LaunchAgent(Entry{ID: "io.meshtray.app", Exec: []string{"/Applications/meshtray.app/Contents/MacOS/meshtray", "--name", "A&B <laptop>"}})
	for _, s := range []string{
		"<key>Label</key>\n\t<string>io.meshtray.app</string>",
		"<string>/Applications/meshtray.app/Contents/MacOS/meshtray</string>",
		"<string>A&amp;B &lt;laptop&gt;</string>",
		"<key>RunAtLoad</key>\n\t<true/>",
	} {
		if !strings.Contains(got, s) {
			t.Errorf("plist lacks %q:\n%s", s, got)
		}
	}
}

func TestCommandLine(t *testing.T) {
	t.Parallel()
	// Vectors of CommandLineToArgvW's rules (as syscall.EscapeArg).
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{`C:\meshtray\meshtray.exe`}, `C:\meshtray\meshtray.exe`},
		{[]string{`C:\Program Files\meshtray\meshtray.exe`, "--state-dir", `C:\Users\a b\`}, `"C:\Program Files\meshtray\meshtray.exe" --state-dir "C:\Users\a b\\"`},
		{[]string{`say "hi"`, ""}, `"say \"hi\"" ""`},
		{[]string{`a\\"b c`}, `"a\\\\\"b c"`},
	} {
		if got := CommandLine(tc.argv); got != tc.want {
			t.Errorf("CommandLine(%q) = %s, want %s", tc.argv, got, tc.want)
		}
	}
}

func TestEntryChecks(t *testing.T) {
	t.Parallel()
	for _, e := range []Entry{
		{ID: "", Exec: []string{"/bin/x"}},
		{ID: "a/b", Exec: []string{"/bin/x"}},
		{ID: "ok", Exec: nil},
		{ID: "ok", Exec: []string{"/bin/x", "a\nb"}},
	} {
		if err := e.check(); err == nil {
			t.Errorf("check(%+v) = nil, want an error", e)
		}
	}
}

func TestEnableDisableRoundTrip(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("file-based autostart only") // Windows uses the registry
	}
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "autostart")
	e := Entry{ID: "io.meshtray.test", Name: "meshtray", Exec: []string{"/usr/bin/meshtray", "--state-dir", "/tmp/x y"}, Dir: dir}
	if on, err := e.Enabled(); err != nil || on {
		t.Fatalf("fresh: Enabled = %v, %v; want false, nil", on, err)
	}
	if err := e.Enable(); err != nil {
		t.Fatal(err)
	}
	if on, err := e.Enabled(); err != nil || !on {
		t.Fatalf("after Enable: Enabled = %v, %v", on, err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("autostart dir holds %d files, want 1 (no temp file left)", len(ents))
	}
	if err := e.Disable(); err != nil {
		t.Fatal(err)
	}
	if on, _ := e.Enabled(); on {
		t.Fatal("still enabled after Disable")
	}
	if err := e.Disable(); err != nil {
		t.Fatalf("second Disable: %v", err)
	}
}

func TestHiddenEntryIsDisabled(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("XDG only")
	}
	t.Parallel()
	dir := t.TempDir()
	e := Entry{ID: "io.meshtray.test", Exec: []string{"/usr/bin/meshtray"}, Dir: dir}
	// A desktop that "removes" an autostart entry may write Hidden=true.
	if err := os.WriteFile(filepath.Join(dir, e.ID+".desktop"), []byte(DesktopEntry(e)+"Hidden=true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if on, err := e.Enabled(); err != nil || on {
		t.Fatalf("Hidden=true: Enabled = %v, %v; want false", on, err)
	}
}
