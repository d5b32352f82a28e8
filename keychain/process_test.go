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
	"testing"
	"time"

	"meshtray/keychain"
	"meshtray/keychain/keychaintest"
)

// TestCrossProcessWriters re-executes this test binary as several processes
// that Set distinct keys into the same store at once (issue 3 §5: "two
// processes writing the keychain index at once lose nothing"), then checks
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
