package mesh

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"tailscale.com/client/local"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnstate"
	"tailscale.com/net/tsaddr"
	"tailscale.com/tailcfg"

	"meshtray/pairing"
)

// LocalAPI is what discovery uses of tailscale.com/client/local.Client; a
// *local.Client (the system tailscaled, or a tsnet.Server's LocalClient)
// satisfies it.
type LocalAPI interface {
	Status(ctx context.Context) (*ipnstate.Status, error)
	WatchIPNBus(ctx context.Context, mask ipn.NotifyWatchOpt) (*local.IPNBusWatcher, error)
	WhoIs(ctx context.Context, remoteAddr string) (*apitype.WhoIsResponse, error)
}

var _ LocalAPI = (*local.Client)(nil)

// TailscaleState is the tailnet as the UI shows it. It follows ipn.State
// (tailscale.com/ipn/backend.go) plus the states of the LocalAPI itself.
type TailscaleState int

const (
	TailscaleUnknown       TailscaleState = iota // not asked yet
	TailscaleOff                                 // the watcher is disabled (Options.NoTailscale)
	TailscaleNotRunning                          // no tailscaled answered the LocalAPI
	TailscaleAccessDenied                        // tailscaled refused this user the LocalAPI
	TailscaleLoggedOut                           // NeedsLogin without a node key: never logged in, or logged out
	TailscaleNeedsLogin                          // NeedsLogin with a node key: the key expired
	TailscaleNeedsApproval                       // NeedsMachineAuth: an admin must approve the device
	TailscaleStopped                             // Stopped: `tailscale down`
	TailscaleStarting                            // NoState or Starting
	TailscaleRunning                             // Running
	TailscaleOtherUser                           // InUseOtherUser
)

var tailscaleStateNames = [...]string{
	TailscaleUnknown:       "unknown",
	TailscaleOff:           "off",
	TailscaleNotRunning:    "not running",
	TailscaleAccessDenied:  "access denied",
	TailscaleLoggedOut:     "logged out",
	TailscaleNeedsLogin:    "needs login",
	TailscaleNeedsApproval: "needs approval",
	TailscaleStopped:       "stopped",
	TailscaleStarting:      "starting",
	TailscaleRunning:       "running",
	TailscaleOtherUser:     "in use by another user",
}

// String is the state as the UI shows it ("running", "not running", ...).
func (s TailscaleState) String() string {
	if s < 0 || int(s) >= len(tailscaleStateNames) {
		return "unknown"
	}
	return tailscaleStateNames[s]
}

// MarshalText encodes the state as its String.
func (s TailscaleState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses a String form.
func (s *TailscaleState) UnmarshalText(b []byte) error {
	i := slices.Index(tailscaleStateNames[:], string(b))
	if i < 0 {
		return errors.New("mesh: unknown tailscale state " + strconv.Quote(string(b)))
	}
	*s = TailscaleState(i)
	return nil
}

// tailscaleStateOf maps an ipnstate.Status.BackendState (an ipn.State
// string) to a TailscaleState.
func tailscaleStateOf(backend string, haveNodeKey bool) TailscaleState {
	switch backend {
	case ipn.Running.String():
		return TailscaleRunning
	case ipn.Starting.String(), ipn.NoState.String():
		return TailscaleStarting
	case ipn.Stopped.String():
		return TailscaleStopped
	case ipn.NeedsMachineAuth.String():
		return TailscaleNeedsApproval
	case ipn.NeedsLogin.String():
		if haveNodeKey {
			return TailscaleNeedsLogin
		}
		return TailscaleLoggedOut
	case ipn.InUseOtherUser.String():
		return TailscaleOtherUser
	}
	return TailscaleUnknown
}

// tsPeer is a tailnet peer as last seen in Status.
type tsPeer struct {
	nodeID tailcfg.NodeID
	ips    []netip.Addr
	online bool
	node   string    // MagicDNS name without the trailing dot, else host name
	id     string    // meshtray device ID once its hello answered
	called time.Time // last probe-back after it called our hello
}

// tailscaleLoop follows the LocalAPI: Status, then the IPN bus (re-reading
// Status when it reports state or peer changes, since Notify.NetMap is nil
// on Linux); when tailscaled is absent, stopped or restarted it reconnects
// with capped exponential backoff and jitter. A missing tailscaled is a
// state, logged once on the transition, not an error per attempt.
func (d *Discovery) tailscaleLoop(ctx context.Context) {
	tm := d.opts.Timing
	wait := tm.RetryMin
	for {
		began := time.Now()
		err := d.tailscaleSession(ctx)
		if ctx.Err() != nil {
			return
		}
		st := TailscaleNotRunning
		if local.IsAccessDeniedError(err) {
			st = TailscaleAccessDenied
		}
		d.setTailscale(st, nil, err)
		d.tailnetGone()
		if time.Since(began) > tm.RetryMax {
			wait = tm.RetryMin // the session was healthy for a while
		}
		t := time.NewTimer(wait/2 + time.Duration(rand.Int64N(int64(wait)+1))) // wait ±50 %
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, tm.RetryMax)
	}
}

// tailscaleSession runs one connection to the LocalAPI until it breaks.
func (d *Discovery) tailscaleSession(ctx context.Context) error {
	st, err := d.lc.Status(ctx)
	if err != nil {
		return err
	}
	d.applyStatus(st)
	w, err := d.lc.WatchIPNBus(ctx, ipn.NotifyInitialState|ipn.NotifyPeerChanges)
	if err != nil {
		return err
	}
	kick := make(chan struct{}, 1)
	errc := make(chan error, 1)
	go func() { // ends when Next fails, which Close or ctx makes it do
		for {
			n, err := w.Next()
			if err != nil {
				errc <- err
				return
			}
			d.applyNotify(&n)
			if n.State != nil || n.SelfChange != nil || n.LoginFinished != nil ||
				len(n.PeersChanged) > 0 || len(n.PeersRemoved) > 0 || len(n.PeerChangedPatch) > 0 || n.NetMap != nil {
				select {
				case kick <- struct{}{}:
				default:
				}
			}
		}
	}()
	// Status is re-read on every bus kick, and every RetryMax as a safety
	// net for changes the bus does not carry.
	poll := time.NewTicker(d.opts.Timing.RetryMax)
	defer poll.Stop()
	defer func() {
		w.Close()
		<-errc
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errc:
			errc <- err // for the deferred receive
			return err
		case <-poll.C:
			d.kick(kick)
		case <-d.kickTS:
			d.kick(kick)
		case <-kick:
			st, err := d.lc.Status(ctx)
			if err != nil {
				return err
			}
			d.applyStatus(st)
		}
	}
}

// setTailscale records the state and tailnet addresses, notifying and
// logging on a change only.
func (d *Discovery) setTailscale(st TailscaleState, ips []netip.Addr, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if st == d.tsState && slices.Equal(ips, d.addrs.Tailnet) {
		return
	}
	if st != d.tsState {
		if err != nil {
			d.log.Info("tailscale", "state", st.String(), "err", err)
		} else {
			d.log.Info("tailscale", "state", st.String())
		}
	}
	d.tsState = st
	d.addrs.Tailnet = slices.Clone(ips)
	d.notifyLocked()
}

// applyStatus folds one Status into the tailnet peers and the table, and
// probes online peers not yet known to run meshtray.
func (d *Discovery) applyStatus(st *ipnstate.Status) {
	state := tailscaleStateOf(st.BackendState, st.HaveNodeKey)
	var ips []netip.Addr
	if state == TailscaleRunning {
		ips = slices.Clone(st.TailscaleIPs)
	}
	d.setTailscale(state, ips, nil)
	if state != TailscaleRunning {
		d.tailnetGone()
		return
	}
	self := d.selfID()
	type probeReq struct {
		key   string
		addrs []string
		node  string
	}
	var probes []probeReq
	var offline, online, gone []string
	d.mu.Lock()
	seen := make(map[string]bool, len(st.Peer))
	for _, ps := range st.Peer {
		if len(ps.TailscaleIPs) == 0 {
			continue
		}
		key := string(ps.ID)
		seen[key] = true
		p := d.tsPeers[key]
		if p == nil {
			if len(d.tsPeers) >= maxTSPeers {
				continue
			}
			p = &tsPeer{}
			d.tsPeers[key] = p
		}
		wasOnline := p.online
		p.nodeID = ps.NodeID
		p.ips = slices.Clone(ps.TailscaleIPs)
		p.online = ps.Online
		p.node = strings.TrimSuffix(ps.DNSName, ".")
		if p.node == "" {
			p.node = ps.HostName
		}
		switch {
		case !ps.Online:
			if p.id != "" {
				offline = append(offline, p.id)
			}
		case p.id != "" && p.id != self:
			if !wasOnline {
				online = append(online, p.id)
			}
		case p.id == "":
			if !wasOnline {
				d.neg.del(key) // it came back: maybe with meshtray now
			}
			for _, ip := range p.ips {
				if at, ok := d.callers[ip]; ok {
					delete(d.callers, ip)
					if time.Since(at) < callerMemory {
						d.neg.del(key) // it called our hello: it runs meshtray now
					}
				}
			}
			if !d.neg.has(key, time.Now()) {
				probes = append(probes, probeReq{key: key, addrs: tailnetAddrs(p.ips, d.opts.Port), node: p.node})
			}
		}
	}
	for key, p := range d.tsPeers {
		if !seen[key] {
			if p.id != "" {
				gone = append(gone, p.id)
			}
			delete(d.tsPeers, key)
		}
	}
	d.mu.Unlock()

	for _, id := range offline {
		d.table.setOnline(id, SourceTailscale, false)
	}
	for _, id := range gone {
		d.table.drop(id, SourceTailscale)
	}
	for _, id := range online { // back online: confirm with its hello
		d.recheckOne(id, SourceTailscale)
	}
	for _, pr := range probes {
		d.probeAsync("ts|"+pr.key, func(ctx context.Context) { d.probeTailnetPeer(ctx, pr.key, pr.addrs, pr.node) })
	}
}

// applyNotify applies the peers' online flags an IPN bus message carries
// (PeersChanged nodes, or patches), without waiting for Status: Status can
// lag the bus by a moment.
func (d *Discovery) applyNotify(n *ipn.Notify) {
	type change struct {
		id     string
		online bool
	}
	var changes []change
	d.mu.Lock()
	set := func(match func(*tsPeer) bool, online bool) {
		for _, p := range d.tsPeers {
			if match(p) && p.online != online {
				p.online = online
				if p.id != "" {
					changes = append(changes, change{p.id, online})
				}
			}
		}
	}
	for _, node := range n.PeersChanged {
		if node != nil && node.Online != nil {
			nid := node.ID
			set(func(p *tsPeer) bool { return p.nodeID == nid }, *node.Online)
		}
	}
	for _, pc := range n.PeerChangedPatch {
		if pc != nil && pc.Online != nil {
			nid := pc.NodeID
			set(func(p *tsPeer) bool { return p.nodeID == nid }, *pc.Online)
		}
	}
	d.mu.Unlock()
	for _, c := range changes {
		if c.online {
			d.recheckOne(c.id, SourceTailscale)
		} else {
			d.table.setOnline(c.id, SourceTailscale, false)
		}
	}
}

// Probe-back bounds: at most one per peer per reverseProbeEvery; callers
// not yet in our Status are remembered (at most maxCallers, for
// callerMemory) until it lists them.
const (
	reverseProbeEvery = 3 * time.Second
	maxCallers        = 64
	callerMemory      = 30 * time.Second
)

// HelloHandler serves GET /mesh/hello for this device (Options.Self), like
// the package-level HelloHandler, and in addition, when the caller is an
// online tailnet peer not yet known to run meshtray, probes it back (at
// most once per 10 s per peer): a meshtray started after we last probed its
// device is then found by its own first probe of us, not after our
// negative cache lets go.
func (d *Discovery) HelloHandler() http.Handler {
	h := HelloHandler(d.opts.Self)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil && tsaddr.IsTailscaleIP(ap.Addr()) {
			d.calledBy(ap.Addr().Unmap())
		}
	})
}

func (d *Discovery) calledBy(ip netip.Addr) {
	now := time.Now()
	d.mu.Lock()
	var key string
	var p *tsPeer
	for k, q := range d.tsPeers {
		if slices.Contains(q.ips, ip) {
			key, p = k, q
			break
		}
	}
	if p == nil {
		// Not in our Status yet (it just joined): remember the call, and
		// re-read Status; applyStatus probes it then.
		if len(d.callers) >= maxCallers {
			for ip, at := range d.callers {
				if now.Sub(at) > callerMemory || len(d.callers) >= maxCallers {
					delete(d.callers, ip)
				}
			}
		}
		d.callers[ip] = now
		d.mu.Unlock()
		d.kick(d.kickTS)
		return
	}
	if p.id != "" || !p.online || now.Sub(p.called) < reverseProbeEvery {
		d.mu.Unlock()
		return
	}
	p.called = now
	addrs, node := tailnetAddrs(p.ips, d.opts.Port), p.node
	d.mu.Unlock()
	d.neg.del(key)
	d.probeAsync("ts|"+key, func(ctx context.Context) { d.probeTailnetPeer(ctx, key, addrs, node) })
}

// probeTailnetPeer asks a tailnet peer for its hello on the default port.
func (d *Discovery) probeTailnetPeer(ctx context.Context, key string, addrs []string, node string) {
	h, _, err := d.probeAddrs(ctx, addrs, "", true)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		timedOut := isTimeout(err)
		ttl := d.neg.add(key, time.Now(), timedOut)
		d.log.Debug("tailnet peer is not meshtray", "node", node, "err", err, "retry_in", ttl)
		if timedOut {
			d.retryAfter(ctx, ttl)
		}
		return
	}
	if h.ID == d.selfID() {
		return
	}
	d.mu.Lock()
	p := d.tsPeers[key]
	if p == nil { // gone meanwhile
		d.mu.Unlock()
		return
	}
	p.id = h.ID
	d.mu.Unlock()
	if err := d.table.upsert(h, SourceTailscale, addrs, 0, node); err != nil {
		d.log.Debug("tailnet peer", "peer", pairing.ShortID(h.ID), "err", err)
	}
}

// recheckOne re-probes one sighting now.
func (d *Discovery) recheckOne(id string, src Source) {
	s, h, ok := d.table.sightingOf(id, src)
	if !ok {
		return
	}
	d.probeAsync("re|"+string(src)+"|"+id, func(ctx context.Context) {
		got, _, err := d.probeAddrs(ctx, s.addrs, h.FP, src == SourceTailscale)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			d.lost(id, src, err)
			return
		}
		d.table.updateHello(got)
		if src == SourceTailscale && !d.tsPeerOnline(id) {
			return // control says offline meanwhile
		}
		d.table.setOnline(id, src, true)
	})
}

// maxRetryWaits bounds the goroutines waiting to retry timed-out probes;
// beyond it the periodic Status re-read (RetryMax) retries them.
const maxRetryWaits = 16

// retryAfter re-reads Status (which probes peers whose negative entry has
// lapsed) after ttl.
func (d *Discovery) retryAfter(ctx context.Context, ttl time.Duration) {
	if d.retryWaits.Add(1) > maxRetryWaits {
		d.retryWaits.Add(-1)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		d.retryWaits.Add(-1)
		return
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer d.retryWaits.Add(-1)
		t := time.NewTimer(ttl + 10*time.Millisecond)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
			d.kick(d.kickTS)
		}
	}()
}

// identityChanged reports whether a probe failed because the address now
// presents another certificate (the device re-created its identity, or
// another device took the address).
func identityChanged(err error) bool {
	return errors.Is(err, ErrFingerprint) || errors.Is(err, ErrDeviceID) || errors.Is(err, pairing.ErrPinMismatch)
}

// lost handles a failed re-probe of id's src sighting: mDNS sightings go;
// others go offline, unless the address now answers with another identity:
// then the sighting goes (that device is a new row, to be paired anew) and
// a tailnet peer is probed afresh.
func (d *Discovery) lost(id string, src Source, err error) {
	d.log.Debug("peer not answering", "peer", pairing.ShortID(id), "source", src, "err", err)
	switch {
	case src == SourceMDNS:
		d.table.drop(id, src)
	case src == SourceTailscale && identityChanged(err):
		d.table.drop(id, src)
		d.mu.Lock()
		for key, p := range d.tsPeers {
			if p.id == id {
				p.id = ""
				d.neg.del(key)
			}
		}
		d.mu.Unlock()
		d.kick(d.kickTS)
	default:
		d.table.setOnline(id, src, false)
	}
}

// isTimeout reports whether err is a probe that ran out of time.
func isTimeout(err error) bool {
	ne, ok := errors.AsType[net.Error](err)
	return errors.Is(err, context.DeadlineExceeded) || ok && ne.Timeout()
}

// tailnetGone marks every tailnet sighting offline: our own tailnet is down.
func (d *Discovery) tailnetGone() {
	d.whois.clear()
	d.mu.Lock()
	var ids []string
	for key, p := range d.tsPeers {
		if p.id != "" {
			ids = append(ids, p.id)
		}
		delete(d.tsPeers, key)
	}
	d.mu.Unlock()
	for _, id := range ids {
		d.table.setOnline(id, SourceTailscale, false)
	}
}

// tsPeerOnline reports whether Status lists the meshtray peer id online.
func (d *Discovery) tsPeerOnline(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.tsPeers {
		if p.id == id {
			return p.online
		}
	}
	return false
}

func tailnetAddrs(ips []netip.Addr, port int) []string {
	ips = slices.Clone(ips)
	slices.SortStableFunc(ips, func(a, b netip.Addr) int { // IPv4 first
		switch {
		case a.Is4() && !b.Is4():
			return -1
		case !a.Is4() && b.Is4():
			return 1
		}
		return 0
	})
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, net.JoinHostPort(ip.String(), strconv.Itoa(port)))
	}
	return out
}

// whoIsTimeout bounds one LocalAPI WhoIs.
const whoIsTimeout = 3 * time.Second

// WhoIs cache: pairing's auth middleware asks on every authenticated
// tailnet request, and a LocalAPI round trip per request would tie each
// request's latency to tailscaled's. A tailnet address keeps its node for
// the life of the node key, so a few seconds' memory is safe.
const (
	whoIsTTL      = 5 * time.Second // an answer naming a node
	whoIsMissTTL  = time.Second     // "not known" or a LocalAPI error
	maxWhoIsCache = 256             // addresses remembered
)

// whoIsCache remembers WhoIs answers per tailnet address (the port is
// ignored: every connection of a node comes from its address). Bounded at
// maxWhoIsCache: when full, expired entries go, then the one expiring
// first. Safe for concurrent use.
type whoIsCache struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[netip.Addr]whoIsEntry // guarded by mu
}

type whoIsEntry struct {
	id    *pairing.TailnetIdentity // nil: the LocalAPI did not name a node
	until time.Time
}

func newWhoIsCache() *whoIsCache {
	return &whoIsCache{now: time.Now, m: make(map[netip.Addr]whoIsEntry)}
}

// get returns the cached answer for a and whether there was one.
func (c *whoIsCache) get(a netip.Addr) (*pairing.TailnetIdentity, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[a]
	if !ok || !c.now().Before(e.until) {
		return nil, false
	}
	return cloneIdentity(e.id), true
}

// put remembers id (nil for a miss) for a.
func (c *whoIsCache) put(a netip.Addr, id *pairing.TailnetIdentity) {
	ttl := whoIsTTL
	if id == nil {
		ttl = whoIsMissTTL
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if _, ok := c.m[a]; !ok && len(c.m) >= maxWhoIsCache {
		var first netip.Addr
		var firstUntil time.Time
		for k, e := range c.m {
			if !now.Before(e.until) {
				delete(c.m, k)
				continue
			}
			if !first.IsValid() || e.until.Before(firstUntil) {
				first, firstUntil = k, e.until
			}
		}
		if len(c.m) >= maxWhoIsCache {
			delete(c.m, first)
		}
	}
	c.m[a] = whoIsEntry{id: cloneIdentity(id), until: now.Add(ttl)}
}

func cloneIdentity(id *pairing.TailnetIdentity) *pairing.TailnetIdentity {
	if id == nil {
		return nil
	}
	c := *id
	return &c
}

// clear forgets every answer (the tailnet went away).
func (c *whoIsCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
}

func (c *whoIsCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// WhoIs tells which tailnet node and user an incoming connection from
// remote comes from (LocalAPI /localapi/v0/whois). nil when remote is not a
// tailnet address (tsaddr.IsTailscaleIP), the watcher is off, or the
// LocalAPI does not know it. Answers are cached per address for whoIsTTL
// (misses and LocalAPI errors for whoIsMissTTL; a canceled caller's is not
// kept). The result is the caller's own copy.
func (d *Discovery) WhoIs(ctx context.Context, remote netip.AddrPort) *pairing.TailnetIdentity {
	if d.lc == nil || !tsaddr.IsTailscaleIP(remote.Addr()) {
		return nil
	}
	addr := remote.Addr().Unmap()
	if id, ok := d.whois.get(addr); ok {
		return id
	}
	wctx, cancel := context.WithTimeout(ctx, whoIsTimeout)
	defer cancel()
	r, err := d.lc.WhoIs(wctx, remote.String())
	if err != nil || r == nil || r.Node == nil {
		d.log.Debug("whois", "addr", remote, "err", err)
		if ctx.Err() == nil {
			d.whois.put(addr, nil)
		}
		return nil
	}
	id := &pairing.TailnetIdentity{Node: strings.TrimSuffix(r.Node.Name, ".")}
	if id.Node == "" && r.Node.Hostinfo.Valid() {
		id.Node = r.Node.Hostinfo.Hostname()
	}
	if r.UserProfile != nil {
		id.User = r.UserProfile.LoginName
	}
	d.whois.put(addr, id)
	return id
}

// IsTailnetPeer reports whether a is the tailnet address of a peer in this
// device's tailnet, per the LocalAPI's latest Status (any peer, meshtray or
// not, online or not). Plain HTTP to such an address rides WireGuard; an
// address in 100.64.0.0/10 that is not a peer's may be carrier-grade NAT.
func (d *Discovery) IsTailnetPeer(a netip.Addr) bool {
	a = a.Unmap()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.tsPeers {
		if slices.Contains(p.ips, a) {
			return true
		}
	}
	return false
}
