//go:build linux

package app

import (
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// dialAsUID connects to the Unix socket path from a thread running as uid
// (setresuid(2) on this thread only, through the raw system call; the Go
// wrapper would change every thread), and back to root after. A thread
// that cannot go back stays locked and ends with its goroutine.
func dialAsUID(uid int, path string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), 0); e != 0 {
			runtime.UnlockOSThread()
			ch <- result{nil, e}
			return
		}
		c, err := net.Dial("unix", path)
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, 0, 0, 0); e == 0 {
			runtime.UnlockOSThread()
		}
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// TestControlSocketRefusesOtherUsers: a process of another uid that
// reaches the socket (its directory and mode opened up for the test) is
// disconnected at once, unserved; our own uid is served.
func TestControlSocketRefusesOtherUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to connect as another uid (CI runs as root)")
	}
	dir := t.TempDir()
	ln, path, err := listenControl(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan struct{}, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			served <- struct{}{}
			c.Write([]byte("x"))
			c.Close()
		}
	}()
	// Open the way for the other user: only the peer check stands.
	for _, p := range []string{filepath.Dir(dir), dir} {
		os.Chmod(p, 0o755)
	}
	os.Chmod(path, 0o777)
	other, err := dialAsUID(65534, path)
	if err != nil {
		t.Fatalf("dial as uid 65534: %v", err)
	}
	defer other.Close()
	other.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := other.Read(make([]byte, 1)); n != 0 {
		t.Errorf("another uid's connection was served (%v)", err)
	}
	select {
	case <-served:
		t.Error("the listener handed out another uid's connection")
	default:
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatalf("our own uid: %v", err)
	}
}
