//go:build linux

package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// TestRunEnv is not parallel: it sets process environment variables, as a
// user's session would (an SSH agent, cloud credentials).
func TestRunEnv(t *testing.T) {
	set := map[string]string{
		"SSH_AUTH_SOCK":         "/tmp/ssh-agent.sock",
		"AWS_SECRET_ACCESS_KEY": "aws-secret",
		"GITHUB_TOKEN":          "ghp_secret",
		"MESHTRAY_SECRET_TEST":  "should-not-leak",
		"LANG":                  "C.UTF-8",
		"LC_TIME":               "C",
		"TZ":                    "UTC",
		"USER":                  "owner",
		"DISPLAY":               ":9",
	}
	for k, v := range set {
		t.Setenv(k, v)
	}
	r := runRegistry(t, RunRule{Name: "env"}, RunRule{Name: "printenv", Env: []string{"DISPLAY", "MESHTRAY_SECRET_TEST", "BAD=NAME"}})
	got := func(argv ...string) map[string]string {
		t.Helper()
		rr, _, err := invokeRun(t, context.Background(), r, argv, 0)
		if err != nil || rr.ExitCode != 0 {
			t.Fatalf("%v: %v %+v", argv, err, rr)
		}
		m := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(rr.Stdout), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				m[k] = v
			}
		}
		return m
	}
	base := got("env")
	for _, k := range []string{"PATH", "HOME", "LANG", "LC_TIME", "TZ", "USER"} {
		if base[k] != os.Getenv(k) || base[k] == "" {
			t.Errorf("%s = %q, want the node's %q", k, base[k], os.Getenv(k))
		}
	}
	for _, k := range []string{"SSH_AUTH_SOCK", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "MESHTRAY_SECRET_TEST", "DISPLAY"} {
		if v, ok := base[k]; ok {
			t.Errorf("%s=%q reached a command whose rule does not name it", k, v)
		}
	}
	// Names only in failures: a CI environment's values stay out of logs.
	names := func(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
	if len(base) > 6 {
		t.Errorf("the command got more than the base environment: %v", names(base))
	}
	extra := got("printenv")
	if _, ok := extra["MESHTRAY_SECRET_TEST"]; ok || extra["DISPLAY"] != ":9" || len(extra) != len(base)+1 {
		t.Errorf("a rule's Env: got %v, want the base and DISPLAY, never MESHTRAY_*", names(extra))
	}
}

// TestRunDiesWithTheNode: a node killed with SIGKILL (no cleanup runs)
// does not leave its system.run command behind. The node is this test
// binary re-executed (TestMain's helper), running `sleep` through the
// registry.
func TestRunDiesWithTheNode(t *testing.T) {
	t.Parallel()
	const secs = "281.25" // distinctive, to find the process
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=run-sleep", "MESHTRAY_HELPER_ARG="+secs)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var sleepPID int
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if sleepPID != 0 && !pidGone(sleepPID) {
			_ = syscall.Kill(sleepPID, syscall.SIGKILL)
		}
	})
	waitFor(t, "the helper's sleep to start", 20*time.Second, func() bool {
		sleepPID = childRunning(cmd.Process.Pid, "sleep", secs)
		return sleepPID != 0
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitFor(t, fmt.Sprintf("sleep (pid %d) to die with the node", sleepPID), 5*time.Second, func() bool { return pidGone(sleepPID) })
}

// childRunning returns the pid of a running child of parent with exactly
// argv (argv[0] as a base name), or 0.
func childRunning(parent int, argv ...string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		got := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		if len(got) != len(argv) || filepath.Base(got[0]) != argv[0] || !slices.Equal(got[1:], argv[1:]) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(parent) && !pidGone(pid) {
			return pid
		}
	}
	return 0
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

// TestRunLookPathIgnoresDot is not parallel (it sets PATH and the working
// directory): a program found only through a relative PATH entry is not
// allowlisted (exec.ErrDot), whatever the working directory holds.
func TestRunLookPathIgnoresDot(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "meshtray-dot-cmd"), []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	t.Setenv("PATH", ".")
	rn := newRunner([]RunRule{{Name: "meshtray-dot-cmd"}}, slog.New(slog.DiscardHandler))
	if ok, reason := rn.available(); ok || !strings.Contains(reason, "meshtray-dot-cmd: not found in PATH") {
		t.Fatalf("available %v, reason %q", ok, reason)
	}
}
