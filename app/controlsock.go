package app

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
)

// The control socket: the owner's CLI, tray and UI process reach the
// control API over a Unix-domain socket, not the loopback TCP port. Every
// local user can open connections to 127.0.0.1 (and owns all of 127/8),
// so no per-source limit on the TCP port can keep the owner's slot free;
// the socket (mode 0600 in a 0700 directory, each connection's peer uid
// checked against ours with SO_PEERCRED / LOCAL_PEERCRED) admits the
// owner's processes only, whatever floods the TCP port. The TCP port stays
// for peers, phones, browsers and agents. Tailscale's LocalAPI is cut the
// same way (tailscaled.sock).
//
// The control token is still required on the socket: a second factor that
// costs nothing (the socket's clients read it from daemon.json like before)
// and keeps one rule for the local owner whichever way they arrive (the TCP
// port still admits the owner with it, for platforms without the socket).

const controlSockName = "control.sock"

// maxSockPath is the longest socket path every supported kernel takes:
// sockaddr_un.sun_path is 104 bytes on darwin and the BSDs, 108 on Linux,
// both counting the terminating NUL.
const maxSockPath = 103

// controlSocketPath is where the node of stateDir puts its control
// socket: <state-dir>/control.sock, or, when that path is too long for
// sun_path, <runtime dir>/meshtray-<uid>/<hash of the state dir>.sock
// (a 0700 directory of ours; the runtime dir is $XDG_RUNTIME_DIR, else the
// temp dir). The path chosen is published in daemon.json.
func controlSocketPath(stateDir string) (string, error) {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return "", err
	}
	p := filepath.Join(abs, controlSockName)
	if len(p) <= maxSockPath {
		return p, nil
	}
	base := os.Getenv("XDG_RUNTIME_DIR")
	if base == "" || !filepath.IsAbs(base) {
		base = os.TempDir()
	}
	dir := filepath.Join(base, fmt.Sprintf("meshtray-%d", os.Getuid()))
	if err := privateDir(dir); err != nil {
		return "", err
	}
	h := sha256.Sum256([]byte(abs))
	p = filepath.Join(dir, hex.EncodeToString(h[:8])+".sock")
	if len(p) > maxSockPath {
		return "", fmt.Errorf("control socket: no directory with a short enough path (%s is %d bytes, the limit is %d)", p, len(p), maxSockPath)
	}
	return p, nil
}

// privateDir makes dir (0700) if missing and checks it is a real directory
// owned by us that nobody else can enter: in a shared temp dir another
// user could have made it first.
func privateDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("control socket dir: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("control socket dir: %w", err)
	}
	if !fi.IsDir() || !ownedByMe(fi) || fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("control socket dir %s is not a private directory of this user (mode %v); remove it", dir, fi.Mode())
	}
	return nil
}

// listenControl binds the control socket of stateDir (the caller holds the
// state-dir lock, so a socket file left there is a dead node's and is
// removed). It returns the listener, admitting only connections from our
// own uid, and the path. On platforms without peer credentials it returns
// a nil listener and "": clients use the loopback port.
func listenControl(stateDir string, log *slog.Logger) (net.Listener, string, error) {
	if !peerCredSupported {
		return nil, "", nil
	}
	p, err := controlSocketPath(stateDir)
	if err != nil {
		return nil, "", err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, "", fmt.Errorf("control socket: %w", err)
	}
	// The state dir is 0700 already; the mode of the socket file is the
	// second lock (umask is process-wide, so chmod rather than rely on it).
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
	if err != nil {
		return nil, "", fmt.Errorf("control socket: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(p, 0o600); err != nil {
		ln.Close()
		return nil, "", fmt.Errorf("control socket: %w", err)
	}
	return &peerCredListener{UnixListener: ln, uid: os.Getuid(), log: log}, p, nil
}

// peerCredListener accepts only connections whose peer process runs as
// uid; others are closed at once (and logged at debug).
type peerCredListener struct {
	*net.UnixListener
	uid int
	log *slog.Logger
}

func (l *peerCredListener) Accept() (net.Conn, error) {
	for {
		c, err := l.UnixListener.AcceptUnix()
		if err != nil {
			return nil, err
		}
		uid, err := peerUID(c)
		if err == nil && uid == l.uid {
			return c, nil
		}
		l.log.Debug("control socket: connection from another user refused", "uid", uid, "err", err)
		c.Close()
	}
}
