package files

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// cutProxy forwards TCP to target and closes its first connection after
// cutAfter bytes went client -> server (TLS records and all), as a dropped
// Wi-Fi link would; later connections pass untouched.
type cutProxy struct {
	ln       net.Listener
	target   string
	cutAfter int64
	cuts     atomic.Int32
	conns    atomic.Int32
	wg       sync.WaitGroup

	mu   sync.Mutex
	open []net.Conn // guarded by mu; closed at cleanup
}

func newCutProxy(t *testing.T, target string, cutAfter int64) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, cutAfter: cutAfter}
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.open {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		first := p.conns.Add(1) == 1
		p.wg.Go(func() { p.pipe(c, first) })
	}
}

func (p *cutProxy) pipe(c net.Conn, cut bool) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	p.mu.Lock()
	p.open = append(p.open, c, s)
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { io.Copy(c, s); c.Close() })
	limit := int64(-1)
	if cut {
		limit = p.cutAfter
	}
	if limit < 0 {
		io.Copy(s, c)
	} else {
		io.CopyN(s, c, limit)
		p.cuts.Add(1)
	}
	s.Close()
	c.Close()
	wg.Wait()
}

// rangeRecorder records the Content-Range of every PUT.
type rangeRecorder struct {
	rt     http.RoundTripper
	mu     sync.Mutex
	ranges []string
}

func (r *rangeRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPut {
		r.mu.Lock()
		r.ranges = append(r.ranges, req.Header.Get("Content-Range"))
		r.mu.Unlock()
	}
	return r.rt.RoundTrip(req)
}

// The connection is cut at about half a file; the sender asks the offset
// the receiver kept (fsynced) and sends only the rest; the hash matches.
func TestResumeAfterCut(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, "", Limits{KeepFree: -1})
	const size = 48 << 20
	srcs, err := Sources(writeRandom(t, filepath.Join(t.TempDir(), "video.mp4"), size, 42))
	if err != nil {
		t.Fatal(err)
	}
	proxy := newCutProxy(t, strings.TrimPrefix(fx.srv.URL, "https://"), size/2)
	rec := &rangeRecorder{rt: fx.client.HTTP.Transport}
	fx.client.HTTP = &http.Client{Transport: rec}
	fx.client.BaseURL = "https://" + proxy.ln.Addr().String()
	res, err := fx.send(t, "cut", srcs)
	if err != nil {
		t.Fatal(err)
	}
	if proxy.cuts.Load() != 1 {
		t.Fatalf("proxy cut %d connections", proxy.cuts.Load())
	}
	if got := fileSHA(t, filepath.Join(fx.dir, res.Files[0].Path)); got != srcs[0].Entry.SHA256 {
		t.Fatalf("hash %s, want %s", got, srcs[0].Entry.SHA256)
	}
	rec.mu.Lock()
	ranges := rec.ranges
	rec.mu.Unlock()
	if len(ranges) < 2 || ranges[0] != fmt.Sprintf("bytes 0-%d/%d", size-1, size) {
		t.Fatalf("PUT ranges %q", ranges)
	}
	var start int64
	fmt.Sscanf(ranges[len(ranges)-1], "bytes %d-", &start)
	// TLS and HTTP framing take a little of the half the proxy let through;
	// the kernel buffers may hold some more that never reached the handler.
	if start < size/4 || start > size/2 {
		t.Errorf("resumed from %d of %d (%q)", start, size, ranges)
	}
	t.Logf("cut after %d bytes on the wire; resumed from offset %d of %d (%.0f%%); PUTs %q",
		size/2, start, size, 100*float64(start)/size, ranges)
	if p := partials(t, fx.dir); len(p) != 0 {
		t.Errorf("partials left: %v", p)
	}
}

// vmHWM reads the peak resident set of this process (Linux), after
// resetPeak.
func vmHWM() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return -1
}

// resetPeak resets VmHWM to the current RSS (proc(5), clear_refs "5").
func resetPeak() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// heapPeak samples the in-use heap every few milliseconds until stop.
func heapPeak(stop <-chan struct{}) <-chan uint64 {
	out := make(chan uint64, 1)
	go func() {
		var peak uint64
		var ms runtime.MemStats
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-stop:
				out <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

// sparseMarked makes a sparse file of size bytes with 4 KiB of distinct
// data every 64 MiB, so a byte landing at the wrong offset changes the hash;
// nothing of it is stored in the repository.
func sparseMarked(t testing.TB, p string, size int64) string {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	mark := make([]byte, 4096)
	for off := int64(0); off+int64(len(mark)) <= size; off += 64 << 20 {
		for i := range mark {
			mark[i] = byte(off>>20) ^ byte(i)
		}
		if _, err := f.WriteAt(mark, off+12345); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// A 2 GiB file crosses pinned TLS on loopback with this process (receiver
// and sender both) staying well under 64 MB resident and the hash matching.
func TestTwoGiB(t *testing.T) {
	if testing.Short() {
		t.Skip("2 GiB through the disk; skipped with -short")
	}
	const size = 2 << 30
	srcDir := t.TempDir()
	srcs, err := Sources(sparseMarked(t, filepath.Join(srcDir, "disk.img"), size))
	if err != nil {
		t.Fatal(err)
	}
	fx := newFixture(t, "", Limits{})
	runtime.GC()
	canPeak := resetPeak()
	stop := make(chan struct{})
	peak := heapPeak(stop)
	start := time.Now()
	res, err := fx.send(t, "big", srcs)
	elapsed := time.Since(start)
	close(stop)
	heap := <-peak
	rss := vmHWM()
	if err != nil {
		t.Fatal(err)
	}
	got := filepath.Join(fx.dir, res.Files[0].Path)
	if fi, err := os.Stat(got); err != nil || fi.Size() != size {
		t.Fatalf("saved: %v %v", fi, err)
	}
	if h := fileSHA(t, got); h != srcs[0].Entry.SHA256 {
		t.Fatalf("hash %s, want %s", h, srcs[0].Entry.SHA256)
	}
	os.Remove(got)
	t.Logf("2 GiB in %v (%.0f MB/s); peak heap %.1f MiB; peak RSS of sender+receiver %.1f MiB (reset: %v)",
		elapsed.Round(time.Millisecond), size/elapsed.Seconds()/1e6, float64(heap)/(1<<20), float64(rss)/(1<<20), canPeak)
	if heap > 64<<20 {
		t.Errorf("peak heap %d bytes, want under 64 MiB", heap)
	}
	if canPeak && rss > 64<<20 {
		t.Errorf("peak RSS %d bytes, want under 64 MiB", rss)
	}
}

// withTmpfs mounts a tmpfs of size bytes for the test (root only).
func withTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 || runtime.GOOS != "linux" {
		t.Skip("mounting a tmpfs needs root on Linux")
	}
	dir := t.TempDir()
	if out, err := runCmd("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir); err != nil {
		t.Skipf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := runCmd("umount", dir); err != nil {
			t.Errorf("umount: %v %s", err, out)
		}
	})
	return dir
}

// A full disk: refused up front when the announced size does not fit;
// when the disk fills during the upload, a clean ErrNoSpace and no partial.
func TestFullDisk(t *testing.T) {
	dir := withTmpfs(t, "1m")
	fx := newFixture(t, filepath.Join(dir, "in"), Limits{KeepFree: -1})
	src := t.TempDir()
	big, err := Sources(writeRandom(t, filepath.Join(src, "big.bin"), 2<<20, 5))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fx.r.Begin("big", "", ManifestOf(big)); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("2 MiB into a 1 MiB tmpfs: %v, want ErrNoSpace", err)
	}
	// KeepFree is part of the need.
	fx.r.limits.KeepFree = 900 << 10
	small, _ := Sources(writeRandom(t, filepath.Join(src, "small.bin"), 200<<10, 6))
	if _, err := fx.r.Begin("kf", "", ManifestOf(small)); !errors.Is(err, ErrNoSpace) {
		t.Errorf("200 KiB with 900 KiB kept free: %v, want ErrNoSpace", err)
	}
	fx.r.limits.KeepFree = 0

	mid, _ := Sources(writeRandom(t, filepath.Join(src, "mid.bin"), 700<<10, 7))
	tr, err := fx.r.Begin("mid", "", ManifestOf(mid))
	if err != nil {
		t.Fatal(err)
	}
	// Someone else fills the disk after the check.
	if err := os.WriteFile(filepath.Join(dir, "other"), make([]byte, 600<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = fx.client.Upload(context.Background(), "mid", mid)
	if !errors.Is(err, ErrNoSpace) {
		t.Errorf("upload onto a full disk: %v, want ErrNoSpace", err)
	}
	if _, err := tr.Wait(context.Background()); !errors.Is(err, ErrNoSpace) {
		t.Errorf("transfer: %v", err)
	}
	if p := partials(t, dir); len(p) != 0 {
		t.Errorf("partials left: %v", p)
	}
	ents, _ := os.ReadDir(fx.dir)
	if len(ents) != 0 {
		t.Errorf("receive folder holds %v", ents)
	}
}
