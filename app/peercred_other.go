//go:build !linux && !darwin

package app

import (
	"errors"
	"net"
)

// peerCredSupported is false here (Windows and the rest): no control
// socket; the owner's clients use the loopback port and the control token
// as before.
const peerCredSupported = false

func peerUID(*net.UnixConn) (int, error) {
	return -1, errors.New("peer credentials not supported on this platform")
}
