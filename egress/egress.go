// Package egress is the address policy for the outbound connections a
// request from the network can make this node open: adding a manual peer
// (POST /mesh/peers probes its hello), adding an external agent (POST
// /a2a/agents fetches its card), a reciprocation offer's URL (POST
// /pair/reciprocate) and pairing join. A caller on the LAN or the tailnet
// must not turn the node into a probe of its own machine: connections to
// loopback, link-local (which holds the cloud metadata services at
// 169.254.169.254) and the other cloud metadata addresses are refused for
// them. The local owner is not limited.
//
// The check is on the address actually dialled, after name resolution
// (net.Dialer.ControlContext runs once per address tried), so a DNS name
// that resolves to 127.0.0.1, a re-binding name, `localhost.` or
// `0x7f000001` cannot slip past a check of the URL's text.
//
// The package imports nothing of meshtray, so every package that dials
// can use it.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// ErrRefused is the error of a connection the policy refused.
var ErrRefused = errors.New("egress: address not allowed for a request from the network")

type networkKey struct{}

// FromNetwork marks ctx as serving a request that arrived over the
// network (a LAN or tailnet listener): connections dialled under it follow
// the policy.
func FromNetwork(ctx context.Context) context.Context {
	return context.WithValue(ctx, networkKey{}, true)
}

// IsFromNetwork reports whether ctx was marked by FromNetwork.
func IsFromNetwork(ctx context.Context) bool {
	v, _ := ctx.Value(networkKey{}).(bool)
	return v
}

// metadata are cloud instance-metadata addresses outside link-local:
// AWS's IPv6 IMDS and Alibaba Cloud's.
var metadata = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("100.100.100.200"),
}

// thisNetwork is 0.0.0.0/8 (RFC 791 "this network"): Linux connects
// 0.0.0.0 to the local host.
var thisNetwork = netip.MustParsePrefix("0.0.0.0/8")

// Allowed reports whether a request from the network may make us connect
// to a: not loopback (127/8, ::1), not this host's "this network" or
// unspecified addresses, not link-local (169.254/16, fe80::/10) or
// multicast, not a cloud metadata address. IPv4-mapped IPv6 addresses are
// judged as their IPv4 address.
func Allowed(a netip.Addr) bool {
	a = a.Unmap()
	switch {
	case !a.IsValid(),
		a.IsLoopback(),
		a.IsUnspecified(),
		a.Is4() && thisNetwork.Contains(a),
		a.IsLinkLocalUnicast(),
		a.IsMulticast():
		return false
	}
	for _, m := range metadata {
		if a == m {
			return false
		}
	}
	return true
}

// Check returns nil when ctx is not from the network or a is Allowed,
// else an error wrapping ErrRefused.
func Check(ctx context.Context, a netip.Addr) error {
	if !IsFromNetwork(ctx) || Allowed(a) {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrRefused, a.Unmap())
}

// Control is a net.Dialer.ControlContext: it applies Check to the address
// about to be connected (address is the resolved "ip:port").
func Control(ctx context.Context, network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		if !IsFromNetwork(ctx) {
			return nil
		}
		return fmt.Errorf("%w: %q is no IP address", ErrRefused, address)
	}
	return Check(ctx, ap.Addr())
}

// Dialer returns d (a new net.Dialer when nil) with Control as its
// ControlContext, keeping a ControlContext d had (run after the check).
func Dialer(d *net.Dialer) *net.Dialer {
	if d == nil {
		d = &net.Dialer{}
	}
	nd := *d
	prev := d.ControlContext
	nd.ControlContext = func(ctx context.Context, network, address string, c syscall.RawConn) error {
		if err := Control(ctx, network, address, c); err != nil {
			return err
		}
		if prev != nil {
			return prev(ctx, network, address, c)
		}
		return nil
	}
	return &nd
}

// CheckHost resolves host (a name or an IP literal, as a URL's Hostname
// gives it) and checks every address it resolves to: for a URL taken from
// a request now and dialled later. The dial itself should still go
// through Dialer, since the name may resolve differently then. Without a
// network ctx it does nothing.
func CheckHost(ctx context.Context, r *net.Resolver, host string) error {
	if !IsFromNetwork(ctx) {
		return nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return Check(ctx, a)
	}
	if r == nil {
		r = net.DefaultResolver
	}
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return fmt.Errorf("egress: resolve %q: %w", host, err)
	}
	for _, a := range addrs {
		if err := Check(ctx, a); err != nil {
			return err
		}
	}
	return nil
}
