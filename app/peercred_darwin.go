package app

import (
	"net"

	"golang.org/x/sys/unix"
)

const peerCredSupported = true

// peerUID is the uid of the process at the other end of c
// (LOCAL_PEERCRED, unix(4): the xucred of the connecting process, as
// getpeereid(3) reads it).
func peerUID(c *net.UnixConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	uid := -1
	var serr error
	if err := rc.Control(func(fd uintptr) {
		var cr *unix.Xucred
		cr, serr = unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
		if serr == nil {
			uid = int(cr.Uid)
		}
	}); err != nil {
		return -1, err
	}
	return uid, serr
}
