package app

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofrs/flock"

	"meshtray/keychain"
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
	// keychainBackendFile records the keychain backend the state dir's
	// identity and grants live in ("os" or "file"), so another one is
	// refused instead of silently making a new device.
	keychainBackendFile = "keychain.backend"
)

// lockGrace is how long AcquireLock retries a held lock: a client probing
// whether a node runs (Dial) holds it for an instant.
const lockGrace = 250 * time.Millisecond

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

// AcquireLock creates the state dir (0700) and takes its lock, retrying
// for lockGrace (a client checking whether a node runs holds it for an
// instant). It returns *ErrAlreadyRunning when another process holds it.
func AcquireLock(stateDir string) (*StateLock, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	path := filepath.Join(stateDir, lockFile)
	fl := flock.New(path)
	ctx, cancel := context.WithTimeout(context.Background(), lockGrace)
	ok, err := fl.TryLockContext(ctx, 10*time.Millisecond)
	cancel()
	if errors.Is(err, context.DeadlineExceeded) {
		ok, err = false, nil
	}
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

// stateLockHeld reports whether a process holds the state dir's lock, i.e.
// a node runs on it. When the lock can be taken it is released at once
// (AcquireLock retries over that instant). An error (say, an unreadable
// state dir) is reported as held: the caller then learns more from
// trying the node.
func stateLockHeld(stateDir string) bool {
	path := filepath.Join(stateDir, lockFile)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return false
	}
	fl := flock.New(path)
	ok, err := fl.TryLock()
	if err != nil {
		return true
	}
	if ok {
		fl.Unlock()
		return false
	}
	return true
}

// secureStateDir makes an existing state dir private (0700) when its group
// or others may enter it (a dir made by hand, or by another program), and
// says so on log. A dir shared by design (sticky bit, as /tmp) or owned by
// someone else is refused rather than changed.
func secureStateDir(dir string, log *slog.Logger) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	perm := fi.Mode().Perm()
	if perm&0o077 == 0 || runtime.GOOS == "windows" { // Windows: ACLs, not mode bits
		return nil
	}
	if fi.Mode()&os.ModeSticky != 0 || !ownedByMe(fi) {
		return fmt.Errorf("state dir %s is shared (mode %v) and not this user's own: choose a private directory with --state-dir", dir, fi.Mode())
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("state dir %s is accessible to others (mode %v) and cannot be made private: %w", dir, perm, err)
	}
	log.Warn("state dir was accessible to other users; made private (0700)", "dir", dir, "was", fmt.Sprintf("%#o", perm))
	return nil
}

// ownedByMe reports whether fi belongs to this process's user, where the
// platform says (the Uid of a Unix stat); true where it cannot tell.
func ownedByMe(fi fs.FileInfo) bool {
	uid, ok := fileUID(fi)
	return !ok || uid == uint64(os.Getuid())
}

// fileUID is the owner of fi (the Uid of a Unix stat); ok is false where
// the platform has none.
func fileUID(fi fs.FileInfo) (uid uint64, ok bool) {
	v := reflect.ValueOf(fi.Sys())
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return 0, false
	}
	f := v.FieldByName("Uid")
	if !f.IsValid() || !f.CanUint() {
		return 0, false
	}
	return f.Uint(), true
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
	// Socket is the control socket's path (see controlsock.go); empty on
	// platforms without one, where clients use Port.
	Socket string `json:"socket,omitempty"`
}

// LogValue implements slog.LogValuer without the control token.
func (d DaemonInfo) LogValue() slog.Value {
	return slog.GroupValue(slog.Int("pid", d.PID), slog.Int("port", d.Port), slog.String("socket", d.Socket))
}

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
	return keychain.WriteFile(filepath.Join(stateDir, daemonFile), b)
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

// checkKeychainBackend refuses to open the state dir with another keychain
// backend than the one its identity and grants were created in: the other
// backend holds none of them, so the node would silently become a new
// device with no pairings. The backend is recorded in keychain.backend; a
// state dir from before that record counts as "file" when keychain.json
// exists. It returns the recorded backend ("" when none).
func checkKeychainBackend(dir, want string) (string, error) {
	recorded := ""
	b, err := os.ReadFile(filepath.Join(dir, keychainBackendFile))
	switch {
	case err == nil:
		recorded = strings.TrimSpace(string(b))
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	default:
		if _, err := os.Stat(filepath.Join(dir, keychainFile)); err == nil {
			recorded = KeychainFile
		}
	}
	if recorded == "" || recorded == want {
		return recorded, nil
	}
	return recorded, &BackendMismatchError{StateDir: dir, Recorded: recorded, Want: want}
}

// recordKeychainBackend writes the backend the state dir's identity lives in.
func recordKeychainBackend(dir, backend string) error {
	return keychain.WriteFile(filepath.Join(dir, keychainBackendFile), []byte(backend+"\n"))
}

// BackendMismatchError: the state dir's identity and grants are in another
// keychain backend than the one asked for.
type BackendMismatchError struct {
	StateDir       string
	Recorded, Want string
}

func (e *BackendMismatchError) Error() string {
	where := map[string]string{
		KeychainOS:   "the OS keychain",
		KeychainFile: "the file keychain (" + filepath.Join(e.StateDir, keychainFile) + ")",
	}
	undo := filepath.Join(e.StateDir, keychainBackendFile)
	if e.Recorded == KeychainFile {
		undo = filepath.Join(e.StateDir, keychainFile) + " and " + undo
	}
	return fmt.Sprintf("state dir %s keeps this device's identity and grants in %s; --keychain %s would start a new device with none of its pairings.\n"+
		"Start it with --keychain %s (or keychain = %q in %s).\n"+
		"To start over as a new device on purpose, move %s away and pair your devices again (or use another --state-dir)",
		e.StateDir, where[e.Recorded], e.Want, e.Recorded, e.Recorded, filepath.Join(e.StateDir, "config.toml"), undo)
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
	if err := keychain.WriteFile(st.path, b); err != nil {
		return st.s, fmt.Errorf("save settings: %w", err)
	}
	st.s = next
	return next, nil
}
