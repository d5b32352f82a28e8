package mesh

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock for expiry tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func drained(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestTableMergeBySource(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	paired := map[string]bool{}
	tb := newTable(clk.now, func(id string) bool { return paired[id] }, nil, DefaultPort)
	a := newTestIdentity(t)
	ch, cancel := tb.Subscribe()
	defer cancel()

	h := helloOf(a, "laptop")
	if err := tb.upsert(h, SourceMDNS, []string{"198.18.7.2:47654"}, time.Minute, ""); err != nil {
		t.Fatal(err)
	}
	if !drained(ch) {
		t.Fatal("no notification for a new row")
	}
	clk.add(time.Second)
	if err := tb.upsert(h, SourceTailscale, []string{"100.64.0.2:47654"}, 0, "laptop.tail.ts.net"); err != nil {
		t.Fatal(err)
	}
	paired[a.id] = true
	snap := tb.Snapshot()
	if len(snap) != 1 {
		t.Fatalf("%d rows, want 1: %+v", len(snap), snap)
	}
	p := snap[0]
	if !slices.Equal(p.Sources, []Source{SourceMDNS, SourceTailscale}) || !p.Online || !p.Paired ||
		p.TailnetNode != "laptop.tail.ts.net" || p.Addrs[SourceMDNS][0] != "198.18.7.2:47654" ||
		p.Addrs[SourceTailscale][0] != "100.64.0.2:47654" || !p.LastSeen.Equal(clk.now()) {
		t.Fatalf("merged row %+v", p)
	}

	// A refresh of an unchanged sighting does not notify; a change does.
	drained(ch)
	if !tb.refresh(a.id, SourceMDNS, time.Minute) || drained(ch) {
		t.Fatal("refresh should succeed silently")
	}
	h2 := h
	h2.A2A = true
	tb.updateHello(h2)
	if !drained(ch) {
		t.Fatal("no notification for an A2A change")
	}
	if p, _ := tb.Get(a.id); !p.A2A {
		t.Fatal("A2A not updated")
	}

	// Mutating a snapshot does not reach the table.
	snap[0].Addrs[SourceMDNS][0] = "x"
	snap[0].Sources[0] = "y"
	if p, _ := tb.Get(a.id); p.Addrs[SourceMDNS][0] != "198.18.7.2:47654" || p.Sources[0] != SourceMDNS {
		t.Fatal("snapshot aliases the table")
	}

	// The mDNS sighting expires; the tailnet one stays.
	clk.add(2 * time.Minute)
	tb.expire()
	p, ok := tb.Get(a.id)
	if !ok || !slices.Equal(p.Sources, []Source{SourceTailscale}) {
		t.Fatalf("after expiry: %+v %v", p, ok)
	}
	tb.setOnline(a.id, SourceTailscale, false)
	if p, _ := tb.Get(a.id); p.Online {
		t.Fatal("still online")
	}
	tb.drop(a.id, SourceTailscale)
	if _, ok := tb.Get(a.id); ok {
		t.Fatal("row without sources should be gone")
	}
}

func TestTableRefusesConflictingFingerprint(t *testing.T) {
	t.Parallel()
	tb := newTable(nil, nil, nil, DefaultPort)
	a, b := newTestIdentity(t), newTestIdentity(t)
	if err := tb.upsert(helloOf(a, "a"), SourceMDNS, []string{"198.18.7.2:1"}, time.Minute, ""); err != nil {
		t.Fatal(err)
	}
	spoof := helloOf(b, "a")
	spoof.ID = a.id
	if err := tb.upsert(spoof, SourceTailscale, []string{"198.18.7.9:1"}, 0, ""); !errors.Is(err, ErrConflict) {
		t.Fatalf("err = %v, want ErrConflict", err)
	}
	tb.updateHello(spoof)
	if p, _ := tb.Get(a.id); p.FP != a.fp || len(p.Sources) != 1 {
		t.Fatalf("row changed by a spoof: %+v", p)
	}
}

// fakeHello is a hello for table tests of bounds, where hundreds of rows
// are needed: the table trusts its callers (the prober) on id and fp, so
// no certificate is made.
func fakeHello(kind string, i int) Hello {
	sum := sha256.Sum256([]byte(fmt.Sprint(kind, i)))
	return Hello{ID: fmt.Sprintf("%s-%04d", kind, i), Name: kind, OS: "test", FP: hex.EncodeToString(sum[:]), V: ProtocolVersion}
}

func TestTableBounds(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	tb := newTable(clk.now, nil, nil, DefaultPort)
	addrs := make([]string, 20)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("100.64.7.%d:47654", i+1)
	}
	for i := range maxRows {
		clk.add(time.Millisecond)
		if err := tb.upsert(fakeHello("ts", i), SourceTailscale, addrs, 0, ""); err != nil {
			t.Fatal(i, err)
		}
	}
	if p, _ := tb.Get(fakeHello("ts", 0).ID); len(p.Addrs[SourceTailscale]) != maxAddrs {
		t.Fatalf("%d addresses kept, want %d", len(p.Addrs[SourceTailscale]), maxAddrs)
	}
	last := fakeHello("ts", maxRows)
	if err := tb.upsert(last, SourceTailscale, addrs[:1], 0, ""); !errors.Is(err, ErrTableFull) {
		t.Fatalf("err = %v, want ErrTableFull (every row online)", err)
	}
	// An offline row makes room: the least recently seen offline one goes.
	tb.setOnline(fakeHello("ts", 5).ID, SourceTailscale, false)
	tb.setOnline(fakeHello("ts", 9).ID, SourceTailscale, false)
	if err := tb.upsert(last, SourceTailscale, addrs[:1], 0, ""); err != nil {
		t.Fatal(err)
	}
	if _, ok := tb.Get(fakeHello("ts", 5).ID); ok {
		t.Fatal("the oldest offline row should have been evicted")
	}
	if _, ok := tb.Get(fakeHello("ts", 9).ID); !ok {
		t.Fatal("only one row should have been evicted")
	}
	if n := len(tb.Snapshot()); n != maxRows {
		t.Fatalf("%d rows, want %d", n, maxRows)
	}
}

// TestTableStrangersCannotCrowdOut: one host on the LAN can announce and
// answer for any number of identities. Those rows (unpaired, mDNS only)
// are capped at maxStrangerRows, and the user's own devices (paired,
// tailnet, manual) evict them when the table is full, online or not.
func TestTableStrangersCannotCrowdOut(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	paired := map[string]bool{fakeHello("mine", 0).ID: true}
	tb := newTable(clk.now, func(id string) bool { return paired[id] }, nil, DefaultPort)
	lan := []string{"198.18.7.66:47654"}
	accepted := 0
	for i := range maxRows + 44 {
		clk.add(time.Millisecond)
		err := tb.upsert(fakeHello("stranger", i), SourceMDNS, lan, time.Minute, "")
		switch {
		case err == nil:
			accepted++
		case !errors.Is(err, ErrTableFull):
			t.Fatal(i, err)
		}
	}
	if accepted != maxStrangerRows {
		t.Fatalf("%d unpaired mDNS rows accepted, want the cap %d", accepted, maxStrangerRows)
	}
	// The user's paired device, seen over mDNS too, still gets in.
	clk.add(time.Millisecond)
	if err := tb.upsert(fakeHello("mine", 0), SourceMDNS, []string{"198.18.7.2:47654"}, time.Minute, ""); err != nil {
		t.Fatalf("paired device refused by a flooded table: %v", err)
	}
	// The rest of the table fills with tailnet rows.
	n := maxRows - len(tb.Snapshot())
	for i := range n {
		clk.add(time.Millisecond)
		if err := tb.upsert(fakeHello("ts", i), SourceTailscale, []string{"100.64.7.1:47654"}, 0, ""); err != nil {
			t.Fatal(i, err)
		}
	}
	// Full, every row online: a tailnet row and a manual row each evict
	// the stranger row seen least recently; a new stranger finds no room.
	for _, tc := range []struct {
		h      Hello
		src    Source
		victim string
	}{
		{fakeHello("ts", n), SourceTailscale, fakeHello("stranger", 0).ID},
		{fakeHello("manual", 0), SourceManual, fakeHello("stranger", 1).ID},
	} {
		clk.add(time.Millisecond)
		if err := tb.upsert(tc.h, tc.src, []string{"198.18.7.3:47654"}, 0, ""); err != nil {
			t.Fatalf("%s row refused by a full table: %v", tc.src, err)
		}
		if _, ok := tb.Get(tc.victim); ok {
			t.Fatalf("%s row: the oldest stranger row %s should have made room", tc.src, tc.victim)
		}
		if got := len(tb.Snapshot()); got != maxRows {
			t.Fatalf("%d rows, want %d", got, maxRows)
		}
	}
	if err := tb.upsert(fakeHello("stranger", 9999), SourceMDNS, lan, time.Minute, ""); !errors.Is(err, ErrTableFull) {
		t.Fatalf("new stranger in a full table: %v, want ErrTableFull", err)
	}
	// A stranger gone quiet makes room for another stranger; paired and
	// tailnet rows never go for strangers.
	tb.setOnline(fakeHello("stranger", 7).ID, SourceMDNS, false)
	tb.setOnline(fakeHello("ts", 3).ID, SourceTailscale, false)
	if err := tb.upsert(fakeHello("stranger", 9999), SourceMDNS, lan, time.Minute, ""); err != nil {
		t.Fatal(err)
	}
	if _, ok := tb.Get(fakeHello("stranger", 7).ID); ok {
		t.Fatal("the offline stranger row should have made room")
	}
	for _, id := range []string{fakeHello("ts", 3).ID, fakeHello("mine", 0).ID} {
		if _, ok := tb.Get(id); !ok {
			t.Fatalf("%s evicted for a stranger", id)
		}
	}
}

func TestTableSubscribeCoalesces(t *testing.T) {
	t.Parallel()
	tb := newTable(nil, nil, nil, DefaultPort)
	ch, cancel := tb.Subscribe()
	for i := range 50 {
		id := newTestIdentity(t)
		if err := tb.upsert(helloOf(id, "n"), SourceManual, []string{fmt.Sprint("198.18.7.1:", i+1)}, 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	if len(ch) != 1 || !drained(ch) || drained(ch) {
		t.Fatal("50 changes should leave exactly one pending notification")
	}
	cancel()
	cancel() // idempotent
	tb.upsert(helloOf(newTestIdentity(t), "n"), SourceManual, []string{"198.18.7.1:9"}, 0, "")
	if drained(ch) {
		t.Fatal("notified after cancel")
	}
}

// TestAddManual adds peers by URL against real HTTPS servers on loopback.
func TestAddManual(t *testing.T) {
	t.Parallel()
	self, peer := newTestIdentity(t), newTestIdentity(t)
	d, peerLn := newManualLab(t, self, peer, Timing{ProbeTimeout: 2 * time.Second})
	selfLn := listenLoopback(t)
	serveHello(t, selfLn, self, func() Hello { return helloOf(self, "self") })

	ctx := context.Background()
	p, err := d.Table().AddManual(ctx, "https://"+peerLn.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if p.ID != peer.id || p.Name != "desktop" || !slices.Equal(p.Sources, []Source{SourceManual}) || !p.Online {
		t.Fatalf("manual row %+v", p)
	}
	if _, err := d.Table().AddManual(ctx, "https://"+selfLn.Addr().String()); !errors.Is(err, ErrSelf) {
		t.Fatalf("adding self: %v, want ErrSelf", err)
	}
	if _, err := d.Table().AddManual(ctx, "http://"+peerLn.Addr().String()); err == nil {
		t.Fatal("plain http to a TLS server should fail")
	}
	if _, err := d.Table().AddManual(ctx, "https://192.0.2.1/?x=1"); !errors.Is(err, ErrBadURL) {
		t.Fatalf("bad URL: %v", err)
	}
	if !d.Table().Remove(peer.id) || d.Table().Remove(peer.id) {
		t.Fatal("Remove should succeed once")
	}
	if len(d.Table().Snapshot()) != 0 {
		t.Fatal("table not empty")
	}
}

// TestManualPlainHTTPClaimsNothing: a local process answering the hello
// over plain http on loopback can copy a paired peer's id and fp (both
// public). Without a certificate nothing proves them, so such a URL is
// refused: it never becomes a row, nor an address on the real peer's row
// (where held tokens would then be sent).
func TestManualPlainHTTPClaimsNothing(t *testing.T) {
	t.Parallel()
	self, peer := newTestIdentity(t), newTestIdentity(t)
	d := New(Options{
		Self:        func() Hello { return helloOf(self, "self") },
		NoTailscale: true,
		DeviceID:    testDeviceID,
		Timing:      Timing{ProbeTimeout: 2 * time.Second},
	})
	peerLn := listenLoopback(t)
	serveHello(t, peerLn, peer, func() Hello { return helloOf(peer, "desktop") })
	// The impostor: the peer's hello, served in clear.
	fakeLn := listenLoopback(t)
	fake := &http.Server{Handler: HelloHandler(func() Hello { return helloOf(peer, "desktop") }), ReadHeaderTimeout: time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = fake.Serve(fakeLn) }()
	t.Cleanup(func() { fake.Close(); <-done })
	fakeURL := "http://" + fakeLn.Addr().String()

	ctx := context.Background()
	// Not in the table yet: the impostor cannot create the row.
	if _, err := d.Table().AddManual(ctx, fakeURL); !errors.Is(err, ErrBadURL) {
		t.Fatalf("plain-http manual peer: %v, want ErrBadURL", err)
	}
	if _, ok := d.Table().Get(peer.id); ok {
		t.Fatal("a plain-http answer made a row")
	}
	// Verified over HTTPS: the impostor cannot add or replace its address.
	real := "https://" + peerLn.Addr().String()
	if _, err := d.Table().AddManual(ctx, real); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Table().AddManual(ctx, fakeURL); !errors.Is(err, ErrBadURL) {
		t.Fatalf("plain-http sighting of a verified peer: %v, want ErrBadURL", err)
	}
	p, _ := d.Table().Get(peer.id)
	if !slices.Equal(p.Addrs[SourceManual], []string{peerLn.Addr().String()}) || len(p.Sources) != 1 {
		t.Fatalf("verified row changed by a plain-http answer: %+v", p)
	}
}

func TestLANInterfacesExcludeLoopbackAndTailnet(t *testing.T) {
	t.Parallel()
	v, err := lanInterfaces(nil)
	if err != nil {
		t.Fatal(err)
	}
	ifaces := v.ifaces
	for _, a := range v.addrs {
		if a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsMulticast() || (a.Is4() && a.As4()[0] == 100 && a.As4()[1]&0xc0 == 64) {
			t.Errorf("LAN address %v should be excluded", a)
		}
	}
	for _, i := range ifaces {
		if i.Flags&net.FlagLoopback != 0 || i.Flags&net.FlagMulticast == 0 || i.Flags&net.FlagUp == 0 {
			t.Errorf("mDNS interface %v should be excluded", i.Name)
		}
	}
	for _, a := range v.mdnsAddrs {
		if !slices.Contains(v.addrs, a) {
			t.Errorf("advertised %v is not a LAN address", a)
		}
	}
	if v, _ := lanInterfaces([]string{"no-such-if0"}); len(v.ifaces)+len(v.addrs) != 0 {
		t.Fatalf("restricting to a missing interface leaves %+v", v)
	}
}

func TestOnLinkOnly(t *testing.T) {
	t.Parallel()
	prefixes := []netip.Prefix{netip.MustParsePrefix("198.18.7.0/24"), netip.MustParsePrefix("2001:db8::/64")}
	in := []string{"172.17.0.1:1", "[2001:db8:1::5]:1", "[2001:db8::5]:1", "198.18.7.9:1", "10.0.0.1:1"}
	want := []string{"[2001:db8::5]:1", "198.18.7.9:1"}
	if got := onLink(in, prefixes); !slices.Equal(got, want) {
		t.Fatalf("onLink = %v, want %v", got, want)
	}
}

func TestTXTRoundTripAndBounds(t *testing.T) {
	t.Parallel()
	id := newTestIdentity(t)
	h := helloOf(id, "Åsa's laptop")
	h.A2A = true
	r, ok := parseTXT(buildTXT(h))
	if !ok || r.id != h.ID || r.fp != h.FP || r.name != h.Name || r.os != h.OS || !r.a2a || r.v != ProtocolVersion {
		t.Fatalf("round trip: %+v %v", r, ok)
	}
	many := buildTXT(h)
	for len(many) <= maxTXTStrings {
		many = append(many, "x=y")
	}
	if _, ok := parseTXT(many); ok {
		t.Fatal("too many TXT strings accepted")
	}
	big := append(buildTXT(h), "pad="+string(make([]byte, 250)), "pad2="+string(make([]byte, 250)),
		"pad3="+string(make([]byte, 250)), "pad4="+string(make([]byte, 250)), "pad5="+string(make([]byte, 250)))
	if _, ok := parseTXT(big); ok {
		t.Fatal("oversized TXT accepted")
	}
	if _, ok := parseTXT([]string{"id=../x", "fp=" + id.fp}); ok {
		t.Fatal("bad id accepted")
	}
	if n := instanceName(Hello{ID: id.id, Name: "a.b\\c" + string(make([]byte, 80))}); len(n) > 63 {
		t.Fatalf("instance name %d bytes", len(n))
	}
}

func TestTailscaleStateStrings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		backend string
		key     bool
		want    string
	}{
		{"Running", true, "running"},
		{"NeedsLogin", false, "logged out"},
		{"NeedsLogin", true, "needs login"},
		{"NeedsMachineAuth", true, "needs approval"},
		{"Stopped", true, "stopped"},
		{"Starting", true, "starting"},
		{"NoState", false, "starting"},
		{"InUseOtherUser", false, "in use by another user"},
		{"Bogus", false, "unknown"},
	}
	for _, tt := range tests {
		st := tailscaleStateOf(tt.backend, tt.key)
		if st.String() != tt.want {
			t.Errorf("%s/%v: %q, want %q", tt.backend, tt.key, st, tt.want)
		}
		b, _ := st.MarshalText()
		var back TailscaleState
		if err := back.UnmarshalText(b); err != nil || back != st {
			t.Errorf("text round trip of %v: %v %v", st, back, err)
		}
	}
}

func TestManualRowsBounded(t *testing.T) {
	t.Parallel()
	tb := newTable(nil, nil, nil, DefaultPort)
	for i := range maxManualRows {
		if err := tb.upsert(helloOf(newTestIdentity(t), "m"), SourceManual, []string{fmt.Sprint("198.18.7.1:", i+1)}, 0, ""); err != nil {
			t.Fatal(i, err)
		}
	}
	extra := newTestIdentity(t)
	if err := tb.upsert(helloOf(extra, "m"), SourceManual, []string{"198.18.7.2:1"}, 0, ""); !errors.Is(err, ErrTableFull) {
		t.Fatalf("err = %v, want ErrTableFull", err)
	}
	if _, ok := tb.Get(extra.id); ok {
		t.Fatal("refused manual peer left a row behind")
	}
	// The same device seen over mDNS is still welcome.
	if err := tb.upsert(helloOf(extra, "m"), SourceMDNS, []string{"198.18.7.2:1"}, time.Minute, ""); err != nil {
		t.Fatal(err)
	}
}

// TestManualLastSeenAdvances: each successful re-check of a peer that is
// already online moves its last_seen (it stayed at the time it was added,
// so a live peer read "6m ago").
func TestManualLastSeenAdvances(t *testing.T) {
	t.Parallel()
	self, peer := newTestIdentity(t), newTestIdentity(t)
	d, ln := newManualLab(t, self, peer, Timing{ProbeTimeout: 2 * time.Second, Recheck: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	p, err := d.Table().AddManual(ctx, "https://"+ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	first := p.LastSeen
	waitFor(t, 5*time.Second, "last_seen to advance with the re-checks", func() bool {
		q, ok := d.Table().Get(peer.id)
		return ok && q.Online && q.LastSeen.After(first.Add(150*time.Millisecond))
	})
}

// newManualLab is a discovery for self (no Tailscale, LAN off) and peer's
// hello served over HTTPS on a loopback listener, for peers added by hand.
func newManualLab(t *testing.T, self, peer testIdentity, tm Timing) (*Discovery, net.Listener) {
	t.Helper()
	d := New(Options{
		Self:        func() Hello { return helloOf(self, "self") },
		NoTailscale: true,
		DeviceID:    testDeviceID,
		Timing:      tm,
	})
	ln := listenLoopback(t)
	serveHello(t, ln, peer, func() Hello { return helloOf(peer, "desktop") })
	return d, ln
}
