package files

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshtray/pairing"
)

// benchChildEnv marks a bench child process and names its role.
const benchChildEnv = "MESHTRAY_FILES_BENCH_CHILD"

// TestBenchReport prints the upload throughput of this package (sender and
// receiver in two processes, pinned TLS on loopback) beside curl uploading
// the same file over TLS to a bare Go HTTPS server that writes it to disk,
// and the peak RSS of each process. Figures are printed, never asserted.
// It runs only with MESHTRAY_BENCH=1 (.ci/bench.sh):
//
//	MESHTRAY_BENCH=1 go test -run '^TestBenchReport$' -v ./files
func TestBenchReport(t *testing.T) {
	if os.Getenv("MESHTRAY_BENCH") != "1" {
		t.Skip("set MESHTRAY_BENCH=1")
	}
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not installed")
	}
	const size = 1 << 30
	work := t.TempDir()
	src := writeRandom(t, filepath.Join(work, "payload.bin"), size, 77)
	srcs, err := Sources(src)
	if err != nil {
		t.Fatal(err)
	}
	man, _ := json.Marshal(ManifestOf(srcs))
	manFile := filepath.Join(work, "manifest.json")
	os.WriteFile(manFile, man, 0o600)

	type figure struct {
		secs             float64
		sendRSS, srvRSS  int64
		sendCPU, recvCPU float64 // CPU seconds, user + system
	}
	ours := func(round int) figure {
		dir := filepath.Join(work, fmt.Sprintf("in-%d", round))
		srv := startChild(t, "recv", "DIR="+dir, "MANIFEST="+manFile)
		defer os.RemoveAll(dir)
		snd := exec.Command(os.Args[0], childArgs("send")...)
		snd.Env = append(os.Environ(), benchChildEnv+"=send", "URL="+srv.url, "FP="+srv.fp, "SRC="+src, "MANIFEST="+manFile)
		out, err := snd.CombinedOutput()
		if err != nil {
			t.Fatalf("sender: %v\n%s", err, out)
		}
		var secs float64
		fmt.Sscanf(lastLine(string(out), "SECS "), "SECS %g", &secs)
		rss := srv.stop(t)
		return figure{secs: secs, sendRSS: maxRSS(snd.ProcessState), srvRSS: rss, sendCPU: cpuSecs(snd.ProcessState), recvCPU: cpuSecs(srv.cmd.ProcessState)}
	}
	bare := func(round int) figure {
		dir := filepath.Join(work, fmt.Sprintf("bare-%d", round))
		os.MkdirAll(dir, 0o700)
		defer os.RemoveAll(dir)
		srv := startChild(t, "bare", "DIR="+dir)
		c := exec.Command(curl, "-sS", "-k", "--http1.1", "-T", src, "-o", "/dev/null", "-w", "%{time_total}", srv.url+"/upload")
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("curl: %v\n%s", err, out)
		}
		var secs float64
		fmt.Sscanf(string(out), "%g", &secs)
		rss := srv.stop(t)
		return figure{secs: secs, sendRSS: maxRSS(c.ProcessState), srvRSS: rss, sendCPU: cpuSecs(c.ProcessState), recvCPU: cpuSecs(srv.cmd.ProcessState)}
	}
	mbps := func(f figure) float64 { return size / f.secs / 1e6 }
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	fmt.Printf("1 GiB file (random, in the page cache), TLS on loopback, receiver writes and fsyncs it\n")
	fmt.Printf("%-42s %10s %14s %14s %15s\n", "", "MB/s", "sender RSS", "receiver RSS", "CPU s snd/rcv")
	var bestOurs, bestBare float64
	for round := range 3 {
		b := bare(round)
		o := ours(round)
		bestOurs, bestBare = max(bestOurs, mbps(o)), max(bestBare, mbps(b))
		fmt.Printf("%-42s %10.0f %11.1f MiB %11.1f MiB %7.2f/%.2f\n", fmt.Sprintf("curl -T -> bare Go HTTPS server, run %d", round+1), mbps(b), mib(b.sendRSS), mib(b.srvRSS), b.sendCPU, b.recvCPU)
		fmt.Printf("%-42s %10.0f %11.1f MiB %11.1f MiB %7.2f/%.2f\n", fmt.Sprintf("files.Client -> files.Receiver, run %d", round+1), mbps(o), mib(o.sendRSS), mib(o.srvRSS), o.sendCPU, o.recvCPU)
	}
	fmt.Printf("best: files %.0f MB/s = %.0f%% of curl's %.0f MB/s (goal >= 80%%)\n", bestOurs, 100*bestOurs/bestBare, bestBare)
}

// childArgs runs TestBenchChild; with MESHTRAY_BENCH_PROFILE=DIR each child
// also writes a CPU profile, DIR/<role>.pprof (go tool pprof).
func childArgs(role string) []string {
	args := []string{"-test.run=^TestBenchChild$"}
	if dir := os.Getenv("MESHTRAY_BENCH_PROFILE"); dir != "" {
		args = append(args, "-test.cpuprofile="+filepath.Join(dir, role+".pprof"))
	}
	return args
}

type child struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	url, fp string
}

// startChild starts this test binary as a server (role recv or bare) and
// reads its "URL fp" line.
func startChild(t *testing.T, role string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], childArgs(role)...)
	cmd.Env = append(append(os.Environ(), benchChildEnv+"="+role), env...)
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "LISTEN "); ok {
			c := &child{cmd: cmd, stdin: in}
			c.url, c.fp, _ = strings.Cut(u, " ")
			go io.Copy(io.Discard, out)
			return c
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	t.Fatalf("%s child did not start", role)
	return nil
}

// stop closes the child's stdin (its signal to exit) and returns its peak RSS.
func (c *child) stop(t *testing.T) int64 {
	c.stdin.Close()
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	return maxRSS(c.cmd.ProcessState)
}

func lastLine(out, prefix string) string {
	var last string
	for l := range strings.Lines(out) {
		if strings.HasPrefix(l, prefix) {
			last = l
		}
	}
	return last
}

// TestBenchChild is the body of a bench child process; skipped otherwise.
func TestBenchChild(t *testing.T) {
	role := os.Getenv(benchChildEnv)
	if role == "" {
		t.Skip("bench child only")
	}
	switch role {
	case "recv", "bare":
		id := testIdentity(t)
		var h http.Handler
		if role == "recv" {
			r, err := NewReceiver(os.Getenv("DIR"), Limits{KeepFree: -1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			var m Manifest
			b, _ := os.ReadFile(os.Getenv("MANIFEST"))
			json.Unmarshal(b, &m)
			if _, err := r.Begin("bench", "", m); err != nil {
				t.Fatal(err)
			}
			h = r.Handler(nil)
		} else {
			h = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				f, err := os.CreateTemp(os.Getenv("DIR"), "up")
				if err == nil {
					_, err = io.Copy(f, req.Body)
				}
				if err == nil {
					err = f.Sync()
				}
				f.Close()
				if err != nil {
					http.Error(w, err.Error(), 500)
					return
				}
				w.WriteHeader(http.StatusCreated)
			})
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h, TLSConfig: id.ServerTLSConfig(), ReadHeaderTimeout: 10 * time.Second}
		go srv.ServeTLS(ln, "", "")
		fmt.Printf("LISTEN https://%s %s\n", ln.Addr(), id.Fingerprint)
		io.Copy(io.Discard, os.Stdin)
		srv.Close()
	case "send":
		var m Manifest
		b, _ := os.ReadFile(os.Getenv("MANIFEST"))
		json.Unmarshal(b, &m)
		srcs := []Source{{Entry: m.Files[0], Path: os.Getenv("SRC")}}
		tr := NewTransport(pairing.PinnedTLSConfig(os.Getenv("FP")))
		c := &Client{HTTP: &http.Client{Transport: tr}, BaseURL: os.Getenv("URL")}
		start := time.Now()
		if _, err := c.Upload(context.Background(), "bench", srcs); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("SECS %g\n", time.Since(start).Seconds())
		tr.CloseIdleConnections()
	}
}
