package mesh

import (
	"context"
	"crypto/tls"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"tailscale.com/net/tsaddr"

	"meshtray/egress"
)

// Options configure a Discovery. Self is required; zero values elsewhere
// take the defaults noted.
type Options struct {
	// Self returns this device's hello (served at /mesh/hello and announced
	// in the TXT record). Called again after SelfChanged.
	Self func() Hello
	// Port is where this device serves HTTPS, and where peers are probed.
	// 0 means DefaultPort.
	Port int
	// Logger; nil discards.
	Logger *slog.Logger
	// Paired reports whether a grant exists either way with deviceID
	// (Peer.Paired). nil: never.
	Paired func(deviceID string) bool
	// TLSConfig returns the client config for probing a peer's hello: the
	// pinned config when fp != "" (a paired peer, or the fp its TXT record
	// announced), an observing one otherwise. Whatever it returns, the
	// hello's fp must equal the fingerprint of the certificate presented.
	// nil: accept any certificate and check the fingerprint after.
	TLSConfig func(fp string) *tls.Config
	// DeviceID returns the device ID string of a certificate fingerprint
	// (pairing.DeviceID form). A hello whose id is not DeviceID(fp) is
	// refused (ErrDeviceID). nil: not checked (tests only).
	DeviceID func(fp string) (string, error)
	// Tailscale is the LocalAPI to follow. nil: the system tailscaled.
	Tailscale LocalAPI
	// NoTailscale turns the Tailscale watcher off.
	NoTailscale bool
	// Dial dials tailnet addresses (tsaddr.IsTailscaleIP) for hello probes,
	// e.g. a tsnet.Server's Dial; other addresses use a net.Dialer. nil: a
	// net.Dialer for all (the system tailscaled routes the tailnet).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// LAN is the initial "reachable on local network" switch: mDNS
	// advertising and browsing run only while it is on (SetLAN).
	LAN bool
	// Interfaces, if not empty, restricts the LAN (addresses and mDNS) to
	// these interface names.
	Interfaces []string
	// Timing; zero fields take DefaultTiming's.
	Timing Timing
}

// Timing holds discovery's intervals.
type Timing struct {
	// MDNSRefresh is how often a fresh mDNS browse re-queries (after an
	// initial burst at +1 s and +3 s).
	MDNSRefresh time.Duration
	// MDNSExpiry drops an mDNS sighting not refreshed within it.
	MDNSExpiry time.Duration
	// Recheck is how often known peers' hellos are re-probed (liveness).
	Recheck time.Duration
	// ProbeTimeout bounds one hello probe.
	ProbeTimeout time.Duration
	// NegativeTTL is how long a tailnet peer that did not answer as
	// meshtray is left alone.
	NegativeTTL time.Duration
	// AddrPoll is how often interfaces are re-read.
	AddrPoll time.Duration
	// RetryMin and RetryMax bound the LocalAPI reconnect backoff.
	RetryMin, RetryMax time.Duration
}

// DefaultTiming: mDNS refresh 20 s, expiry 60 s (3 refreshes, as
// Syncthing's CacheLifeTime = 3 × BroadcastInterval), recheck 15 s, probe
// timeout 4 s, negative cache 5 min, interface poll 3 s, LocalAPI retry
// 1 s to 30 s.
func DefaultTiming() Timing {
	return Timing{
		MDNSRefresh:  20 * time.Second,
		MDNSExpiry:   60 * time.Second,
		Recheck:      15 * time.Second,
		ProbeTimeout: 4 * time.Second,
		NegativeTTL:  5 * time.Minute,
		AddrPoll:     3 * time.Second,
		RetryMin:     time.Second,
		RetryMax:     30 * time.Second,
	}
}

func (t Timing) withDefaults() Timing {
	d := DefaultTiming()
	set := func(p *time.Duration, v time.Duration) {
		if *p <= 0 {
			*p = v
		}
	}
	set(&t.MDNSRefresh, d.MDNSRefresh)
	set(&t.MDNSExpiry, d.MDNSExpiry)
	set(&t.Recheck, d.Recheck)
	set(&t.ProbeTimeout, d.ProbeTimeout)
	set(&t.NegativeTTL, d.NegativeTTL)
	set(&t.AddrPoll, d.AddrPoll)
	set(&t.RetryMin, d.RetryMin)
	set(&t.RetryMax, d.RetryMax)
	return t
}

// Addrs are this device's addresses, for the HTTPS listeners.
type Addrs struct {
	Tailnet []netip.Addr `json:"tailnet"` // Status.TailscaleIPs while Tailscale runs
	LAN     []netip.Addr `json:"lan"`     // up, non-loopback, non-link-local, non-tailnet
}

// Bounds on work a stranger can cause.
const (
	maxInflight = 64   // hello probes queued or running
	maxTSPeers  = 4096 // tailnet peers tracked
	maxNegative = 4096 // negative cache entries
)

// Discovery finds this person's other devices: mDNS on the LAN
// (grandcat/zeroconf), the tailnet (Tailscale LocalAPI), and peers added by
// hand, merged in one Table. Start it once; Close stops every goroutine it
// started and waits for them (zeroconf's own announce goroutine excepted,
// see mdns.go), and withdraws the mDNS record (goodbye).
type Discovery struct {
	opts   Options
	log    *slog.Logger
	table  *Table
	prober *prober
	neg    *negCache
	whois  *whoIsCache
	lc     LocalAPI

	kickMDNS chan struct{} // capacity 1: re-evaluate mDNS state
	kickTS   chan struct{} // capacity 1: re-read Status

	// mu guards the fields below.
	mu       sync.Mutex
	lan      bool
	tsState  TailscaleState
	addrs    Addrs
	lanNow   lanView // the LAN as last read
	subs     map[chan struct{}]struct{}
	tsPeers  map[string]*tsPeer       // by StableNodeID
	callers  map[netip.Addr]time.Time // tailnet callers of our hello not yet in Status
	inflight map[string]struct{}
	ctx      context.Context // run context, set by Start
	cancel   context.CancelFunc
	started  bool
	closed   bool

	retryWaits atomic.Int32 // goroutines waiting to re-read Status after a probe timeout

	wg sync.WaitGroup
}

// New returns a Discovery; nothing runs before Start.
func New(opts Options) *Discovery {
	if opts.Port == 0 {
		opts.Port = DefaultPort
	}
	opts.Timing = opts.Timing.withDefaults()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Discovery{
		opts:     opts,
		log:      log,
		prober:   newProber(&opts),
		neg:      newNegCache(opts.Timing.NegativeTTL, maxNegative),
		whois:    newWhoIsCache(),
		kickMDNS: make(chan struct{}, 1),
		kickTS:   make(chan struct{}, 1),
		callers:  make(map[netip.Addr]time.Time),
		lan:      opts.LAN,
		subs:     make(map[chan struct{}]struct{}),
		tsPeers:  make(map[string]*tsPeer),
		inflight: make(map[string]struct{}),
	}
	if !opts.NoTailscale {
		d.lc = opts.Tailscale
		if d.lc == nil {
			d.lc = systemLocalAPI()
		}
	}
	d.table = newTable(nil, opts.Paired, d.selfID, opts.Port)
	d.table.probe = d.prober.probe
	if opts.NoTailscale {
		d.tsState = TailscaleOff
	}
	return d
}

func (d *Discovery) selfID() string { return d.opts.Self().ID }

// Table is the merged peer table.
func (d *Discovery) Table() *Table { return d.table }

// Start starts the watchers. They stop when ctx ends or on Close.
func (d *Discovery) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return net.ErrClosed
	}
	if d.started {
		return nil
	}
	d.started = true
	d.ctx, d.cancel = context.WithCancel(ctx)
	d.refreshAddrsLocked()
	d.goLocked(d.addrLoop)
	d.goLocked(d.mdnsLoop)
	d.goLocked(d.recheckLoop)
	if d.lc != nil {
		d.goLocked(d.tailscaleLoop)
	}
	return nil
}

func (d *Discovery) goLocked(f func(context.Context)) {
	d.wg.Add(1)
	ctx := d.ctx
	go func() {
		defer d.wg.Done()
		f(ctx)
	}()
}

// Close withdraws the mDNS record, stops every watcher and waits for them.
// A second Close returns net.ErrClosed.
func (d *Discovery) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return net.ErrClosed
	}
	d.closed = true
	cancel := d.cancel
	d.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	d.wg.Wait()
	return nil
}

// SetLAN switches "reachable on local network": on, the device advertises
// and browses mDNS; off (the default), it sends a goodbye, stops both and
// forgets its mDNS sightings (rows seen otherwise stay).
func (d *Discovery) SetLAN(on bool) {
	d.mu.Lock()
	changed := d.lan != on
	d.lan = on
	if changed {
		d.notifyLocked()
	}
	d.mu.Unlock()
	if !on {
		d.table.dropSource(SourceMDNS)
	}
	d.kick(d.kickMDNS)
}

// LAN reports the "reachable on local network" switch.
func (d *Discovery) LAN() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lan
}

// SelfChanged tells discovery that Self() may return something new (A2A
// toggled, device renamed): the mDNS record is re-registered if its TXT
// changed.
func (d *Discovery) SelfChanged() { d.kick(d.kickMDNS) }

// TailscaleState is the state of the tailnet as last seen.
func (d *Discovery) TailscaleState() TailscaleState {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.tsState
}

// Addrs returns this device's current addresses (copies).
func (d *Discovery) Addrs() Addrs {
	d.mu.Lock()
	defer d.mu.Unlock()
	return Addrs{Tailnet: slices.Clone(d.addrs.Tailnet), LAN: slices.Clone(d.addrs.LAN)}
}

// Subscribe returns a channel that receives a value after the addresses,
// the Tailscale state or the LAN switch changed (coalesced, capacity 1,
// never blocks the sender). cancel stops the subscription.
func (d *Discovery) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	d.mu.Lock()
	d.subs[ch] = struct{}{}
	d.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			d.mu.Lock()
			delete(d.subs, ch)
			d.mu.Unlock()
		})
	}
}

func (d *Discovery) notifyLocked() {
	for ch := range d.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (d *Discovery) kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// addrLoop re-reads the interfaces every AddrPoll and, on a change,
// notifies subscribers and re-registers mDNS (zeroconf snapshots addresses
// at Register).
func (d *Discovery) addrLoop(ctx context.Context) {
	t := time.NewTicker(d.opts.Timing.AddrPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.mu.Lock()
		changed := d.refreshAddrsLocked()
		d.mu.Unlock()
		if changed {
			d.kick(d.kickMDNS)
		}
	}
}

// refreshAddrsLocked re-reads LAN addresses and reports a change. d.mu held.
func (d *Discovery) refreshAddrsLocked() bool {
	v, err := lanInterfaces(d.opts.Interfaces)
	if err != nil {
		d.log.Debug("interfaces", "err", err)
		return false
	}
	if slices.Equal(v.addrs, d.addrs.LAN) && slices.Equal(v.mdnsAddrs, d.lanNow.mdnsAddrs) &&
		sameIfaces(v.ifaces, d.lanNow.ifaces) {
		return false
	}
	d.addrs.LAN = v.addrs
	d.lanNow = v
	d.notifyLocked()
	return true
}

func sameIfaces(a, b []net.Interface) bool {
	return slices.EqualFunc(a, b, func(x, y net.Interface) bool { return x.Index == y.Index && x.Name == y.Name })
}

// lanView is the LAN as read from the interfaces.
type lanView struct {
	addrs     []netip.Addr    // every LAN address, sorted
	ifaces    []net.Interface // multicast-capable interfaces with a LAN address (mDNS)
	mdnsAddrs []netip.Addr    // the LAN addresses on those interfaces (advertised)
	prefixes  []netip.Prefix  // the subnets of every LAN address
}

// lanInterfaces reads the LAN: addresses on up, running interfaces that are not
// loopback, link-local, multicast or tailnet addresses (tsaddr), on
// interfaces not named tailscale*. only, if not empty, restricts to those
// interface names.
func lanInterfaces(only []string) (lanView, error) {
	all, err := net.Interfaces()
	if err != nil {
		return lanView{}, err
	}
	var v lanView
	for _, ifi := range all {
		if ifi.Flags&net.FlagUp == 0 || ifi.Flags&net.FlagRunning == 0 || ifi.Flags&net.FlagLoopback != 0 {
			continue // down, no carrier (an empty docker bridge), or loopback
		}
		if len(only) > 0 && !slices.Contains(only, ifi.Name) {
			continue
		}
		if strings.HasPrefix(ifi.Name, "tailscale") {
			continue
		}
		as, err := ifi.Addrs()
		if err != nil {
			continue
		}
		multicast := ifi.Flags&net.FlagMulticast != 0
		n := 0
		for _, a := range as {
			pfx, err := netip.ParsePrefix(a.String())
			if err != nil {
				continue
			}
			ip := pfx.Addr().Unmap()
			if !ip.IsGlobalUnicast() || tsaddr.IsTailscaleIP(ip) { // excludes loopback, link-local, multicast
				continue
			}
			v.addrs = append(v.addrs, ip)
			v.prefixes = append(v.prefixes, pfx.Masked())
			if multicast {
				v.mdnsAddrs = append(v.mdnsAddrs, ip)
			}
			n++
		}
		if n > 0 && multicast {
			v.ifaces = append(v.ifaces, ifi)
		}
	}
	for _, as := range []*[]netip.Addr{&v.addrs, &v.mdnsAddrs} {
		slices.SortFunc(*as, func(a, b netip.Addr) int { return a.Compare(b) })
		*as = slices.Compact(*as)
	}
	return v, nil
}

// onLink keeps the "host:port" addresses inside one of our LAN subnets, in
// order. A multi-homed peer announces all its addresses on every link (a
// docker bridge's too), and a stranger's TXT/A records must not make us
// connect to arbitrary hosts: an mDNS peer is on our link or not ours to
// probe.
func onLink(addrs []string, prefixes []netip.Prefix) []string {
	return slices.DeleteFunc(slices.Clone(addrs), func(s string) bool {
		ap, err := netip.ParseAddrPort(s)
		return err != nil || !slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Contains(ap.Addr()) })
	})
}

// probeAsync runs f in a tracked goroutine unless a probe with the same key
// is already in flight or maxInflight are. It reports whether f was started.
func (d *Discovery) probeAsync(key string, f func(ctx context.Context)) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.ctx == nil {
		return false
	}
	if _, ok := d.inflight[key]; ok || len(d.inflight) >= maxInflight {
		return false
	}
	d.inflight[key] = struct{}{}
	ctx := d.ctx
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer func() {
			d.mu.Lock()
			delete(d.inflight, key)
			d.mu.Unlock()
		}()
		f(ctx)
	}()
	return true
}

// probeAddrs tries addrs in order (at most 3) and returns the first hello.
// With stopOnTimeout a timeout ends the attempt: for a tailnet peer the
// addresses lead through one tunnel to one node, so the others would time
// out too.
func (d *Discovery) probeAddrs(ctx context.Context, addrs []string, wantFP string, stopOnTimeout bool) (Hello, string, error) {
	var err error
	for i, a := range addrs {
		if i == 3 {
			break
		}
		var h Hello
		if h, err = d.prober.probe(ctx, a, wantFP); err == nil {
			return h, a, nil
		}
		if stopOnTimeout && isTimeout(err) {
			break
		}
	}
	return Hello{}, "", err
}

// recheckLoop re-probes known peers every Recheck (liveness is ours: mDNS
// never reports a peer leaving) and drops expired mDNS sightings.
func (d *Discovery) recheckLoop(ctx context.Context) {
	tm := d.opts.Timing
	expTick := min(tm.Recheck, tm.MDNSExpiry/4)
	exp := time.NewTicker(expTick)
	defer exp.Stop()
	re := time.NewTimer(jitter(tm.Recheck))
	defer re.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-exp.C:
			d.table.expire()
		case <-re.C:
			d.recheck()
			re.Reset(jitter(tm.Recheck))
		}
	}
}

func (d *Discovery) recheck() {
	for _, tg := range d.table.targets(SourceMDNS, SourceTailscale, SourceManual) {
		if tg.src == SourceTailscale && !d.tsPeerOnline(tg.id) {
			continue // Status says offline: nothing to ask
		}
		d.probeAsync("re|"+string(tg.src)+"|"+tg.id, func(ctx context.Context) {
			if tg.fromNetwork {
				// Added by a caller on the network: a name that now
				// resolves to this machine is not probed (egress).
				ctx = egress.FromNetwork(ctx)
			}
			h, _, err := d.probeAddrs(ctx, tg.addrs, tg.fp, tg.src == SourceTailscale)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				d.lost(tg.id, tg.src, err)
				return
			}
			d.table.updateHello(h)
			if tg.src == SourceTailscale && !d.tsPeerOnline(tg.id) {
				return // control says offline meanwhile
			}
			// Online, and seen now (its expiry unchanged: the source's own
			// sightings keep that).
			d.table.refresh(tg.id, tg.src, 0)
		})
	}
}

// jitter returns d ± 10 %.
func jitter(d time.Duration) time.Duration {
	return d - d/10 + time.Duration(rand.Int64N(int64(d/5)+1))
}
