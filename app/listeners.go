package app

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	"meshtray/pairing"
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
		return pairing.WithListener(ctx, tc.kind)
	}
	return ctx
}

// listenerSet runs the node's listeners on one http.Server: plain HTTP on
// loopback, HTTPS with the identity certificate on each remote address, and
// reconciles the remote ones when the wanted addresses change.
type listenerSet struct {
	srv  *http.Server
	port int
	tls  *tls.Config
	log  *slog.Logger

	mu     sync.Mutex
	remote map[netip.Addr]*remoteListener // guarded by mu
	wg     sync.WaitGroup
	closed bool // guarded by mu
}

type remoteListener struct {
	kind pairing.Listener
	ln   net.Listener
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

// listenLoopback binds the plain-HTTP loopback listener, 127.0.0.1:port
// (port 0: any free port, for tests). Serve it with serveLoopback.
func listenLoopback(port int) (net.Listener, error) {
	return net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
}

// serveLoopback serves the loopback listener from listenLoopback.
func (s *listenerSet) serveLoopback(ln net.Listener) {
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
		if s.remote == nil {
			s.remote = make(map[netip.Addr]*remoteListener)
		}
		s.remote[addr] = &remoteListener{kind: kind, ln: ln}
		s.serve(tls.NewListener(&taggedListener{Listener: ln, kind: kind}, s.tls))
		s.log.Info("listening", "kind", kind, "addr", "https://"+ap.String())
	}
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
