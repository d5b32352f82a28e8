package files

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A folder with sub-folders and an empty file goes over pinned TLS and lands
// with its relative paths, hashes matching, progress reaching the total.
func TestSendFolder(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, "", Limits{KeepFree: -1})
	src := t.TempDir()
	writeRandom(t, filepath.Join(src, "album", "a.jpg"), 3<<20+17, 1)
	writeRandom(t, filepath.Join(src, "album", "2024", "b.txt"), 1000, 2)
	writeRandom(t, filepath.Join(src, "album", "empty"), 0, 3)
	writeRandom(t, filepath.Join(src, "single.bin"), 5<<20, 4)
	srcs, err := Sources(filepath.Join(src, "album"), filepath.Join(src, "single.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if len(srcs) != 4 {
		t.Fatalf("sources: %+v", srcs)
	}
	var mu sync.Mutex
	var last Progress
	var calls int
	fx.client.Progress = func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if p.FileDone > p.FileTotal || p.Done > p.Total {
			t.Errorf("progress past total: %+v", p)
		}
		last = p
	}
	res, err := fx.send(t, "t1", srcs)
	if err != nil {
		t.Fatal(err)
	}
	if res.Dir != fx.dir || len(res.Files) != 4 {
		t.Fatalf("result: %+v", res)
	}
	for i, s := range res.Files {
		e := srcs[i].Entry
		if s.Path != e.Path || s.SHA256 != e.SHA256 || s.Size != e.Size {
			t.Errorf("saved %+v for %+v", s, e)
		}
		if got := fileSHA(t, filepath.Join(fx.dir, filepath.FromSlash(s.Path))); got != e.SHA256 {
			t.Errorf("%s: content hash %s, want %s", s.Path, got, e.SHA256)
		}
	}
	for _, f := range res.Files {
		if f.Path == "album/a.jpg" && f.MediaType != "image/jpeg" || f.Path == "album/2024/b.txt" && f.MediaType != "text/plain" {
			t.Errorf("%s: media type %q", f.Path, f.MediaType)
		}
	}
	if last.Done != last.Total || last.Total != ManifestOf(srcs).Total() || calls < 8 {
		t.Errorf("last progress %+v after %d calls", last, calls)
	}
	if p := partials(t, fx.dir); len(p) != 0 {
		t.Errorf("partials left: %v", p)
	}
	st := fx.r.transfers["t1"].Status()
	if !st.Done || st.Error != "" {
		t.Errorf("status %+v", st)
	}
}

// A name that exists is never replaced: the second and third copies get
// "name (1).ext", "name (2).ext", also when they complete at the same time.
func TestNeverOverwrite(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, "", Limits{KeepFree: -1})
	if err := os.WriteFile(filepath.Join(fx.dir, "notes.txt"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	srcs, err := Sources(writeRandom(t, filepath.Join(t.TempDir(), "notes.txt"), 4096, 9))
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	var wg sync.WaitGroup
	paths := make(chan string, n)
	for i := range n {
		wg.Go(func() {
			res, err := fx.send(t, fmt.Sprintf("c%d", i), srcs)
			if err != nil {
				t.Error(err)
				return
			}
			paths <- res.Files[0].Path
		})
	}
	wg.Wait()
	close(paths)
	seen := map[string]bool{}
	for p := range paths {
		if seen[p] {
			t.Errorf("two transfers saved as %s", p)
		}
		seen[p] = true
		if got := fileSHA(t, filepath.Join(fx.dir, p)); got != srcs[0].Entry.SHA256 {
			t.Errorf("%s has the wrong content", p)
		}
	}
	for k := 1; k <= n; k++ {
		if !seen[fmt.Sprintf("notes (%d).txt", k)] {
			t.Errorf("missing notes (%d).txt in %v", k, seen)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(fx.dir, "notes.txt")); string(b) != "mine" {
		t.Errorf("existing file overwritten: %q", b)
	}
}

// A hostile manifest is refused before anything is written; a reserved
// Windows name is cleaned and stays inside the folder.
func TestHostileNames(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, "", Limits{KeepFree: -1})
	body := []byte("payload")
	entry := func(p string) Entry {
		return Entry{Name: p[strings.LastIndex(p, "/")+1:], Path: p, Size: int64(len(body)), SHA256: shaOf(body)}
	}
	for i, p := range []string{"../../.bashrc", "/etc/passwd", `C:\x`, "C:x", "a\x00b", "ok/../../x", "a\x1b]0;x"} {
		_, err := fx.r.Begin(fmt.Sprintf("h%d", i), "", Manifest{Files: []Entry{entry(p)}})
		if !errors.Is(err, ErrBadName) {
			t.Errorf("Begin(%q): %v, want ErrBadName", p, err)
		}
	}
	// Name and path that disagree, bad hashes, negative size, odd IDs.
	for i, m := range []Manifest{
		{Files: []Entry{{Name: "a", Path: "b", Size: 1, SHA256: shaOf(body)}}},
		{Files: []Entry{{Name: "a", Path: "a", Size: 1, SHA256: "xyz"}}},
		{Files: []Entry{{Name: "a", Path: "a", Size: 1, SHA256: strings.ToUpper(shaOf(body))}}},
		{Files: []Entry{{Name: "a", Path: "a", Size: -1, SHA256: shaOf(body)}}},
		{},
	} {
		if _, err := fx.r.Begin(fmt.Sprintf("m%d", i), "", m); !errors.Is(err, ErrBadManifest) {
			t.Errorf("manifest %d: %v, want ErrBadManifest", i, err)
		}
	}
	for _, id := range []string{"", "../x", "a/b", ".x.", strings.Repeat("a", 65)} {
		if _, err := fx.r.Begin(id, "", Manifest{Files: []Entry{entry("a")}}); !errors.Is(err, ErrBadManifest) {
			t.Errorf("id %q: %v", id, err)
		}
	}
	ents, _ := os.ReadDir(fx.dir)
	if len(ents) != 0 {
		t.Errorf("refused manifests wrote %v", ents)
	}

	src := filepath.Join(t.TempDir(), "CON")
	os.WriteFile(src, body, 0o600)
	srcs, err := Sources(src)
	if err != nil {
		t.Fatal(err)
	}
	res, err := fx.send(t, "con", srcs)
	if err != nil {
		t.Fatal(err)
	}
	if res.Files[0].Path != "_CON" {
		t.Errorf("CON saved as %q", res.Files[0].Path)
	}
	if b, err := os.ReadFile(filepath.Join(fx.dir, "_CON")); err != nil || !bytes.Equal(b, body) {
		t.Errorf("_CON: %q %v", b, err)
	}

	// A symlink planted in the folder does not lead a write outside it.
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(fx.dir, "link")); err != nil {
		t.Fatal(err)
	}
	srcs[0].Entry.Path = "link/x"
	srcs[0].Entry.Name = "x"
	counter := &requestCounter{rt: fx.client.HTTP.Transport}
	fx.client.HTTP = &http.Client{Transport: counter}
	_, err = fx.send(t, "sym", srcs)
	if err == nil {
		t.Error("upload through a symlink out of the folder succeeded")
	}
	// The failed transfer answers 410 from then on: the sender stops after
	// one look instead of retrying a refusal.
	if n := counter.n.Load(); n > 3 {
		t.Errorf("sender made %d requests for a refused upload", n)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("wrote outside the folder: %v", ents)
	}
}

// 10,000 files are refused up front by the default cap, in bounded time;
// with the cap raised, 10,000 tiny files go through.
func TestManyTinyFiles(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, "", Limits{KeepFree: -1})
	m := Manifest{}
	for i := range 10000 {
		n := fmt.Sprintf("f%05d", i)
		m.Files = append(m.Files, Entry{Name: n, Path: n, Size: 1, SHA256: shaOf([]byte{'x'})})
	}
	start := time.Now()
	_, err := fx.r.Begin("many", "", m)
	if !errors.Is(err, ErrTooMany) {
		t.Fatalf("10,000 files: %v, want ErrTooMany", err)
	}
	t.Logf("refused 10,000 files in %v", time.Since(start))
	if testing.Short() {
		return
	}

	fx2 := newFixture(t, "", Limits{KeepFree: -1, MaxFiles: 10000})
	srcDir := t.TempDir()
	var srcs []Source
	for i := range 10000 {
		p := filepath.Join(srcDir, fmt.Sprintf("f%05d", i))
		os.WriteFile(p, []byte{byte(i)}, 0o600)
		srcs = append(srcs, Source{Path: p, Entry: Entry{Name: filepath.Base(p), Path: filepath.Base(p), Size: 1, SHA256: shaOf([]byte{byte(i)})}})
	}
	start = time.Now()
	fx2.client.Concurrency = 4
	res, err := fx2.send(t, "many", srcs)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("10,000 tiny files over pinned TLS in %v", time.Since(start))
	if len(res.Files) != 10000 {
		t.Fatalf("%d saved", len(res.Files))
	}
}

// rawPut sends one PUT with the given body and headers.
func rawPut(t *testing.T, fx *fixture, url string, body io.Reader, n int64, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	resp, b, err := tryPut(fx, url, body, n, hdr)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// tryPut is rawPut for a body the receiver may refuse before it has read
// it all: the receiver answers and closes, and the client may see its own
// write fail (broken pipe, reset) before it reads that answer (the net/http
// client returns whichever comes first).
func tryPut(fx *fixture, url string, body io.Reader, n int64, hdr map[string]string) (*http.Response, string, error) {
	req, _ := http.NewRequest(http.MethodPut, url, body)
	req.ContentLength = n
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := fx.client.HTTP.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b), nil
}

// refusedPut is the send of a body too large for its entry: the refusal
// either arrives as a response or cuts the upload (nil response).
func refusedPut(t *testing.T, fx *fixture, url string, body io.Reader, n int64) *http.Response {
	t.Helper()
	r, _, err := tryPut(fx, url, body, n, nil)
	if err != nil {
		t.Logf("upload cut by the receiver's refusal: %v", err)
		return nil
	}
	return r
}

// A sender that lies about the size or the hash is refused, its partial
// removed and the transfer failed.
func TestLyingSender(t *testing.T) {
	t.Parallel()
	data := bytes.Repeat([]byte("abcdefgh"), 64<<10) // 512 KiB
	cases := []struct {
		name  string
		entry Entry
		send  func(t *testing.T, fx *fixture, url string) *http.Response
		code  int
		err   error
	}{
		{"more bytes than announced", Entry{Size: 1000, SHA256: shaOf(data[:1000])},
			func(t *testing.T, fx *fixture, url string) *http.Response {
				return refusedPut(t, fx, url, bytes.NewReader(data), int64(len(data)))
			}, http.StatusUnprocessableEntity, ErrSizeMismatch},
		{"more bytes than announced, chunked", Entry{Size: 1000, SHA256: shaOf(data[:1000])},
			func(t *testing.T, fx *fixture, url string) *http.Response {
				return refusedPut(t, fx, url, io.MultiReader(bytes.NewReader(data)), -1)
			}, http.StatusRequestEntityTooLarge, ErrSizeMismatch},
		{"range size disagrees", Entry{Size: int64(len(data)), SHA256: shaOf(data)},
			func(t *testing.T, fx *fixture, url string) *http.Response {
				r, _ := rawPut(t, fx, url, bytes.NewReader(data[:100]), 100,
					map[string]string{"Content-Range": fmt.Sprintf("bytes 0-99/%d", len(data)+5)})
				return r
			}, http.StatusUnprocessableEntity, ErrSizeMismatch},
		{"wrong hash", Entry{Size: int64(len(data)), SHA256: shaOf([]byte("other"))},
			func(t *testing.T, fx *fixture, url string) *http.Response {
				// Half, then the rest: the partial exists when the lie shows.
				h := len(data) / 2
				r, _ := rawPut(t, fx, url, bytes.NewReader(data[:h]), int64(h),
					map[string]string{"Content-Range": fmt.Sprintf("bytes 0-%d/%d", h-1, len(data))})
				if r.StatusCode != http.StatusNoContent || r.Header.Get("Upload-Offset") != fmt.Sprint(h) {
					t.Errorf("first half: %d %q", r.StatusCode, r.Header.Get("Upload-Offset"))
				}
				r, _ = rawPut(t, fx, url, bytes.NewReader(data[h:]), int64(len(data)-h),
					map[string]string{"Content-Range": fmt.Sprintf("bytes %d-%d/%d", h, len(data)-1, len(data))})
				return r
			}, http.StatusUnprocessableEntity, ErrHashMismatch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fx := newFixture(t, "", Limits{KeepFree: -1})
			c.entry.Name, c.entry.Path = "f.bin", "sub/f.bin"
			tr, err := fx.r.Begin("lie", "", Manifest{Files: []Entry{c.entry}})
			if err != nil {
				t.Fatal(err)
			}
			resp := c.send(t, fx, fx.srv.URL+Prefix+"lie/0")
			if resp != nil && resp.StatusCode != c.code {
				t.Errorf("status %d, want %d", resp.StatusCode, c.code)
			}
			if _, err := tr.Wait(context.Background()); !errors.Is(err, c.err) {
				t.Errorf("transfer error %v, want %v", err, c.err)
			}
			if p := partials(t, fx.dir); len(p) != 0 {
				t.Errorf("partial left: %v", p)
			}
			if _, err := os.Stat(filepath.Join(fx.dir, "sub", "f.bin")); err == nil {
				t.Error("a lie was saved")
			}
			// Later uploads of a failed transfer are refused.
			r, _ := rawPut(t, fx, fx.srv.URL+Prefix+"lie/0", bytes.NewReader(nil), 0, nil)
			if r.StatusCode < 400 {
				t.Errorf("upload after failure: %d", r.StatusCode)
			}
		})
	}
}

// The wire edges: wrong offsets answer 409 with the offset, unknown
// transfers and files 404, another sender's transfer 404, HEAD reports.
func TestProtocolEdges(t *testing.T) {
	t.Parallel()
	r, err := NewReceiver(t.TempDir(), Limits{KeepFree: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	srv, hc := pinnedServer(t, r.Handler(func(req *http.Request) string { return req.Header.Get("X-Test-Sender") }))
	fx := &fixture{r: r, srv: srv, client: &Client{HTTP: hc, BaseURL: srv.URL}}
	data := []byte("0123456789")
	if _, err := r.Begin("e1", "alice", Manifest{Files: []Entry{{Name: "d", Path: "d", Size: 10, SHA256: shaOf(data)}}}); err != nil {
		t.Fatal(err)
	}
	url := srv.URL + Prefix + "e1/0"
	as := map[string]string{"X-Test-Sender": "alice"}
	if resp, _ := rawPut(t, fx, url, bytes.NewReader(data[:4]), 4, map[string]string{"X-Test-Sender": "eve", "Content-Range": "bytes 0-3/10"}); resp.StatusCode != 404 {
		t.Errorf("other sender: %d", resp.StatusCode)
	}
	for _, u := range []string{srv.URL + Prefix + "nope/0", srv.URL + Prefix + "e1/1", srv.URL + Prefix + "e1/-1", srv.URL + Prefix + "e1/x"} {
		if resp, _ := rawPut(t, fx, u, bytes.NewReader(nil), 0, as); resp.StatusCode != 404 {
			t.Errorf("%s: %d", u, resp.StatusCode)
		}
	}
	h := map[string]string{"X-Test-Sender": "alice", "Content-Range": "bytes 0-3/10"}
	if resp, _ := rawPut(t, fx, url, bytes.NewReader(data[:4]), 4, h); resp.StatusCode != 204 {
		t.Fatalf("first part: %d", resp.StatusCode)
	}
	h["Content-Range"] = "bytes 2-9/10"
	resp, body := rawPut(t, fx, url, bytes.NewReader(data[2:]), 8, h)
	if resp.StatusCode != 409 || resp.Header.Get("Upload-Offset") != "4" {
		t.Errorf("overlap: %d %q %s", resp.StatusCode, resp.Header.Get("Upload-Offset"), body)
	}
	h["Content-Range"] = "bytes 4-2/10"
	if resp, _ := rawPut(t, fx, url, bytes.NewReader(nil), 0, h); resp.StatusCode != 400 {
		t.Errorf("bad range: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodHead, url, nil)
	req.Header.Set("X-Test-Sender", "alice")
	hr, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	if hr.Header.Get("Upload-Offset") != "4" || hr.Header.Get("Upload-Length") != "10" || hr.Header.Get("Upload-Complete") != "?0" {
		t.Errorf("HEAD: %v", hr.Header)
	}
	h["Content-Range"] = "bytes 4-9/10"
	resp, body = rawPut(t, fx, url, bytes.NewReader(data[4:]), 6, h)
	if resp.StatusCode != 201 || !strings.Contains(body, `"path":"d"`) {
		t.Errorf("last part: %d %s", resp.StatusCode, body)
	}
	// A retried final PUT is answered again, not re-written.
	resp, _ = rawPut(t, fx, url, bytes.NewReader(data[4:]), 6, h)
	if resp.StatusCode != 201 {
		t.Errorf("retried final PUT: %d", resp.StatusCode)
	}
	if _, err := r.Begin("e1", "alice", Manifest{Files: []Entry{{Name: "d", Path: "d", Size: 10, SHA256: shaOf(data)}}}); !errors.Is(err, ErrExists) {
		t.Errorf("same id twice: %v", err)
	}
}

// Cancelling a transfer while a PUT streams removes the partial; the PUT is
// answered 410 and Close returns once it ended.
func TestCancelMidUpload(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, "", Limits{KeepFree: -1})
	data := bytes.Repeat([]byte{7}, 1<<20)
	tr, err := fx.r.Begin("cx", "", Manifest{Files: []Entry{{Name: "f", Path: "f", Size: int64(len(data)), SHA256: shaOf(data)}}})
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	done := make(chan int)
	go func() {
		req, _ := http.NewRequest(http.MethodPut, fx.srv.URL+Prefix+"cx/0", pr)
		req.ContentLength = int64(len(data))
		resp, err := fx.client.HTTP.Do(req)
		if err != nil {
			done <- -1 // the receiver may hang up before the answer arrives
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	pw.Write(data[:4096])
	for len(partials(t, fx.dir)) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	tr.Cancel()
	// The body stalls (the sender sends nothing more); the receiver must
	// not wait for its idle timeout to end the PUT.
	select {
	case code := <-done:
		if code != http.StatusGone && code != -1 {
			t.Errorf("PUT after cancel: %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Error("the PUT of a cancelled transfer kept waiting for its stalled body")
		pw.Close()
		<-done
	}
	pw.Close()
	fx.r.puts.Wait()
	if p := partials(t, fx.dir); len(p) != 0 {
		t.Errorf("partial left: %v", p)
	}
	if _, err := tr.Wait(context.Background()); !errors.Is(err, ErrTransferEnded) {
		t.Errorf("Wait: %v", err)
	}
}

type requestCounter struct {
	rt http.RoundTripper
	n  atomic.Int32
}

func (c *requestCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(req)
}

// Progress is paced by time as well as by bytes: a fast upload of a
// 48 MiB file reports its start and end and at most one step per
// progressGap between, not one per MiB (each step is an NDJSON line the
// CLI reads and draws).
func TestProgressPaced(t *testing.T) {
	fx := newFixture(t, "", Limits{KeepFree: -1})
	src := writeRandom(t, filepath.Join(t.TempDir(), "p.bin"), 48<<20, 5)
	srcs, err := Sources(src)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var calls int
	var last Progress
	fx.client.Progress = func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		last = p
	}
	start := time.Now()
	if _, err := fx.send(t, "paced", srcs); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	// Start (the receiver's offset), the last byte, the verified answer,
	// and one per progressGap.
	if most := 3 + int(elapsed/progressGap) + 1; calls > most {
		t.Errorf("%d progress calls in %v; want at most %d", calls, elapsed, most)
	}
	if last.Done != last.Total || last.Total != 48<<20 {
		t.Errorf("last progress %+v", last)
	}
}

// TestStatusWhileUploading: while a PUT streams, Status counts the bytes
// written so far (Arrived; Offset, the fsynced part, moves only when the
// PUT ends), and LastByte stays zero until the first byte is written.
func TestStatusWhileUploading(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, "", Limits{KeepFree: -1})
	data := bytes.Repeat([]byte{9}, 2<<20)
	tr, err := fx.r.Begin("up", "", Manifest{Files: []Entry{{Name: "f", Path: "f", Size: int64(len(data)), SHA256: shaOf(data)}}})
	if err != nil {
		t.Fatal(err)
	}
	if st := tr.Status(); !st.LastByte.IsZero() || st.Files[0].Arrived != 0 {
		t.Fatalf("before any byte: last byte %v, arrived %d", st.LastByte, st.Files[0].Arrived)
	}
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPut, fx.srv.URL+Prefix+"up/0", pr)
		req.ContentLength = int64(len(data))
		resp, err := fx.client.HTTP.Do(req)
		if err != nil {
			done <- -1
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	before := time.Now()
	if _, err := pw.Write(data[:1<<20]); err != nil {
		t.Fatal(err)
	}
	var st Status
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if st = tr.Status(); st.Files[0].Arrived >= 512<<10 || time.Now().After(deadline) {
			break
		}
	}
	if f := st.Files[0]; f.Arrived < 512<<10 || f.Arrived > 1<<20 || f.Offset != 0 {
		t.Fatalf("1 MiB into the PUT: arrived %d, offset %d; want at least 512 KiB arrived, nothing fsynced yet", f.Arrived, f.Offset)
	}
	if st.LastByte.Before(before.Add(-time.Second)) {
		t.Errorf("last byte %v, before the PUT began (%v)", st.LastByte, before)
	}
	if _, err := pw.Write(data[1<<20:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if code := <-done; code != http.StatusCreated {
		t.Fatalf("PUT: %d", code)
	}
	if f := tr.Status().Files[0]; f.Arrived != int64(len(data)) || f.Offset != int64(len(data)) {
		t.Errorf("saved: arrived %d, offset %d", f.Arrived, f.Offset)
	}
}
