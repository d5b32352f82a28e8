package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"meshtray/egress"
	"meshtray/pairing"
)

// Listener bounds.
const (
	// sniffTimeout bounds how long a new loopback connection may take to
	// send its first byte (which says TLS or plain HTTP). The connections
	// waiting for it count against loopbackLimits (connguard.go).
	sniffTimeout = 5 * time.Second
	// tlsHandshakeByte is the first byte of a TLS connection: the record
	// type of a handshake (RFC 8446 §5.1, content type 22).
	tlsHandshakeByte = 0x16
)

// taggedListener marks every connection it accepts with the listener kind,
// so the auth middleware knows where a request arrived: only the loopback
// listener can carry the local owner.
type taggedListener struct {
	net.Listener
	kind pairing.Listener
}

type taggedConn struct {
	net.Conn
	kind pairing.Listener
}

func (l *taggedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &taggedConn{Conn: c, kind: l.kind}, nil
}

// connContext is the http.Server ConnContext: it copies the listener tag
// into every request's context.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if tc, ok := c.(*taggedConn); ok {
		if tc.kind != pairing.ListenerLoopback {
			// Outbound calls this request causes follow the egress policy.
			ctx = egress.FromNetwork(ctx)
		}
		return pairing.WithListener(ctx, tc.kind)
	}
	return ctx
}

// listenerSet runs the node's listeners on one http.Server: loopback (TLS
// with the identity certificate for peers, plain HTTP for browsers and the
// local owner where there is no control socket, on the same port), HTTPS
// on each remote address, the control socket, and reconciles the remote
// ones when the wanted addresses change. Every TCP listener counts its
// connections in a connGuard (loopbackLimits, remoteLimits); the server's
// ConnState must be connState.
type listenerSet struct {
	srv  *http.Server
	port int
	tls  *tls.Config
	log  *slog.Logger

	mu     sync.Mutex
	remote map[netip.Addr]*remoteListener // guarded by mu
	// loopbackGuard counts the loopback port's connections; guarded by mu.
	loopbackGuard *connGuard
	wg            sync.WaitGroup
	closed        bool // guarded by mu
}

type remoteListener struct {
	kind  pairing.Listener
	ln    net.Listener
	guard *connGuard
}

// serve runs ln on the server until it is closed.
func (s *listenerSet) serve(ln net.Listener) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			s.log.Warn("listener stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
}

// listenLoopback binds the loopback listener, 127.0.0.1:port (port 0: any
// free port, for tests). Serve it with serveLoopback. A port in use gives
// an error that says so once, with what to do.
func listenLoopback(port int) (net.Listener, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln, nil
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("cannot listen on %s: the port is in use (another program, or a meshtray with another --state-dir?); choose another port with --port", addr)
	}
	var op *net.OpError
	if errors.As(err, &op) {
		err = op.Err // net.OpError repeats the address
	}
	return nil, fmt.Errorf("cannot listen on %s: %w", addr, err)
}

// serveLoopback serves the loopback listener from listenLoopback: a
// connection whose first byte opens a TLS handshake is served over TLS
// with the identity certificate (a second meshtray on this machine pins it
// like any peer), any other as plain HTTP (the local owner's CLI, UI and
// browser). Both are tagged loopback.
func (s *listenerSet) serveLoopback(ln net.Listener) {
	g := newConnGuard(string(pairing.ListenerLoopback), loopbackLimits, s.log)
	s.mu.Lock()
	s.loopbackGuard = g
	s.mu.Unlock()
	s.serve(newSniffListener(&guardListener{Listener: ln, g: g}, s.tls, pairing.ListenerLoopback, sniffTimeout, s.log))
}

// serveControl serves the control socket (listenControl): plain HTTP,
// tagged loopback, so the requests on it meet exactly the local owner's
// rules of the loopback port (Host check, control token).
func (s *listenerSet) serveControl(ln net.Listener) {
	s.serve(&taggedListener{Listener: ln, kind: pairing.ListenerLoopback})
}

// Reconcile makes the remote HTTPS listeners match want (address → kind):
// it closes listeners on addresses no longer wanted and opens new ones. A
// bind failure is logged and retried on the next call.
func (s *listenerSet) Reconcile(want map[netip.Addr]pairing.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	for addr, rl := range s.remote {
		if k, ok := want[addr]; !ok || k != rl.kind {
			rl.ln.Close()
			delete(s.remote, addr)
			s.log.Info("stopped listening", "kind", rl.kind, "addr", addr.String())
		}
	}
	for addr, kind := range want {
		if _, ok := s.remote[addr]; ok {
			continue
		}
		ap := netip.AddrPortFrom(addr, uint16(s.port))
		ln, err := net.Listen("tcp", ap.String())
		if err != nil {
			s.log.Warn("cannot listen", "kind", kind, "addr", ap.String(), "err", err)
			continue
		}
		s.serveRemoteLocked(addr, kind, ln)
		s.log.Info("listening", "kind", kind, "addr", "https://"+ap.String())
	}
}

// serveRemoteLocked serves ln as the remote listener of addr: HTTPS with
// the identity certificate, its connections bounded by remoteLimits. The
// caller holds mu.
func (s *listenerSet) serveRemoteLocked(addr netip.Addr, kind pairing.Listener, ln net.Listener) *connGuard {
	if s.remote == nil {
		s.remote = make(map[netip.Addr]*remoteListener)
	}
	g := newConnGuard(string(kind)+" "+addr.String(), remoteLimits, s.log)
	s.remote[addr] = &remoteListener{kind: kind, ln: ln, guard: g}
	s.serve(tls.NewListener(&taggedListener{Listener: &guardListener{Listener: ln, g: g}, kind: kind}, s.tls))
	return g
}

// Remote lists the remote listeners, sorted by address.
func (s *listenerSet) Remote() []ListenerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ListenerStatus, 0, len(s.remote))
	for addr, rl := range s.remote {
		ap := netip.AddrPortFrom(addr, uint16(s.port)).String()
		out = append(out, ListenerStatus{Kind: rl.kind, Addr: ap, URL: "https://" + ap})
	}
	slices.SortFunc(out, func(a, b ListenerStatus) int { return strings.Compare(a.Addr, b.Addr) })
	return out
}

// Shutdown stops accepting, waits for requests in flight (until ctx ends),
// then for the serve goroutines.
func (s *listenerSet) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	s.wg.Wait()
	return err
}

// sniffListener accepts on a raw listener and hands out each connection
// once its first byte arrived (within timeout): as a *tls.Conn server side
// with cfg when that byte opens a TLS handshake, else as the plain
// connection, the byte put back; both tagged kind. The byte is read on a
// goroutine per new connection, so a silent client never blocks Accept.
// Close stops accepting, closes the connections still being read, and
// waits for every goroutine.
type sniffListener struct {
	raw     net.Listener
	cfg     *tls.Config
	kind    pairing.Listener
	timeout time.Duration
	log     *slog.Logger

	out    chan net.Conn
	closed chan struct{}
	once   sync.Once
	wg     sync.WaitGroup

	mu       sync.Mutex
	sniffing map[net.Conn]struct{} // guarded by mu; waiting for their first byte
	done     bool                  // guarded by mu
}

func newSniffListener(raw net.Listener, cfg *tls.Config, kind pairing.Listener, timeout time.Duration, log *slog.Logger) *sniffListener {
	l := &sniffListener{
		raw: raw, cfg: cfg, kind: kind, timeout: timeout, log: log,
		out:      make(chan net.Conn),
		closed:   make(chan struct{}),
		sniffing: make(map[net.Conn]struct{}),
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l
}

func (l *sniffListener) acceptLoop() {
	defer l.wg.Done()
	var delay time.Duration
	for {
		c, err := l.raw.Accept()
		if err != nil {
			select {
			case <-l.closed:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off as
			// net/http's Serve does, then try again.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			l.log.Warn("loopback accept failed; retrying", "err", err, "in", delay)
			select {
			case <-l.closed:
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		l.mu.Lock()
		if l.done {
			l.mu.Unlock()
			c.Close()
			continue
		}
		l.sniffing[c] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		go l.sniff(c)
	}
}

// sniff reads c's first byte and hands c to Accept.
func (l *sniffListener) sniff(c net.Conn) {
	defer l.wg.Done()
	var b [1]byte
	_ = c.SetReadDeadline(time.Now().Add(l.timeout))
	_, err := c.Read(b[:])
	l.mu.Lock()
	delete(l.sniffing, c)
	l.mu.Unlock()
	if err != nil || c.SetReadDeadline(time.Time{}) != nil {
		c.Close()
		return
	}
	var conn net.Conn = &taggedConn{Conn: &peekedConn{Conn: c, first: b[0], has: true}, kind: l.kind}
	if b[0] == tlsHandshakeByte {
		conn = tls.Server(conn, l.cfg)
	}
	select {
	case l.out <- conn:
	case <-l.closed:
		conn.Close()
	}
}

// Accept returns the next sniffed connection, or net.ErrClosed after Close.
func (l *sniffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.out:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close stops the listener and waits for its goroutines.
func (l *sniffListener) Close() error {
	var err error
	l.once.Do(func() {
		l.mu.Lock()
		l.done = true
		for c := range l.sniffing {
			c.Close()
		}
		l.mu.Unlock()
		close(l.closed)
		err = l.raw.Close()
		l.wg.Wait()
	})
	return err
}

// Addr is the raw listener's address.
func (l *sniffListener) Addr() net.Addr { return l.raw.Addr() }

// peekedConn gives back the byte sniffListener read before the rest.
type peekedConn struct {
	net.Conn
	first byte
	has   bool // first not read yet; only the connection's reader touches it
}

func (c *peekedConn) Read(p []byte) (int, error) {
	if c.has && len(p) > 0 {
		p[0] = c.first
		c.has = false
		return 1, nil
	}
	return c.Conn.Read(p)
}
