package mesh

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBenchDiscovery measures time-to-discover and time-to-leave. It is
// a benchmark printing figures, not a pass/fail timing test; it
// runs only with MESHTRAY_BENCH=1:
//
//	MESHTRAY_BENCH=1 go test -run TestBenchDiscovery -v ./mesh
//
// mDNS: an observer node runs in one namespace; each trial starts a new
// node process in another and measures from the process start (and from
// its discovery start) to its row in the observer's table, then kills it
// (SIGKILL, no goodbye) and measures until the row is gone.
// Tailnet: an observer tsnet node with discovery; each trial brings up a new
// tsnet node serving the hello and measures from the moment it is online
// (Up returned) to its row, then closes it and measures until the row is
// offline.
func TestBenchDiscovery(t *testing.T) {
	if os.Getenv("MESHTRAY_BENCH") != "1" {
		t.Skip("benchmark: set MESHTRAY_BENCH=1")
	}
	const trials = 20
	var rows []benchRow

	t.Run("mdns", func(t *testing.T) {
		lan := newTestLAN(t, 2)
		obs := lan.start(t, 0, "observer", "MT_TIMING=bench")
		obs.waitReady(30 * time.Second)
		var fromProc, fromStart, leave []time.Duration
		for i := range trials {
			name := fmt.Sprintf("trial-%02d", i)
			n := lan.start(t, 1, name, "MT_TIMING=bench")
			seen := obs.wait(10*time.Second, name+" discovered", func() bool { return obs.hasName(name) })
			n.waitReady(10 * time.Second)
			fromProc = append(fromProc, seen.Sub(n.started))
			fromStart = append(fromStart, seen.Sub(n.readyAt()))
			killed := time.Now()
			n.kill()
			gone := obs.wait(70*time.Second, name+" gone", func() bool { return !obs.hasName(name) })
			leave = append(leave, gone.Sub(killed))
		}
		rows = append(rows,
			benchRow{"mDNS: node process start -> row", fromProc, "p50 <= 0.5 s"},
			benchRow{"mDNS: node discovery start -> row", fromStart, "p50 <= 0.5 s"},
			benchRow{"mDNS: SIGKILL -> row gone (recheck 2 s)", leave, "within expiry (60 s)"},
		)
	})

	t.Run("tailnet", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		controlURL, _ := startTestControl(t, "127.0.0.1")
		a := startTSNode(t, ctx, controlURL, "observer")
		self := newTestIdentity(t)
		d := New(Options{
			Self:      func() Hello { return helloOf(self, "observer") },
			Tailscale: localClient(t, a),
			Dial:      a.Dial,
			DeviceID:  testDeviceID,
			Timing:    benchTiming,
		})
		if err := d.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		aln, err := a.Listen("tcp", ":"+strconv.Itoa(DefaultPort))
		if err != nil {
			t.Fatal(err)
		}
		serveTLS(t, aln, self, d.HelloHandler())
		var found, leave []time.Duration
		for i := range trials {
			// A trial node is a meshtray: tsnet up, then its hello server
			// and its own discovery, as the app starts them.
			id := newTestIdentity(t)
			s := startTSNode(t, ctx, controlURL, fmt.Sprintf("trial-%02d", i))
			online := time.Now()
			ln, err := s.Listen("tcp", ":"+strconv.Itoa(DefaultPort))
			if err != nil {
				t.Fatal(err)
			}
			td := New(Options{
				Self:      func() Hello { return helloOf(id, "trial") },
				Tailscale: localClient(t, s),
				Dial:      s.Dial,
				DeviceID:  testDeviceID,
				Timing:    benchTiming,
			})
			serveTLS(t, ln, id, td.HelloHandler())
			if err := td.Start(ctx); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 30*time.Second, "trial row", func() bool { p, ok := d.Table().Get(id.id); return ok && p.Online })
			found = append(found, time.Since(online))
			td.Close()
			closed := time.Now()
			s.Close()
			waitFor(t, 30*time.Second, "trial offline", func() bool { p, ok := d.Table().Get(id.id); return !ok || !p.Online })
			leave = append(leave, time.Since(closed))
		}
		rows = append(rows,
			benchRow{"tailnet: peer online -> row", found, "p50 <= 1 s"},
			benchRow{"tailnet: peer closed -> row offline (recheck 2 s, probe timeout 1 s)", leave, "-"},
		)
	})

	var b strings.Builder
	fmt.Fprintf(&b, "\nmesh discovery benchmark, %d trials each\n", trials)
	fmt.Fprintf(&b, "%-70s %8s %8s %8s   %s\n", "measure", "p50", "p95", "max", "target")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-70s %8s %8s %8s   %s\n", r.name, pct(r.d, 0.50), pct(r.d, 0.95), pct(r.d, 1), r.target)
	}
	fmt.Print(b.String())
}

type benchRow struct {
	name   string
	d      []time.Duration
	target string
}

// pct is the nearest-rank percentile q of ds, rounded to the millisecond.
func pct(ds []time.Duration, q float64) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*q+0.999999) - 1
	i = max(0, min(i, len(s)-1))
	return s[i].Round(time.Millisecond).String()
}

func (n *node) hasName(name string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.ContainsFunc(n.peers, func(p Peer) bool { return p.Name == name })
}

func (n *node) readyAt() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ready
}
