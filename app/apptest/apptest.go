// Package apptest runs real meshtray nodes for tests: the test binary
// re-executes itself as the meshtray command (cli.Run), so a test drives the
// exact program a user runs — flags, config file, keychain, signals, exit
// codes — without building a separate binary.
//
// Use it as the whole TestMain of a package that needs nodes, with the
// command line (cli.Run; apptest does not import it, so the packages
// app/cli links, the tray among them, can use apptest in their own tests):
//
//	func TestMain(m *testing.M) { apptest.Main(m, cli.Run) }
//
// Main also starts a private Secret Service (keychain/keychaintest) that
// every node started by the tests uses for --keychain os.
package apptest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"
	"go.uber.org/goleak"

	"meshtray/app"
	"meshtray/keychain/keychaintest"
)

// envMain marks a child process that must run the meshtray command.
const envMain = "MESHTRAY_APPTEST_MAIN"

// Main runs the meshtray command (run, given the arguments after the
// program name, returning the exit code) when this process is a node or
// CLI child, and otherwise the tests, with a private Secret Service and a
// goroutine leak check.
func Main(m *testing.M, run func(args []string) int, opts ...goleak.Option) {
	if os.Getenv(envMain) == "1" {
		os.Exit(run(os.Args[1:]))
	}
	// tailscale.com/client/local dials tailscaled through an http.Transport
	// whose dial outlives the request; with no tailscaled, safesocket
	// retries that dial every 250 ms for the first 2-5 s of the process
	// (tailscaledStillStarting) and then gives up by itself. An in-process
	// node closed in that window leaves that one library goroutine behind.
	opts = append(opts, goleak.IgnoreTopFunction("tailscale.com/safesocket.ConnectContext"))
	keychaintest.Main(m, opts...)
}

// Command returns an *exec.Cmd running `meshtray args...` (this test binary
// in meshtray mode) with the test's environment plus env.
func Command(ctx context.Context, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), envMain+"=1", "LANGUAGE=en"), env...)
	cmd.Cancel = func() error { return cmd.Process.Kill() }
	dieWithParent(cmd)
	return cmd
}

// Options configure StartNode.
type Options struct {
	// StateDir; default a fresh t.TempDir().
	StateDir string
	// Keychain is "os" (the private Secret Service) or "file"; default os.
	// "config" passes no --keychain flag (the config file decides).
	Keychain string
	// Name is the device name; default "node".
	Name string
	// Config is written to config.toml in the state dir before start.
	// Unless it has a [files] table, files.dir is set to FilesDir.
	Config string
	// FilesDir is the node's receive folder; default <StateDir>/received
	// (a test node never writes to the user's download folder).
	FilesDir string
	// Args are extra flags for `meshtray serve`.
	Args []string
	// Env is extra environment for the node.
	Env []string
}

// Node is a running `meshtray serve` child process.
type Node struct {
	StateDir string
	FilesDir string // the receive folder (Options.FilesDir)
	Port     int
	BaseURL  string // http://127.0.0.1:PORT
	Client   *app.Client
	Cmd      *exec.Cmd

	t    testing.TB
	mu   sync.Mutex
	logs bytes.Buffer // node stderr; guarded by mu
	done chan struct{}
	err  error // Wait's result, set before done closes
}

type syncWriter struct{ n *Node }

func (w syncWriter) Write(p []byte) (int, error) {
	w.n.mu.Lock()
	defer w.n.mu.Unlock()
	return w.n.logs.Write(p)
}

// StartNode starts `meshtray serve` on a free loopback port and waits until
// its control API answers. The node is stopped (SIGTERM, then killed) at
// the end of the test; its logs are printed when the test failed.
func StartNode(t testing.TB, o Options) *Node {
	t.Helper()
	if o.StateDir == "" {
		o.StateDir = t.TempDir()
	}
	if o.Keychain == "" {
		o.Keychain = app.KeychainOS
	}
	if o.Name == "" {
		o.Name = "node"
	}
	if o.FilesDir == "" {
		o.FilesDir = filepath.Join(o.StateDir, "received")
	}
	if !strings.Contains(o.Config, "[files]") {
		o.Config += fmt.Sprintf("\n[files]\ndir = %q\n", o.FilesDir)
	}
	if o.Config != "" {
		if err := os.WriteFile(filepath.Join(o.StateDir, "config.toml"), []byte(o.Config), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"serve", "--state-dir", o.StateDir, "--port", "0", "--name", o.Name, "--log-level", "debug"}
	if o.Keychain != "config" {
		args = append(args, "--keychain", o.Keychain)
	}
	args = append(args, o.Args...)
	n := &Node{StateDir: o.StateDir, FilesDir: o.FilesDir, t: t, done: make(chan struct{})}
	n.Cmd = Command(context.Background(), o.Env, args...)
	n.Cmd.Stdout = syncWriter{n}
	n.Cmd.Stderr = syncWriter{n}
	if err := n.Cmd.Start(); err != nil {
		t.Fatalf("start meshtray serve: %v", err)
	}
	go func() {
		n.err = n.Cmd.Wait()
		close(n.done)
	}()
	t.Cleanup(func() {
		n.Stop()
		if t.Failed() {
			t.Logf("logs of node %s:\n%s", o.Name, n.Logs())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-n.done:
			t.Fatalf("meshtray serve exited: %v\n%s", n.err, n.Logs())
		default:
		}
		if c, err := app.Dial(o.StateDir, 0); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err = c.Status(ctx)
			cancel()
			if err == nil {
				n.Client = c
				n.BaseURL = c.BaseURL()
				fmt.Sscanf(n.BaseURL[strings.LastIndexByte(n.BaseURL, ':')+1:], "%d", &n.Port)
				return n
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("meshtray serve not ready after 30s\n%s", n.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Logs returns what the node wrote to stdout and stderr so far.
func (n *Node) Logs() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.logs.String()
}

// Signal sends sig to the node.
func (n *Node) Signal(sig os.Signal) error { return n.Cmd.Process.Signal(sig) }

// Wait waits for the node to exit (up to d) and returns its exit error.
func (n *Node) Wait(d time.Duration) (exited bool, err error) {
	select {
	case <-n.done:
		return true, n.err
	case <-time.After(d):
		return false, nil
	}
}

// Stop sends SIGTERM and waits up to 15 s, then kills. It returns the exit
// error of a clean stop (nil for exit code 0).
func (n *Node) Stop() error {
	select {
	case <-n.done:
		return n.err
	default:
	}
	_ = n.Signal(syscall.SIGTERM)
	if exited, err := n.Wait(15 * time.Second); exited {
		return err
	}
	_ = n.Cmd.Process.Kill()
	<-n.done
	return errors.New("node did not stop within 15s of SIGTERM; killed")
}

// Result is the outcome of one CLI run.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// CLI runs `meshtray args... --state-dir <node's>` and returns its output
// and exit code.
func (n *Node) CLI(args ...string) Result {
	n.t.Helper()
	return RunCLI(n.t, nil, append(args, "--state-dir", n.StateDir)...)
}

// CLIWithin is CLI for a command that may run longer than a minute: it
// is killed, and the test fails, after d.
func (n *Node) CLIWithin(d time.Duration, args ...string) Result {
	n.t.Helper()
	return RunCLIWithin(n.t, d, nil, append(args, "--state-dir", n.StateDir)...)
}

// RunCLI runs `meshtray args...` with extra env; the command is killed,
// and the test fails, after a minute.
func RunCLI(t testing.TB, env []string, args ...string) Result {
	t.Helper()
	return RunCLIWithin(t, time.Minute, env, args...)
}

// RunCLIWithin is RunCLI with the time limit d.
func RunCLIWithin(t testing.TB, d time.Duration, env []string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := Command(ctx, env, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("meshtray %v: still running after %v, killed\nstdout:\n%s\nstderr:\n%s", args, d, out.String(), errb.String())
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("meshtray %v: %v", args, err)
	}
	return Result{Stdout: out.String(), Stderr: errb.String(), Code: code}
}

// Bearer is an a2a-go CallInterceptor that adds a grant token.
type Bearer struct {
	a2aclient.PassthroughInterceptor
	Token string
}

func (b Bearer) Before(ctx context.Context, req *a2aclient.Request) (context.Context, error) {
	req.Meta.Append("Authorization", "Bearer "+b.Token)
	return ctx, nil
}

// A2AClient resolves base's Agent Card and returns the official a2a-go
// client calling it with token. The HTTP client has no timeout (a2a-go's
// default 3 minutes would cut streams).
func A2AClient(t testing.TB, base, token string) *a2aclient.Client {
	t.Helper()
	ctx := context.Background()
	hc := &http.Client{}
	card, err := agentcard.NewResolver(hc).Resolve(ctx, base)
	if err != nil {
		t.Fatalf("resolve agent card at %s: %v", base, err)
	}
	c, err := a2aclient.NewFromCard(ctx, card,
		a2aclient.WithJSONRPCTransport(hc),
		a2aclient.WithConfig(a2aclient.Config{PreferredTransports: []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC}}),
		a2aclient.WithInterceptors(Bearer{Token: token}))
	if err != nil {
		t.Fatalf("a2a client from card: %v", err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c
}

// WaitFor polls cond every 20 ms until it returns true or d passes.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
