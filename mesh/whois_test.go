package mesh

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tailscale.com/client/local"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnstate"
	"tailscale.com/tailcfg"
)

// whoIsDouble is a LocalAPI that answers WhoIs from a table and counts the
// calls per address; Status and the bus are not there. The real LocalAPI
// is exercised in TestTailnetDiscovery/WhoIs.
type whoIsDouble struct {
	mu    sync.Mutex
	calls map[string]int // by address without port
	nodes map[string]string
}

func (w *whoIsDouble) Status(context.Context) (*ipnstate.Status, error) {
	return nil, errors.New("no status here")
}
func (w *whoIsDouble) WatchIPNBus(context.Context, ipn.NotifyWatchOpt) (*local.IPNBusWatcher, error) {
	return nil, errors.New("no bus here")
}
func (w *whoIsDouble) WhoIs(ctx context.Context, remote string) (*apitype.WhoIsResponse, error) {
	ap := netip.MustParseAddrPort(remote)
	w.mu.Lock()
	w.calls[ap.Addr().String()]++
	node, ok := w.nodes[ap.Addr().String()]
	w.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("no match for IP:port")
	}
	return &apitype.WhoIsResponse{
		Node:        &tailcfg.Node{Name: node + ".tail.ts.net."},
		UserProfile: &tailcfg.UserProfile{LoginName: "alice@example.com"},
	}, nil
}

func (w *whoIsDouble) count(addr string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls[addr]
}

// TestWhoIsCached: the auth middleware asks WhoIs on every authenticated
// tailnet request; the LocalAPI is asked once per address per whoIsTTL
// (misses per whoIsMissTTL), the cache is bounded, and callers get copies.
func TestWhoIsCached(t *testing.T) {
	t.Parallel()
	lc := &whoIsDouble{calls: map[string]int{}, nodes: map[string]string{"100.64.0.2": "bravo", "100.64.0.3": "charlie"}}
	d := New(Options{Self: func() Hello { return Hello{} }, Tailscale: lc})
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	d.whois.now = clk.now
	ctx := context.Background()
	from := func(ip string, port uint16) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(ip), port) }

	for i := range 50 { // one node, a new connection (port) per request
		id := d.WhoIs(ctx, from("100.64.0.2", uint16(40000+i)))
		if id == nil || id.Node != "bravo.tail.ts.net" || id.User != "alice@example.com" {
			t.Fatalf("request %d: WhoIs = %+v", i, id)
		}
		id.Node = "mutated" // the caller's copy
	}
	if n := lc.count("100.64.0.2"); n != 1 {
		t.Fatalf("%d LocalAPI WhoIs calls for 50 requests of one node, want 1", n)
	}
	if id := d.WhoIs(ctx, from("100.64.0.3", 1)); id == nil || id.Node != "charlie.tail.ts.net" {
		t.Fatalf("second node: %+v", id)
	}
	clk.add(whoIsTTL + time.Millisecond)
	d.WhoIs(ctx, from("100.64.0.2", 1))
	if n := lc.count("100.64.0.2"); n != 2 {
		t.Fatalf("%d calls after the TTL, want 2", n)
	}

	// A miss is remembered for whoIsMissTTL only.
	for range 10 {
		if id := d.WhoIs(ctx, from("100.64.0.9", 1)); id != nil {
			t.Fatalf("unknown node: %+v", id)
		}
	}
	if n := lc.count("100.64.0.9"); n != 1 {
		t.Fatalf("%d calls for 10 misses, want 1", n)
	}
	clk.add(whoIsMissTTL + time.Millisecond)
	d.WhoIs(ctx, from("100.64.0.9", 1))
	if n := lc.count("100.64.0.9"); n != 2 {
		t.Fatalf("%d calls after the miss TTL, want 2", n)
	}

	// A caller that went away leaves nothing behind.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	d.WhoIs(cctx, from("100.64.0.2", 1)) // cached: no call
	clk.add(whoIsTTL + time.Millisecond)
	d.WhoIs(cctx, from("100.64.0.2", 1))
	d.WhoIs(ctx, from("100.64.0.2", 1))
	if n := lc.count("100.64.0.2"); n != 4 {
		t.Fatalf("%d calls, want 4 (a canceled caller's failure is not cached)", n)
	}

	// Not tailnet addresses: never asked.
	if id := d.WhoIs(ctx, from("192.0.2.1", 1)); id != nil || lc.count("192.0.2.1") != 0 {
		t.Fatalf("WhoIs of a LAN address asked the LocalAPI: %+v", id)
	}

	// Bounded: a stranger walking the tailnet range does not grow it.
	for i := range 3 * maxWhoIsCache {
		d.WhoIs(ctx, from(fmt.Sprintf("100.65.%d.%d", i/250, i%250+1), 1))
	}
	if n := d.whois.len(); n > maxWhoIsCache {
		t.Fatalf("cache holds %d addresses, bound %d", n, maxWhoIsCache)
	}
}

// whoIsCounting counts the WhoIs calls reaching a real LocalAPI.
type whoIsCounting struct {
	LocalAPI
	n atomic.Int32
}

func (w *whoIsCounting) WhoIs(ctx context.Context, remote string) (*apitype.WhoIsResponse, error) {
	w.n.Add(1)
	return w.LocalAPI.WhoIs(ctx, remote)
}
