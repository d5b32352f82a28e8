package mesh

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/grandcat/zeroconf"

	"meshtray/pairing"
)

// mDNS with grandcat/zeroconf v1.0.0, around its known traps
// (research/peers.md §7):
//
//   - Register snapshots addresses once: we register with RegisterProxy and
//     explicit interfaces and addresses, and re-register when they change.
//   - A Resolver serves one Browse, delivers each instance once (later TXT or
//     address changes are suppressed), stops querying after the first
//     answer, and never reports a goodbye. So the browse is re-started: a
//     fresh Resolver at +1 s and +3 s (the initial burst: zeroconf's own
//     re-query waits 4 s) and then every MDNSRefresh, the new one started
//     before the old one is stopped so no announcement falls in a gap. Every
//     fresh browse re-delivers every live instance, which refreshes its
//     sighting; a sighting not refreshed within MDNSExpiry is dropped, and
//     recheckLoop drops one whose hello stops answering.
//   - A goodbye from a re-registering peer clears the Resolver's memory of
//     that instance, so its new TXT (A2A toggled) arrives at once.
//   - The entries channel is drained in its own goroutine.
//   - Server.Shutdown sends a goodbye, but the announce goroutine started by
//     Register (probe) sleeps up to ~3.5 s and cannot be stopped: it outlives
//     Close by that much (harmless writes to closed sockets).

// Bounds on one TXT record we accept.
const (
	maxTXTStrings = 16
	maxTXTBytes   = 1300
)

// txtRecord is the parsed TXT of a _meshtray._tcp instance.
type txtRecord struct {
	id, name, os, fp string
	v                int
	a2a              bool
}

// buildTXT is the TXT record for h (DESIGN.md "Discovery"): id, name, os, fp,
// v, a2a (0/1). Each string stays under 255 bytes (RFC 6763 §6.1).
func buildTXT(h Hello) []string {
	a2a := "0"
	if h.A2A {
		a2a = "1"
	}
	v := h.V
	if v == 0 {
		v = ProtocolVersion
	}
	return []string{
		"id=" + h.ID,
		"name=" + truncUTF8(h.Name, maxNameLen),
		"os=" + truncUTF8(h.OS, maxOSLen),
		"fp=" + h.FP,
		"v=" + strconv.Itoa(v),
		"a2a=" + a2a,
	}
}

// parseTXT reads a TXT record, refusing oversized ones. Unknown keys are
// ignored; the first of a repeated key wins (RFC 6763 §6.4).
func parseTXT(txt []string) (txtRecord, bool) {
	if len(txt) > maxTXTStrings {
		return txtRecord{}, false
	}
	total := 0
	var r txtRecord
	seen := map[string]bool{}
	for _, s := range txt {
		total += len(s)
		if total > maxTXTBytes {
			return txtRecord{}, false
		}
		k, v, _ := strings.Cut(s, "=")
		k = strings.ToLower(k)
		if seen[k] {
			continue
		}
		seen[k] = true
		switch k {
		case "id":
			r.id = v
		case "name":
			r.name = v
		case "os":
			r.os = v
		case "fp":
			r.fp = strings.ToLower(v)
		case "v":
			r.v, _ = strconv.Atoi(v)
		case "a2a":
			r.a2a = v == "1"
		}
	}
	if r.id == "" || len(r.id) > maxIDLen || !isIDChars(r.id) || !canonicalFP(r.fp) {
		return txtRecord{}, false
	}
	return r, true
}

// instanceName is the DNS-SD instance label: the device name, made safe for
// zeroconf (which does not escape), plus the short ID so two devices with
// one name do not collide; at most 63 bytes (RFC 6763 §4.1.1).
func instanceName(h Hello) string {
	var b strings.Builder
	for _, r := range h.Name {
		switch {
		case r == ' ' || r == '-' || r == '_' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	return truncUTF8(b.String(), 40) + " " + pairing.ShortID(h.ID)
}

// mdnsLoop keeps the advertisement and the browse in the wanted state: both
// run while the LAN switch is on and a LAN interface exists.
func (d *Discovery) mdnsLoop(ctx context.Context) {
	var (
		srv    *zeroconf.Server
		srvKey string
		br     *browse
		brKey  string
		burst  int
		timer  = time.NewTimer(time.Hour)
		retry  = time.NewTimer(time.Hour) // after a failed Register or browse
		failed bool                       // logged once until it works again
	)
	timer.Stop()
	retry.Stop()
	defer retry.Stop()
	fail := func(what string, err error) {
		if !failed {
			d.log.Warn("mDNS "+what, "err", err)
		}
		failed = true
		retry.Reset(mdnsRetry)
	}
	stopAll := func() {
		if srv != nil {
			srv.Shutdown() // goodbye (TTL 0)
			srv = nil
			srvKey = ""
		}
		if br != nil {
			br.stop()
			br = nil
			brKey = ""
		}
		timer.Stop()
	}
	defer stopAll()
	for {
		d.mu.Lock()
		lan := d.lan
		ifaces := slices.Clone(d.lanNow.ifaces)
		lanAddrs := slices.Clone(d.lanNow.mdnsAddrs)
		d.mu.Unlock()
		if !lan || len(ifaces) == 0 {
			stopAll()
		} else {
			self := d.opts.Self()
			txt := buildTXT(self)
			ifKey := ifaceKey(ifaces)
			key := strings.Join(txt, "\x00") + "|" + ifKey + "|" + addrKey(lanAddrs)
			if srv == nil || key != srvKey {
				if srv != nil {
					srv.Shutdown()
					srv = nil
				}
				s, err := zeroconf.RegisterProxy(instanceName(self), ServiceType, "local.", d.opts.Port,
					"mt-"+strings.ToLower(pairing.ShortID(self.ID)), addrStrings(lanAddrs), txt, ifaces)
				if err != nil {
					fail("register", err)
				} else {
					srv, srvKey = s, key
					d.log.Debug("mDNS registered", "ifaces", ifKey, "a2a", self.A2A)
				}
			}
			if br == nil || brKey != ifKey {
				if nb, err := d.startBrowse(ctx, ifaces); err != nil {
					fail("browse", err)
				} else {
					if br != nil {
						br.stop()
					}
					br, brKey = nb, ifKey
					burst = 0
					timer.Reset(time.Second)
				}
			}
			if srv != nil && br != nil {
				failed = false
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-d.kickMDNS:
		case <-retry.C:
		case <-timer.C:
			if br == nil {
				continue
			}
			if nb, err := d.startBrowse(ctx, ifaces); err != nil {
				fail("browse", err)
			} else {
				br.stop()
				br = nb
			}
			next := d.opts.Timing.MDNSRefresh
			if burst++; burst == 1 {
				next = min(2*time.Second, next)
			}
			timer.Reset(jitter(next))
		}
	}
}

func ifaceKey(ifaces []net.Interface) string {
	var parts []string
	for _, i := range ifaces {
		parts = append(parts, strconv.Itoa(i.Index)+":"+i.Name)
	}
	return strings.Join(parts, ",")
}

func addrKey(as []netip.Addr) string { return strings.Join(addrStrings(as), ",") }

func addrStrings(as []netip.Addr) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.String()
	}
	return out
}

// browse is one zeroconf Resolver's Browse and the goroutine draining it.
type browse struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (b *browse) stop() {
	b.cancel()
	<-b.done
}

// mdnsRetry is the pause before retrying a failed Register or browse.
const mdnsRetry = 5 * time.Second

// startBrowse starts a fresh Resolver on ifaces (IPv4 and IPv6, or IPv4
// alone where IPv6 is unavailable).
func (d *Discovery) startBrowse(ctx context.Context, ifaces []net.Interface) (*browse, error) {
	r, err := zeroconf.NewResolver(zeroconf.SelectIfaces(ifaces))
	if err != nil {
		if r, err = zeroconf.NewResolver(zeroconf.SelectIfaces(ifaces), zeroconf.SelectIPTraffic(zeroconf.IPv4)); err != nil {
			return nil, err
		}
	}
	bctx, cancel := context.WithCancel(ctx)
	entries := make(chan *zeroconf.ServiceEntry, 16)
	b := &browse{cancel: cancel, done: make(chan struct{})}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer close(b.done)
		for e := range entries { // closed by zeroconf when bctx ends
			d.onEntry(e)
		}
	}()
	if err := r.Browse(bctx, ServiceType, "local.", entries); err != nil {
		b.stop()
		return nil, err
	}
	return b, nil
}

// onEntry handles one mDNS sighting: ignore our own; refresh a known,
// unchanged one; otherwise confirm it over HTTPS before it enters the table.
func (d *Discovery) onEntry(e *zeroconf.ServiceEntry) {
	txt, ok := parseTXT(e.Text)
	if !ok || txt.id == d.selfID() || e.Port < 1 || e.Port > 65535 {
		return
	}
	port := strconv.Itoa(e.Port)
	var addrs []string
	for _, ip := range append(slices.Clone(e.AddrIPv4), e.AddrIPv6...) {
		a, ok := netip.AddrFromSlice(ip)
		if !ok || !a.Unmap().IsGlobalUnicast() { // link-local v6 comes without a zone: useless
			continue
		}
		addrs = append(addrs, net.JoinHostPort(a.Unmap().String(), port))
		if len(addrs) == maxAddrs {
			break
		}
	}
	d.mu.Lock()
	addrs = onLink(addrs, d.lanNow.prefixes)
	d.mu.Unlock()
	if len(addrs) == 0 {
		return
	}
	expiry := d.opts.Timing.MDNSExpiry
	if s, h, ok := d.table.sightingOf(txt.id, SourceMDNS); ok && h.FP == txt.fp && h.A2A == txt.a2a &&
		h.Name == txt.name && h.OS == txt.os && slices.Equal(s.addrs, addrs) {
		d.table.refresh(txt.id, SourceMDNS, expiry)
		return
	}
	d.probeAsync("mdns|"+txt.id+"|"+strings.Join(addrs, ","), func(ctx context.Context) {
		h, _, err := d.probeAddrs(ctx, addrs, txt.fp, false)
		if err != nil {
			d.log.Debug("mDNS peer hello", "peer", pairing.ShortID(txt.id), "err", err)
			return
		}
		if h.ID != txt.id {
			d.log.Debug("mDNS peer id differs from its hello", "peer", pairing.ShortID(txt.id))
			return
		}
		if !d.LAN() {
			return // switched off while probing
		}
		if err := d.table.upsert(h, SourceMDNS, addrs, expiry, ""); err != nil {
			d.log.Debug("mDNS peer", "peer", pairing.ShortID(h.ID), "err", err)
		}
	})
}
