package mesh

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"strconv"

	"tailscale.com/client/local"
	"tailscale.com/paths"
	"tailscale.com/safesocket"
)

// systemLocalAPI is the LocalAPI client of the system's tailscaled.
//
// local.Client decorates a failed dial (a *net.OpError) with a hint it gets
// by running `systemctl show tailscaled.service` on Linux
// (tailscaledConnectHint, tailscale.com/client/local/local.go at v1.102.5).
// Discovery retries every 15-45 s for as long as tailscaled is absent, so
// on a machine without Tailscale that was a process spawned twice a minute,
// all day, by an idle tray. Its dialer here is the client's default one
// (defaultDialer, same file) with the error wrapped in a type the hint code
// does not match; the state shown is "not running" either way.
func systemLocalAPI() *local.Client { return localAPIAt("") }

// localAPIAt is that client for the tailscaled socket at path; "" is the
// platform's default, where the macOS GUI's loopback TCP port is tried
// first, as local.Client does.
func localAPIAt(path string) *local.Client {
	return &local.Client{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != "local-tailscaled.sock:80" {
			return nil, fmt.Errorf("unexpected LocalAPI address %q", addr)
		}
		var (
			c   net.Conn
			err error
		)
		if port, _, perr := safesocket.LocalTCPPortAndToken(); path == "" && perr == nil {
			var d net.Dialer
			c, err = d.DialContext(ctx, "tcp", "127.0.0.1:"+strconv.Itoa(port))
		} else {
			c, err = safesocket.ConnectContext(ctx, cmp.Or(path, paths.DefaultTailscaledSocket()))
		}
		if err != nil {
			return nil, &localAPIDialError{err: err}
		}
		return c, nil
	}}
}

// localAPIDialError is a failed connection to tailscaled.
type localAPIDialError struct{ err error }

func (e *localAPIDialError) Error() string { return "tailscaled is not reachable: " + e.err.Error() }
func (e *localAPIDialError) Unwrap() error { return e.err }
