package app_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshtray/app"
)

// What `meshtray send` prints, between two real nodes paired on loopback.
func TestSendCLIOutput(t *testing.T) {
	a, b := sendPair(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "note.txt"), "hello from ant\n")

	t.Run("denied on the receiver", func(t *testing.T) {
		run := startCLI(t, a, "send", "bee", filepath.Join(src, "note.txt"))
		decide(t, b, approvalOf(t, b, app.KindFiles).ID, false)
		r := run.wait(t, 60*time.Second)
		t.Logf("meshtray send, denied: exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
		if r.Code != 12 {
			t.Fatalf("exit %d, want 12 (rejected)", r.Code)
		}
		// The state word once, and the reason once: the state line says
		// it, the exit does not repeat it.
		if strings.Contains(r.Stderr, "rejected: rejected") || strings.Count(r.Stderr, "denied by the owner") != 1 ||
			!strings.Contains(r.Stderr, "rejected: denied by the owner\n") {
			t.Fatalf("stderr:\n%s", r.Stderr)
		}
	})
}
