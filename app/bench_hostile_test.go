//go:build linux

package app_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"meshtray/app"
	"meshtray/app/apptest"
)

// TestBenchHostile is `make bench`'s "hostile" section (MESHTRAY_BENCH=1):
// the owner's `meshtray status` latency (p50/p99, failures) while each
// flood of a local attacker runs, next to the same with no flood, and the
// node's RSS and open fds during each flood and 60 s after it ends.
// Floods (all on loopback, bounded in count and time):
//
//   - silent: 1,100 connections that never send a byte, renewed as the
//     node closes them;
//   - idle: 4,000 keep-alive connections each left idle after one public
//     GET /pair/issuer, renewed as the node closes them;
//   - claims: pairing claims with wrong codes from 200 addresses of 127/8.
//
// "owner cli" is `meshtray status` (the control socket where there is
// one); "owner tcp" is GET /status with the control token on the loopback
// port, the path every owner client used before the socket.
func TestBenchHostile(t *testing.T) {
	if os.Getenv("MESHTRAY_BENCH") != "1" {
		t.Skip("benchmark: run with MESHTRAY_BENCH=1 (make bench)")
	}
	n := apptest.StartNode(t, apptest.Options{Keychain: "file", Config: "tailscale = false\n"})
	d, err := app.ReadDaemonInfo(n.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(n.Port)
	settle := 60 * time.Second
	if s := os.Getenv("MESHTRAY_BENCH_SETTLE"); s != "" {
		settle, _ = time.ParseDuration(s)
	}
	fmt.Printf("node pid %d, control socket %q; RSS/fds 'after' are %v after the flood ends\n", d.PID, d.Socket, settle)
	fmt.Printf("%-8s %-10s %9s %9s %6s   %-10s %9s %9s %6s   %9s %6s   %9s %6s\n",
		"flood", "", "p50", "p99", "fail", "", "p50", "p99", "fail", "RSS", "fds", "RSS", "fds")
	fmt.Printf("%-8s %-10s %9s %9s %6s   %-10s %9s %9s %6s   %16s   %16s\n",
		"", "owner cli", "", "", "", "owner tcp", "", "", "", "during", "after")
	report := func(name string, during, after procStat) {
		cli, cliFail := hbMeasure(40, func() bool { return n.CLI("status").Code == 0 })
		tcp, tcpFail := hbMeasure(40, func() bool { return hbTCPStatus(addr, d.Token) })
		if during.rss == 0 {
			during = hbProc(d.PID)
		}
		fmt.Printf("%-8s %-10s %9s %9s %6d   %-10s %9s %9s %6d   %8.1fMB %6d   %8.1fMB %6d\n",
			name, "", hbPct(cli, 50), hbPct(cli, 99), cliFail, "", hbPct(tcp, 50), hbPct(tcp, 99), tcpFail,
			during.rssMB(), during.fds, after.rssMB(), after.fds)
	}
	report("none", procStat{}, hbProc(d.PID))

	for _, f := range []struct {
		name string
		run  func(ctx context.Context, addr string)
	}{
		{"silent", hbSilentFlood},
		{"idle", hbIdleFlood},
		{"claims", hbClaimFlood},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); f.run(ctx, addr) }()
		time.Sleep(3 * time.Second) // the flood at full strength
		during := hbProc(d.PID)
		cli, cliFail := hbMeasure(40, func() bool { return n.CLI("status").Code == 0 })
		tcp, tcpFail := hbMeasure(40, func() bool { return hbTCPStatus(addr, d.Token) })
		during = hbMaxProc(during, hbProc(d.PID))
		cancel()
		<-done
		time.Sleep(settle)
		after := hbProc(d.PID)
		fmt.Printf("%-8s %-10s %9s %9s %6d   %-10s %9s %9s %6d   %8.1fMB %6d   %8.1fMB %6d\n",
			f.name, "", hbPct(cli, 50), hbPct(cli, 99), cliFail, "", hbPct(tcp, 50), hbPct(tcp, 99), tcpFail,
			during.rssMB(), during.fds, after.rssMB(), after.fds)
	}
}

type procStat struct {
	rss int64 // bytes
	fds int
}

func (p procStat) rssMB() float64 { return float64(p.rss) / (1 << 20) }

func hbMaxProc(a, b procStat) procStat {
	return procStat{rss: max(a.rss, b.rss), fds: max(a.fds, b.fds)}
}

// hbProc reads VmRSS and the fd count of pid (Linux /proc).
func hbProc(pid int) procStat {
	var p procStat
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
				p.rss = kb << 10
			}
		}
	}
	if ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd"); err == nil {
		p.fds = len(ents)
	}
	return p
}

// hbMeasure runs f tries times (each bounded by f itself) and returns the
// durations of the successful ones and the number of failures.
func hbMeasure(tries int, f func() bool) ([]time.Duration, int) {
	var ds []time.Duration
	fail := 0
	for range tries {
		t0 := time.Now()
		if f() {
			ds = append(ds, time.Since(t0))
		} else {
			fail++
		}
	}
	return ds, fail
}

func hbPct(ds []time.Duration, p int) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min(len(s)-1, (len(s)*p+99)/100-1)
	return s[max(i, 0)].Round(100 * time.Microsecond).String()
}

// hbTCPStatus is the owner's GET /status on the loopback port.
func hbTCPStatus(addr, token string) bool {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	req, _ := http.NewRequest("GET", "http://"+addr+"/status", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

// hbRenewing runs workers goroutines that each keep one connection made
// by open, opening the next once the node closes it, until ctx ends.
func hbRenewing(ctx context.Context, workers int, open func(ctx context.Context) net.Conn) {
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				c := open(ctx)
				if c == nil {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				stop := context.AfterFunc(ctx, func() { c.Close() })
				c.Read(make([]byte, 1)) // until the node closes it
				stop()
				c.Close()
				time.Sleep(20 * time.Millisecond)
			}
		}()
		if i%100 == 99 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	wg.Wait()
}

func hbSilentFlood(ctx context.Context, addr string) {
	hbRenewing(ctx, 1100, func(ctx context.Context) net.Conn {
		c, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil
		}
		return c
	})
}

func hbIdleFlood(ctx context.Context, addr string) {
	hbRenewing(ctx, 4000, func(ctx context.Context) net.Conn {
		c, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET /pair/issuer HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			c.Close()
			return nil
		}
		resp.Body.Close()
		c.SetDeadline(time.Time{})
		return c
	})
}

func hbClaimFlood(ctx context.Context, addr string) {
	var wg sync.WaitGroup
	var sent atomic.Int64
	for w := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				src := fmt.Sprintf("127.0.%d.%d", w+1, i%10+1) // 200 addresses of 127/8
				tr := &http.Transport{Proxy: nil, DisableKeepAlives: true, DialContext: (&net.Dialer{
					LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}).DialContext}
				hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
				resp, err := hc.Post("http://"+addr+"/pair/claim", "application/json",
					strings.NewReader(`{"code":"ZZZZZZZZ","name":"x","nonce":"`+strings.Repeat("n", 22)+`"}`))
				if err == nil {
					resp.Body.Close()
					sent.Add(1)
				}
			}
		}()
	}
	wg.Wait()
}
