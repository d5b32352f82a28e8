package pairing

import (
	"net/netip"
	"testing"
)

// TestSourceKeyBuckets: IPv4 per address, IPv6 per /64, all of loopback as
// one source.
func TestSourceKeyBuckets(t *testing.T) {
	t.Parallel()
	same := [][2]string{
		{"127.0.0.1", "127.255.3.4"},
		{"127.0.0.1", "::1"},
		{"::ffff:127.0.0.1", "127.0.0.9"},
		{"2001:db8:1:2::1", "2001:db8:1:2:ffff::9"},
		{"::ffff:10.0.0.1", "10.0.0.1"},
	}
	for _, p := range same {
		if SourceKey(netip.MustParseAddr(p[0])) != SourceKey(netip.MustParseAddr(p[1])) {
			t.Errorf("%s and %s: different sources", p[0], p[1])
		}
	}
	differ := [][2]string{{"10.0.0.1", "10.0.0.2"}, {"2001:db8:1:2::1", "2001:db8:1:3::1"}, {"127.0.0.1", "10.0.0.1"}}
	for _, p := range differ {
		if SourceKey(netip.MustParseAddr(p[0])) == SourceKey(netip.MustParseAddr(p[1])) {
			t.Errorf("%s and %s: one source", p[0], p[1])
		}
	}
}
