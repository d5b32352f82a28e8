//go:build linux

package tray

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"image"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/files"
	"meshtray/pairing"
)

// fakeOpener puts an xdg-open on PATH that records the folder it is asked
// to open (the desktop's file manager is not part of the test) and
// returns the PATH entry and the record's path.
func fakeOpener(t *testing.T) (pathEnv, record string) {
	t.Helper()
	bin := t.TempDir()
	record = filepath.Join(t.TempDir(), "opened")
	script := "#!/bin/sh\nprintf '%s' \"$1\" > " + record + ".tmp && mv " + record + ".tmp " + record + "\n"
	if err := os.WriteFile(filepath.Join(bin, "xdg-open"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return "PATH=" + bin + ":" + os.Getenv("PATH"), record
}

func randomFile(t *testing.T, dir, name string, n int) (string, []byte) {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, b
}

// TestReceivedFilesNotification: files a phone sends (the A2A
// announcement with the official a2a-go client, the owner's approval, the
// bytes PUT over the pinned loopback TLS) make the tray show a desktop
// notification naming the sender and the file, with an "Open folder"
// action; invoking it (ActionInvoked "open" from the notification
// service) opens the receive folder with xdg-open.
func TestReceivedFilesNotification(t *testing.T) {
	d := startDesktop(t, false)
	notes := d.startNotifications(t)
	pathEnv, opened := fakeOpener(t)
	dir := t.TempDir()
	recv := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte("tailscale = false\n[files]\ndir = \""+recv+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startTrayCmd(t, d.env(pathEnv), dir, nil)
	c := p.client(t)
	cli(t, d.env(), nil, dir, "a2a", "on")
	token := strings.TrimSpace(cli(t, d.env(), nil, dir, "grant", "create", "--name", "Ada’s phone", "--scope", "agent"))
	st, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}

	src, body := randomFile(t, t.TempDir(), "IMG_0042.jpg", 300<<10)
	srcs, err := files.Sources(src)
	if err != nil {
		t.Fatal(err)
	}
	e := srcs[0].Entry
	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.FilePart{
		File:     a2a.FileURI{FileMeta: a2a.FileMeta{Name: e.Name, MimeType: e.MediaType}, URI: files.NamedInfoURI(e.SHA256)},
		Metadata: map[string]any{files.PartMetadataKey: map[string]any{"path": e.Path, "size": e.Size, "sha256": e.SHA256}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := apptest.A2AClient(t, c.BaseURL(), token).SendMessage(ctx, &a2a.MessageSendParams{Message: msg, Config: &a2a.MessageSendConfig{Blocking: new(false)}})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("answer %#v, want a task", res)
	}
	var fa app.Approval
	apptest.WaitFor(t, 20*time.Second, "the files approval", func() bool {
		as, _ := c.Approvals(ctx)
		for _, a := range as {
			if a.Kind == app.KindFiles {
				fa = a
				return true
			}
		}
		return false
	})
	if err := c.Decide(ctx, fa.ID, app.ApprovalDecision{Decision: app.DecisionApprove}); err != nil {
		t.Fatal(err)
	}
	up := files.Client{
		HTTP:    &http.Client{Transport: files.NewTransport(pairing.PinnedTLSConfig(st.Fingerprint))},
		BaseURL: "https://" + strings.TrimPrefix(c.BaseURL(), "http://"),
		Header:  http.Header{"Authorization": {"Bearer " + token}},
	}
	defer up.HTTP.CloseIdleConnections()
	var saved []files.Saved
	apptest.WaitFor(t, 20*time.Second, "the upload accepted", func() bool {
		saved, err = up.Upload(ctx, string(task.ID), srcs)
		return err == nil
	})
	if b, err := os.ReadFile(filepath.Join(recv, saved[0].Path)); err != nil || !bytes.Equal(b, body) {
		t.Fatalf("received file: %v", err)
	}

	var n notice
	apptest.WaitFor(t, 20*time.Second, "the files notification", func() bool {
		for _, x := range notes.wait(t, 0, time.Second) {
			if x.Summary == "IMG_0042.jpg from Ada’s phone" {
				n = x
				return true
			}
		}
		return false
	})
	if n.Actions != "open=Open folder" || !strings.Contains(n.Body, "Saved in "+recv) || n.App != "meshtray" {
		t.Errorf("notification %+v", n)
	}
	notes.invoke(t, n.ID, "open")
	apptest.WaitFor(t, 10*time.Second, "xdg-open of the receive folder", func() bool {
		b, err := os.ReadFile(opened)
		return err == nil && string(b) == recv
	})
}

// TestSendFilesWindow: "Send files…" to a phone in the window process
// (meshtray-ui send DEVICE PATH..., what a drop on the peer window does):
// the window shows the offer, the phone (its grant over HTTP, as its page
// does) lists and downloads the files, and the window shows them sent.
// Then a file picked with the window's file chooser (X pointer clicks on
// Add files…, the file, Open, Send) goes the same way.
func TestSendFilesWindow(t *testing.T) {
	d := startDesktop(t, false)
	dir := t.TempDir()
	p := startTrayCmd(t, d.env(), dir, nil)
	c := p.client(t)
	token := strings.TrimSpace(cli(t, d.env(), nil, dir, "grant", "create", "--name", "Ada’s phone", "--scope", "agent"))
	srcDir := t.TempDir()
	f1, b1 := randomFile(t, srcDir, "holiday.mp4", 3<<20)
	f2, b2 := randomFile(t, srcDir, "notes.txt", 2000)
	// The window process's user: a home with one file to pick later.
	uenv := userEnv(t)
	home := strings.TrimPrefix(uenv[0], "HOME=")
	_, b3 := randomFile(t, home, "picked.txt", 5000)
	startProc(t, "ui", append(d.env(), uenv...), dir, []string{uiExe(t), "--state-dir", dir, "send", "Ada’s phone", f1, f2})
	win, _ := waitWindow(t, d, "Send files to Ada’s phone", 30*time.Second)

	get := func(path string, out any) []byte {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, c.BaseURL()+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s %s", path, resp.Status, b)
		}
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatal(err)
			}
		}
		return b
	}
	var offers []app.OfferView
	apptest.WaitFor(t, 20*time.Second, "the offer on the phone's list", func() bool {
		get("/files/offers", &offers)
		return len(offers) == 1
	})
	if o := offers[0]; len(o.Files) != 2 || o.Files[0].Name != "holiday.mp4" || o.Files[1].Size != int64(len(b2)) {
		t.Fatalf("offer %+v", o)
	}
	settledShot(t, d, win, "send-offered", "the send window waiting for the phone")
	for i, want := range [][]byte{b1, b2} {
		if got := get("/files/offers/"+offers[0].ID+"/"+string(rune('0'+i)), nil); !bytes.Equal(got, want) {
			t.Errorf("file %d downloaded differs", i)
		}
	}
	apptest.WaitFor(t, 20*time.Second, "the offer done", func() bool {
		get("/files/offers", &offers)
		return len(offers) == 0
	})
	_, done := settledShot(t, d, win, "send-done", "the send window after the download")

	// Again with the chooser: "Add files…" (top left, under the text)
	// opens Fyne's file dialog over the window, in the home folder: its
	// grid shows (Parent), picked.txt and run; pick the file, Open, Send.
	// Where to click comes from the window's size (xdotool
	// getwindowgeometry): the buttons hang from the window's left and
	// right edges, and the dialog (420 high, as wide as the window) is
	// centred on it. Open, once a file is picked, is the dialog's one
	// primary-coloured button, found in the picture.
	w, h := windowSize(t, d, win)
	clickAt(t, d, win, 63, 147)
	pollShot(t, d, win, "send-chooser", "the file chooser over the window", 15*time.Second, func(_ string, img image.Image) bool {
		return blankness(img) == "" && !sameImage(img, done)
	})
	clickAt(t, d, win, 295, h/2-80)
	_, ox, oy := buttonShot(t, d, win, "send-chooser-picked", "the chooser with the file picked")
	clickAt(t, d, win, ox, oy)
	// Send, top right (the progress bars share its colour, so findPrimary
	// would not single it out).
	settledShot(t, d, win, "send-picked", "the window with the picked file")
	clickAt(t, d, win, w-47, 147)
	apptest.WaitFor(t, 20*time.Second, "the second offer", func() bool {
		get("/files/offers", &offers)
		return len(offers) == 1
	})
	if o := offers[0]; len(o.Files) != 1 || o.Files[0].Name != "picked.txt" {
		t.Fatalf("offer %+v", o)
	}
	if got := get("/files/offers/"+offers[0].ID+"/0", nil); !bytes.Equal(got, b3) {
		t.Error("the picked file downloaded differs")
	}
	apptest.WaitFor(t, 20*time.Second, "the second offer done", func() bool {
		get("/files/offers", &offers)
		return len(offers) == 0
	})
	settledShot(t, d, win, "send-picked-done", "the send window after the picked file went")
}
