package pairing

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// TestFewSourcesCannotFillGlobalLimit: 60 sources claiming as fast as they
// can (every 10 ms for 20 s of the fake clock), and a local user claiming
// from 200 addresses of 127/8 and 200 of one IPv6 /64, leave a new source
// its claim: the per-source limits bind first, and the global one takes
// far more sources than that to fill.
func TestFewSourcesCannotFillGlobalLimit(t *testing.T) {
	t.Parallel()
	f := newPairerFixture(t)
	ctx := context.Background()
	var flood []ClaimSource
	for i := range 60 {
		flood = append(flood, src(1000+i))
	}
	for i := range 200 {
		flood = append(flood,
			ClaimSource{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, byte(i / 100), byte(i%100 + 1)}), 40000), Listener: ListenerLoopback},
			ClaimSource{Addr: netip.AddrPortFrom(netip.MustParseAddr(fmt.Sprintf("2001:db8:9:9::%x", i+1)), 40000), Listener: ListenerLAN})
	}
	refusedFresh := 0
	for tick := range 2000 {
		for _, s := range flood {
			f.p.Claim(ctx, claimFor("XXXXXXXX"), s)
		}
		if tick%100 == 99 { // every simulated second, a source never seen
			if _, err := f.p.Claim(ctx, claimFor("XXXXXXXX"), src(5000+tick)); errors.Is(err, ErrRateLimited) {
				refusedFresh++
			}
		}
		f.clock.Advance(10 * time.Millisecond)
	}
	if refusedFresh > 0 {
		t.Errorf("a new source was rate-limited %d of 20 times while %d addresses flooded: a handful of sources fills the global limit", refusedFresh, len(flood))
	}
}

// TestGlobalRefusalKeepsSourceTokens: when the global bucket is empty, a
// source's own bucket is not charged for a call that was refused anyway.
func TestGlobalRefusalKeepsSourceTokens(t *testing.T) {
	t.Parallel()
	l := newSourceLimiter(rate.Every(time.Hour), 3, rate.Every(time.Hour), 1, 100)
	now := time.Now()
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	if !l.allow(a, now) {
		t.Fatal("first call refused")
	}
	for range 5 {
		if l.allow(b, now) {
			t.Fatal("allowed with the global bucket empty")
		}
	}
	l.mu.Lock()
	left := l.sources[sourceKey(b)].lim.TokensAt(now)
	l.mu.Unlock()
	if left != 3 {
		t.Fatalf("source b has %.0f of 3 tokens after 5 calls the global bucket refused", left)
	}
}
