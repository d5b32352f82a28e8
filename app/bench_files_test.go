//go:build linux

package app_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"meshtray/app"
	"meshtray/keychain"
	"meshtray/pairing"
)

// benchFilesChildEnv makes this test binary the bare HTTPS server of
// TestBenchFiles (TestBenchFilesServer).
const benchFilesChildEnv = "MESHTRAY_BENCH_FILES_SERVER"

// TestBenchFiles prints the throughput of a file sent between two real
// nodes paired on loopback (meshtray send's path: the announcement, the
// approval by policy, the upload over pinned TLS, the receiver writing,
// hashing and fsyncing) beside curl -T uploading the same file over TLS to
// a bare Go HTTPS server that writes and fsyncs it, in the same run; and
// the peak RSS of both sides. Figures are printed, never asserted. It runs
// only with MESHTRAY_BENCH=1 (.ci/bench.sh).
func TestBenchFiles(t *testing.T) {
	if os.Getenv("MESHTRAY_BENCH") != "1" {
		t.Skip("set MESHTRAY_BENCH=1")
	}
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("curl is needed: apt-get install -y curl")
	}
	const size = 1 << 30
	src := filepath.Join(t.TempDir(), "payload.bin")
	writeRandomFile(t, src, size)

	type figure struct {
		secs, uploadSecs float64
		sendRSS, recvRSS int64
		sendCPU, recvCPU float64 // CPU seconds (user + system) of the round
		tailSecs         float64 // last byte sent -> the result (receiver's fsync, naming, task end)
		announcedSecs    float64 // start -> the receiver's task seen (the sender hashed, opened the session, announced)
	}
	bare := func() figure {
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^TestBenchFilesServer$")
		cmd.Env = append(os.Environ(), benchFilesChildEnv+"=1", "DIR="+dir)
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var url string
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "LISTEN "); ok {
				url = u
				break
			}
		}
		go io.Copy(io.Discard, out)
		if url == "" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("bare server did not start")
		}
		c := exec.Command(curl, "-sS", "-k", "--http1.1", "-T", src, "-o", "/dev/null", "-w", "%{time_total}", url+"/upload")
		res, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("curl: %v\n%s", err, res)
		}
		var secs float64
		fmt.Sscanf(string(res), "%g", &secs)
		in.Close()
		cmd.Wait()
		return figure{secs: secs, uploadSecs: secs, sendRSS: rusageMaxRSS(c.ProcessState), recvRSS: rusageMaxRSS(cmd.ProcessState),
			sendCPU: cpuSecs(c.ProcessState), recvCPU: cpuSecs(cmd.ProcessState)}
	}
	// One pair of nodes for every round (VmHWM is each node's peak so far).
	a, b2 := sendPair(t)
	allowFiles(t, b2, "ant")
	ours := func() figure {
		var announced, upStart, lastByte time.Time
		sendCPU0, recvCPU0 := procCPU(t, a.Cmd.Process.Pid), procCPU(t, b2.Cmd.Process.Pid)
		start := time.Now()
		res, err := a.Client.SendFiles(context.Background(), "bee", []string{src}, func(ev app.SendEvent) {
			if announced.IsZero() {
				announced = time.Now()
			}
			// Working with a message: the receiver began; the sender
			// hashed the file and announced it before.
			if ev.Type == app.SendEventState && ev.State == "working" && ev.Message != "" && upStart.IsZero() {
				upStart = time.Now()
			}
			if ev.Type == app.SendEventProgress && ev.TotalDone == ev.Total && lastByte.IsZero() {
				lastByte = time.Now()
			}
		})
		end := time.Now()
		if lastByte.IsZero() {
			lastByte = end
		}
		if err != nil || res.State != "completed" {
			t.Fatalf("send: %+v %v", res, err)
		}
		os.Remove(filepath.Join(b2.FilesDir, res.Files[0].Path))
		return figure{secs: end.Sub(start).Seconds(), uploadSecs: end.Sub(upStart).Seconds(),
			sendRSS: vmHWM(t, a.Cmd.Process.Pid), recvRSS: vmHWM(t, b2.Cmd.Process.Pid),
			sendCPU: procCPU(t, a.Cmd.Process.Pid) - sendCPU0, recvCPU: procCPU(t, b2.Cmd.Process.Pid) - recvCPU0,
			tailSecs: end.Sub(lastByte).Seconds(), announcedSecs: announced.Sub(start).Seconds()}
	}
	mbps := func(secs float64) float64 { return size / secs / 1e6 }
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	rounds := 5
	if n, err := strconv.Atoi(os.Getenv("MESHTRAY_BENCH_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	fmt.Printf("1 GiB file (random, in the page cache), TLS on loopback, the receiver writes and fsyncs it\n")
	fmt.Printf("%-44s %9s %11s %14s %14s %15s\n", "", "MB/s", "upload MB/s", "sender RSS", "receiver RSS", "CPU s snd/rcv")
	var oursAll, uploadAll, bareAll, hashAll, announceAll, tailAll, bareCPU, oursCPU []float64
	for round := range rounds {
		b := bare()
		// MESHTRAY_BENCH_PERF=DIR records perf(1) CPU profiles of both
		// nodes during each round (DIR/sender.data, DIR/receiver.data).
		var profs []*exec.Cmd
		if dir := os.Getenv("MESHTRAY_BENCH_PERF"); dir != "" {
			for name, pid := range map[string]int{"sender": a.Cmd.Process.Pid, "receiver": b2.Cmd.Process.Pid} {
				c := exec.Command("perf", "record", "-q", "-F", "499", "-g", "-o", filepath.Join(dir, name+".data"), "-p", strconv.Itoa(pid))
				if err := c.Start(); err != nil {
					t.Fatalf("perf: %v", err)
				}
				profs = append(profs, c)
			}
			time.Sleep(300 * time.Millisecond)
		}
		o := ours()
		for _, c := range profs {
			c.Process.Signal(os.Interrupt)
			c.Wait()
		}
		oursAll, uploadAll, bareAll = append(oursAll, mbps(o.secs)), append(uploadAll, mbps(o.uploadSecs)), append(bareAll, mbps(b.secs))
		hashAll, tailAll = append(hashAll, o.secs-o.uploadSecs), append(tailAll, o.tailSecs)
		announceAll = append(announceAll, o.announcedSecs)
		bareCPU, oursCPU = append(bareCPU, b.sendCPU+b.recvCPU), append(oursCPU, o.sendCPU+o.recvCPU)
		fmt.Printf("%-44s %9.0f %11s %11.1f MiB %11.1f MiB %7.2f/%.2f\n", fmt.Sprintf("curl -T -> bare Go HTTPS server, run %d", round+1), mbps(b.secs), "", mib(b.sendRSS), mib(b.recvRSS), b.sendCPU, b.recvCPU)
		fmt.Printf("%-44s %9.0f %11.0f %11.1f MiB %11.1f MiB %7.2f/%.2f\n", fmt.Sprintf("meshtray node -> node (send), run %d", round+1), mbps(o.secs), mbps(o.uploadSecs), mib(o.sendRSS), mib(o.recvRSS), o.sendCPU, o.recvCPU)
	}
	bestOurs, bestUpload, bestBare := slices.Max(oursAll), slices.Max(uploadAll), slices.Max(bareAll)
	medOurs, medUpload, medBare := median(oursAll), median(uploadAll), median(bareAll)
	fmt.Printf("best:   node to node %.0f MB/s = %.0f%% of curl's %.0f MB/s (goal >= 80%%); the upload alone %.0f MB/s = %.0f%%\n",
		bestOurs, 100*bestOurs/bestBare, bestBare, bestUpload, 100*bestUpload/bestBare)
	fmt.Printf("median: node to node %.0f MB/s = %.0f%% of curl's %.0f MB/s; the upload alone %.0f MB/s = %.0f%%\n",
		medOurs, 100*medOurs/medBare, medBare, medUpload, 100*medUpload/medBare)
	fmt.Printf("before the upload (the sender hashing the file, announcing it, the receiver's go): best %.2f s, median %.2f s, of which until the task was announced %.2f s (median)\n",
		slices.Min(hashAll), median(hashAll), median(announceAll))
	fmt.Printf("after the last byte (the receiver's fsync, naming, the task's end reaching the sender): best %.2f s, median %.2f s\n",
		slices.Min(tailAll), median(tailAll))
	fmt.Printf("CPU of both sides together (user + system), median: curl + bare server %.2f s, node + node %.2f s (2 cores shared by both sides)\n",
		median(bareCPU), median(oursCPU))
	fmt.Printf("(the upload is timed from the receiver's go, after the sender hashed and announced the file)\n")
	fmt.Printf("(node RSS is VmHWM of the whole node process; the bare server's and curl's are ru_maxrss)\n")
	fmt.Printf("(a receiver's CPU far above its other rounds is page cache taken fresh, costly on first touch in a VM that hands freed pages back\n" +
		" to its host: the node's receiver recycles a few MiB of it, the bare server takes 1 GiB a round; judge curl by its best rounds)\n")
}

// TestBenchFilesServer is the bare HTTPS server of TestBenchFiles when run
// as its child; skipped otherwise.
func TestBenchFilesServer(t *testing.T) {
	if os.Getenv(benchFilesChildEnv) != "1" {
		t.Skip("bench child only")
	}
	id, err := pairing.LoadOrCreateIdentity(keychain.NewMemory(), "bare")
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, TLSConfig: id.ServerTLSConfig(), ReadHeaderTimeout: 10 * time.Second}
	go srv.ServeTLS(ln, "", "")
	fmt.Printf("LISTEN https://%s\n", ln.Addr())
	io.Copy(io.Discard, os.Stdin)
	srv.Close()
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func writeRandomFile(t *testing.T, p string, size int64) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.CopyN(f, rand.Reader, size); err != nil {
		t.Fatal(err)
	}
}

// cpuSecs is the CPU time (user + system) an exited process used.
func cpuSecs(ps *os.ProcessState) float64 { return (ps.UserTime() + ps.SystemTime()).Seconds() }

// procCPU is the CPU time (user + system, seconds) pid used so far
// (/proc/PID/stat utime and stime, in clock ticks of 1/100 s).
func procCPU(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The command name (field 2) may hold spaces; fields count from after it.
	_, rest, _ := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}

func rusageMaxRSS(ps *os.ProcessState) int64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss << 10
	}
	return -1
}
