//go:build linux

package tray

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"meshtray/app"
	"meshtray/app/apptest"
)

// dropOn drops paths on the X window win the way a file manager does:
// testdata/xdnd_drop.py, an XDND source (python3-xlib), speaks the XDND
// protocol to the window (Enter, Position, Status, Drop, the text/uri-list
// selection, Finished) and fails when any step gets no answer.
func dropOn(t *testing.T, d *desktop, win string, paths ...string) {
	t.Helper()
	// Debian's python3: python3-xlib is a Debian package, installed for
	// it, not for another python3 earlier on PATH (pyenv, a venv).
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		py = need(t, "python3", "python3")
	}
	if err := exec.Command(py, "-c", "import Xlib").Run(); err != nil {
		t.Fatalf("python3-xlib is missing: apt-get install -y python3-xlib")
	}
	script, err := filepath.Abs(filepath.Join("testdata", "xdnd_drop.py"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{script, win}, paths...)...)
	cmd.Env = append(os.Environ(), "DISPLAY="+d.Display)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dropping on window %s: %v\n%s", win, err, out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
}

// treeHashes maps each regular file under dir (its slash path relative to
// dir) to its SHA-256.
func treeHashes(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = sha256.Sum256(b)
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return out
}

func sameHashes(a, b map[string][32]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// waitReceived waits until dir holds exactly the files of want; when it
// does not within 60 s, it fails with what is there and a screenshot of
// the sending window (what the window says went wrong).
func waitReceived(t *testing.T, d *desktop, win, shot, dir string, want map[string][32]byte) map[string][32]byte {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := treeHashes(t, dir)
		if sameHashes(got, want) {
			return got
		}
		if time.Now().After(deadline) {
			p, _ := screenshot(t, d, win, shot+"-failed")
			t.Fatalf("the receive folder holds %q, want %q (the sending window: %s)", hashNames(got), hashNames(want), p)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func hashNames(m map[string][32]byte) []string {
	var ns []string
	for k := range m {
		ns = append(ns, k)
	}
	slices.Sort(ns)
	return ns
}

// TestDropFilesOnWindows: files and a folder dropped on the windows over
// XDND (as a file manager drops them, under Xvfb) are sent to the device
// the window is for. The tray's node (test-laptop) is paired with a second
// real node on loopback (bee, which allows files from it). A drop of two
// files (one named with a space and a non-ASCII letter) and a folder on
// bee's peer window opens "Send files to bee" and sends them at once;
// another file dropped on that send window, once done, goes the same way.
// bee's receive folder ends with exactly the dropped files, names and
// relative paths kept, SHA-256s matching (that the window put each
// dropped path on its list is seen there: the window sends its list at
// once on a drop; the screenshots show the per-file rows).
func TestDropFilesOnWindows(t *testing.T) {
	d := startDesktop(t, false)
	dir := t.TempDir()
	p := startTrayCmd(t, d.env(), dir, nil)
	c := p.client(t)
	bee := apptest.StartNode(t, apptest.Options{Name: "bee", Keychain: "file"})

	// Pair: the tray's node joins bee; bee's owner approves.
	var offer struct {
		URL string `json:"url"`
	}
	if r := bee.CLI("pair", "--json"); r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &offer) != nil || offer.URL == "" {
		t.Fatalf("bee: pair --json: exit %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	joined := make(chan string, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "pair", "--join", offer.URL, "--give", "none", "--json", "--state-dir", dir)
		cmd.Env = d.env()
		out, err := cmd.CombinedOutput()
		if err != nil {
			joined <- err.Error() + "\n" + string(out)
			return
		}
		joined <- ""
	}()
	var pairing string
	apptest.WaitFor(t, 30*time.Second, "the pairing approval on bee", func() bool {
		as, err := bee.Client.Approvals(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			if a.Kind == app.KindPairing {
				pairing = a.ID
				return true
			}
		}
		return false
	})
	if r := bee.CLI("approve", pairing); r.Code != 0 {
		t.Fatalf("bee: approve: %s %s", r.Stdout, r.Stderr)
	}
	if msg := <-joined; msg != "" {
		t.Fatalf("pair --join: %s", msg)
	}
	devs, err := bee.Client.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var grant string
	for _, g := range devs.Issued {
		if g.Name == "test-laptop" {
			grant = g.ID
		}
	}
	if r := bee.CLI("grant", "set", grant, "--files", "allow"); grant == "" || r.Code != 0 {
		t.Fatalf("bee: grant set %q --files allow: %s %s", grant, r.Stdout, r.Stderr)
	}
	// Files arrive as A2A tasks: bee publishes its A2A surface.
	if r := bee.CLI("a2a", "on"); r.Code != 0 {
		t.Fatalf("bee: a2a on: %s %s", r.Stdout, r.Stderr)
	}
	var beeID string
	apptest.WaitFor(t, 30*time.Second, "bee among the tray's peers", func() bool {
		ps, err := c.Peers(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p.Name == "bee" {
				beeID = p.ID
				return true
			}
		}
		return false
	})

	// What is dropped: two files and a folder (with a subfolder).
	src := t.TempDir()
	randomFile(t, src, "Ådne notes.txt", 7000)
	randomFile(t, src, "data.bin", 300<<10)
	trip := filepath.Join(src, "Trip")
	if err := os.MkdirAll(filepath.Join(trip, "day 2"), 0o755); err != nil {
		t.Fatal(err)
	}
	randomFile(t, trip, "map.png", 40<<10)
	randomFile(t, filepath.Join(trip, "day 2"), "café.jpg", 90<<10)
	want := treeHashes(t, src)

	ctx := context.Background()
	if err := c.OpenUI(ctx, app.UIRequest{Window: app.UIPeer, Arg: beeID}); err != nil {
		t.Fatal(err)
	}
	// The tray starts the UI process for its own menu clicks; the test asks
	// for the window through the API, so it starts it as the tray would.
	startProc(t, "ui", d.env(), dir, []string{uiExe(t), "--state-dir", dir})
	peerWin, _ := waitWindow(t, d, "^meshtray — bee$", 30*time.Second)
	settledShot(t, d, peerWin, "dnd-1-peer", "bee's peer window")
	dropOn(t, d, peerWin, filepath.Join(src, "Ådne notes.txt"), filepath.Join(src, "data.bin"), trip)

	sendWin, _ := waitWindow(t, d, "^meshtray — Send files to bee$", 30*time.Second)
	got := waitReceived(t, d, sendWin, "dnd-2-sent", bee.FilesDir, want)
	t.Logf("bee received %q", hashNames(got))
	shot, _ := settledShot(t, d, sendWin, "dnd-2-sent", "the send window after the drop on the peer window")
	t.Logf("the send window after the drop: %s", shot)

	// The send window itself takes a drop once done: the file goes too.
	more := t.TempDir()
	randomFile(t, more, "late addition.txt", 1234)
	late := treeHashes(t, more)
	dropOn(t, d, sendWin, filepath.Join(more, "late addition.txt"))
	for k, v := range late {
		want[k] = v
	}
	waitReceived(t, d, sendWin, "dnd-3-sent-again", bee.FilesDir, want)
	settledShot(t, d, sendWin, "dnd-3-sent-again", "the send window after the drop on it")
	// The peer window, filled in by now (its title changes a frame before
	// its content is drawn, so the first picture may show the bare ID).
	settledShot(t, d, peerWin, "dnd-4-peer", "bee's peer window at the end")
}
