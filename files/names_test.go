package files

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCleanPath(t *testing.T) {
	t.Parallel()
	refused := []string{
		"", "../../.bashrc", "..", "a/../../b", "./a", "a/./b", "a//b", "/etc/passwd",
		`\\server\share\x`, `C:\x`, "C:x", "c:/windows/x", "a:stream", "a\x00b", "a\nb",
		"a\x7fb", "a\x1b[31m", "...", ". .", "a/ /b", "\xff\xfe", "x" + partialSuffix,
		string(make([]byte, 300)), longPath(17),
	}
	for _, p := range refused {
		if got, err := CleanPath(p); !errors.Is(err, ErrBadName) {
			t.Errorf("CleanPath(%q) = %q, %v; want ErrBadName", p, got, err)
		}
	}
	cleaned := map[string]string{
		"report.pdf":        "report.pdf",
		"photos/2024/a.jpg": "photos/2024/a.jpg",
		".bashrc":           ".bashrc", // inside the folder: harmless
		"CON":               "_CON",
		"con.txt":           "_con.txt",
		"Nul.tar.gz":        "_Nul.tar.gz",
		"COM1":              "_COM1",
		"lpt9.log":          "_lpt9.log",
		"COM¹":              "_COM¹",
		"CON /x":            "_CON/x",
		"CONSOLE":           "CONSOLE",
		"COM10":             "COM10",
		"name. . ":          "name",
		"dir./f ":           "dir/f",
		`a<b>"c|d?e*.txt`:   "a_b__c_d_e_.txt",
		"héllo wörld.txt":   "héllo wörld.txt",
	}
	for in, want := range cleaned {
		got, err := CleanPath(in)
		if err != nil || got != want {
			t.Errorf("CleanPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func longPath(depth int) string {
	p := "d"
	for range depth - 1 {
		p += "/d"
	}
	return p
}

func TestNumbered(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"report.pdf": "report (2).pdf", ".bashrc": ".bashrc (2)", "README": "README (2)",
		"a.tar.gz": "a.tar (2).gz",
	} {
		if got := numbered(in, 2); got != want {
			t.Errorf("numbered(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDefaultDirXDG(t *testing.T) {
	home := t.TempDir()
	cfg := filepath.Join(home, "cfg")
	os.MkdirAll(cfg, 0o755)
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", cfg)
	write := func(s string) {
		if err := os.WriteFile(filepath.Join(cfg, "user-dirs.dirs"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	check := func(want string) {
		t.Helper()
		got, err := DefaultDir()
		if err != nil || got != want {
			t.Errorf("DefaultDir() = %q, %v; want %q", got, err, want)
		}
	}
	// No file: ~/Downloads.
	check(filepath.Join(home, "Downloads", AppFolder))
	write("# written by xdg-user-dirs-update\nXDG_DESKTOP_DIR=\"$HOME/Desktop\"\nXDG_DOWNLOAD_DIR=\"$HOME/Téléchargements\"\n")
	check(filepath.Join(home, "Téléchargements", AppFolder))
	write("XDG_DOWNLOAD_DIR=\"/srv/dl\"\n")
	check(filepath.Join("/srv/dl", AppFolder))
	write("XDG_DOWNLOAD_DIR=\"$HOME/\"\n") // disabled
	check(filepath.Join(home, "Downloads", AppFolder))
	write("XDG_DOWNLOAD_DIR=relative/x\n") // malformed
	check(filepath.Join(home, "Downloads", AppFolder))
}

// TestRefusedNamesNamesEach: a receiver refusing names says each of them,
// not only the first (five, then how many more).
func TestRefusedNamesNamesEach(t *testing.T) {
	m := Manifest{}
	for _, p := range []string{"ok.txt", `a\b.txt`, "../up", "fine/x", "c:d", "e\x01", "f\x02", "g\x03"} {
		m.Files = append(m.Files, Entry{Path: p})
	}
	err := refusedNames(m)
	if !errors.Is(err, ErrBadName) {
		t.Fatalf("refusedNames = %v", err)
	}
	for _, want := range []string{`"a\\b.txt"`, `"../up"`, `"c:d"`, "and 1 more"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("%q does not name %s", err, want)
		}
	}
	if refusedNames(Manifest{Files: []Entry{{Path: "ok.txt"}}}) != nil {
		t.Fatal("a good name refused")
	}
}
