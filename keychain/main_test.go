package keychain_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"meshtray/keychain"
	"meshtray/keychain/keychaintest"
)

// The test binary re-executes itself as child processes (for cross-process
// writers, and for anything needing its own session bus, since godbus caches
// the session bus per process). childEnv selects the child's job.
const childEnv = "MESHTRAY_KEYCHAIN_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	keychaintest.Main(m)
}

// childResult is what a child prints on stdout, as one JSON line.
type childResult struct {
	Err         string `json:"err,omitempty"`
	Unavailable bool   `json:"unavailable"`
	Timeout     bool   `json:"timeout"`
	InvalidKey  bool   `json:"invalid_key"`
	ElapsedMS   int64  `json:"elapsed_ms"`
	Opened      bool   `json:"opened"`
}

func result(start time.Time, opened bool, err error) childResult {
	r := childResult{
		Unavailable: errors.Is(err, keychain.ErrUnavailable),
		Timeout:     errors.Is(err, keychain.ErrTimeout),
		InvalidKey:  errors.Is(err, keychain.ErrInvalidKey),
		ElapsedMS:   time.Since(start).Milliseconds(),
		Opened:      opened,
	}
	if err != nil {
		r.Err = err.Error()
	}
	return r
}

// child runs one job in a child process and returns its exit code. Jobs:
//
//	write-os, write-file: CHILD_N Sets of distinct keys "p<CHILD_ID>/k<j>"
//	  into the OS store (CHILD_SERVICE, CHILD_LOCK) or the file store
//	  (CHILD_PATH); exit 0 when every Set returned nil.
//	open-os: OpenOS(CHILD_SERVICE, CHILD_LOCK) on whatever session bus the
//	  environment names; prints a childResult.
//	freeze-os: starts its own Secret Service, opens the store, freezes the
//	  daemon and times one Get; prints a childResult.
func child(mode string) int {
	switch mode {
	case "write-os", "write-file":
		var ks keychain.Store
		var err error
		if mode == "write-os" {
			ks, err = keychain.OpenOS(os.Getenv("CHILD_SERVICE"), os.Getenv("CHILD_LOCK"))
		} else {
			ks, err = keychain.OpenFile(os.Getenv("CHILD_PATH"))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "open:", err)
			return 2
		}
		n, _ := strconv.Atoi(os.Getenv("CHILD_N"))
		id := os.Getenv("CHILD_ID")
		for j := range n {
			key := fmt.Sprintf("p%s/k%03d", id, j)
			if err := ks.Set(key, []byte("value of "+key)); err != nil {
				fmt.Fprintln(os.Stderr, "set:", err)
				return 3
			}
		}
		return 0
	case "open-os":
		start := time.Now()
		_, err := keychain.OpenOS(os.Getenv("CHILD_SERVICE"), os.Getenv("CHILD_LOCK"))
		return printResult(result(start, err == nil, err))
	case "freeze-os":
		svc, err := keychaintest.Start()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer svc.Stop()
		ks, err := keychain.OpenOS(os.Getenv("CHILD_SERVICE"), os.Getenv("CHILD_LOCK"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "open:", err)
			return 2
		}
		if err := ks.Set("grant/a", []byte("x")); err != nil {
			fmt.Fprintln(os.Stderr, "set:", err)
			return 2
		}
		thaw, err := svc.Freeze()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer thaw()
		start := time.Now()
		_, err = ks.Get("grant/a")
		return printResult(result(start, true, err))
	}
	fmt.Fprintln(os.Stderr, "unknown child mode", mode)
	return 2
}

func printResult(r childResult) int {
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
	return 0
}

// runChild runs this test binary as a child doing mode, with env added to
// base (nil: os.Environ()), and returns its stdout. It fails t when the
// child exits non-zero.
func runChild(t *testing.T, mode string, base []string, env ...string) []byte {
	t.Helper()
	cmd := childCmd(mode, base, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child %s %v: %v\nstderr:\n%s", mode, env, err, stderr.String())
	}
	return stdout.Bytes()
}

func childCmd(mode string, base []string, env ...string) *exec.Cmd {
	if base == nil {
		base = os.Environ()
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(base[:len(base):len(base)], childEnv+"="+mode), env...)
	if os.Getenv("GORACE") == "" {
		// A -race child otherwise sleeps 1 s at exit.
		cmd.Env = append(cmd.Env, "GORACE=atexit_sleep_ms=0")
	}
	return cmd
}

func childResultOf(t *testing.T, out []byte) childResult {
	t.Helper()
	var r childResult
	if err := json.Unmarshal(bytes.TrimSpace(out), &r); err != nil {
		t.Fatalf("child printed %q: %v", out, err)
	}
	return r
}

func lockPath(t testing.TB) string { return filepath.Join(t.TempDir(), "keychain.lock") }
