// Package keychaintest starts a private freedesktop Secret Service for tests:
// a dbus-daemon with its own socket and config (no service activation, so
// nothing of the machine's session is started or reached) and
// gnome-keyring-daemon with an unlocked "login" collection, both in a temp
// HOME. Tests then use the real go-keyring code path (keychain.OpenOS)
// without touching the developer's own keyring.
//
// godbus caches the session bus connection process-wide on first use and
// go-keyring always uses that connection, so one test process can use one
// Secret Service, and it must be chosen before anything touches D-Bus. Hence
// the usual form is in TestMain:
//
//	func TestMain(m *testing.M) { keychaintest.Main(m) }
//
// and in tests:
//
//	keychaintest.Require(t) // fails unless Main started it
//	ks, err := keychain.OpenOS(keychaintest.ServiceName(t), filepath.Join(t.TempDir(), "keychain.lock"))
//
// ServiceName gives each test its own items, so tests may run in parallel
// on the one service. A child process (a meshtray binary under test, or this
// test binary re-executed) started with os.Environ() or Require(t).Env()
// talks to the same service. For a child that needs its own (to freeze or
// lock it), StartPrivate; for a bus with no Secret Service at all, StartBus.
//
// Main starts the service, sets DBUS_SESSION_BUS_ADDRESS for this process
// (so child processes started with os.Environ() use the same service),
// runs the tests, stops the daemons and checks for leaked goroutines with
// go.uber.org/goleak. A test binary that re-executes itself and calls Main
// in the child reuses the parent's service. For a TestMain that must do more,
// call Start and Stop around m.Run yourself.
//
// Needs Linux with the Debian packages dbus (dbus-daemon) and gnome-keyring;
// when a binary is missing, Start fails with the apt-get command.
package keychaintest

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/zalando/go-keyring"
	"go.uber.org/goleak"
)

// InstallHint is the command that installs what this package runs.
const InstallHint = "apt-get install -y dbus gnome-keyring"

// reuseEnv tells a child test process that its parent's service is running
// at DBUS_SESSION_BUS_ADDRESS.
const reuseEnv = "MESHTRAY_KEYCHAINTEST_BUS"

const (
	startTimeout = 15 * time.Second
	stopTimeout  = 5 * time.Second
	pollEvery    = 10 * time.Millisecond

	loginCollection = dbus.ObjectPath("/org/freedesktop/secrets/collection/login")
)

// Daemons is one private session bus, with or without a Secret Service on
// it. Its methods are safe for concurrent use.
type Daemons struct {
	addr    string // DBUS_SESSION_BUS_ADDRESS
	dir     string // temp dir holding HOME, the socket, logs
	bus     *proc
	keyring *proc // nil for StartBus
	owned   bool  // false when reusing a parent's service

	keyringBin, home, run string // how startKeyring starts gnome-keyring-daemon
	restarts              int    // gnome-keyring-daemons replaced by restartKeyring
}

type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd.Wait returns
	log  string        // path of its stdout+stderr
}

var (
	mu       sync.Mutex
	shared   *Daemons // the process-wide service, set by Start
	prevAddr *string  // DBUS_SESSION_BUS_ADDRESS before Start, nil if unset
)

// Main is the whole TestMain of a package whose tests use the OS keychain:
// Start, m.Run, Stop, then a goleak check (with opts) when the tests
// passed; it exits the process with the result. On a start failure it
// prints why (with the apt-get command when a binary is missing) and exits 1.
func Main(m *testing.M, opts ...goleak.Option) {
	os.Exit(run(m, opts))
}

func run(m *testing.M, opts []goleak.Option) int {
	svc, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if err := svc.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	return code
}

// Start starts the process-wide private Secret Service (once; later calls
// return the same one until Stop), points DBUS_SESSION_BUS_ADDRESS of this
// process at it, and checks that go-keyring can set, get and delete an item
// through this process's cached session bus connection. It fails if that
// connection already goes to another bus (something used D-Bus before
// Start: call Start first in TestMain).
func Start() (*Daemons, error) {
	mu.Lock()
	defer mu.Unlock()
	if shared != nil {
		return shared, nil
	}
	var d *Daemons
	if addr := os.Getenv(reuseEnv); addr != "" && addr == os.Getenv("DBUS_SESSION_BUS_ADDRESS") {
		d = &Daemons{addr: addr}
	} else {
		var err error
		if d, err = start(true); err != nil {
			return nil, err
		}
		d.owned = true
	}
	if v, ok := os.LookupEnv("DBUS_SESSION_BUS_ADDRESS"); ok {
		prevAddr = &v
	}
	os.Setenv("DBUS_SESSION_BUS_ADDRESS", d.addr)
	os.Setenv(reuseEnv, d.addr)
	if err := d.checkWithRestarts(); err != nil {
		restoreEnv()
		d.stop()
		return nil, err
	}
	shared = d
	return d, nil
}

// startAttempts bounds how often Start replaces a gnome-keyring-daemon that
// fails its first go-keyring round trip.
const startAttempts = 3

// testHookReady, when set (by this package's tests), runs after the
// Secret Service first reports ready and before the go-keyring check.
var testHookReady func(*Daemons)

// checkWithRestarts runs checkProcessBus and, when the go-keyring round
// trip fails on a daemon we own, replaces the daemon and tries again, up to
// startAttempts in all. gnome-keyring-daemon can exit or drop its bus
// connection right after it first answers (an upstream race in its unlock
// handling; the symptom is "Message recipient disconnected from message
// bus without replying"): one bad start must not fail a whole test run.
// Each replacement is reported on stderr with the old daemon's log.
func (d *Daemons) checkWithRestarts() error {
	if testHookReady != nil {
		testHookReady(d)
	}
	var err error
	for attempt := 1; ; attempt++ {
		if err = checkProcessBus(d.addr); err == nil {
			return nil
		}
		var other *otherBusError
		if errors.As(err, &other) || d.keyring == nil || attempt == startAttempts {
			break
		}
		fmt.Fprintf(os.Stderr, "keychaintest: attempt %d: %v; replacing gnome-keyring-daemon%s\n", attempt, err, d.keyring.tail())
		if rerr := d.restartKeyring(); rerr != nil {
			return errors.Join(err, rerr)
		}
	}
	if d.keyring != nil {
		return fmt.Errorf("%w%s", err, d.keyring.tail())
	}
	return err
}

// otherBusError: this process's session bus connection goes to another bus;
// restarting our daemon cannot help.
type otherBusError struct{ msg string }

func (e *otherBusError) Error() string { return e.msg }

// StartPrivate starts a Secret Service that this process does not use (its
// environment and session bus connection are left alone): for a child
// process that should see a fresh keyring, started with Env. Stop it when
// done.
func StartPrivate() (*Daemons, error) {
	d, err := start(true)
	if err != nil {
		return nil, err
	}
	d.owned = true
	return d, nil
}

// StartBus starts a private session bus with no Secret Service on it: for
// testing how code reacts to a machine without a keyring (in a child
// process started with Env, since this process's bus is already chosen).
func StartBus() (*Daemons, error) {
	d, err := start(false)
	if err != nil {
		return nil, err
	}
	d.owned = true
	return d, nil
}

// Require returns the service Main (or Start) started, and fails t when
// there is none, so a test never falls through to the developer's keyring.
func Require(t testing.TB) *Daemons {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if shared == nil {
		t.Fatal("keychaintest: no private Secret Service: call keychaintest.Main(m) (or Start) in TestMain")
	}
	return shared
}

// ServiceName returns a keychain service name unique to t (and to this run),
// so parallel tests on the shared Secret Service never see each other's items.
func ServiceName(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	return "meshtray-test:" + name + ":" + hex.EncodeToString(b[:])
}

// Addr is the D-Bus address of the private bus.
func (d *Daemons) Addr() string { return d.addr }

// Env returns os.Environ() with DBUS_SESSION_BUS_ADDRESS set to this bus,
// for starting a child process that should use it (a child test binary
// calling Main reuses it only when it is the process-wide service).
func (d *Daemons) Env() []string {
	env := make([]string, 0, len(os.Environ())+1)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DBUS_SESSION_BUS_ADDRESS=") && !strings.HasPrefix(kv, reuseEnv+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, "DBUS_SESSION_BUS_ADDRESS="+d.addr)
	if d == shared {
		env = append(env, reuseEnv+"="+d.addr)
	}
	return env
}

// KeyringPID returns the gnome-keyring-daemon's process id, or 0 for a bus
// without one (or a service owned by a parent process).
func (d *Daemons) KeyringPID() int {
	if d.keyring == nil {
		return 0
	}
	return d.keyring.cmd.Process.Pid
}

// Freeze stops the gnome-keyring-daemon (SIGSTOP), so every Secret Service
// call hangs as with a prompt nobody answers, until the returned thaw is
// called (SIGCONT). Stop thaws it too.
func (d *Daemons) Freeze() (thaw func(), err error) {
	if d.keyring == nil {
		return nil, errors.New("keychaintest: no gnome-keyring-daemon of ours to freeze")
	}
	p := d.keyring.cmd.Process
	if err := p.Signal(sigStop); err != nil {
		return nil, fmt.Errorf("keychaintest: SIGSTOP gnome-keyring-daemon: %w", err)
	}
	return func() { _ = p.Signal(sigCont) }, nil
}

// LockLogin locks the "login" collection over a private connection (as a
// screen lock would). The next go-keyring call then needs an unlock prompt,
// which cannot be shown here: go-keyring fails with "failed to unlock
// correct collection".
func (d *Daemons) LockLogin() error {
	conn, err := dbus.Connect(d.addr)
	if err != nil {
		return fmt.Errorf("keychaintest: connect %s: %w", d.addr, err)
	}
	defer conn.Close()
	var locked []dbus.ObjectPath
	var prompt dbus.ObjectPath
	err = conn.Object("org.freedesktop.secrets", "/org/freedesktop/secrets").
		Call("org.freedesktop.Secret.Service.Lock", 0, []dbus.ObjectPath{loginCollection}).
		Store(&locked, &prompt)
	if err != nil {
		return fmt.Errorf("keychaintest: lock the login collection: %w", err)
	}
	if len(locked) != 1 || prompt != "/" {
		return fmt.Errorf("keychaintest: lock the login collection: locked %v, prompt %s", locked, prompt)
	}
	return nil
}

// Stop stops the daemons (when this process started them), removes their
// temp dir, and, for the process-wide service, closes this process's
// session bus connection (its goroutines end) and restores
// DBUS_SESSION_BUS_ADDRESS. Stop is idempotent.
func (d *Daemons) Stop() error {
	mu.Lock()
	if d == shared {
		shared = nil
		if conn, err := dbus.SessionBus(); err == nil {
			_ = conn.Close()
		}
		restoreEnv()
	}
	mu.Unlock()
	return d.stop()
}

func restoreEnv() {
	os.Unsetenv(reuseEnv)
	if prevAddr != nil {
		os.Setenv("DBUS_SESSION_BUS_ADDRESS", *prevAddr)
	} else {
		os.Unsetenv("DBUS_SESSION_BUS_ADDRESS")
	}
	prevAddr = nil
}

func (d *Daemons) stop() error {
	if !d.owned {
		return nil
	}
	var errs []error
	for _, p := range []*proc{d.keyring, d.bus} {
		if p != nil {
			errs = append(errs, p.stop())
		}
	}
	d.keyring, d.bus = nil, nil
	if d.dir != "" {
		errs = append(errs, os.RemoveAll(d.dir))
		d.dir = ""
	}
	return errors.Join(errs...)
}

func (p *proc) stop() error {
	select {
	case <-p.done:
		return nil // already gone (or stopped before)
	default:
	}
	_ = p.cmd.Process.Signal(sigCont) // in case it is frozen
	_ = p.cmd.Process.Signal(sigTerm)
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("keychaintest: %s ignored SIGTERM for %v; killed", filepath.Base(p.cmd.Path), stopTimeout)
}

// start starts a dbus-daemon and, with secrets, a gnome-keyring-daemon on it.
func start(secrets bool) (d *Daemons, err error) {
	if err := supported(); err != nil {
		return nil, err
	}
	bins := []string{"dbus-daemon"}
	if secrets {
		bins = append(bins, "gnome-keyring-daemon")
	}
	paths := map[string]string{}
	for _, b := range bins {
		p, err := exec.LookPath(b)
		if err != nil {
			return nil, fmt.Errorf("keychaintest: %s not found on PATH: install it with `%s`", b, InstallHint)
		}
		paths[b] = p
	}
	// A short path: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "mtkc")
	if err != nil {
		return nil, fmt.Errorf("keychaintest: %w", err)
	}
	d = &Daemons{dir: dir, owned: true}
	defer func() {
		if err != nil {
			_ = d.stop()
		}
	}()
	home := filepath.Join(dir, "home")
	run := filepath.Join(dir, "run")
	for _, p := range []string{home, run} {
		if err := os.Mkdir(p, 0o700); err != nil {
			return nil, fmt.Errorf("keychaintest: %w", err)
		}
	}
	conf := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(conf, []byte(busConfig(filepath.Join(dir, "bus"))), 0o600); err != nil {
		return nil, fmt.Errorf("keychaintest: %w", err)
	}

	// dbus-daemon prints its address on fd 1 once it listens.
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("keychaintest: %w", err)
	}
	defer r.Close()
	d.bus, err = startProc(dir, "dbus-daemon", exec.Command(paths["dbus-daemon"],
		"--config-file="+conf, "--nofork", "--nopidfile", "--print-address=1"), nil, w)
	w.Close()
	if err != nil {
		return nil, err
	}
	_ = r.SetReadDeadline(time.Now().Add(startTimeout))
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("keychaintest: dbus-daemon printed no address: %w%s", err, d.bus.tail())
	}
	d.addr = strings.TrimSpace(line)
	if !secrets {
		return d, nil
	}

	d.keyringBin, d.home, d.run = paths["gnome-keyring-daemon"], home, run
	if err := d.startKeyring(); err != nil {
		return nil, err
	}
	return d, nil
}

// startKeyring starts gnome-keyring-daemon on d's bus and waits until it
// serves the unlocked login collection.
func (d *Daemons) startKeyring() error {
	home := d.home
	// An empty password on stdin: gnome-keyring creates and unlocks the
	// "login" collection (gnome-keyring-daemon(1), --unlock).
	cmd := exec.Command(d.keyringBin, "--foreground", "--unlock", "--components=secrets")
	cmd.Env = []string{
		"HOME=" + home,
		"XDG_DATA_HOME=" + filepath.Join(home, ".local", "share"),
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"XDG_CACHE_HOME=" + filepath.Join(home, ".cache"),
		"XDG_RUNTIME_DIR=" + d.run,
		"DBUS_SESSION_BUS_ADDRESS=" + d.addr,
		"PATH=" + os.Getenv("PATH"),
		"LANG=C.UTF-8",
	}
	stdin, err := os.CreateTemp(d.dir, "password")
	if err != nil {
		return fmt.Errorf("keychaintest: %w", err)
	}
	_, _ = stdin.WriteString("\n")
	_, _ = stdin.Seek(0, 0)
	d.keyring, err = startProc(d.dir, "gnome-keyring-daemon", cmd, stdin, nil)
	stdin.Close()
	os.Remove(stdin.Name())
	if err != nil {
		return err
	}
	return waitLogin(d)
}

// restartKeyring replaces d's gnome-keyring-daemon by a fresh one on the
// same bus (so this process's cached session bus connection stays valid).
// The old daemon's log is kept as gnome-keyring-daemon.log.<n>.
func (d *Daemons) restartKeyring() error {
	if d.keyring != nil {
		_ = d.keyring.stop()
		d.restarts++
		_ = os.Rename(d.keyring.log, fmt.Sprintf("%s.%d", d.keyring.log, d.restarts))
	}
	return d.startKeyring()
}

// startProc starts cmd with its output in dir/<name>.log (and fd 1 on
// stdout when given), dying with this process (Pdeathsig).
func startProc(dir, name string, cmd *exec.Cmd, stdin, stdout *os.File) (*proc, error) {
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("keychaintest: %w", err)
	}
	defer logf.Close()
	cmd.Stdin = stdin
	cmd.Stdout = logf
	if stdout != nil {
		cmd.Stdout = stdout
	}
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("keychaintest: start %s: %w", name, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// tail returns the end of the process's log, for error messages.
func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	if len(b) == 0 {
		return ""
	}
	return "\n" + filepath.Base(p.log) + ":\n" + string(b)
}

// waitLogin polls, over a private connection, until the Secret Service
// lists the login collection (gnome-keyring creates it shortly after it
// takes its bus name).
func waitLogin(d *Daemons) error {
	conn, err := dbus.Connect(d.addr)
	if err != nil {
		return fmt.Errorf("keychaintest: connect %s: %w", d.addr, err)
	}
	defer conn.Close()
	obj := conn.Object("org.freedesktop.secrets", "/org/freedesktop/secrets")
	deadline := time.Now().Add(startTimeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-d.keyring.done:
			return fmt.Errorf("keychaintest: gnome-keyring-daemon exited at start%s", d.keyring.tail())
		default:
		}
		v, err := obj.GetProperty("org.freedesktop.Secret.Service.Collections")
		if err == nil {
			paths, _ := v.Value().([]dbus.ObjectPath)
			for _, p := range paths {
				if p == loginCollection {
					return nil
				}
			}
			err = fmt.Errorf("collections %v have no login collection", paths)
		}
		last = err
		time.Sleep(pollEvery)
	}
	return fmt.Errorf("keychaintest: Secret Service not ready within %v: %v%s", startTimeout, last, d.keyring.tail())
}

// checkProcessBus checks that this process's cached session bus connection
// (the one go-keyring uses) goes to the bus at addr, and that go-keyring
// can set, get and delete an item there.
func checkProcessBus(addr string) error {
	conn, err := dbus.SessionBus()
	if err != nil {
		return fmt.Errorf("keychaintest: connect the session bus: %w", err)
	}
	id, err := busID(conn)
	if err != nil {
		return err
	}
	private, err := dbus.Connect(addr)
	if err != nil {
		return fmt.Errorf("keychaintest: connect %s: %w", addr, err)
	}
	want, err := busID(private)
	private.Close()
	if err != nil {
		return err
	}
	if id != want {
		return &otherBusError{fmt.Sprintf("keychaintest: this process is already connected to another session bus (id %s, want %s at %s): "+
			"call keychaintest.Main or Start in TestMain before anything uses D-Bus", id, want, addr)}
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	svc, user, val := "meshtray-keychaintest", "probe-"+hex.EncodeToString(b[:]), "ok"
	if err := keyring.Set(svc, user, val); err != nil {
		return fmt.Errorf("keychaintest: go-keyring Set on the private Secret Service: %w", err)
	}
	got, err := keyring.Get(svc, user)
	if err != nil || got != val {
		return fmt.Errorf("keychaintest: go-keyring Get on the private Secret Service: %q, %v", got, err)
	}
	if err := keyring.Delete(svc, user); err != nil {
		return fmt.Errorf("keychaintest: go-keyring Delete on the private Secret Service: %w", err)
	}
	return nil
}

// busID returns the bus's unique ID (org.freedesktop.DBus.GetId).
func busID(conn *dbus.Conn) (string, error) {
	var id string
	if err := conn.BusObject().Call("org.freedesktop.DBus.GetId", 0).Store(&id); err != nil {
		return "", fmt.Errorf("keychaintest: session bus GetId: %w", err)
	}
	return id, nil
}

// busConfig is a session bus that only listens on socket: no service
// activation (so no daemon of the real session is ever started on it).
func busConfig(socket string) string {
	return `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=` + socket + `</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
`
}
