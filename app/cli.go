package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"meshtray/keychain"
	"meshtray/mesh"
	"meshtray/pairing"
)

// Exit codes of the meshtray command.
const (
	ExitOK         = 0
	ExitError      = 1
	ExitUsage      = 2
	ExitNoKeychain = 3 // no OS keychain reachable; --keychain file is the way out
	ExitNotRunning = 4 // a client command found no running node
)

// CLIOptions are what main passes in: the parts of the program app cannot
// import (the tray imports app, not the reverse).
type CLIOptions struct {
	// RunTray runs the tray app with the node in-process, on the main
	// goroutine. Nil: `meshtray` without a subcommand runs the headless node.
	RunTray func(ctx context.Context, n *Node) error
	// UI runs `meshtray ui ...` (the Fyne window process). Nil hides it.
	UI     func(ctx context.Context, c *Client, args []string) error
	Stdout io.Writer
	Stderr io.Writer
	Stdin  io.Reader
}

// cli holds the parsed global flags.
type cli struct {
	opts     CLIOptions
	stateDir string
	port     int
	asJSON   bool

	// node flags (serve and the tray)
	name     string
	keychain string
	logLevel string
}

// Main runs the meshtray command line and returns the process exit code.
func Main(args []string, opts CLIOptions) int {
	if opts.Stdout == nil {
		opts.Stdout = os.Stdout
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	if opts.Stdin == nil {
		opts.Stdin = os.Stdin
	}
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
		return ex.code
	}
	fmt.Fprintln(opts.Stderr, "meshtray:", err)
	var wrongPort *WrongPortError
	switch {
	case errors.As(err, &wrongPort):
		return ExitNotRunning
	case errors.Is(err, ErrNotRunning):
		fmt.Fprintln(opts.Stderr, "start it with `meshtray` (tray) or `meshtray serve` (headless), with the same --state-dir;\n"+
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
		Version: Version,
	}
	root.CompletionOptions.HiddenDefaultCmd = true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&c.stateDir, "state-dir", DefaultStateDir(), "state directory (config, settings, lock)")
	pf.IntVar(&c.port, "port", 0, fmt.Sprintf("TCP port of the node (default %d); other commands find the node by --state-dir and check it listens here", DefaultPort))
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
		Run:   func(*cobra.Command, []string) { fmt.Fprintln(c.opts.Stdout, "meshtray", Version) },
	})

	root.AddCommand(c.idCommand(), c.statusCommand(), c.manifestCommand(), c.a2aCommand(), c.grantCommand(),
		c.devicesCommand(), c.approvalsCommand(), c.approveCommand(), c.denyCommand(),
		c.lanCommand(), c.pairCommand(), c.peersCommand(),
		c.agentsCommand(), c.delegateCommand(), c.answerCommand(), c.cancelCommand(), c.outboundCommand(), c.forwardCommand())
	if c.opts.UI != nil {
		root.AddCommand(&cobra.Command{
			Use:    "ui",
			Short:  "Open meshtray windows (started by the tray)",
			Hidden: true,
			Args:   cobra.ArbitraryArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				cl, err := c.dial()
				if err != nil {
					return err
				}
				return c.opts.UI(cmd.Context(), cl, args)
			},
		})
	}
	return root
}

func (c *cli) nodeFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.name, "name", "", "device name shown to peers (default: the host name)")
	fs.StringVar(&c.keychain, "keychain", KeychainOS, `where secrets live: "os" (the OS keychain) or "file" (0600 file in the state dir)`)
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
}

// config builds the node configuration: defaults, the config file, then the
// flags that were given.
func (c *cli) config(cmd *cobra.Command) (Config, error) {
	cfg := Defaults()
	cfg.StateDir = c.stateDir
	if _, err := LoadConfigFile(&cfg); err != nil {
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
		cfg.keychainFromFile = false
	}
	if fl.Changed("log-level") {
		cfg.LogLevel = c.logLevel
	}
	return cfg, cfg.Validate()
}

func (c *cli) runNode(cmd *cobra.Command, tray bool) error {
	cfg, err := c.config(cmd)
	if err != nil {
		return usageError{err}
	}
	level, _ := ParseLogLevel(cfg.LogLevel)
	out := c.opts.Stderr
	var logFile *os.File
	if tray && c.opts.RunTray != nil {
		// A tray app's stderr goes nowhere a person looks: keep a log file
		// too ("Open log folder" in the menu).
		f, err := OpenLogFile(cfg.StateDir)
		if err != nil {
			fmt.Fprintln(c.opts.Stderr, "meshtray: no log file:", err)
		} else {
			defer f.Close()
			logFile = f
			out = io.MultiWriter(c.opts.Stderr, f)
		}
	}
	logger := NewLogger(out, level)
	if logFile != nil {
		cfg.LogFile = logFile.Name()
	}
	n, err := NewNode(cfg, logger)
	if err != nil {
		return err
	}
	if tray && c.opts.RunTray != nil {
		return c.opts.RunTray(cmd.Context(), n)
	}
	return n.Run(cmd.Context())
}

func (c *cli) dial() (*Client, error) { return Dial(c.stateDir, c.port) }

// call dials the node and sends one request.
func (c *cli) call(cmd *cobra.Command, method, path string, in, out any) error {
	cl, err := c.dial()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
	defer cancel()
	return cl.Do(ctx, method, path, in, out)
}

// printJSON prints v indented, as written: no HTML escaping (\u0026 for &
// in a pairing URL helps no terminal or script).
func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.opts.Stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func (c *cli) table() *tabwriter.Writer {
	return tabwriter.NewWriter(c.opts.Stdout, 0, 4, 2, ' ', 0)
}

func (c *cli) jsonFlag(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&c.asJSON, "json", false, "print JSON for scripts")
}

func (c *cli) idCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "id",
		Short: "Print this device's ID (compare it with what peers show)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var st Status
			if err := c.call(cmd, http.MethodGet, "/status", nil, &st); err != nil {
				return err
			}
			if c.asJSON {
				return c.printJSON(map[string]string{"id": st.DeviceID, "fingerprint": st.Fingerprint, "name": st.Name})
			}
			fmt.Fprintln(c.opts.Stdout, st.DeviceID)
			return nil
		},
	}
	c.jsonFlag(cmd)
	return cmd
}

func (c *cli) statusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the running node: name, OS, A2A, listeners, approvals",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var st Status
			if err := c.call(cmd, http.MethodGet, "/status", nil, &st); err != nil {
				return err
			}
			if c.asJSON {
				return c.printJSON(st)
			}
			w := c.table()
			fmt.Fprintf(w, "device\t%s — %s\n", st.Name, st.OS)
			fmt.Fprintf(w, "id\t%s\n", st.DeviceID)
			fmt.Fprintf(w, "a2a\t%s\n", onOff(st.A2A.Enabled))
			fmt.Fprintf(w, "lan\t%s\n", onOff(st.LAN))
			fmt.Fprintf(w, "tailscale\t%s\n", st.Tailscale)
			for _, l := range st.Listeners {
				fmt.Fprintf(w, "listening\t%s %s\n", l.Kind, l.URL)
			}
			fmt.Fprintf(w, "approvals\t%d pending\n", st.PendingApprovals)
			fmt.Fprintf(w, "peers\t%d online\n", st.OnlinePeers)
			if st.LogDir != "" {
				fmt.Fprintf(w, "logs\t%s\n", st.LogDir)
			}
			return w.Flush()
		},
	}
	c.jsonFlag(cmd)
	return cmd
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func (c *cli) a2aCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "a2a [on|off|status]",
		Short: "Publish or withdraw this device's A2A Agent Card; no argument shows it",
		Long: `Publishing serves the Agent Card at /.well-known/agent-card.json so other
agents can find this device; it grants nothing: every A2A call still needs a
grant with scope agent, and each delegation is approved by you.`,
		Args:      rangeArgs(0, 1),
		ValidArgs: []string{"on", "off", "status"},
		RunE: func(cmd *cobra.Command, args []string) error {
			var st A2AStatus
			var err error
			if len(args) == 0 {
				args = []string{"status"}
			}
			switch args[0] {
			case "on", "off":
				err = c.call(cmd, http.MethodPost, "/a2a/status", map[string]bool{"enabled": args[0] == "on"}, &st)
			case "status":
				err = c.call(cmd, http.MethodGet, "/a2a/status", nil, &st)
			default:
				return usageError{fmt.Errorf("a2a %q: want on, off or status", args[0])}
			}
			if err != nil {
				return err
			}
			if c.asJSON {
				return c.printJSON(st)
			}
			if st.Enabled {
				fmt.Fprintf(c.opts.Stdout, "A2A agent card published at %s (%d live tasks)\n", st.CardURL, st.LiveTasks)
			} else {
				fmt.Fprintf(c.opts.Stdout, "A2A agent card not published (%d live tasks)\n", st.LiveTasks)
			}
			return nil
		},
	}
	c.jsonFlag(cmd)
	return cmd
}

func (c *cli) lanCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lan [on|off|status]",
		Short: "Make this device reachable on the local network (HTTPS + mDNS) or not; no argument shows it",
		Args:  rangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var st Settings
			var err error
			if len(args) == 0 {
				args = []string{"status"}
			}
			switch args[0] {
			case "on", "off":
				on := args[0] == "on"
				err = c.call(cmd, http.MethodPost, "/config", ConfigUpdate{LAN: &on}, &st)
			case "status":
				err = c.call(cmd, http.MethodGet, "/config", nil, &st)
			default:
				return usageError{fmt.Errorf("lan %q: want on, off or status", args[0])}
			}
			if err != nil {
				return err
			}
			if c.asJSON {
				return c.printJSON(map[string]bool{"lan": st.LAN})
			}
			fmt.Fprintf(c.opts.Stdout, "reachable on the local network: %s\n", onOff(st.LAN))
			return nil
		},
	}
	c.jsonFlag(cmd)
	return cmd
}

func (c *cli) grantCommand() *cobra.Command {
	grant := &cobra.Command{
		Use:   "grant",
		Short: "Mint, list, pause, resume, revoke and rotate grants (bearer tokens for peers and agents)",
	}
	var req GrantRequest
	var scopes, approval string
	create := &cobra.Command{
		Use:   "create --name NAME --scope agent,node [--approval ask|allow|deny]",
		Short: "Mint a grant and print its token once",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sc, err := parseScopes(scopes)
			if err != nil {
				return usageError{err}
			}
			req.Scopes = sc
			if req.Approval, err = parsePolicy(approval); err != nil {
				return usageError{err}
			}
			if strings.TrimSpace(req.Name) == "" {
				return usageError{errors.New("--name is required")}
			}
			var tok GrantToken
			if err := c.call(cmd, http.MethodPost, "/nodes/devices", req, &tok); err != nil {
				return err
			}
			if c.asJSON {
				return c.printJSON(tok)
			}
			fmt.Fprintf(c.opts.Stderr, "grant %s created; its token is shown this once:\n", tok.ID)
			fmt.Fprintln(c.opts.Stdout, tok.Token)
			return nil
		},
	}
	create.Flags().StringVar(&req.Name, "name", "", "who the grant is for (shown in approvals)")
	create.Flags().StringVar(&scopes, "scope", "agent", "scopes: agent, node, full (comma-separated)")
	create.Flags().StringVar(&approval, "approval", "ask", "approval policy for its delegations: ask, allow, deny")
	c.jsonFlag(create)

	list := &cobra.Command{
		Use:   "list",
		Short: "List the grants this device issued",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var d Devices
			if err := c.call(cmd, http.MethodGet, "/nodes/devices", nil, &d); err != nil {
				return err
			}
			if c.asJSON {
				return c.printJSON(d.Issued)
			}
			c.printIssued(d.Issued)
			return nil
		},
	}
	c.jsonFlag(list)
	grant.AddCommand(create, list)

	for _, action := range []string{ActionPause, ActionResume, ActionRevoke, ActionRotate} {
		short := map[string]string{
			ActionPause:  "Pause a grant: its token is refused until resumed",
			ActionResume: "Resume a paused grant",
			ActionRevoke: "Revoke a grant for good",
			ActionRotate: "Replace a grant's token (the old one stops working) and print the new one once",
		}[action]
		grant.AddCommand(&cobra.Command{
			Use:   action + " ID",
			Short: short,
			Args:  exactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				var tok GrantToken
				if err := c.call(cmd, http.MethodPost, "/nodes/devices/"+pathEscape(args[0]), GrantUpdate{Action: action}, &tok); err != nil {
					return err
				}
				if action == ActionRotate {
					fmt.Fprintf(c.opts.Stderr, "grant %s rotated; its new token is shown this once:\n", args[0])
					fmt.Fprintln(c.opts.Stdout, tok.Token)
					return nil
				}
				fmt.Fprintf(c.opts.Stdout, "grant %s: %s\n", args[0], map[string]string{
					ActionPause: "paused", ActionResume: "resumed", ActionRevoke: "revoked"}[action])
				return nil
			},
		})
	}
	var setApproval string
	set := &cobra.Command{
		Use:   "set ID --approval ask|allow|deny",
		Short: "Set a grant's approval policy for delegations",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := parsePolicy(setApproval)
			if err != nil || setApproval == "" {
				return usageError{errors.New("--approval ask|allow|deny is required")}
			}
			if err := c.call(cmd, http.MethodPost, "/nodes/devices/"+pathEscape(args[0]), GrantUpdate{Approval: p}, nil); err != nil {
				return err
			}
			fmt.Fprintf(c.opts.Stdout, "grant %s: approval %s\n", args[0], p)
			return nil
		},
	}
	set.Flags().StringVar(&setApproval, "approval", "", "ask, allow or deny")
	grant.AddCommand(set)
	return grant
}

func (c *cli) printIssued(gs []pairing.Grant) {
	w := c.table()
	fmt.Fprintln(w, "ID\tNAME\tSCOPES\tAPPROVAL\tSTATUS\tLAST USED")
	for _, g := range gs {
		last := "never"
		if !g.LastUsed.IsZero() {
			last = ago(g.LastUsed)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", g.ID, oneLine(g.Name, 64), g.Scopes, g.Policy, g.Status, last)
	}
	w.Flush()
}

func (c *cli) devicesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "devices",
		Short: "List paired devices: grants issued to them and grants they gave this device",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var d Devices
			if err := c.call(cmd, http.MethodGet, "/nodes/devices", nil, &d); err != nil {
				return err
			}
			if c.asJSON {
				return c.printJSON(d)
			}
			fmt.Fprintln(c.opts.Stdout, "Issued by this device:")
			c.printIssued(d.Issued)
			fmt.Fprintln(c.opts.Stdout, "\nGiven to this device by:")
			w := c.table()
			fmt.Fprintln(w, "DEVICE\tNAME\tOS\tSCOPES\tURL")
			for _, h := range d.Held {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", shortID(h.PeerID), oneLine(h.Name, 64), oneLine(h.OS, 64), h.Scopes, oneLine(h.URL, 80))
			}
			return w.Flush()
		},
	}
	c.jsonFlag(cmd)
	return cmd
}

func (c *cli) approvalsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "List requests waiting for your decision",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var as []Approval
			if err := c.call(cmd, http.MethodGet, "/approvals", nil, &as); err != nil {
				return err
			}
			if c.asJSON {
				return c.printJSON(as)
			}
			if len(as) == 0 {
				fmt.Fprintln(c.opts.Stdout, "no pending approvals")
				return nil
			}
			for i, a := range as {
				if i > 0 {
					fmt.Fprintln(c.opts.Stdout)
				}
				c.printApproval(a)
			}
			return nil
		},
	}
	c.jsonFlag(cmd)
	return cmd
}

// maxDetailLines bounds the lines of a request's detail `approvals` shows.
const maxDetailLines = 12

// printApproval shows one pending request with everything the owner should
// read before deciding: who, over what, what exactly (the detail: message
// text, call parameters), and how to decide.
func (c *cli) printApproval(a Approval) {
	out := c.opts.Stdout
	from := oneLine(a.Peer, 64)
	if a.DeviceID != "" {
		from += " (" + shortID(a.DeviceID) + ")"
	}
	if a.OS != "" {
		from += ", " + oneLine(a.OS, 64)
	}
	fmt.Fprintf(out, "%s  %s from %s\n", a.ID, a.Kind, from)
	via := a.Via
	if a.Addr != "" {
		via += " " + a.Addr
	}
	if a.TailnetUser != "" || a.TailnetNode != "" {
		via += fmt.Sprintf(" (tailnet: %s on %s)", oneLine(a.TailnetUser, 64), oneLine(a.TailnetNode, 64))
	}
	if via != "" {
		fmt.Fprintf(out, "  via:      %s\n", via)
	}
	fmt.Fprintf(out, "  request:  %s\n", oneLine(a.Summary, 200))
	if a.SAS != "" {
		fmt.Fprintf(out, "  code:     %s (must match the other screen)\n", spacedSAS(a.SAS))
	}
	if a.Detail != "" {
		lines := strings.Split(safeText(a.Detail, true), "\n")
		if len(lines) > maxDetailLines {
			lines = append(lines[:maxDetailLines], fmt.Sprintf("… (%d more lines; --json shows all)", len(lines)-maxDetailLines))
		}
		fmt.Fprintln(out, "  detail:")
		for _, l := range lines {
			fmt.Fprintf(out, "    %s\n", l)
		}
	}
	fmt.Fprintf(out, "  expires:  in %s\n", time.Until(a.Expires).Round(time.Second))
	switch a.Kind {
	case KindPairing:
		fmt.Fprintf(out, "  decide:   meshtray approve %s [--scopes agent,node] | meshtray deny %s\n", a.ID, a.ID)
	case KindDelegation:
		fmt.Fprintf(out, "  decide:   meshtray approve %s [--always] | meshtray deny %s\n", a.ID, a.ID)
	default:
		fmt.Fprintf(out, "  decide:   meshtray approve %s | meshtray deny %s\n", a.ID, a.ID)
	}
}

func (c *cli) approveCommand() *cobra.Command {
	var scopes string
	var always bool
	cmd := &cobra.Command{
		Use:   "approve ID [--scopes agent,node] [--always]",
		Short: "Approve a pending request and say what it granted",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d := ApprovalDecision{Decision: DecisionApprove, Always: always}
			if scopes != "" {
				sc, err := parseScopes(scopes)
				if err != nil {
					return usageError{err}
				}
				d.Scopes = sc
			}
			a, err := c.pendingApproval(cmd, args[0])
			if err != nil {
				return err
			}
			if d.Always && a.Kind != KindDelegation {
				return usageError{fmt.Errorf("--always is for delegations (it lets every later delegation of that device run unasked); %s is a %s request", a.ID, a.Kind)}
			}
			if len(d.Scopes) > 0 && a.Kind != KindPairing {
				return usageError{fmt.Errorf("--scopes is for pairing requests; %s is a %s request", a.ID, a.Kind)}
			}
			if err := c.call(cmd, http.MethodPost, "/approvals/"+pathEscape(a.ID), d, nil); err != nil {
				return err
			}
			out := c.opts.Stdout
			from := oneLine(a.Peer, 64)
			switch a.Kind {
			case KindPairing:
				granted := d.Scopes
				if len(granted) == 0 {
					granted = defaultPairingScopes(a.Scopes)
				}
				fmt.Fprintf(out, "approved %s: paired with %s, granted %s\n", a.ID, from, granted)
			case KindDelegation:
				fmt.Fprintf(out, "approved %s: delegation from %s: %s\n", a.ID, from, oneLine(a.Summary, 120))
				if d.Always {
					fmt.Fprintf(out, "every later delegation from %s runs without asking (meshtray grant set %s --approval ask undoes it)\n", from, a.GrantID)
				}
			default:
				fmt.Fprintf(out, "approved %s: %s from %s: %s\n", a.ID, a.Kind, from, oneLine(a.Summary, 120))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&scopes, "scopes", "", "pairing: scopes to grant (agent, node, full; default: those requested, never full)")
	cmd.Flags().BoolVar(&always, "always", false, "delegations: always allow from this device from now on")
	return cmd
}

// pendingApproval returns the pending approval id (404 as an APIError when
// none is pending with that id).
func (c *cli) pendingApproval(cmd *cobra.Command, id string) (Approval, error) {
	var as []Approval
	if err := c.call(cmd, http.MethodGet, "/approvals", nil, &as); err != nil {
		return Approval{}, err
	}
	for _, a := range as {
		if a.ID == id {
			return a, nil
		}
	}
	return Approval{}, &APIError{Status: http.StatusNotFound, Message: fmt.Sprintf("%v: %s (meshtray approvals lists them)", ErrNoApproval, id)}
}

func (c *cli) denyCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "deny ID",
		Short: "Deny a pending request",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := c.call(cmd, http.MethodPost, "/approvals/"+pathEscape(args[0]), ApprovalDecision{Decision: DecisionDeny}, nil); err != nil {
				return err
			}
			fmt.Fprintf(c.opts.Stdout, "denied %s\n", args[0])
			return nil
		},
	}
}

func parseScopes(s string) (pairing.Scopes, error) {
	var out pairing.Scopes
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		switch sc := pairing.Scope(p); sc {
		case pairing.ScopeAgent, pairing.ScopeNode, pairing.ScopeFull:
			if !out.Has(sc) || sc == pairing.ScopeFull {
				out = append(out, sc)
			}
		case "":
		default:
			return nil, fmt.Errorf("scope %q: want agent, node or full", p)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no scope given: want agent, node or full")
	}
	return out, nil
}

func parsePolicy(s string) (pairing.Policy, error) {
	switch p := pairing.Policy(s); p {
	case pairing.PolicyAsk, pairing.PolicyAllow, pairing.PolicyDeny:
		return p, nil
	case "":
		return "", nil
	}
	return "", fmt.Errorf("approval %q: want ask, allow or deny", s)
}

func shortID(id string) string {
	if len(id) > 7 {
		return id[:7]
	}
	return id
}

// oneLine is the first line of untrusted text s, escaped (safeText) and cut
// to max runes.
func oneLine(s string, max int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	s = safeText(s, false)
	if r := []rune(s); len(r) > max {
		s = string(r[:max-1]) + "…"
	}
	return s
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return t.Local().Format("2006-01-02")
}

func (c *cli) peersCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "peers",
		Short: "List the devices found on the LAN (mDNS), the tailnet, or added by hand",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var ps []mesh.Peer
			if err := c.call(cmd, http.MethodGet, "/mesh/peers", nil, &ps); err != nil {
				return err
			}
			if c.asJSON {
				return c.printJSON(ps)
			}
			if len(ps) == 0 {
				var st Status
				if err := c.call(cmd, http.MethodGet, "/status", nil, &st); err != nil {
					return err
				}
				fmt.Fprintln(c.opts.Stdout, noPeersText(st))
				return nil
			}
			w := c.table()
			fmt.Fprintln(w, "DEVICE\tNAME\tOS\tSEEN VIA\tONLINE\tPAIRED\tA2A\tLAST SEEN\tADDRESS")
			for _, p := range ps {
				var via []string
				addr := ""
				for _, s := range p.Sources {
					via = append(via, string(s))
					if addr == "" && len(p.Addrs[s]) > 0 {
						addr = p.Addrs[s][0]
					}
				}
				seenVia := strings.Join(via, ",")
				if seenVia == "" {
					seenVia = "-" // paired, not seen since this node started
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", shortID(p.ID), oneLine(p.Name, 64), oneLine(p.OS, 64),
					seenVia, yesNo(p.Online), yesNo(p.Paired), yesNo(p.A2A && p.Online), ago(p.LastSeen), addr)
			}
			return w.Flush()
		},
	}
	c.jsonFlag(cmd)
	add := &cobra.Command{
		Use:   "add URL",
		Short: "Add a device by address (https://host:port); it is probed before it is listed",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var p mesh.Peer
			if err := c.call(cmd, http.MethodPost, "/mesh/peers", map[string]string{"url": args[0]}, &p); err != nil {
				return err
			}
			fmt.Fprintf(c.opts.Stdout, "added %s (%s, %s)\n", oneLine(p.Name, 64), oneLine(p.OS, 64), shortID(p.ID))
			return nil
		},
	}
	rm := &cobra.Command{
		Use:   "rm DEVICE",
		Short: "Forget a device added by hand (its device ID, or the first characters the table shows)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := c.call(cmd, http.MethodDelete, "/mesh/peers/"+pathEscape(args[0]), nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(c.opts.Stdout, "removed %s\n", oneLine(args[0], 64))
			return nil
		},
	}
	cmd.AddCommand(add, rm)
	return cmd
}

// noPeersText says why the peer table is empty, from the node's status.
func noPeersText(st Status) string {
	var why []string
	if !st.LAN {
		why = append(why, "LAN discovery needs `meshtray lan on`")
	}
	switch st.Tailscale {
	case "running":
	case "off":
		why = append(why, "tailnet discovery is off (tailscale = false in config.toml)")
	default:
		why = append(why, "the tailnet needs Tailscale (it is "+st.Tailscale+")")
	}
	if len(why) == 0 {
		return "no peers found yet: no meshtray answered on the local network or the tailnet (`meshtray peers add https://HOST:PORT` adds one by hand)"
	}
	return "no peers found yet (" + strings.Join(why, "; ") + ")"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
