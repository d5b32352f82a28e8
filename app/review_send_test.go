//go:build unix

package app_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"meshtray/app"
)

// What a user names to `meshtray send` that is not a file: a FIFO, a
// device, a symlink to one. The node refused nothing and hashed them: the
// open of a FIFO blocked until a writer came, /dev/zero was read forever,
// and the CLI waited with it.
func TestSendRefusesSpecialFiles(t *testing.T) {
	a, _ := sendPair(t)
	tmp := t.TempDir()
	fifo := filepath.Join(tmp, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	link := filepath.Join(tmp, "zero")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, link} {
		r := startCLI(t, a, "send", "bee", p).wait(t, 30*time.Second)
		if r.Code != 1 || !strings.Contains(r.Stderr, "not a regular file") {
			t.Errorf("send %s: exit %d, want 1 (nothing could be sent)\nstdout: %s\nstderr: %s", p, r.Code, r.Stdout, r.Stderr)
		}
	}
}

// A name at the 255-byte limit sent twice: the second is saved as a
// numbered name cut to fit, not failed after its bytes were sent.
func TestSendLongNameTwice(t *testing.T) {
	a, b := sendPair(t)
	src := filepath.Join(t.TempDir(), strings.Repeat("Q", 251)+".txt")
	writeFile(t, src, "long")
	for i := range 2 {
		run := startCLI(t, a, "send", "bee", src)
		ap := approvalOf(t, b, app.KindFiles)
		mustCLI(t, b, "approve", ap.ID)
		if r := run.wait(t, 60*time.Second); r.Code != 0 {
			t.Fatalf("send %d: exit %d\nstdout: %s\nstderr: %s", i, r.Code, r.Stdout, r.Stderr)
		}
	}
	ents, err := os.ReadDir(b.FilesDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
		if b, err := os.ReadFile(filepath.Join(b.FilesDir, e.Name())); err != nil || string(b) != "long" {
			t.Errorf("%s: %q %v", e.Name(), b, err)
		}
	}
	if len(names) != 2 {
		t.Errorf("receive folder holds %d entries, want the file and its numbered twin: %q", len(names), names)
	}
}
