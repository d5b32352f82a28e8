package app

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/gofrs/flock"

	"meshtray/pairing"
)

// Files in the state dir.
const (
	lockFile     = "meshtray.lock" // flock held by the running node; holds its pid
	daemonFile   = "daemon.json"   // how local clients reach the running node (0600)
	settingsFile = "settings.json" // runtime toggles (0600)
	keychainFile = "keychain.json" // --keychain file backend (0600)
	keychainLock = "keychain.lock" // serialises keychain index updates across processes
	logDir       = "logs"          // log files of the tray app
)

// ErrAlreadyRunning is returned by AcquireLock when another node holds the
// state dir; PID is the holder's process id when it could be read.
type ErrAlreadyRunning struct {
	StateDir string
	PID      int
}

func (e *ErrAlreadyRunning) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("already running (pid %d) on state dir %s", e.PID, e.StateDir)
	}
	return fmt.Sprintf("already running on state dir %s", e.StateDir)
}

// StateLock is the exclusive lock that makes one node per state dir.
type StateLock struct {
	fl   *flock.Flock
	path string
}

// AcquireLock creates the state dir (0700) and takes its lock without
// waiting. It returns *ErrAlreadyRunning when another process holds it.
func AcquireLock(stateDir string) (*StateLock, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	path := filepath.Join(stateDir, lockFile)
	fl := flock.New(path)
	ok, err := fl.TryLock()
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if !ok {
		pid := 0
		if b, err := os.ReadFile(path); err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		return nil, &ErrAlreadyRunning{StateDir: stateDir, PID: pid}
	}
	// The lock is advisory and the file ours: record the pid for the error
	// message of the next process.
	if err := os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		fl.Unlock()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return &StateLock{fl: fl, path: path}, nil
}

// Release drops the lock.
func (l *StateLock) Release() error {
	if l == nil {
		return nil
	}
	_ = os.WriteFile(l.path, nil, 0o600)
	return l.fl.Unlock()
}

// DaemonInfo is what a running node publishes in the state dir so local
// clients (the CLI, the UI process) can reach its control surface.
type DaemonInfo struct {
	PID   int    `json:"pid"`
	Port  int    `json:"port"`
	Token string `json:"token"` // the control token: grants local-owner access
}

// LogValue keeps the control token out of logs.
func (d DaemonInfo) LogValue() string { return fmt.Sprintf("pid=%d port=%d", d.PID, d.Port) }

func newControlToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func writeDaemonInfo(stateDir string, d DaemonInfo) error {
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(stateDir, daemonFile), b, 0o600)
}

// ReadDaemonInfo reads the running node's daemon.json; os.ErrNotExist when
// no node has published one.
func ReadDaemonInfo(stateDir string) (DaemonInfo, error) {
	var d DaemonInfo
	b, err := os.ReadFile(filepath.Join(stateDir, daemonFile))
	if err != nil {
		return d, err
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("%s: %w", daemonFile, err)
	}
	return d, nil
}

func removeDaemonInfo(stateDir string) {
	_ = os.Remove(filepath.Join(stateDir, daemonFile))
}

// writeFileAtomic writes b to path through a temp file in the same dir,
// fsynced and renamed over path, so a crash leaves the old or the new file.
func writeFileAtomic(path string, b []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Settings are the runtime toggles the owner flips while the node runs; they
// survive restarts in settings.json.
type Settings struct {
	A2AEnabled bool `json:"a2a_enabled"`
	LAN        bool `json:"lan"`
	// CapabilityPolicies overrides the built-in approval policy per capability.
	CapabilityPolicies map[string]pairing.Policy `json:"capability_policies,omitempty"`
}

// settingsStore persists Settings.
type settingsStore struct {
	path string
	mu   sync.Mutex
	s    Settings // guarded by mu
}

func openSettings(stateDir string) (*settingsStore, error) {
	st := &settingsStore{path: filepath.Join(stateDir, settingsFile)}
	b, err := os.ReadFile(st.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		if err := json.Unmarshal(b, &st.s); err != nil {
			return nil, fmt.Errorf("%s: %w (fix or remove it)", st.path, err)
		}
	}
	return st, nil
}

// Get returns a copy of the settings.
func (st *settingsStore) Get() Settings {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.s
	s.CapabilityPolicies = maps.Clone(s.CapabilityPolicies)
	return s
}

// Update applies f to the settings and writes them; on a write error the
// in-memory settings are left unchanged.
func (st *settingsStore) Update(f func(*Settings)) (Settings, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	next := st.s
	next.CapabilityPolicies = maps.Clone(next.CapabilityPolicies)
	f(&next)
	b, err := json.MarshalIndent(next, "", "  ")
	if err != nil {
		return st.s, err
	}
	if err := writeFileAtomic(st.path, b, 0o600); err != nil {
		return st.s, fmt.Errorf("save settings: %w", err)
	}
	st.s = next
	return next, nil
}
