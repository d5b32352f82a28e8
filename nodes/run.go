package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// system.run limits.
const (
	// DefaultRunTimeout is a command's time limit when its RunRule sets none.
	DefaultRunTimeout = 30 * time.Second
	// MaxRunTimeout caps every RunRule.Timeout and every timeout_s.
	MaxRunTimeout = 10 * time.Minute
	// MaxRunOutput is how much of stdout, and of stderr, a result keeps;
	// the rest is read and dropped, and the result says truncated.
	MaxRunOutput = 64 << 10
	// MaxConcurrentRuns is how many system.run processes may run at once;
	// more are refused as unavailable.
	MaxConcurrentRuns = 4
	// runWaitDelay is how long a finished (or killed) command's output pipes
	// stay open for processes that escaped its process group.
	runWaitDelay = 500 * time.Millisecond
	maxRunArgs   = 64
	maxRunArgLen = 4096
)

// RunRule allows one command for system.run.
type RunRule struct {
	// Name is what argv[0] must equal: a bare command name ("uname"), never
	// a path.
	Name string `json:"name" toml:"name"`
	// Path is the program's absolute path; empty means exec.LookPath(Name)
	// when the registry is built.
	Path string `json:"path,omitempty" toml:"path,omitempty"`
	// Timeout is the longest the command may run, and how long it may run
	// when the caller gives no timeout_s; 0 means DefaultRunTimeout. Capped
	// at MaxRunTimeout.
	Timeout time.Duration `json:"timeout,omitempty" toml:"timeout,omitempty"`
	// Env names environment variables of the node passed to this command
	// on top of the minimal environment every command gets (RunBaseEnv):
	// exact names, e.g. ["DISPLAY"]. Names with "=" are ignored.
	Env []string `json:"env,omitempty" toml:"env,omitempty"`
}

// RunBaseEnv is the environment every system.run command gets from the
// node, whatever its rule says: the variables a program needs to find
// programs, the user's home, language and time zone. Nothing else (not
// SSH_AUTH_SOCK, cloud credentials, tokens in the node's environment)
// unless the rule's Env names it. LC_* means every locale variable.
var RunBaseEnv = []string{"PATH", "HOME", "LANG", "LC_*", "TZ", "USER"}

// RunParams are system.run's parameters.
type RunParams struct {
	Argv     []string `json:"argv"`
	TimeoutS float64  `json:"timeout_s,omitempty"`
}

// RunResult is system.run's result. Output that is not UTF-8 is carried
// with U+FFFD in place of invalid bytes (encoding/json).
type RunResult struct {
	ExitCode        int    `json:"exit_code"` // -1 when a signal ended it
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
	DurationMS      int64  `json:"duration_ms"`
}

type runRule struct {
	name, path string
	timeout    time.Duration
	env        []string // extra variable names (RunRule.Env)
}

// runner runs allowlisted commands without a shell.
type runner struct {
	rules  map[string]runRule
	names  []string // sorted
	reason string   // why system.run is unavailable, when rules is empty
	sem    chan struct{}
	log    *slog.Logger
}

func newRunner(allow []RunRule, log *slog.Logger) *runner {
	rn := &runner{rules: make(map[string]runRule), sem: make(chan struct{}, MaxConcurrentRuns), log: log}
	var problems []string
	for _, r := range allow {
		rule, err := resolveRunRule(r)
		if err != nil {
			log.Warn("system.run: allowlist entry skipped", "name", r.Name, "err", err)
			problems = append(problems, err.Error())
			continue
		}
		rn.rules[rule.name] = rule
	}
	rn.names = make([]string, 0, len(rn.rules))
	for n := range rn.rules {
		rn.names = append(rn.names, n)
	}
	slices.Sort(rn.names)
	switch {
	case len(allow) == 0:
		rn.reason = "no command allowlist is configured"
	case len(rn.rules) == 0:
		rn.reason = "no allowlisted command is usable: " + strings.Join(problems, "; ")
	}
	return rn
}

func resolveRunRule(r RunRule) (runRule, error) {
	if r.Name == "" || strings.ContainsAny(r.Name, `/\`) || strings.TrimSpace(r.Name) != r.Name {
		return runRule{}, fmt.Errorf("name %q must be a bare command name", r.Name)
	}
	path := r.Path
	if path == "" {
		// LookPath never returns a path relative to the working directory:
		// one found through a relative PATH entry ("." or "bin") is an
		// error (exec.ErrDot, Go >= 1.19), reported as not found.
		p, err := exec.LookPath(r.Name)
		if err != nil {
			return runRule{}, fmt.Errorf("%s: not found in PATH", r.Name)
		}
		path = p
	}
	if !filepath.IsAbs(path) {
		return runRule{}, fmt.Errorf("%s: path %q is not absolute", r.Name, path)
	}
	if fi, err := os.Stat(path); err != nil || fi.IsDir() {
		return runRule{}, fmt.Errorf("%s: %s is not a program", r.Name, path)
	}
	t := r.Timeout
	if t <= 0 {
		t = DefaultRunTimeout
	}
	t = min(t, MaxRunTimeout)
	var env []string
	for _, n := range r.Env {
		if n = strings.TrimSpace(n); n != "" && !strings.Contains(n, "=") {
			env = append(env, n)
		}
	}
	return runRule{name: r.Name, path: path, timeout: t, env: env}, nil
}

func (rn *runner) available() (bool, string) {
	if len(rn.rules) == 0 {
		return false, rn.reason
	}
	return true, ""
}

// paramsSchema lists the allowlisted names as the only values of argv[0],
// so the manifest tells callers what they may run and Check refuses the
// rest.
func (rn *runner) paramsSchema() json.RawMessage {
	first := `{"type":"string"}`
	if len(rn.names) > 0 {
		enum, _ := json.Marshal(rn.names)
		first = `{"type":"string","enum":` + string(enum) + `}`
	}
	return json.RawMessage(fmt.Sprintf(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
"required":["argv"],"additionalProperties":false,
"properties":{
"argv":{"type":"array","minItems":1,"maxItems":%d,"prefixItems":[%s],"items":{"type":"string","maxLength":%d},
 "description":"program and arguments, run without a shell; argv[0] must be an allowlisted command name"},
"timeout_s":{"type":"number","exclusiveMinimum":0,"maximum":%d,"description":"time limit in seconds, at most the command's own limit"}}}`,
		maxRunArgs, first, maxRunArgLen, int(MaxRunTimeout/time.Second)))
}

const runResultSchema = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
"required":["exit_code","stdout","stderr","stdout_truncated","stderr_truncated","duration_ms"],
"properties":{"exit_code":{"type":"integer"},"stdout":{"type":"string"},"stderr":{"type":"string"},
"stdout_truncated":{"type":"boolean"},"stderr_truncated":{"type":"boolean"},"duration_ms":{"type":"integer","minimum":0}}}`

func runCapability(rn *runner) *capability {
	return &capability{
		Capability: Capability{
			Name: CapSystemRun,
			Description: fmt.Sprintf("Run an allowlisted program on this device without a shell; returns its exit code and the first %d KiB of stdout and stderr.",
				MaxRunOutput>>10),
			Params:  rn.paramsSchema(),
			Result:  json.RawMessage(runResultSchema),
			Effects: EffectExec,
		},
		available: rn.available,
		run: func(ctx context.Context, _ Call, raw json.RawMessage) (Result, error) {
			var p RunParams
			if err := json.Unmarshal(raw, &p); err != nil {
				return Result{}, err
			}
			res, err := rn.run(ctx, p)
			if err != nil {
				return Result{}, err
			}
			summary := fmt.Sprintf("%s exited %d", p.Argv[0], res.ExitCode)
			if res.StdoutTruncated || res.StderrTruncated {
				summary += " (output truncated)"
			}
			return marshalResult(res, summary)
		},
	}
}

// run starts argv[0]'s allowlisted program with argv[1:], without a shell,
// stdin from the null device, a minimal environment (runEnv), in the user's
// home directory. When ctx ends or the time limit passes, the whole process
// group is killed (unix; the process on Windows) and run returns at once.
// On Linux the command also gets SIGKILL when the node dies (kill -9
// included; prctl PR_SET_PDEATHSIG), so it never outlives the node's
// timeout; processes it started in the background are not covered.
func (rn *runner) run(ctx context.Context, p RunParams) (RunResult, error) {
	if len(p.Argv) == 0 {
		return RunResult{}, &ParamError{Capability: CapSystemRun, Missing: []string{"argv"}}
	}
	rule, ok := rn.rules[p.Argv[0]]
	if !ok {
		return RunResult{}, fmt.Errorf("%w: %q is not an allowlisted command", ErrDenied, p.Argv[0])
	}
	limit := rule.timeout
	if p.TimeoutS > 0 {
		if d := time.Duration(p.TimeoutS * float64(time.Second)); d > 0 && d < limit {
			limit = d
		}
	}
	select {
	case rn.sem <- struct{}{}:
		defer func() { <-rn.sem }()
	default:
		return RunResult{}, fmt.Errorf("%s: %w: %d commands are already running", CapSystemRun, ErrUnavailable, MaxConcurrentRuns)
	}

	runCtx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(runCtx, rule.path, p.Argv[1:]...)
	cmd.Env = runEnv(os.Environ(), rule.env)
	if home, err := os.UserHomeDir(); err == nil {
		cmd.Dir = home
	}
	stdout, stderr := &boundedBuffer{max: MaxRunOutput}, &boundedBuffer{max: MaxRunOutput}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	killProcessGroup(cmd)
	cmd.WaitDelay = runWaitDelay

	start := time.Now()
	err := cmd.Run()
	res := RunResult{
		ExitCode:        -1,
		Stdout:          string(stdout.buf),
		Stderr:          string(stderr.buf),
		StdoutTruncated: stdout.truncated,
		StderrTruncated: stderr.truncated,
		DurationMS:      time.Since(start).Milliseconds(),
	}
	if cmd.ProcessState != nil {
		res.ExitCode = cmd.ProcessState.ExitCode()
	}
	if ctx.Err() != nil {
		return RunResult{}, fmt.Errorf("%s: %w", CapSystemRun, ctx.Err())
	}
	if runCtx.Err() != nil {
		return RunResult{}, fmt.Errorf("%w: %s ran longer than its %s limit and was killed", ErrTimeout, rule.name, limit)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) && !errors.Is(err, exec.ErrWaitDelay) {
		return RunResult{}, fmt.Errorf("%s: %s: %w", CapSystemRun, rule.name, err)
	}
	return res, nil
}

// runEnv picks from environ (KEY=value entries) the variables a command
// gets: RunBaseEnv's and the rule's extra names, in environ's order.
// meshtray's own MESHTRAY_* variables never pass, even when named.
func runEnv(environ, extra []string) []string {
	out := make([]string, 0, 8)
	for _, kv := range environ {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.HasPrefix(strings.ToUpper(k), "MESHTRAY_") {
			continue
		}
		if envAllowed(k, RunBaseEnv) || slices.Contains(extra, k) {
			out = append(out, kv)
		}
	}
	return out
}

// envAllowed reports whether name is in names, where "P*" stands for
// every name starting with P.
func envAllowed(name string, names []string) bool {
	for _, n := range names {
		if p, ok := strings.CutSuffix(n, "*"); ok {
			if strings.HasPrefix(name, p) {
				return true
			}
		} else if n == name {
			return true
		}
	}
	return false
}

// boundedBuffer keeps the first max bytes written to it and counts the
// rest as dropped; it never fails a write, so the writer is not disturbed.
type boundedBuffer struct {
	buf       []byte
	max       int
	truncated bool
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if room := b.max - len(b.buf); room > 0 {
		if len(p) > room {
			b.buf = append(b.buf, p[:room]...)
			b.truncated = true
		} else {
			b.buf = append(b.buf, p...)
		}
	} else if len(p) > 0 {
		b.truncated = true
	}
	return len(p), nil
}
