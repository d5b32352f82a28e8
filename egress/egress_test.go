package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"
)

func TestAllowed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1", false}, {"127.255.0.9", false}, {"::1", false}, {"::ffff:127.0.0.1", false},
		{"0.0.0.0", false}, {"0.1.2.3", false}, {"::", false},
		{"169.254.169.254", false}, {"169.254.1.1", false}, {"fe80::1", false},
		{"fd00:ec2::254", false}, {"100.100.100.200", false}, {"224.0.0.251", false}, {"ff02::fb", false},
		{"192.168.1.20", true}, {"10.0.0.1", true}, {"100.101.102.103", true}, {"fd7a:115c:a1e0::1", true}, {"2001:db8::1", true},
	} {
		if got := Allowed(netip.MustParseAddr(c.addr)); got != c.ok {
			t.Errorf("Allowed(%s) = %v, want %v", c.addr, got, c.ok)
		}
	}
}

// TestDialerChecksTheResolvedAddress: the check runs on the address
// dialled, after resolution, and only for a ctx from the network.
func TestDialerChecksTheResolvedAddress(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	d := Dialer(&net.Dialer{Timeout: 5 * time.Second})
	ctx := context.Background()
	// "localhost" is resolved (the hosts file) before the check sees it.
	if _, err := d.DialContext(FromNetwork(ctx), "tcp", net.JoinHostPort("localhost", port)); !errors.Is(err, ErrRefused) {
		t.Errorf("network dial to localhost: %v, want ErrRefused", err)
	}
	if _, err := d.DialContext(FromNetwork(ctx), "tcp", ln.Addr().String()); !errors.Is(err, ErrRefused) {
		t.Errorf("network dial to 127.0.0.1: %v, want ErrRefused", err)
	}
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("local dial: %v", err)
	}
	c.Close()
	if err := CheckHost(FromNetwork(ctx), nil, "localhost"); !errors.Is(err, ErrRefused) {
		t.Errorf("CheckHost(localhost): %v", err)
	}
	if err := CheckHost(FromNetwork(ctx), nil, "192.0.2.7"); err != nil {
		t.Errorf("CheckHost(192.0.2.7): %v", err)
	}
}
