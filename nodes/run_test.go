//go:build linux

package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"meshtray/pairing"
)

func runRegistry(t testing.TB, rules ...RunRule) *Registry {
	t.Helper()
	r := newTestRegistry(t, Options{RunAllow: rules})
	if err := r.SetPolicy(CapSystemRun, pairing.PolicyAllow); err != nil {
		t.Fatal(err)
	}
	return r
}

func invokeRun(t testing.TB, ctx context.Context, r *Registry, argv []string, timeoutS float64) (RunResult, Result, error) {
	t.Helper()
	p := RunParams{Argv: argv, TimeoutS: timeoutS}
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Invoke(ctx, Call{Capability: CapSystemRun, Params: raw, Caller: grantCaller(pairing.PolicyAllow)})
	if err != nil {
		return RunResult{}, res, err
	}
	var rr RunResult
	if err := json.Unmarshal(res.Data, &rr); err != nil {
		t.Fatal(err)
	}
	return rr, res, nil
}

func TestRunOutput(t *testing.T) {
	t.Parallel()
	r := runRegistry(t, RunRule{Name: "sh"}, RunRule{Name: "uname"})
	tests := []struct {
		name                   string
		argv                   []string
		exit                   int
		stdout, stderr         string
		stdoutTrunc, stderrTrn bool
		stdoutLen              int
	}{
		{name: "uname", argv: []string{"uname", "-s"}, stdout: "Linux\n"},
		{name: "argv is not a shell line", argv: []string{"sh", "-c", `printf '%s|' "$@"`, "x", "a b", "$HOME", ";rm -rf /"}, stdout: "a b|$HOME|;rm -rf /|"},
		{name: "exit code and stderr", argv: []string{"sh", "-c", "echo oops >&2; exit 3"}, exit: 3, stderr: "oops\n"},
		{name: "stdout bounded", argv: []string{"sh", "-c", "yes | head -c 200000"}, stdoutTrunc: true, stdoutLen: MaxRunOutput},
		{name: "stderr bounded", argv: []string{"sh", "-c", "yes x | head -c 100000 >&2"}, stderrTrn: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rr, res, err := invokeRun(t, context.Background(), r, tt.argv, 0)
			if err != nil {
				t.Fatal(err)
			}
			checkResult(t, r, CapSystemRun, res)
			if rr.ExitCode != tt.exit {
				t.Errorf("exit %d, want %d (stderr %q)", rr.ExitCode, tt.exit, rr.Stderr)
			}
			if tt.stdoutLen > 0 {
				if len(rr.Stdout) != tt.stdoutLen {
					t.Errorf("stdout %d bytes, want %d", len(rr.Stdout), tt.stdoutLen)
				}
			} else if tt.stdout != "" && rr.Stdout != tt.stdout {
				t.Errorf("stdout %q, want %q", rr.Stdout, tt.stdout)
			}
			if tt.stderr != "" && rr.Stderr != tt.stderr {
				t.Errorf("stderr %q, want %q", rr.Stderr, tt.stderr)
			}
			if tt.stderrTrn && len(rr.Stderr) != MaxRunOutput {
				t.Errorf("stderr %d bytes, want %d", len(rr.Stderr), MaxRunOutput)
			}
			if rr.StdoutTruncated != tt.stdoutTrunc || rr.StderrTruncated != tt.stderrTrn {
				t.Errorf("truncated stdout %v stderr %v, want %v %v", rr.StdoutTruncated, rr.StderrTruncated, tt.stdoutTrunc, tt.stderrTrn)
			}
		})
	}
}

// TestRunEnv is not parallel: it sets a process environment variable.
func TestRunEnv(t *testing.T) {
	t.Setenv("MESHTRAY_SECRET_TEST", "should-not-leak")
	t.Setenv("OTHER_VAR_TEST", "kept")
	r := runRegistry(t, RunRule{Name: "sh"})
	rr, _, err := invokeRun(t, context.Background(), r, []string{"sh", "-c", `echo "[$MESHTRAY_SECRET_TEST][$OTHER_VAR_TEST]"`}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rr.Stdout != "[][kept]\n" {
		t.Errorf("stdout %q: MESHTRAY_* must be dropped, the rest kept", rr.Stdout)
	}
}

func TestRunRefusals(t *testing.T) {
	t.Parallel()
	r := runRegistry(t, RunRule{Name: "sleep"})
	for _, argv := range [][]string{{"rm", "-rf", "/tmp/x"}, {"/bin/sleep", "1"}, {"./sleep", "1"}, {"sleep/..", "1"}} {
		_, _, err := invokeRun(t, context.Background(), r, argv, 0)
		var pe *ParamError
		if !errors.As(err, &pe) || len(pe.Invalid) != 1 || pe.Invalid[0] != "argv[0]: value must be 'sleep'" {
			t.Errorf("%q: err %v, want a ParamError on argv[0]", argv, err)
		}
	}
	// Even past the schema, the runner refuses what is not allowlisted.
	rn := newRunner([]RunRule{{Name: "sleep"}}, r.log)
	if _, err := rn.run(context.Background(), RunParams{Argv: []string{"sh", "-c", "true"}}); !errors.Is(err, ErrDenied) {
		t.Errorf("runner.run(sh) = %v, want ErrDenied", err)
	}
}

func TestRunAllowlistResolution(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name      string
		rules     []RunRule
		available bool
		reason    string
		names     []string
	}{
		{"none", nil, false, "no command allowlist is configured", nil},
		{"not found", []RunRule{{Name: "no-such-command-meshtray"}}, false, "no allowlisted command is usable: no-such-command-meshtray: not found in PATH", nil},
		{"path as name", []RunRule{{Name: "/bin/sh"}}, false, `no allowlisted command is usable: name "/bin/sh" must be a bare command name`, nil},
		{"relative path", []RunRule{{Name: "x", Path: "bin/x"}}, false, `no allowlisted command is usable: x: path "bin/x" is not absolute`, nil},
		{"directory", []RunRule{{Name: "d", Path: dir}}, false, "no allowlisted command is usable: d: " + dir + " is not a program", nil},
		{"absolute path under another name", []RunRule{{Name: "shell", Path: "/bin/sh"}, {Name: "nope-meshtray"}}, true, "", []string{"shell"}},
		{"several", []RunRule{{Name: "sleep"}, {Name: "uname"}}, true, "", []string{"sleep", "uname"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newTestRegistry(t, Options{RunAllow: tt.rules})
			var c Capability
			for _, x := range r.Manifest().Capabilities {
				if x.Name == CapSystemRun {
					c = x
				}
			}
			if c.Available != tt.available || c.Reason != tt.reason {
				t.Fatalf("available %v reason %q, want %v %q", c.Available, c.Reason, tt.available, tt.reason)
			}
			if tt.available {
				var schema struct {
					Properties struct {
						Argv struct {
							PrefixItems []struct {
								Enum []string `json:"enum"`
							} `json:"prefixItems"`
						} `json:"argv"`
					} `json:"properties"`
				}
				if err := json.Unmarshal(c.Params, &schema); err != nil {
					t.Fatal(err)
				}
				if got := schema.Properties.Argv.PrefixItems[0].Enum; fmt.Sprint(got) != fmt.Sprint(tt.names) {
					t.Errorf("argv[0] enum %q, want %q", got, tt.names)
				}
			}
			_, err := r.Invoke(context.Background(), Call{Capability: CapSystemRun, Params: json.RawMessage(`{"argv":["x"]}`), Approved: true})
			if !tt.available && !errors.Is(err, ErrUnavailable) {
				t.Errorf("Invoke = %v, want ErrUnavailable", err)
			}
		})
	}
	// An absolute Path runs under its rule's name.
	r := runRegistry(t, RunRule{Name: "shell", Path: "/bin/sh"})
	rr, _, err := invokeRun(t, context.Background(), r, []string{"shell", "-c", "echo via-path"}, 0)
	if err != nil || rr.Stdout != "via-path\n" {
		t.Fatalf("shell rule: %+v %v", rr, err)
	}
}

func TestRunTimeout(t *testing.T) {
	t.Parallel()
	r := runRegistry(t, RunRule{Name: "sleep"}, RunRule{Name: "sh", Timeout: 300 * time.Millisecond})
	tests := []struct {
		name     string
		argv     []string
		timeoutS float64
		limit    string
	}{
		{"caller's timeout_s", []string{"sleep", "30"}, 0.3, "300ms"},
		{"rule's timeout", []string{"sh", "-c", "sleep 30"}, 0, "300ms"},
		{"timeout_s cannot raise the rule's", []string{"sh", "-c", "sleep 30"}, 20, "300ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			_, _, err := invokeRun(t, context.Background(), r, tt.argv, tt.timeoutS)
			if !errors.Is(err, ErrTimeout) {
				t.Fatalf("err %v, want ErrTimeout", err)
			}
			if !strings.Contains(err.Error(), tt.limit) {
				t.Errorf("error %q does not name the %s limit", err, tt.limit)
			}
			if el := time.Since(start); el > 5*time.Second {
				t.Errorf("returned after %s", el)
			}
		})
	}
}

// pidGone reports whether pid no longer runs: no such process, or a zombie
// waiting for its (possibly non-reaping) parent.
func pidGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// Field 3, after the parenthesised command name.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'Z'
}

// TestRunCancelKillsProcessGroup starts a shell that starts a background
// sleep, cancels the call, and checks Invoke returns at once and both
// processes are gone.
func TestRunCancelKillsProcessGroup(t *testing.T) {
	t.Parallel()
	r := runRegistry(t, RunRule{Name: "sh"})
	pidFile := filepath.Join(t.TempDir(), "pids")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, err := invokeRun(t, ctx, r, []string{"sh", "-c", `sleep 60 & echo $! $$ > "$0.tmp" && mv "$0.tmp" "$0"; wait`, pidFile}, 0)
		done <- err
	}()
	var pids []int
	waitFor(t, "the pid file", 10*time.Second, func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		for _, f := range strings.Fields(string(b)) {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			pids = append(pids, n)
		}
		return true
	})
	if len(pids) != 2 {
		t.Fatalf("pids %v", pids)
	}
	for _, p := range pids {
		if pidGone(p) {
			t.Fatalf("pid %d not running before cancel", p)
		}
	}
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Invoke did not return after cancel")
	}
	t.Logf("Invoke returned %s after cancel", time.Since(start))
	for _, p := range pids {
		waitFor(t, fmt.Sprintf("pid %d to die", p), 5*time.Second, func() bool { return pidGone(p) })
	}
}

func TestRunConcurrencyBound(t *testing.T) {
	t.Parallel()
	r := runRegistry(t, RunRule{Name: "sh"})
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, MaxConcurrentRuns)
	for i := range MaxConcurrentRuns {
		go func() {
			_, _, err := invokeRun(t, ctx, r, []string{"sh", "-c", `touch "$0"; exec sleep 60`, filepath.Join(dir, strconv.Itoa(i))}, 0)
			errs <- err
		}()
	}
	waitFor(t, "all commands to start", 10*time.Second, func() bool {
		ents, _ := os.ReadDir(dir)
		return len(ents) == MaxConcurrentRuns
	})
	_, _, err := invokeRun(t, ctx, r, []string{"sh", "-c", "true"}, 0)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("run beyond the bound: %v, want ErrUnavailable", err)
	}
	cancel()
	for range MaxConcurrentRuns {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Errorf("running command: %v", err)
		}
	}
	// The slots are free again.
	if _, _, err := invokeRun(t, context.Background(), r, []string{"sh", "-c", "true"}, 0); err != nil {
		t.Fatalf("after the bound cleared: %v", err)
	}
}
