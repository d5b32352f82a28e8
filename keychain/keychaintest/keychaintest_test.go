//go:build linux

package keychaintest_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/zalando/go-keyring"

	"meshtray/keychain/keychaintest"
)

func TestMain(m *testing.M) { keychaintest.Main(m) }

const childEnv = "KEYCHAINTEST_TEST_CHILD"

// TestChildReusesParentService re-executes this test binary; the child's
// TestMain (keychaintest.Main) must reuse this process's Secret Service,
// see an item set here, and leave the daemons running when it exits.
func TestChildReusesParentService(t *testing.T) {
	svc := keychaintest.Require(t)
	service := keychaintest.ServiceName(t)
	if err := keyring.Set(service, "from-parent", "p"); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildSide$", "-test.v")
	cmd.Env = append(svc.Env(), childEnv+"="+service, "GORACE=atexit_sleep_ms=0")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestChildSide") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if got, err := keyring.Get(service, "from-child"); err != nil || got != "c" {
		t.Fatalf("item the child set: %q, %v", got, err)
	}
	if svc.KeyringPID() == 0 || syscall.Kill(svc.KeyringPID(), 0) != nil {
		t.Fatal("the child's exit stopped this process's gnome-keyring-daemon")
	}
}

// TestChildSide is the child half of TestChildReusesParentService; run
// directly it has nothing to check.
func TestChildSide(t *testing.T) {
	service := os.Getenv(childEnv)
	if service == "" {
		t.Skip("child half of TestChildReusesParentService")
	}
	svc := keychaintest.Require(t)
	if svc.KeyringPID() != 0 {
		t.Fatalf("child started its own gnome-keyring-daemon (pid %d) instead of reusing the parent's", svc.KeyringPID())
	}
	if got, err := keyring.Get(service, "from-parent"); err != nil || got != "p" {
		t.Fatalf("parent's item: %q, %v", got, err)
	}
	if err := keyring.Set(service, "from-child", "c"); err != nil {
		t.Fatal(err)
	}
}

func TestStartPrivateIsSeparateAndStops(t *testing.T) {
	keychaintest.Require(t)
	priv, err := keychaintest.StartPrivate()
	if err != nil {
		t.Fatal(err)
	}
	pid := priv.KeyringPID()
	if os.Getenv("DBUS_SESSION_BUS_ADDRESS") == priv.Addr() {
		t.Fatal("StartPrivate changed this process's session bus address")
	}
	conn, err := dbus.Connect(priv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	v, err := conn.Object("org.freedesktop.secrets", "/org/freedesktop/secrets").
		GetProperty("org.freedesktop.Secret.Service.Collections")
	conn.Close()
	if err != nil || !strings.Contains(v.String(), "/collection/login") {
		t.Fatalf("private service collections: %v, %v", v, err)
	}
	if err := priv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := priv.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("gnome-keyring-daemon %d still exists after Stop: %v", pid, err)
	}
	// The process-wide service is untouched.
	service := keychaintest.ServiceName(t)
	if err := keyring.Set(service, "k", "v"); err != nil {
		t.Fatalf("shared service after stopping a private one: %v", err)
	}
}

func TestStartBusHasNoSecretService(t *testing.T) {
	bus, err := keychaintest.StartBus()
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Stop()
	if bus.KeyringPID() != 0 {
		t.Fatal("StartBus started a keyring daemon")
	}
	if _, err := bus.Freeze(); err == nil {
		t.Fatal("Freeze without a keyring daemon succeeded")
	}
	conn, err := dbus.Connect(bus.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var has bool
	if err := conn.BusObject().Call("org.freedesktop.DBus.NameHasOwner", 0, "org.freedesktop.secrets").Store(&has); err != nil || has {
		t.Fatalf("org.freedesktop.secrets owned on a bare bus: %v, %v", has, err)
	}
	// No activation either: asking for the service fails at once.
	start := time.Now()
	err = conn.Object("org.freedesktop.secrets", "/org/freedesktop/secrets").
		Call("org.freedesktop.Secret.Service.OpenSession", 0, "plain", dbus.MakeVariant("")).Err
	var de dbus.Error
	if !errors.As(err, &de) || de.Name != "org.freedesktop.DBus.Error.ServiceUnknown" {
		t.Fatalf("OpenSession on a bare bus = %v, want ServiceUnknown", err)
	}
	t.Logf("ServiceUnknown after %v", time.Since(start))
}

// TestMissingBinaryNamesTheInstall checks a machine without the daemons
// gets the apt-get command, not a bare "executable file not found".
func TestMissingBinaryNamesTheInstall(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for name, start := range map[string]func() (*keychaintest.Daemons, error){
		"StartBus": keychaintest.StartBus, "StartPrivate": keychaintest.StartPrivate,
	} {
		d, err := start()
		if err == nil {
			d.Stop()
			t.Fatalf("%s with an empty PATH succeeded", name)
		}
		if !strings.Contains(err.Error(), keychaintest.InstallHint) {
			t.Errorf("%s error %q does not name %q", name, err, keychaintest.InstallHint)
		}
	}
}

func TestRequireAndServiceName(t *testing.T) {
	svc := keychaintest.Require(t)
	if svc.Addr() != os.Getenv("DBUS_SESSION_BUS_ADDRESS") {
		t.Fatalf("Require's service at %s, this process's bus at %s", svc.Addr(), os.Getenv("DBUS_SESSION_BUS_ADDRESS"))
	}
	a, b := keychaintest.ServiceName(t), keychaintest.ServiceName(t)
	if a == b || !strings.HasPrefix(a, "meshtray-test:") || len(a) > 100 {
		t.Fatalf("ServiceName: %q, %q", a, b)
	}
}
