package mesh

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"meshtray/egress"
)

// Peers added by hand across a restart: the node keeps what their
// verified hello said (app stores it) and gives it back at start.

// RestoreManual re-adds a peer added by hand before a restart: rawURL as
// it was added (https://host:port), the device ID, fingerprint, name and
// OS its last verified hello had, and when that was (lastSeen, zero when
// unknown). The row is listed offline at once, with that name, OS and
// last-seen time, and
// probed now (when discovery runs) and with every re-probe after, pinned
// to fp: only a hello over a certificate with that fingerprint brings it
// online (and refreshes its name, OS and A2A), so a restored address that
// now answers with another identity stays offline. Re-probes follow the
// egress policy unless the host is a loopback address or "localhost" (the
// policy refused those to a caller on the network, so only the owner at
// the device added such a peer). A row already seen (mDNS, tailnet, an
// add since) keeps what it saw. Errors: ErrBadURL, ErrSelf, ErrDeviceID
// (id is not fp's device ID), ErrTableFull.
func (d *Discovery) RestoreManual(rawURL, id, fp, name, os string, lastSeen time.Time) error {
	hostport, err := parsePeerURL(rawURL, d.opts.Port)
	if err != nil {
		return err
	}
	if fp == "" || d.opts.DeviceID == nil {
		return fmt.Errorf("%w: %s: no fingerprint to pin", ErrDeviceID, clipURL(rawURL))
	}
	if got, err := d.opts.DeviceID(fp); err != nil || got != id {
		return fmt.Errorf("%w: %s: the kept device ID is not its fingerprint's", ErrDeviceID, clipURL(rawURL))
	}
	if d.opts.Self != nil && d.opts.Self().ID == id {
		return ErrSelf
	}
	host, _, _ := net.SplitHostPort(hostport)
	h := Hello{ID: id, Name: name, OS: os, FP: fp, V: ProtocolVersion}
	if err := d.table.restore(h, SourceManual, []string{hostport}, lastSeen, !loopbackHost(host)); err != nil {
		return err
	}
	d.probeAsync("re|"+string(SourceManual)+"|"+id, func(ctx context.Context) {
		if !loopbackHost(host) {
			ctx = egress.FromNetwork(ctx)
		}
		got, _, err := d.probeAddrs(ctx, []string{hostport}, fp, false)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			d.lost(id, SourceManual, err)
			return
		}
		d.table.updateHello(got)
		d.table.refresh(id, SourceManual, 0)
	})
	return nil
}

// loopbackHost reports "localhost" and loopback address literals.
func loopbackHost(host string) bool {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// restore adds an offline src sighting of h at addrs, last seen at seen:
// a peer known from before a restart, not seen again yet. A row already
// seen through src stays as it is.
func (t *Table) restore(h Hello, src Source, addrs []string, seen time.Time, fromNetwork bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.rows[h.ID]
	if ok && r.hello.FP != h.FP {
		return ErrConflict
	}
	if ok && r.by[src] != nil {
		return nil
	}
	if src == SourceManual && t.countLocked(SourceManual) >= maxManualRows {
		return ErrTableFull
	}
	if !ok {
		if err := t.makeRoomLocked(h.ID, src); err != nil {
			return err
		}
		r = &row{hello: h, by: make(map[Source]*sighting)}
		t.rows[h.ID] = r
	}
	if len(addrs) > maxAddrs {
		addrs = addrs[:maxAddrs]
	}
	r.by[src] = &sighting{addrs: append([]string(nil), addrs...), seen: seen, fromNetwork: fromNetwork}
	t.notifyLocked()
	return nil
}
