package app

import (
	"net"

	"golang.org/x/sys/unix"
)

const peerCredSupported = true

// peerUID is the uid of the process at the other end of c (SO_PEERCRED,
// unix(7): the credentials at connect time).
func peerUID(c *net.UnixConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	uid := -1
	var serr error
	if err := rc.Control(func(fd uintptr) {
		var cr *unix.Ucred
		cr, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if serr == nil {
			uid = int(cr.Uid)
		}
	}); err != nil {
		return -1, err
	}
	return uid, serr
}
