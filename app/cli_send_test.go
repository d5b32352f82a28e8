package app_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshtray/app"
	"meshtray/app/apptest"
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

	t.Run("links in a folder are skipped, saying so", func(t *testing.T) {
		mustCLI(t, b, "grant", "set", grantOf(t, b, "ant"), "--files", "allow")
		trip := filepath.Join(src, "Trip")
		writeFile(t, filepath.Join(trip, "day1.txt"), "sun")
		if err := os.Symlink("day1.txt", filepath.Join(trip, "copy-link")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/etc", filepath.Join(trip, "etc-link")); err != nil {
			t.Fatal(err)
		}
		r := mustCLI(t, a, "send", "bee", trip)
		t.Logf("meshtray send, a folder with links:\nstdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
		if !strings.Contains(r.Stderr, "skipped 2 entries") || !strings.Contains(r.Stderr, "Trip/copy-link (symbolic link)") ||
			!strings.Contains(r.Stderr, "Trip/etc-link (symbolic link)") {
			t.Fatalf("stderr does not report the skipped links:\n%s", r.Stderr)
		}
		r = mustCLI(t, a, "send", "bee", trip, "--json")
		var res app.SendResult
		if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil {
			t.Fatalf("send --json: %s (%v)", r.Stdout, err)
		}
		if res.State != "completed" || len(res.Files) != 1 || res.Skipped == nil || res.Skipped.Count != 2 || len(res.Skipped.Entries) != 2 ||
			res.Skipped.Entries[0].Path != "Trip/copy-link" || res.Skipped.Entries[0].Type != "symbolic link" {
			t.Fatalf("send --json: %s", r.Stdout)
		}
		if !strings.Contains(r.Stderr, "skipped 2 entries") {
			t.Errorf("send --json: stderr does not report the skipped links:\n%s", r.Stderr)
		}
	})
}

// grantOf is the ID of the grant n issued to the device named name.
func grantOf(t *testing.T, n *apptest.Node, name string) string {
	t.Helper()
	d, err := n.Client.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range d.Issued {
		if g.Name == name {
			return g.ID
		}
	}
	t.Fatalf("no grant issued to %q", name)
	return ""
}
