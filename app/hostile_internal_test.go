//go:build linux

package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"meshtray/pairing"
)

// hostileNSPrefix names this file's namespaces: mthostile-<pid>-<seq>-{l,r}.
const hostileNSPrefix = "mthostile-"

var hostileSeq atomic.Int32

func hostileRunIP(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// hostileLab makes two namespaces joined by a veth pair: "l" holds
// 10.78.0.1 (the listener), "r" holds the given client addresses of
// 10.78.0.0/24. Both ends are created inside the namespaces: no packet
// reaches the machine's interfaces.
func hostileLab(t *testing.T, clients ...string) (l, r string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root (CI runs as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("ip is needed by this test: run `apt-get install -y iproute2`")
	}
	tag := fmt.Sprintf("%s%d-%d-", hostileNSPrefix, os.Getpid(), hostileSeq.Add(1))
	l, r = tag+"l", tag+"r"
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", l).Run()
		exec.Command("ip", "netns", "del", r).Run()
	})
	hostileRunIP(t, "netns", "add", l)
	hostileRunIP(t, "netns", "add", r)
	hostileRunIP(t, "-n", l, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", r)
	hostileRunIP(t, "-n", l, "addr", "add", "10.78.0.1/24", "dev", "eth0")
	for _, a := range clients {
		hostileRunIP(t, "-n", r, "addr", "add", a+"/24", "dev", "eth0")
	}
	for _, ns := range []string{l, r} {
		hostileRunIP(t, "-n", ns, "link", "set", "eth0", "up")
		hostileRunIP(t, "-n", ns, "link", "set", "lo", "up")
	}
	return l, r
}

// inNetns runs f on a thread inside namespace ns (setns(2) on a locked
// thread, back home before unlocking; a thread that cannot go back ends
// locked). Sockets f creates stay in ns.
func inNetns(ns string, f func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer home.Close()
		target, err := os.Open("/run/netns/" + ns)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		err = f()
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- err
	}()
	return <-ch
}

// TestOneLANHostCannotTakeTheListener: 256 idle TLS connections from one
// LAN address (the old global cap) leave another device of the LAN its
// request; the flooder holds at most its per-source share.
func TestOneLANHostCannotTakeTheListener(t *testing.T) {
	const attacker, phone = "10.78.0.2", "10.78.0.3"
	lns, rns := hostileLab(t, attacker, phone)
	ls, id := listenerFixture(t)
	ls.port = 8443 // the lab's own address: any port is free
	// Reconcile binds inside the lab namespace: its socket lives there.
	if err := inNetns(lns, func() error {
		ls.Reconcile(map[netip.Addr]pairing.Listener{netip.MustParseAddr("10.78.0.1"): pairing.ListenerLAN})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(ls.Remote()) != 1 {
		t.Fatal("LAN listener not up")
	}
	addr := ls.Remote()[0].Addr

	dial := func(from string, d time.Duration) (*tls.Conn, error) {
		var nc net.Conn
		err := inNetns(rns, func() (err error) {
			dl := net.Dialer{Timeout: d, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
			nc, err = dl.Dial("tcp", addr)
			return
		})
		if err != nil {
			return nil, err
		}
		c := tls.Client(nc, pairing.PinnedTLSConfig(id.Fingerprint))
		c.SetDeadline(time.Now().Add(d))
		if err := c.Handshake(); err != nil {
			c.Close()
			return nil, err
		}
		c.SetDeadline(time.Time{})
		return c, nil
	}
	var held []*tls.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := range 256 {
		c, err := dial(attacker, 5*time.Second)
		if err != nil {
			t.Fatalf("attacker connection %d: %v", i, err)
		}
		held = append(held, c)
	}
	var nc net.Conn
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		Proxy: nil, TLSClientConfig: pairing.PinnedTLSConfig(id.Fingerprint), DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			err := inNetns(rns, func() (err error) {
				dl := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(phone)}}
				nc, err = dl.DialContext(ctx, network, a)
				return
			})
			return nc, err
		}}}
	if got := getJSON(t, hc, "https://"+addr+"/"); got["listener"] != "lan" {
		t.Fatalf("the phone's request: %v", got)
	}
}
