package app

import (
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
)

// TestConnGuardEvictsOldestWaiting: at the total cap a new connection
// closes the oldest waiting one, never one serving a request; with every
// slot serving, the new one is refused.
func TestConnGuardEvictsOldestWaiting(t *testing.T) {
	g := newConnGuard("test", connLimits{Total: 3, PerSource: 2}, slog.New(slog.DiscardHandler))
	pipe := func(from string) net.Conn {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		return addrConn{Conn: a, remote: from}
	}
	c1, ok1 := g.admit(pipe("10.0.0.1:1"))
	time.Sleep(time.Millisecond)
	c2, ok2 := g.admit(pipe("10.0.0.2:1"))
	time.Sleep(time.Millisecond)
	c3, ok3 := g.admit(pipe("10.0.0.3:1"))
	if !ok1 || !ok2 || !ok3 {
		t.Fatal("first three refused")
	}
	g.setBusy(c1, true)
	if _, ok := g.admit(pipe("10.0.0.4:1")); !ok {
		t.Fatal("fourth refused though two were waiting")
	}
	if _, err := c2.Read(make([]byte, 1)); err == nil {
		t.Fatal("the oldest waiting connection was not closed")
	}
	if _, present := g.conns[c1]; !present {
		t.Fatal("a busy connection was evicted")
	}
	g.setBusy(c3, true)
	// Per source: a second connection of 10.0.0.1 fits (cap 2) by evicting
	// the only waiting one, 10.0.0.4's.
	c5, ok := g.admit(pipe("10.0.0.1:2"))
	if !ok {
		t.Fatal("refused with one waiting connection to evict")
	}
	g.setBusy(c5, true)
	if _, ok := g.admit(pipe("10.0.0.5:1")); ok {
		t.Fatal("admitted with every slot serving a request")
	}
	if _, ok := g.admit(pipe("10.0.0.1:3")); ok {
		t.Fatal("admitted a third connection of one source over its cap with none of its own waiting")
	}
}

type addrConn struct {
	net.Conn
	remote string
}

func (c addrConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.ParseIP(strings.Split(c.remote, ":")[0]), Port: 1}
}
