//go:build linux

package keychain_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"meshtray/keychain"
	"meshtray/keychain/keychaintest"
)

// TestCrossProcessWriters re-executes this test binary as several processes
// that Set distinct keys into the same store at once (ARCHITECTURE.md, keychain: "two
// processes writing at once lose nothing"), then checks
// every key is indexed and readable. Without the lock file the index
// read-modify-write races and keys go missing.
func TestCrossProcessWriters(t *testing.T) {
	t.Parallel()
	const procs, each = 4, 50
	for _, tc := range []struct {
		name string
		env  func(t *testing.T) []string
		open func(t *testing.T, env []string) keychain.Store
	}{
		{"os-secret-service", func(t *testing.T) []string {
			keychaintest.Require(t)
			return []string{"CHILD_SERVICE=" + keychaintest.ServiceName(t), "CHILD_LOCK=" + lockPath(t)}
		}, func(t *testing.T, env []string) keychain.Store {
			ks, err := keychain.OpenOS(envValue(env, "CHILD_SERVICE"), envValue(env, "CHILD_LOCK"))
			if err != nil {
				t.Fatal(err)
			}
			return ks
		}},
		{"file", func(t *testing.T) []string {
			return []string{"CHILD_PATH=" + filepath.Join(t.TempDir(), "keychain.json")}
		}, func(t *testing.T, env []string) keychain.Store {
			ks, err := keychain.OpenFile(envValue(env, "CHILD_PATH"))
			if err != nil {
				t.Fatal(err)
			}
			return ks
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := tc.env(t)
			mode := map[string]string{"os-secret-service": "write-os", "file": "write-file"}[tc.name]
			start := time.Now()
			var wg sync.WaitGroup
			errs := make([]error, procs)
			for i := range procs {
				wg.Go(func() {
					cmd := childCmd(mode, nil, append(env, "CHILD_ID="+strconv.Itoa(i), "CHILD_N="+strconv.Itoa(each))...)
					var stderr bytes.Buffer
					cmd.Stderr = &stderr
					if err := cmd.Run(); err != nil {
						errs[i] = fmt.Errorf("child %d: %v: %s", i, err, stderr.String())
					}
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d processes x %d Sets: %v", procs, each, time.Since(start).Round(time.Millisecond))

			ks := tc.open(t, env)
			var want []string
			for i := range procs {
				for j := range each {
					want = append(want, fmt.Sprintf("p%d/k%03d", i, j))
				}
			}
			got, err := ks.Keys("")
			if err != nil {
				t.Fatal(err)
			}
			if missing := missingFrom(got, want); len(missing) > 0 || len(got) != len(want) {
				t.Fatalf("index has %d keys, want %d; missing %d: %v", len(got), len(want), len(missing), missing)
			}
			for _, k := range want {
				v, err := ks.Get(k)
				if err != nil || string(v) != "value of "+k {
					t.Fatalf("Get(%s) = %q, %v", k, v, err)
				}
			}
		})
	}
}

func missingFrom(got, want []string) []string {
	var missing []string
	for _, k := range want {
		if _, ok := slices.BinarySearch(got, k); !ok {
			missing = append(missing, k)
		}
	}
	return missing
}

func envValue(env []string, name string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// envWithoutBus is os.Environ() without the session bus variables, for a
// child that must not reach this process's private Secret Service.
func envWithoutBus() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "DBUS_SESSION_BUS_ADDRESS=") || strings.HasPrefix(kv, "MESHTRAY_KEYCHAINTEST_BUS=")
	})
}

// TestOpenOSUnavailable runs OpenOS in child processes (godbus caches the
// session bus per process) against keychains that cannot be used, and
// checks it fails with ErrUnavailable, a reason, and quickly.
func TestOpenOSUnavailable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		env     func(t *testing.T) []string // the child's whole environment
		reason  string
		timeout bool
		within  time.Duration
	}{
		{"no session bus", func(t *testing.T) []string {
			return append(envWithoutBus(), "DBUS_SESSION_BUS_ADDRESS=unix:path="+filepath.Join(t.TempDir(), "nothing"))
		}, "no D-Bus session bus", false, 2 * time.Second},
		{"no Secret Service on the bus", func(t *testing.T) []string {
			bus, err := keychaintest.StartBus()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { bus.Stop() })
			return bus.Env()
		}, "no Secret Service on the session bus", false, 2 * time.Second},
		{"login collection locked", func(t *testing.T) []string {
			svc, err := keychaintest.StartPrivate()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { svc.Stop() })
			if err := svc.LockLogin(); err != nil {
				t.Fatal(err)
			}
			return svc.Env()
		}, "locked", false, keychain.ProbeTimeout},
		{"Secret Service hangs", func(t *testing.T) []string {
			svc, err := keychaintest.StartPrivate()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { svc.Stop() })
			thaw, err := svc.Freeze()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(thaw)
			return svc.Env()
		}, "no answer within 5s", true, keychain.ProbeTimeout + 2*time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := tc.env(t)
			start := time.Now()
			r := childResultOf(t, runChild(t, "open-os", env, "CHILD_SERVICE=meshtray-test", "CHILD_LOCK="+lockPath(t)))
			elapsed := time.Since(start)
			t.Logf("OpenOS: %s after %dms (child total %v)", r.Err, r.ElapsedMS, elapsed.Round(time.Millisecond))
			if r.Opened || !r.Unavailable {
				t.Fatalf("OpenOS = %q (opened %v), want an error wrapping ErrUnavailable", r.Err, r.Opened)
			}
			if !strings.Contains(r.Err, tc.reason) {
				t.Errorf("error %q does not name the reason %q", r.Err, tc.reason)
			}
			if r.Timeout != tc.timeout {
				t.Errorf("errors.Is(err, ErrTimeout) = %v, want %v", r.Timeout, tc.timeout)
			}
			if time.Duration(r.ElapsedMS)*time.Millisecond > tc.within {
				t.Errorf("OpenOS took %dms, want at most %v", r.ElapsedMS, tc.within)
			}
		})
	}
}

// TestOpenOSDoesNotAutolaunchABus checks that with no session bus at all
// OpenOS fails at once instead of letting godbus run dbus-launch, which
// leaves a dbus-daemon and a gnome-keyring-daemon running after meshtray.
func TestOpenOSDoesNotAutolaunchABus(t *testing.T) {
	t.Parallel()
	run := fmt.Sprintf("/run/user/%d", os.Getuid())
	for _, f := range []string{"bus", "dbus-session"} {
		if _, err := os.Stat(filepath.Join(run, f)); err == nil {
			t.Skipf("%s/%s exists: this machine has a real session bus, which this test must not touch", run, f)
		}
	}
	// Every process the child starts inherits the marker; after it exits,
	// none may be left.
	marker := "MESHTRAY_TEST_MARKER=" + keychaintest.ServiceName(t)
	env := append(slices.DeleteFunc(envWithoutBus(), func(kv string) bool {
		return strings.HasPrefix(kv, "DISPLAY=") || strings.HasPrefix(kv, "HOME=")
	}), marker, "HOME="+t.TempDir()) // should anything start, it writes there
	r := childResultOf(t, runChild(t, "open-os", env, "CHILD_SERVICE=meshtray-test", "CHILD_LOCK="+lockPath(t)))
	t.Logf("OpenOS: %s", r.Err)
	if left := processesWith(marker); len(left) > 0 {
		for _, pid := range left {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		t.Errorf("processes %v started by OpenOS outlived it", left)
	}
	if r.Opened || !r.Unavailable || !strings.Contains(r.Err, "DBUS_SESSION_BUS_ADDRESS is unset") {
		t.Fatalf("OpenOS without a session bus = %q, want ErrUnavailable naming the unset address", r.Err)
	}
}

// processesWith returns the live processes whose environment holds kv.
func processesWith(kv string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || len(env) == 0 { // gone, or a zombie (nothing left to stop)
			continue
		}
		if slices.Contains(strings.Split(string(env), "\x00"), kv) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestOSCallTimeoutRealService freezes a real gnome-keyring-daemon under an
// open store (in a child with its own Secret Service) and checks a Get
// gives up after CallTimeout with ErrTimeout instead of hanging.
func TestOSCallTimeoutRealService(t *testing.T) {
	t.Parallel()
	r := childResultOf(t, runChild(t, "freeze-os", envWithoutBus(), "CHILD_SERVICE=meshtray-test", "CHILD_LOCK="+lockPath(t)))
	t.Logf("Get on a frozen Secret Service: %s after %dms", r.Err, r.ElapsedMS)
	if !r.Timeout || !r.Unavailable {
		t.Fatalf("Get = %q, want ErrTimeout and ErrUnavailable", r.Err)
	}
	got := time.Duration(r.ElapsedMS) * time.Millisecond
	if got < keychain.CallTimeout || got > keychain.CallTimeout+2*time.Second {
		t.Errorf("Get gave up after %v, want about %v", got, keychain.CallTimeout)
	}
}
