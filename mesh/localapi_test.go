package mesh

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tailscale.com/client/local"
)

// TestLocalAPIAbsentSpawnsNothing: asking a tailscaled that is not there
// runs no program. local.Client on its own runs `systemctl show
// tailscaled.service` on every failed dial to word its error, which the
// discovery's retry loop turned into a process every 15-45 s on machines
// without Tailscale. A systemctl first on PATH records each call.
func TestLocalAPIAbsentSpawnsNothing(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	script := "#!/bin/sh\necho \"$@\" >> " + calls + "\n"
	if err := os.WriteFile(filepath.Join(dir, "systemctl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	sock := filepath.Join(dir, "no-tailscaled.sock")
	ctx := context.Background()

	// The hazard, shown with the plain client: it runs systemctl.
	if _, err := (&local.Client{Socket: sock, UseSocketOnly: true}).Status(ctx); err == nil {
		t.Fatal("a missing socket answered")
	}
	if b, err := os.ReadFile(calls); err != nil || !strings.Contains(string(b), "tailscaled.service") {
		t.Fatalf("the plain local.Client ran no systemctl (%v %q): this test no longer shows anything", err, b)
	}
	os.Remove(calls)

	for range 3 {
		_, err := localAPIAt(sock).Status(ctx)
		var de *localAPIDialError
		if !errors.As(err, &de) || !strings.Contains(err.Error(), "tailscaled is not reachable") {
			t.Fatalf("Status without tailscaled: %v, want a localAPIDialError", err)
		}
	}
	if b, err := os.ReadFile(calls); err == nil {
		t.Fatalf("systemctl ran: %q", b)
	}
}
