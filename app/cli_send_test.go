package app_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	agent "meshtray/a2a"
	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/store"
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
			res.Skipped.Entries[0].Path != "Trip/copy-link" || res.Skipped.Entries[0].Why != "symbolic link" {
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

// TestSendReceiverRestarts: the receiving node stops mid-transfer and
// starts again. Killed (a crash) once the transfer was working on its
// disk, meshtray send ends failed (exit 10), saying in the sender's words
// that the device restarted and to send again; stopped cleanly (an
// update, a reboot), it ends canceled (exit 11), saying the device shut
// down. Either way the partial file is gone from the receive folder.
func TestSendReceiverRestarts(t *testing.T) {
	for _, c := range []struct {
		name string
		kill bool
		code int
		want string
	}{
		{"killed", true, 10, "failed: " + app.ReceiverRestartedText},
		{"stopped", false, 11, "canceled: " + app.ReceiverShutDownText},
	} {
		t.Run(c.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
			ln.Close()
			bopts := apptest.Options{Name: "bee", Keychain: "file", StateDir: t.TempDir(), Args: []string{"--port", port}}
			b := apptest.StartNode(t, bopts)
			a := apptest.StartNode(t, apptest.Options{Name: "ant", Keychain: "file"})
			pairNodes(t, a, b)
			mustCLI(t, b, "a2a", "on")
			mustCLI(t, b, "grant", "set", grantOf(t, b, "ant"), "--files", "allow")

			run := startCLI(t, a, "send", "bee", sparseFile(t, 1<<30))
			apptest.WaitFor(t, 60*time.Second, "a partial file on the receiver", func() bool {
				m, _ := filepath.Glob(filepath.Join(b.FilesDir, ".*.meshtray-partial"))
				return len(m) > 0
			})
			if c.kill {
				// The database says working (read beside the node, as
				// another SQLite reader), then the crash.
				db, err := sql.Open("sqlite", "file:"+filepath.Join(bopts.StateDir, store.DefaultFile)+"?mode=ro")
				if err != nil {
					t.Fatal(err)
				}
				apptest.WaitFor(t, 30*time.Second, "the transfer working on the receiver's disk", func() bool {
					var n int
					return db.QueryRow("SELECT count(*) FROM tasks WHERE state = ?", string(store.StateWorking)).Scan(&n) == nil && n == 1
				})
				db.Close()
				if err := b.Cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				b.Wait(10 * time.Second)
			} else {
				b.Stop()
			}
			b = apptest.StartNode(t, bopts)
			r := run.wait(t, 4*time.Minute)
			t.Logf("meshtray send, the receiver %s and started again: exit %d\nstdout:\n%s\nstderr:\n%s", c.name, r.Code, r.Stdout, r.Stderr)
			if r.Code != c.code || strings.Count(r.Stderr, c.want) != 1 ||
				strings.Contains(r.Stderr, agent.RestartedText) || strings.Contains(r.Stderr, ": node shutting down") {
				t.Fatalf("exit %d, want %d with %q; stderr:\n%s", r.Code, c.code, c.want, r.Stderr)
			}
			if m, _ := filepath.Glob(filepath.Join(b.FilesDir, ".*.meshtray-partial")); len(m) != 0 {
				t.Errorf("partial files left after the restart: %v", m)
			}
		})
	}
}
