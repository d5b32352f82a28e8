package app_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/app"
	"meshtray/app/apptest"
)

// File transfers between two real nodes paired on loopback: the sender's
// node announces, the receiver's owner approves, the bytes stream over the
// pinned loopback TLS, the task ends with the saved files.

// sendPair starts two paired nodes, the receiver ("bee") publishing A2A.
func sendPair(t *testing.T) (a, b *apptest.Node) {
	t.Helper()
	b = apptest.StartNode(t, apptest.Options{Name: "bee", Keychain: "file"})
	a = apptest.StartNode(t, apptest.Options{Name: "ant", Keychain: "file"})
	pairNodes(t, a, b)
	mustCLI(t, b, "a2a", "on")
	return a, b
}

// sendAsync runs Client.SendFiles on a in the background.
type sendRun struct {
	done   chan struct{}
	res    app.SendResult
	err    error
	mu     sync.Mutex
	events []app.SendEvent
}

func startSend(t *testing.T, a *apptest.Node, device string, paths ...string) *sendRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	s := &sendRun{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer cancel()
		s.res, s.err = a.Client.SendFiles(ctx, device, paths, func(ev app.SendEvent) {
			s.mu.Lock()
			s.events = append(s.events, ev)
			s.mu.Unlock()
		})
	}()
	t.Cleanup(func() { cancel(); <-s.done })
	return s
}

func (s *sendRun) wait(t *testing.T, d time.Duration) (app.SendResult, error) {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(d):
		t.Fatalf("send still running after %v", d)
	}
	return s.res, s.err
}

func (s *sendRun) states() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, ev := range s.events {
		if ev.Type == app.SendEventState {
			out = append(out, ev.State)
		}
	}
	return out
}

func sha256File(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestSendFilesBetweenPairedNodes(t *testing.T) {
	a, b := sendPair(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "note.txt"), "hello from ant\n")
	writeFile(t, filepath.Join(src, "Trip", "day1.txt"), strings.Repeat("sun ", 4000))
	writeFile(t, filepath.Join(src, "Trip", "sub", "day2.txt"), "rain")
	// A file of that name is there already: it is never replaced.
	writeFile(t, filepath.Join(b.FilesDir, "note.txt"), "older")

	t.Run("approved on the receiver", func(t *testing.T) {
		run := startSend(t, a, "bee", filepath.Join(src, "note.txt"), filepath.Join(src, "Trip"))
		ap := approvalOf(t, b, app.KindFiles)
		paths := []string{}
		for _, f := range ap.Files {
			paths = append(paths, f.Path)
		}
		if ap.Peer != "ant" || ap.Dir != b.FilesDir || ap.TotalSize != int64(15+16000+4) ||
			!slices.Equal(paths, []string{"note.txt", "Trip/day1.txt", "Trip/sub/day2.txt"}) {
			t.Fatalf("approval: %+v", ap)
		}
		decide(t, b, ap.ID, true)
		res, err := run.wait(t, 60*time.Second)
		if err != nil || res.State != string(a2a.TaskStateCompleted) || res.Dir != b.FilesDir || len(res.Files) != 3 {
			t.Fatalf("send: %+v, %v; events %+v", res, err, run.events)
		}
		if res.Files[0].Path != "note (1).txt" {
			t.Errorf("a taken name: saved as %q", res.Files[0].Path)
		}
		for i, rel := range []string{"note.txt", "Trip/day1.txt", "Trip/sub/day2.txt"} {
			if got, want := sha256File(t, filepath.Join(b.FilesDir, res.Files[i].Path)), sha256File(t, filepath.Join(src, rel)); got != want || res.Files[i].SHA256 != want {
				t.Errorf("%s: saved %s, result %s, want %s", rel, got, res.Files[i].SHA256, want)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(b.FilesDir, "note.txt")); string(b) != "older" {
			t.Errorf("the existing file was replaced: %q", b)
		}
		if st := run.states(); !slices.Contains(st, "submitted") || !slices.Contains(st, "working") || st[len(st)-1] != "completed" {
			t.Errorf("states: %v", st)
		}
		rs, err := b.Client.ReceivedFiles(context.Background())
		if err != nil || len(rs) != 1 || rs[0].TaskID != res.TaskID || rs[0].Peer != "ant" || len(rs[0].Result.Files) != 3 {
			t.Fatalf("received: %+v %v", rs, err)
		}
	})

	t.Run("denied on the receiver", func(t *testing.T) {
		run := startSend(t, a, "bee", filepath.Join(src, "note.txt"))
		decide(t, b, approvalOf(t, b, app.KindFiles).ID, false)
		res, err := run.wait(t, 60*time.Second)
		if err != nil || res.State != string(a2a.TaskStateRejected) || !strings.Contains(res.Message, "denied") || len(res.Files) != 0 {
			t.Fatalf("send: %+v, %v", res, err)
		}
	})

	t.Run("always allow files from this device", func(t *testing.T) {
		run := startSend(t, a, "bee", filepath.Join(src, "Trip", "sub", "day2.txt"))
		ap := approvalOf(t, b, app.KindFiles)
		if err := b.Client.Decide(context.Background(), ap.ID, app.ApprovalDecision{Decision: app.DecisionApprove, Always: true}); err != nil {
			t.Fatal(err)
		}
		if res, err := run.wait(t, 60*time.Second); err != nil || res.State != string(a2a.TaskStateCompleted) {
			t.Fatalf("send: %+v, %v", res, err)
		}
		// The next one needs no approval; delegations still do.
		res, err := startSend(t, a, "bee", filepath.Join(src, "note.txt")).wait(t, 60*time.Second)
		if err != nil || res.State != string(a2a.TaskStateCompleted) {
			t.Fatalf("second send: %+v, %v", res, err)
		}
		d, err := b.Client.Devices(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		gid := ""
		for _, g := range d.Issued {
			if g.Name == "ant" {
				gid = g.ID
				if g.FilesPolicy != "allow" || g.Policy == "allow" {
					t.Fatalf("grant after always: %+v", g)
				}
			}
		}
		// Undone from the CLI: the owner is asked again.
		mustCLI(t, b, "grant", "set", gid, "--files", "ask")
		run = startSend(t, a, "bee", filepath.Join(src, "note.txt"))
		decide(t, b, approvalOf(t, b, app.KindFiles).ID, false)
		if res, _ := run.wait(t, 60*time.Second); res.State != string(a2a.TaskStateRejected) {
			t.Fatalf("after --files ask: %+v", res)
		}
		mustCLI(t, b, "grant", "set", gid, "--files", "allow") // for the next subtests
	})

	t.Run("meshtray send, allowed by the policy", func(t *testing.T) {
		r := mustCLI(t, a, "send", "bee", filepath.Join(src, "Trip"))
		want := sha256File(t, filepath.Join(src, "Trip", "sub", "day2.txt"))
		if !strings.Contains(r.Stdout, "saved in "+b.FilesDir) || !strings.Contains(r.Stdout, want) ||
			!strings.Contains(r.Stderr, "completed") || !strings.Contains(r.Stderr, "sent Trip/sub/day2.txt") {
			t.Fatalf("send:\nstdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
		}
		r = mustCLI(t, a, "send", "bee", filepath.Join(src, "note.txt"), "--json")
		var res app.SendResult
		if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil || res.State != "completed" || len(res.Files) != 1 {
			t.Fatalf("send --json: %s (%v)", r.Stdout, err)
		}
		if r := a.CLI("send", "nobody", filepath.Join(src, "note.txt")); r.Code != 1 || !strings.Contains(r.Stderr, "no peer") {
			t.Fatalf("send to nobody: exit %d, %s", r.Code, r.Stderr)
		}
	})

	t.Run("too many files for one announcement", func(t *testing.T) {
		many := filepath.Join(t.TempDir(), "many")
		for i := range 5000 {
			writeFile(t, filepath.Join(many, fmt.Sprintf("file-%04d.txt", i)), "x")
		}
		_, err := a.Client.SendFiles(context.Background(), "bee", []string{many}, nil)
		if err == nil || !strings.Contains(err.Error(), "too many for one transfer") {
			t.Fatalf("5000 files: %v", err)
		}
		if len(approvalsOf(t, b)) != 0 {
			t.Fatal("the receiver was asked")
		}
	})

	t.Run("unknown device and relative path", func(t *testing.T) {
		if _, err := a.Client.SendFiles(context.Background(), "nobody", []string{filepath.Join(src, "note.txt")}, nil); err == nil || !strings.Contains(err.Error(), "no peer") {
			t.Fatalf("unknown device: %v", err)
		}
		if _, err := a.Client.SendFiles(context.Background(), "bee", []string{"note.txt"}, nil); err == nil || !strings.Contains(err.Error(), "not absolute") {
			t.Fatalf("relative path: %v", err)
		}
	})
}
