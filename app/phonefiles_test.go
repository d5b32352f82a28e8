//go:build linux

package app_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"

	"meshtray/app"
	"meshtray/app/apptest"
)

// phFile writes n random bytes to dir/name and returns its path, bytes
// and SHA-256.
func phFile(t *testing.T, dir, name string, n int) (string, []byte, string) {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return p, b, hex.EncodeToString(s[:])
}

// phSent is the outcome of POST /files/send.
type phSent struct {
	res    app.SendResult
	events []app.SendEvent
	err    error
}

// phSendFiles is POST /files/send as the owner (what meshtray send and the
// tray call), followed to its result line.
func phSendFiles(n *phNode, device string, paths ...string) phSent {
	body, _ := json.Marshal(app.SendRequest{Device: device, Paths: paths})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, n.base+"/files/send", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+n.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.hc.Do(req)
	if err != nil {
		return phSent{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return phSent{err: fmt.Errorf("%s: %s", resp.Status, b)}
	}
	var out phSent
	dec := json.NewDecoder(resp.Body)
	for {
		var ev app.SendEvent
		if err := dec.Decode(&ev); err != nil {
			out.err = err
			return out
		}
		if ev.Type == app.SendEventResult && ev.Result != nil {
			out.res = *ev.Result
			return out
		}
		out.events = append(out.events, ev)
	}
}

// TestPhoneFiles is the phone page's files card end to end in headless
// Chromium, over the node's HTTPS (its loopback TLS side, inside a network
// namespace): the phone picks two files (one hashed by WebCrypto, one past
// its 16 MiB limit and so by the vendored js-sha256, sent in three PUTs),
// the owner approves the transfer, the answer of one PUT is cut after the
// node stored its bytes and the page resumes from the offset HEAD reports;
// the files land with matching hashes and the page shows where. Then the
// computer offers a file to the phone (POST /files/send, what `meshtray send
// PHONE PATH` calls, which waits), the page lists it, downloads it in ranges, checks its SHA-256
// and saves it: the bytes match, and the send completes.
func TestPhoneFiles(t *testing.T) {
	lab := newPhLab(t)
	recv := t.TempDir()
	node := startPhNode(t, lab.laptop, phNodeOptions{Name: phStatesDevice, Config: "tailscale = false\n[files]\ndir = \"" + recv + "\"\n"})
	e := &phoneEnv{t: t, lab: lab, node: node, b: startPhone(t, lab.laptop)}
	e.newSession()
	// Files travel over HTTPS only: the loopback listener's TLS side,
	// through a relay in the laptop's namespace that cuts the connection
	// once, 12 MiB into the uploads (in the second 8 MiB PUT of the big
	// file).
	proxy := startCutProxy(t, phNSListen(t, lab.laptop, "127.0.0.1:0"), func() (net.Conn, error) {
		return phNSDialer(lab.laptop)(context.Background(), "tcp", "127.0.0.1:"+strconv.Itoa(node.Port))
	}, 12<<20)
	e.url = strings.Replace(e.ps.URLs[len(e.ps.URLs)-1], ":"+strconv.Itoa(node.Port)+"/", ":"+strconv.Itoa(proxy.port())+"/", 1)
	if !strings.HasPrefix(e.url, "https://127.0.0.1:"+strconv.Itoa(proxy.port())+"/pair#") {
		t.Fatalf("loopback pairing URL %q", e.ps.URLs)
	}
	node.MustAPI("POST", "/a2a/status", map[string]any{"enabled": true}, nil)
	// A Chromium just started in a new namespace may see the network
	// change under its first load (net::ERR_NETWORK_CHANGED): load once
	// until it stays, before the flow.
	for i := 0; ; i++ {
		err := chromedp.Do(e.b.ctx, chromedp.Navigate(e.url))
		if err == nil || i == 4 || !strings.Contains(err.Error(), "ERR_NETWORK_CHANGED") {
			break
		}
		time.Sleep(200 * time.Millisecond) // pacing of the retries
	}
	e.pairPhone()
	e.b.Visible("files-card", 10*time.Second)
	if got := e.text("offers-note"); !strings.HasPrefix(got, "Nothing offered") {
		t.Errorf("offers note %q", got)
	}

	// 1. The phone sends two files.
	src := t.TempDir()
	small, smallB, smallSum := phFile(t, src, "note <b>1.txt", 100<<10)
	big, bigB, bigSum := phFile(t, src, "video.mp4", 20<<20)
	e.b.Do("pick two files", chromedp.SetUploadFiles(chromedp.ID("files-pick"), []string{small, big}))
	e.b.WaitJS("Send enabled", `!document.getElementById("files-send").disabled`, 5*time.Second)
	e.b.Do("send them", chromedp.Click(chromedp.ID("files-send")))
	e.b.WaitJS("the transfer waiting for approval", `document.getElementById("files-state").dataset.state === "waiting"`, 30*time.Second)
	fa := phWaitApproval(t, node.approvals, app.KindFiles, nil)
	if fa.Peer != "Test phone" || !strings.Contains(fa.Summary, "note <b>1.txt") {
		t.Errorf("files approval %+v", fa)
	}
	e.b.Screenshot("files-waiting")
	e.decide(fa.ID, app.DecisionApprove)
	e.b.WaitJS("the files sent", `document.getElementById("files-state").classList.contains("ok")`, 60*time.Second)
	// Resumed, not started over: what went up is the files plus at most
	// the one cut PUT again (8 MiB) and the page's other requests.
	if sent, cuts := proxy.up.Load(), proxy.cuts.Load(); cuts != 1 || sent > int64(len(smallB)+len(bigB))+8<<20+2<<20 {
		t.Errorf("relay cut %d times, %d bytes went up for %d: not resumed from the offset", cuts, sent, len(smallB)+len(bigB))
	}
	var got []app.ReceivedTransfer
	node.MustAPI("GET", "/files/received", nil, &got)
	if len(got) != 1 || len(got[0].Result.Files) != 2 || got[0].Peer != "Test phone" {
		t.Fatalf("received %+v", got)
	}
	for i, want := range []struct {
		b   []byte
		sum string
	}{{smallB, smallSum}, {bigB, bigSum}} {
		s := got[0].Result.Files[i]
		b, err := os.ReadFile(filepath.Join(got[0].Result.Dir, filepath.FromSlash(s.Path)))
		if err != nil || s.SHA256 != want.sum || !bytes.Equal(b, want.b) {
			t.Errorf("file %d saved as %s (sha256 %s, want %s): content differs or unreadable (%v)", i, s.Path, s.SHA256, want.sum, err)
		}
	}
	shown := phoneEval[[]string](e.b, `[...document.querySelectorAll("#files-saved li")].map(li => li.textContent)`)
	if !slices.Equal(shown, []string{got[0].Result.Files[0].Path, got[0].Result.Files[1].Path}) {
		t.Errorf("the page shows saved paths %q, want %s and %s", shown, got[0].Result.Files[0].Path, got[0].Result.Files[1].Path)
	}
	// The page names the folder, never its absolute path (the phone is not
	// the computer's own screen): its name here, as recv is not under
	// the home folder.
	card := e.text("files-card")
	if strings.Contains(card, recv) || !strings.Contains(card, "in "+filepath.Base(recv)+":") {
		t.Errorf("the files card shows the receive folder as:\n%s", card)
	}
	// The name is shown as text, never as markup.
	if n := phoneEval[int](e.b, `document.querySelectorAll("#files-card b").length`); n != 0 {
		t.Errorf("a file name became markup: %d <b> elements", n)
	}
	e.b.Screenshot("files-sent")

	// 2. The computer offers a file; the phone downloads it.
	dl := t.TempDir()
	if _, err := chromedp.Call(e.b.ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dl}); err != nil {
		t.Fatalf("Browser.setDownloadBehavior: %v", err)
	}
	offered, offeredB, _ := phFile(t, src, "Résumé 2026.pdf", 9<<20)
	sent := make(chan phSent, 1)
	go func() { sent <- phSendFiles(node, "Test phone", offered) }()
	// And `meshtray send PHONE PATH`, which goes the same way.
	cliSent := make(chan apptest.Result, 1)
	cliFile, cliB, cliSum := phFile(t, src, "scan.png", 200<<10)
	go func() { cliSent <- node.CLI("send", "Test phone", cliFile) }()
	e.b.WaitJS("both offers listed", `document.querySelectorAll("#offers .offer").length === 2`, 30*time.Second)
	if heads := phoneEval[[]string](e.b, `[...document.querySelectorAll("#offers .offer-head")].map(h => h.textContent)`); len(heads) != 2 || !strings.Contains(heads[0]+heads[1], phStatesDevice+" offers 1 file") {
		t.Errorf("offer headings %q", heads)
	}
	e.b.Screenshot("offer-listed")
	e.b.Do("download them", chromedp.Evaluate[chromedp.Void](`document.querySelectorAll("#offers .offer button.primary").forEach(b => b.click())`))
	e.b.WaitJS("the downloads checked", `[...document.querySelectorAll("#offers .file")].every(f => f.dataset.state === "ok")`, 60*time.Second)
	saved := filepath.Join(dl, "Résumé 2026.pdf")
	apptest.WaitFor(t, 30*time.Second, "the browser to save the file", func() bool {
		fi, err := os.Stat(saved)
		return err == nil && fi.Size() == int64(len(offeredB))
	})
	if b, _ := os.ReadFile(saved); !bytes.Equal(b, offeredB) {
		t.Error("the downloaded file differs from the offered one")
	}
	apptest.WaitFor(t, 30*time.Second, "the browser to save scan.png", func() bool {
		b, err := os.ReadFile(filepath.Join(dl, "scan.png"))
		return err == nil && bytes.Equal(b, cliB)
	})
	e.b.Screenshot("offer-downloaded")
	select {
	case r := <-sent:
		if r.err != nil || r.res.State != "completed" || len(r.res.Files) != 1 || !slices.ContainsFunc(r.events, func(ev app.SendEvent) bool {
			return ev.Type == app.SendEventProgress && ev.TotalDone == int64(len(offeredB))
		}) {
			t.Errorf("POST /files/send to the phone: %+v %v, events %+v", r.res, r.err, r.events)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("POST /files/send did not end once the phone downloaded the file")
	}
	select {
	case r := <-cliSent:
		if r.Code != 0 || !strings.Contains(r.Stdout, cliSum) {
			t.Errorf("meshtray send to the phone: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("meshtray send did not end once the phone downloaded the file")
	}
	e.b.CheckClean()
}
