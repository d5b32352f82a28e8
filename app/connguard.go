package app

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"meshtray/pairing"
)

// connLimits bound the connections one listener holds: in total and per
// source network (pairing.SourceKey: an IPv4 address, an IPv6 /64, all of
// loopback as one).
type connLimits struct {
	Total     int
	PerSource int
}

// Listener limits. A connection waiting for its first byte, for its TLS
// handshake or idle between requests is "waiting": when a new connection
// needs a slot (the listener or its source at the cap), the oldest waiting
// one (of that source, when the source is at its cap) is closed for it. A
// connection serving a request is never evicted; a new one that finds only
// those is refused (closed at once). So a flood of silent or idle
// connections costs the flooder its own oldest connections, never anyone
// else's next request, and what a stranger makes us hold stays bounded.
var (
	loopbackLimits = connLimits{Total: 512, PerSource: 512} // one machine: one source
	remoteLimits   = connLimits{Total: 256, PerSource: 32}
)

// freeAfterFlood: when a listener that held at least floodConns
// connections drops below a quarter of that peak, the heap the flood grew
// is handed back to the OS (debug.FreeOSMemory) freeDelay later, once.
const (
	floodConns = 128
	freeDelay  = 5 * time.Second
)

// connGuard enforces connLimits on one listener's connections. The
// http.Server's ConnState (connState) tells it which connections are
// serving a request.
type connGuard struct {
	lim  connLimits
	name string
	log  *slog.Logger

	mu       sync.Mutex
	conns    map[*guardedConn]struct{} // guarded by mu
	bySource map[netip.Prefix]int      // guarded by mu
	peak     int                       // guarded by mu: most held since the last free
	evicted  int                       // guarded by mu: since the last log line
	refused  int                       // guarded by mu: since the last log line
	logged   time.Time                 // guarded by mu
	freeing  atomic.Bool
}

func newConnGuard(name string, lim connLimits, log *slog.Logger) *connGuard {
	return &connGuard{lim: lim, name: name, log: log,
		conns: make(map[*guardedConn]struct{}), bySource: make(map[netip.Prefix]int)}
}

// guardedConn is a connection counted by a connGuard.
type guardedConn struct {
	net.Conn
	g    *connGuard
	key  netip.Prefix
	once sync.Once
	// guarded by g.mu:
	busy  bool      // serving a request
	since time.Time // accepted, or idle since
}

func (c *guardedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.g.release(c) })
	return err
}

// admit counts c in, evicting the oldest waiting connection when a cap is
// reached; it reports false (c must be closed) when every held connection
// is serving a request.
func (g *connGuard) admit(c net.Conn) (*guardedConn, bool) {
	key := connSourceKey(c)
	now := time.Now()
	var victims []*guardedConn
	g.mu.Lock()
	if g.bySource[key] >= g.lim.PerSource {
		if v := g.oldestLocked(key, true); v != nil {
			victims = append(victims, v)
			g.dropLocked(v)
		}
	}
	if g.bySource[key] < g.lim.PerSource && len(g.conns) >= g.lim.Total {
		if v := g.oldestLocked(key, false); v != nil {
			victims = append(victims, v)
			g.dropLocked(v)
		}
	}
	ok := g.bySource[key] < g.lim.PerSource && len(g.conns) < g.lim.Total
	var gc *guardedConn
	if ok {
		gc = &guardedConn{Conn: c, g: g, key: key, since: now}
		g.conns[gc] = struct{}{}
		g.bySource[key]++
		g.peak = max(g.peak, len(g.conns))
	} else {
		g.refused++
	}
	g.evicted += len(victims)
	g.noteLocked(now)
	g.mu.Unlock()
	for _, v := range victims {
		v.Close()
	}
	return gc, ok
}

// oldestLocked is the oldest waiting connection, of source key only when
// sameSource.
func (g *connGuard) oldestLocked(key netip.Prefix, sameSource bool) *guardedConn {
	var old *guardedConn
	for c := range g.conns {
		if c.busy || sameSource && c.key != key {
			continue
		}
		if old == nil || c.since.Before(old.since) {
			old = c
		}
	}
	return old
}

// dropLocked uncounts c (once; release after it does nothing).
func (g *connGuard) dropLocked(c *guardedConn) {
	if _, ok := g.conns[c]; !ok {
		return
	}
	delete(g.conns, c)
	if g.bySource[c.key]--; g.bySource[c.key] <= 0 {
		delete(g.bySource, c.key)
	}
	if g.peak >= floodConns && len(g.conns) < g.peak/4 && g.freeing.CompareAndSwap(false, true) {
		g.peak = len(g.conns)
		time.AfterFunc(freeDelay, func() {
			debug.FreeOSMemory()
			g.freeing.Store(false)
		})
	}
}

func (g *connGuard) release(c *guardedConn) {
	g.mu.Lock()
	g.dropLocked(c)
	g.mu.Unlock()
}

// noteLocked logs evictions and refusals at most once a minute.
func (g *connGuard) noteLocked(now time.Time) {
	if g.evicted+g.refused == 0 || now.Sub(g.logged) < time.Minute {
		return
	}
	g.log.Warn("connection limit reached: oldest waiting connections closed", "listener", g.name,
		"evicted", g.evicted, "refused", g.refused, "held", len(g.conns), "total_cap", g.lim.Total, "per_source_cap", g.lim.PerSource)
	g.evicted, g.refused, g.logged = 0, 0, now
}

// setBusy records whether c serves a request; an idle connection's wait
// starts now.
func (g *connGuard) setBusy(c *guardedConn, busy bool) {
	g.mu.Lock()
	c.busy = busy
	if !busy {
		c.since = time.Now()
	}
	g.mu.Unlock()
}

// held is the number of connections counted now.
func (g *connGuard) held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.conns)
}

// connSourceKey is the source network of c's remote address.
func connSourceKey(c net.Conn) netip.Prefix {
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return netip.Prefix{}
	}
	return pairing.SourceKey(ap.Addr())
}

// guardListener counts every accepted connection in g.
type guardListener struct {
	net.Listener
	g *connGuard
}

func (l *guardListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if gc, ok := l.g.admit(c); ok {
			return gc, nil
		}
		c.Close()
	}
}

// connState is the http.Server ConnState: it tells the connection's guard
// whether it is serving a request (StateActive) or waiting (new, idle).
func connState(c net.Conn, st http.ConnState) {
	gc := guardedOf(c)
	if gc == nil {
		return
	}
	switch st {
	case http.StateActive:
		gc.g.setBusy(gc, true)
	case http.StateIdle:
		gc.g.setBusy(gc, false)
	case http.StateHijacked, http.StateClosed:
		gc.once.Do(func() { gc.g.release(gc) })
	}
}

// guardedOf finds the guardedConn under the wrappers the listeners put on
// a connection.
func guardedOf(c net.Conn) *guardedConn {
	for {
		switch x := c.(type) {
		case *guardedConn:
			return x
		case *tls.Conn:
			c = x.NetConn()
		case *taggedConn:
			c = x.Conn
		case *peekedConn:
			c = x.Conn
		default:
			return nil
		}
	}
}
