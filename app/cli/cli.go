// Package cli is the meshtray command line: `meshtray` (the tray app, or
// the headless node without a desktop session), `meshtray serve`, and the
// client commands that talk to a running node over its control API
// through app.Client's typed methods, one file per command or command
// group. main calls Run; the tray is wired in by tray.go (tray_omit.go
// with -tags headless).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"meshtray/app"
	"meshtray/jsonout"
	"meshtray/keychain"
	"meshtray/store"
)

// Exit codes of the meshtray command.
const (
	ExitOK         = 0
	ExitError      = 1
	ExitUsage      = 2
	ExitNoKeychain = 3 // no OS keychain reachable; --keychain file is the way out
	ExitNotRunning = 4 // a client command found no running node
)

// trayParts are the parts of the program this build links for the
// desktop (tray.go; none in tray_omit.go).
type trayParts struct {
	// run runs the tray app with the node in-process, on the main
	// goroutine. Nil: `meshtray` without a subcommand runs the headless node.
	run func(ctx context.Context, n *app.Node) error
}

// options are where the command reads and writes, and its tray.
type options struct {
	tray   trayParts
	Stdout io.Writer
	Stderr io.Writer
	Stdin  io.Reader
}

// cli holds the parsed global flags.
type cli struct {
	opts     options
	stateDir string
	port     int
	asJSON   bool
	// printedJSON: the command printed its JSON (a failure after it adds
	// none).
	printedJSON bool

	// node flags (serve and the tray)
	name     string
	keychain string
	logLevel string
	resetDB  bool
}

// Run runs the meshtray command line (args without the program name) on
// the process's stdin, stdout and stderr, with this build's tray, until it
// ends or SIGINT/SIGTERM; it returns the process exit code (Exit*, and
// the Exit* codes of delegated tasks).
func Run(args []string) int {
	return run(args, options{tray: buildTray, Stdout: os.Stdout, Stderr: os.Stderr, Stdin: os.Stdin})
}

func run(args []string, opts options) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := &cli{opts: opts}
	root := c.rootCommand()
	root.SetArgs(args)
	root.SetOut(opts.Stdout)
	root.SetErr(opts.Stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var ex *exitError
	if errors.As(err, &ex) {
		if ex.msg != "" {
			fmt.Fprintln(opts.Stderr, "meshtray:", ex.msg)
		}
		c.jsonError(ex.msg, ex.code)
		return ex.code
	}
	fmt.Fprintln(opts.Stderr, "meshtray:", err)
	code := exitCode(err, opts.Stderr)
	c.jsonError(err.Error(), code)
	return code
}

// jsonError prints {"error", "exit_code"} on stdout for a --json command
// that failed without printing its JSON (the one way every --json command
// reports a failure to a script; the sentence also goes to stderr).
func (c *cli) jsonError(msg string, code int) {
	if !c.asJSON || c.printedJSON {
		return
	}
	if msg == "" {
		msg = fmt.Sprintf("exit code %d", code)
	}
	if b, err := jsonout.MarshalIndent(map[string]any{"error": msg, "exit_code": code}); err == nil {
		c.opts.Stdout.Write(append(b, '\n'))
	}
}

// exitCode is the exit code of an error that is not an *exitError (with
// the hint for a node not running, on stderr).
func exitCode(err error, stderr io.Writer) int {
	var wrongPort *app.WrongPortError
	switch {
	case errors.As(err, &wrongPort):
		return ExitNotRunning
	case errors.Is(err, app.ErrNotRunning):
		fmt.Fprintln(stderr, "start it with `meshtray` (tray) or `meshtray serve` (headless), with the same --state-dir;\n"+
			"a node started with another --state-dir is reached with that --state-dir (--port alone does not find it)")
		return ExitNotRunning
	case errors.Is(err, keychain.ErrUnavailable):
		return ExitNoKeychain
	case isUsage(err):
		return ExitUsage
	}
	return ExitError
}

// exitError carries a specific exit code (and an optional message).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

type usageError struct{ error }

func isUsage(err error) bool {
	var u usageError
	return errors.As(err, &u)
}

// noArgs and exactArgs are cobra's validators with usage errors (exit 2).
func noArgs(cmd *cobra.Command, args []string) error {
	if err := cobra.NoArgs(cmd, args); err != nil {
		return usageError{err}
	}
	return nil
}

func rangeArgs(min, max int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.RangeArgs(min, max)(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

func (c *cli) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "meshtray",
		Short: "Your devices as one private mesh: pairing, node capabilities and an A2A agent surface",
		Long: `meshtray turns a person's laptops, desktops and phone into one private mesh.

Without a subcommand it runs the tray app (or, with no desktop session, the
headless node). Every other subcommand talks to the running node over its
loopback control surface, found through --state-dir.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.runNode(cmd, true)
		},
		Version: app.Version,
	}
	root.CompletionOptions.HiddenDefaultCmd = true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&c.stateDir, "state-dir", app.DefaultStateDir(), "state directory (config, settings, lock)")
	pf.IntVar(&c.port, "port", 0, fmt.Sprintf("TCP port of the node (default %d); other commands find the node by --state-dir and check it listens here", app.DefaultPort))
	c.nodeFlags(root.Flags())

	serve := &cobra.Command{
		Use:   "serve",
		Short: "Run the headless node (no tray)",
		Long: `Run the node without a tray: the HTTP surfaces on 127.0.0.1:PORT, the A2A
surface when published, discovery, pairing. Stops cleanly on SIGINT/SIGTERM.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return c.runNode(cmd, false) },
	}
	c.nodeFlags(serve.Flags())
	root.AddCommand(serve)
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print meshtray's version",
		Args:  noArgs,
		Run:   func(*cobra.Command, []string) { fmt.Fprintln(c.opts.Stdout, "meshtray", app.Version) },
	})

	root.AddCommand(c.idCommand(), c.statusCommand(), c.manifestCommand(), c.a2aCommand(), c.grantCommand(),
		c.devicesCommand(), c.approvalsCommand(), c.approveCommand(), c.denyCommand(),
		c.lanCommand(), c.pairCommand(), c.peersCommand(),
		c.agentsCommand(), c.delegateCommand(), c.answerCommand(), c.cancelCommand(), c.outboundCommand(), c.forwardCommand(),
		c.auditCommand(), c.sendCommand())
	return root
}

func (c *cli) nodeFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.name, "name", "", "device name shown to peers (default: the host name)")
	fs.StringVar(&c.keychain, "keychain", app.KeychainOS, `where secrets live: "os" (the OS keychain) or "file" (0600 file in the state dir)`)
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.BoolVar(&c.resetDB, strings.TrimPrefix(store.ResetFlag, "--"), false, "if the database (meshtray.db in the state dir) is unreadable, keep it as meshtray.db.corrupt-<time> and start with an empty one")
}

// config builds the node configuration: defaults, the config file, then the
// flags that were given.
func (c *cli) config(cmd *cobra.Command) (app.Config, error) {
	cfg := app.Defaults()
	cfg.StateDir = c.stateDir
	if _, err := app.LoadConfigFile(&cfg); err != nil {
		return cfg, err
	}
	fl := cmd.Flags()
	if fl.Changed("port") {
		cfg.Port = c.port
	}
	if fl.Changed("name") {
		cfg.Name = c.name
	}
	if fl.Changed("keychain") {
		cfg.Keychain = c.keychain
	}
	if fl.Changed("log-level") {
		cfg.LogLevel = c.logLevel
	}
	cfg.ResetDatabase = c.resetDB
	return cfg, cfg.Validate()
}

func (c *cli) runNode(cmd *cobra.Command, tray bool) error {
	cfg, err := c.config(cmd)
	if err != nil {
		return usageError{err}
	}
	level, _ := app.ParseLogLevel(cfg.LogLevel)
	out := c.opts.Stderr
	var logFile *os.File
	if tray && c.opts.tray.run != nil {
		// A tray app's stderr goes nowhere a person looks: keep a log file
		// too ("Open log folder" in the menu).
		f, err := app.OpenLogFile(cfg.StateDir)
		if err != nil {
			fmt.Fprintln(c.opts.Stderr, "meshtray: no log file:", err)
		} else {
			defer f.Close()
			logFile = f
			out = io.MultiWriter(c.opts.Stderr, f)
		}
	}
	logger := app.NewLogger(out, level)
	if logFile != nil {
		cfg.LogFile = logFile.Name()
	}
	n, err := app.NewNode(cfg, logger)
	if err != nil {
		return err
	}
	if tray && c.opts.tray.run != nil {
		return c.opts.tray.run(cmd.Context(), n)
	}
	return n.Run(cmd.Context())
}

// dial finds the node; what the command changes is recorded as decided
// from the CLI.
func (c *cli) dial() (*app.Client, error) {
	cl, err := app.Dial(c.stateDir, c.port)
	if cl != nil {
		cl.Where = app.WhereCLI
	}
	return cl, err
}

// callTimeout bounds the control-API calls of one short command (loopback).
const callTimeout = 30 * time.Second

// api dials the node for a short command: its client, and a context that
// ends after callTimeout; done releases the context.
func (c *cli) api(cmd *cobra.Command) (cl *app.Client, ctx context.Context, done func(), err error) {
	cl, err = c.dial()
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, done = context.WithTimeout(cmd.Context(), callTimeout)
	return cl, ctx, done, nil
}

// withAPI runs fn with the node's client and a call context (api).
func (c *cli) withAPI(cmd *cobra.Command, fn func(ctx context.Context, cl *app.Client) error) error {
	cl, ctx, done, err := c.api(cmd)
	if err != nil {
		return err
	}
	defer done()
	return fn(ctx, cl)
}

// show is a command that reads one value from the node: get runs with
// the node's client and a call context (api); the value is printed as
// indented JSON with --json, else by text, for a person.
func show[T any](c *cli, cmd *cobra.Command, get func(*app.Client, context.Context) (T, error), text func(T) error) error {
	cl, ctx, done, err := c.api(cmd)
	if err != nil {
		return err
	}
	defer done()
	v, err := get(cl, ctx)
	if err != nil {
		return err
	}
	if c.asJSON {
		return c.printJSON(v)
	}
	return text(v)
}

// printJSON prints v indented, as written (jsonout.MarshalIndent: no HTML
// escaping; \u0026 for & in a pairing URL helps no terminal or script).
func (c *cli) printJSON(v any) error {
	b, err := jsonout.MarshalIndent(v)
	if err != nil {
		return err
	}
	c.printedJSON = true
	_, err = c.opts.Stdout.Write(append(b, '\n'))
	return err
}

func (c *cli) table() *tabwriter.Writer {
	return tabwriter.NewWriter(c.opts.Stdout, 0, 4, 2, ' ', 0)
}

func (c *cli) jsonFlag(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&c.asJSON, "json", false, "print JSON for scripts")
}
