package tray

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gofrs/flock"
)

// One tray per user: the tray mode takes an exclusive lock in
// the user's runtime directory, whatever its state dir, so a second
// `meshtray` with another --state-dir does not put a second icon and a
// second node in the same session. `meshtray serve` does not take it: any
// number of headless nodes may run, one per state dir (app's state lock).

// trayLockName is the lock file under the user's runtime (or cache) dir.
const trayLockName = "tray.lock"

// trayHolder is what the running tray writes into its lock file, for the
// message of the next one.
type trayHolder struct {
	PID      int    `json:"pid"`
	StateDir string `json:"state_dir"`
}

// errTrayRunning is returned when this user's tray already runs.
type errTrayRunning struct{ holder trayHolder }

func (e *errTrayRunning) Error() string {
	s := "the meshtray tray is already running"
	if e.holder.PID > 0 {
		s += fmt.Sprintf(" (pid %d)", e.holder.PID)
	}
	if e.holder.StateDir != "" {
		s += " on state dir " + e.holder.StateDir
	}
	return s + ": its icon is in the system tray, and `meshtray status` talks to it (one tray per user; `meshtray serve --state-dir DIR` runs more nodes headless)"
}

// trayLockDir is where the per-user lock lives: $XDG_RUNTIME_DIR/meshtray
// when it is set (XDG Base Directory Specification: the per-user runtime
// dir, removed at logout, meant for such files), else the user's cache dir
// (os.UserCacheDir: $XDG_CACHE_HOME or ~/.cache, ~/Library/Caches on
// macOS, %LocalAppData% on Windows).
func trayLockDir() (string, error) {
	if rt := os.Getenv("XDG_RUNTIME_DIR"); rt != "" && filepath.IsAbs(rt) {
		return filepath.Join(rt, "meshtray"), nil
	}
	c, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no runtime or cache dir for the tray lock: %w", err)
	}
	return filepath.Join(c, "meshtray"), nil
}

// trayLock is the held per-user lock.
type trayLock struct {
	fl *flock.Flock
}

// acquireTrayLock takes this user's tray lock without waiting and records
// the pid and state dir in it. It returns *errTrayRunning when another
// tray holds it.
func acquireTrayLock(stateDir string) (*trayLock, error) {
	dir, err := trayLockDir()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tray lock: %w", err)
	}
	path := filepath.Join(dir, trayLockName)
	fl := flock.New(path)
	ok, err := fl.TryLock()
	if err != nil {
		return nil, fmt.Errorf("tray lock %s: %w", path, err)
	}
	if !ok {
		var h trayHolder
		if b, err := os.ReadFile(path); err == nil {
			_ = json.Unmarshal(b, &h) // a holder still writing it: no details
		}
		return nil, &errTrayRunning{holder: h}
	}
	if abs, err := filepath.Abs(stateDir); err == nil {
		stateDir = abs
	}
	b, _ := json.Marshal(trayHolder{PID: os.Getpid(), StateDir: stateDir})
	// The lock is advisory and the file ours while we hold it.
	if err := os.WriteFile(path, b, 0o600); err != nil {
		fl.Unlock()
		return nil, fmt.Errorf("tray lock %s: %w", path, err)
	}
	return &trayLock{fl: fl}, nil
}

// release empties the lock file and drops the lock.
func (l *trayLock) release() error {
	if l == nil {
		return nil
	}
	_ = os.WriteFile(l.fl.Path(), nil, 0o600)
	return l.fl.Close()
}
