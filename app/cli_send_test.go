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
// update, a reboot) the same once it is back (the transfer does not
// outlive the receiving process), after a line saying it restarts.
// Either way the partial file is gone from the receive folder.
func TestSendReceiverRestarts(t *testing.T) {
	for _, c := range []struct {
		name string
		kill bool
		code int
		want string
	}{
		{"killed", true, 10, "failed: " + app.ReceiverRestartedText},
		{"stopped", false, 10, "failed: " + app.ReceiverRestartedText},
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
			if !c.kill && !strings.Contains(r.Stderr, app.ReceiverRestartingText) {
				t.Errorf("no line saying the device restarts:\n%s", r.Stderr)
			}
			if m, _ := filepath.Glob(filepath.Join(b.FilesDir, ".*.meshtray-partial")); len(m) != 0 {
				t.Errorf("partial files left after the restart: %v", m)
			}
		})
	}
}

// fixedPortOptions are the options of a receiver "bee" that starts again
// on the same port (its peers' pinned endpoint).
func fixedPortOptions(t *testing.T) apptest.Options {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	return apptest.Options{Name: "bee", Keychain: "file", StateDir: t.TempDir(), Args: []string{"--port", port}}
}

// TestSendReceiverStopsAwaitingApproval: the receiving node stops cleanly
// (SIGTERM) while its owner has not yet approved a transfer. The sender
// says the device restarts and keeps following the task, as after a
// kill; the receiver asks its owner again after its restart, and once
// approved the files arrive whole and meshtray send exits 0.
func TestSendReceiverStopsAwaitingApproval(t *testing.T) {
	bopts := fixedPortOptions(t)
	b := apptest.StartNode(t, bopts)
	a := apptest.StartNode(t, apptest.Options{Name: "ant", Keychain: "file"})
	pairNodes(t, a, b)
	mustCLI(t, b, "a2a", "on")
	src := filepath.Join(t.TempDir(), "Box")
	want := map[string]string{"Box/one.txt": "first file\n", "Box/two.txt": strings.Repeat("second ", 5000)}
	for p, body := range want {
		writeFile(t, filepath.Join(filepath.Dir(src), p), body)
	}

	run := startCLI(t, a, "send", "bee", src, "--json")
	first := approvalOf(t, b, app.KindFiles)
	if err := b.Stop(); err != nil {
		t.Fatalf("clean stop: %v", err)
	}
	apptest.WaitFor(t, 30*time.Second, "the sender to say the device restarts", func() bool {
		return strings.Contains(run.err.String(), app.ReceiverRestartingText)
	})
	select {
	case <-run.done:
		r := run.wait(t, time.Second)
		t.Fatalf("meshtray send gave up while the receiver restarted: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	case <-time.After(2 * time.Second):
	}
	b = apptest.StartNode(t, bopts)
	again := approvalOf(t, b, app.KindFiles)
	if again.ID != first.ID {
		t.Logf("approval %s asked again as %s", first.ID, again.ID)
	}
	decide(t, b, again.ID, true)
	r := run.wait(t, 2*time.Minute)
	if r.Code != 0 {
		t.Fatalf("send exited %d after the receiver restarted and approved:\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	var res app.SendResult
	if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil || res.State != "completed" || len(res.Files) != len(want) {
		t.Fatalf("result %s (%v)", r.Stdout, err)
	}
	for _, f := range res.Files {
		body, ok := want[f.Path]
		if !ok || f.SHA256 != hexSum([]byte(body)) {
			t.Fatalf("saved %+v; want one of %v with its hash", f, want)
		}
		got, err := os.ReadFile(filepath.Join(b.FilesDir, filepath.FromSlash(f.Path)))
		if err != nil || string(got) != body {
			t.Fatalf("%s on the receiver: %v (%d bytes, want %d)", f.Path, err, len(got), len(body))
		}
	}
}

// TestSendingNodeStopsMidTransfer: the sending node stops cleanly
// (SIGTERM) during a send, awaiting approval and while the bytes flow.
// meshtray send says the local node stopped (exit 10, as after a kill),
// not "canceled by the caller", and the node cancels the transfer at the
// receiver as it stops: nothing is under way there and no partial file
// is left, long before the receiver's idle bound, and its database names
// no send under way.
func TestSendingNodeStopsMidTransfer(t *testing.T) {
	for _, uploading := range []bool{false, true} {
		name := "awaiting approval"
		if uploading {
			name = "uploading"
		}
		t.Run(name, func(t *testing.T) {
			a, b := sendPair(t)
			src := filepath.Join(t.TempDir(), "note.txt")
			writeFile(t, src, "hello\n")
			if uploading {
				allowFiles(t, b, "ant")
				src = sparseFile(t, 4<<30)
			}
			run := startCLI(t, a, "send", "bee", src)
			if uploading {
				apptest.WaitFor(t, 60*time.Second, "a partial file on the receiver", func() bool { return len(partials(t, b.FilesDir)) > 0 })
			} else {
				approvalOf(t, b, app.KindFiles)
				// The sender knows the task (its first event names it):
				// before that it has no id to cancel (see the README's
				// note on a stop within that instant).
				apptest.WaitFor(t, 10*time.Second, "the sender waiting for approval", func() bool {
					return strings.Contains(run.stdout.String()+run.err.String(), "waiting for approval")
				})
			}
			if err := a.Stop(); err != nil {
				t.Fatalf("clean stop: %v", err)
			}
			r := run.wait(t, 30*time.Second)
			if r.Code != 10 || !strings.Contains(r.Stderr, "the local meshtray node stopped during the transfer") ||
				strings.Contains(r.Stderr, "canceled by the caller") {
				t.Fatalf("send exited %d when its node stopped, want 10 saying so:\n%s\n%s", r.Code, r.Stdout, r.Stderr)
			}
			apptest.WaitFor(t, 10*time.Second, "the transfer to end at the receiver", func() bool {
				return len(incoming(t, b)) == 0 && len(partials(t, b.FilesDir)) == 0
			})
			if as := pendingApprovals(t, b); len(as) != 0 {
				t.Fatalf("the receiver still asks its owner: %+v", as)
			}
			// Canceled as it stopped: nothing left for the next start.
			db, err := sql.Open("sqlite", "file:"+filepath.Join(a.StateDir, store.DefaultFile)+"?mode=ro")
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var n int
			if err := db.QueryRow("SELECT count(*) FROM sendings").Scan(&n); err != nil || n != 0 {
				t.Fatalf("%d sends under way in the stopped node's database (%v), want 0", n, err)
			}
		})
	}
}
