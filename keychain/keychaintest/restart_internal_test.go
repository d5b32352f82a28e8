//go:build linux

package keychaintest

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/zalando/go-keyring"
)

// killOnceEnv makes a re-executed test binary kill its freshly started
// gnome-keyring-daemon between "ready" and the go-keyring check, as the
// daemon does by itself now and then.
const killOnceEnv = "KEYCHAINTEST_KILL_KEYRING_ONCE"

func init() {
	if os.Getenv(killOnceEnv) != "1" {
		return
	}
	testHookReady = func(d *Daemons) {
		_ = d.keyring.cmd.Process.Signal(syscall.SIGKILL)
		<-d.keyring.done
	}
}

// TestStartReplacesAKeyringThatDies re-executes this test binary with a
// hook that kills the new gnome-keyring-daemon right after it reports
// ready: Main must replace it and run the child's test against the new one.
func TestStartReplacesAKeyringThatDies(t *testing.T) {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DBUS_SESSION_BUS_ADDRESS=") && !strings.HasPrefix(kv, reuseEnv+"=") {
			env = append(env, kv)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRestartedChildSide$", "-test.v")
	cmd.Env = append(env, killOnceEnv+"=1", "GORACE=atexit_sleep_ms=0")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestRestartedChildSide") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "replacing gnome-keyring-daemon") {
		t.Fatalf("child did not report the replacement on stderr:\n%s", out)
	}
}

// TestRestartedChildSide is the child half of
// TestStartReplacesAKeyringThatDies.
func TestRestartedChildSide(t *testing.T) {
	if os.Getenv(killOnceEnv) != "1" {
		t.Skip("child half of TestStartReplacesAKeyringThatDies")
	}
	d := Require(t)
	if d.restarts != 1 {
		t.Fatalf("gnome-keyring-daemon replaced %d times, want 1", d.restarts)
	}
	svc := ServiceName(t)
	if err := keyring.Set(svc, "u", "v"); err != nil {
		t.Fatalf("go-keyring on the replacement daemon: %v", err)
	}
	if got, err := keyring.Get(svc, "u"); err != nil || got != "v" {
		t.Fatalf("Get: %q, %v", got, err)
	}
}
