package egress

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestCause: real failed connections read as a person's words, without
// the URL or Go's chain of prefixes.
func TestCause(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	_, dialErr := net.Dial("tcp", closed)
	_, getErr := (&http.Client{Timeout: 5 * time.Second}).Get("https://" + closed + "/mesh/hello")
	d := &net.Dialer{ControlContext: Control}
	_, policyErr := d.DialContext(FromNetwork(context.Background()), "tcp", closed)
	_, dnsErr := net.DefaultResolver.LookupHost(context.Background(), "no-such-host.invalid")
	for _, c := range []struct {
		what string
		err  error
		want string
	}{
		{"dial", dialErr, "connection refused"},
		{"GET", getErr, "connection refused"},
		{"egress policy", policyErr, "the address is not allowed for a request from the network"},
		{"DNS", dnsErr, "cannot resolve no-such-host.invalid"},
		{"timeout", context.DeadlineExceeded, "no answer in time"},
		{"other", errors.New("tls: handshake failure"), "tls: handshake failure"},
	} {
		if c.err == nil {
			t.Fatalf("%s: no error", c.what)
		}
		got := Cause(c.err)
		if got != c.want || strings.Contains(got, closed) {
			t.Errorf("Cause(%s: %v) = %q, want %q", c.what, c.err, got, c.want)
		}
	}
}
