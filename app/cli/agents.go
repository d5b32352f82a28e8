package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"meshtray/a2a/delegate"
	"meshtray/app"
	"meshtray/pairing"
)

func (c *cli) agentsCommand() *cobra.Command {
	var refresh bool
	list := func(cmd *cobra.Command, _ []string) error {
		return show(c, cmd, func(cl *app.Client, ctx context.Context) ([]delegate.Agent, error) {
			return cl.Agents(ctx, refresh)
		}, func(as []delegate.Agent) error { c.printAgents(as); return nil })
	}
	cmd := &cobra.Command{
		Use:   "agents [list|add|rm|enable|disable|refresh]",
		Short: "The agents this device delegates to: paired devices that publish A2A, and agents added by URL",
		Long: `Paired devices that publish their A2A agent card are agents with no extra
step: this device calls them over their pinned certificate with the grant they
gave it. Other A2A agents (LangGraph, ADK, another meshtray you did not pair
with, ...) are added by URL: their Agent Card is fetched and verified first,
their token kept in the OS keychain. A card that no longer verifies marks the
agent invalid and it is not used until a refresh verifies it again.`,
		Args: noArgs,
		RunE: list,
	}
	cmd.Flags().BoolVar(&refresh, "refresh", false, "fetch and verify every card again first")
	c.jsonFlag(cmd)
	ls := &cobra.Command{Use: "list", Short: "List the agents (the default)", Args: noArgs, RunE: list}
	ls.Flags().BoolVar(&refresh, "refresh", false, "fetch and verify every card again first")
	c.jsonFlag(ls)

	var tokenStdin bool
	add := &cobra.Command{
		Use:   "add URL [--token-stdin]",
		Short: "Add an A2A agent by URL (its card is fetched and verified before anything is stored)",
		Long: `Add an A2A agent by its base URL (the card is read from
/.well-known/agent-card.json below it) or by its card's URL. The URL must be
https, or http to a loopback or tailnet address. With --token-stdin the first
line of stdin is the bearer token, kept in the OS keychain (never in a file,
never shown again). Adding a URL again refreshes it (and replaces the token
when one is given).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := app.AgentRequest{URL: args[0]}
			if tokenStdin {
				tok, err := readSecretLine(c.opts.Stdin, "token")
				if err != nil {
					return err
				}
				req.Token = tok
			}
			cl, ctx, done, err := c.api(cmd)
			if err != nil {
				return err
			}
			defer done()
			a, err := cl.AddAgent(ctx, req)
			if err != nil {
				return err
			}
			if c.asJSON {
				return c.printJSON(a)
			}
			fmt.Fprintf(c.opts.Stdout, "added %s (%s): %s\n", a.ID, oneLine(a.Name, 64), a.Status)
			return nil
		},
	}
	add.Flags().BoolVar(&tokenStdin, "token-stdin", false, "read the agent's bearer token from the first line of stdin")
	c.jsonFlag(add)

	rm := &cobra.Command{
		Use:   "rm ID",
		Short: "Remove an added agent and its token (a paired device is an agent while paired: disable it)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, ctx, done, err := c.api(cmd)
			if err != nil {
				return err
			}
			defer done()
			if err := cl.RemoveAgent(ctx, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(c.opts.Stdout, "removed %s\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(ls, add, rm)
	for _, action := range []string{"enable", "disable"} {
		cmd.AddCommand(&cobra.Command{
			Use:   action + " ID",
			Short: map[string]string{"enable": "Use an agent again", "disable": "Stop using an agent (kept, not called)"}[action],
			Args:  exactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				cl, ctx, done, err := c.api(cmd)
				if err != nil {
					return err
				}
				defer done()
				a, err := cl.UpdateAgent(ctx, args[0], app.AgentUpdate{Action: action})
				if err != nil {
					return err
				}
				fmt.Fprintf(c.opts.Stdout, "%s (%s): %s\n", a.ID, oneLine(a.Name, 64), a.Status)
				return nil
			},
		})
	}
	refreshCmd := &cobra.Command{
		Use:   "refresh [ID]",
		Short: "Fetch and verify an agent's card again (every agent's without ID)",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError{errors.New("at most one agent")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				refresh = true
				return list(cmd, nil)
			}
			cl, ctx, done, err := c.api(cmd)
			if err != nil {
				return err
			}
			defer done()
			a, err := cl.UpdateAgent(ctx, args[0], app.AgentUpdate{Action: "refresh"})
			if err != nil {
				return err
			}
			if c.asJSON {
				return c.printJSON(a)
			}
			c.printAgents([]delegate.Agent{a})
			if !a.Ready() {
				return &exitError{code: ExitError}
			}
			return nil
		},
	}
	c.jsonFlag(refreshCmd)
	cmd.AddCommand(refreshCmd)
	return cmd
}

func (c *cli) printAgents(as []delegate.Agent) {
	if len(as) == 0 {
		fmt.Fprintln(c.opts.Stdout, "no agents: pair a device that publishes A2A (`meshtray pair`), or add one with `meshtray agents add URL`")
		return
	}
	w := c.table()
	fmt.Fprintln(w, "ID\tKIND\tNAME\tSTATUS\tA2A\tCARD\tSTREAMING\tSKILLS\tURL")
	for _, a := range as {
		id := a.ID
		if a.Kind == delegate.AgentPeer {
			id = pairing.ShortID(a.ID)
		}
		version, signature, streaming, skills := "-", "-", "-", "-"
		var notes []string
		if a.Card != nil {
			version, signature = a.Card.ProtocolVersion, a.Card.Signature
			streaming, skills = yesNo(a.Card.Streaming), fmt.Sprint(len(a.Card.Skills))
			notes = a.Card.Notes
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", id, a.Kind, oneLine(a.Name, 64), a.Status, oneLine(version, 8), oneLine(signature, 10), streaming, skills, oneLine(a.URL, 80))
		for _, n := range notes {
			fmt.Fprintf(w, "\t\t\t\t\t\t\t\t↳ %s\n", oneLine(n, 120))
		}
		if a.Problem != "" {
			fmt.Fprintf(w, "\t\t\t\t\t\t\t\t↳ %s\n", oneLine(a.Problem, 120))
		}
	}
	w.Flush()
}

// readSecretLine reads the first line of r (a token piped in).
// readSecretLine reads the first line of r (a secret kept out of argv,
// where other users of the machine see it in ps); what names it in the
// error when there is none.
func readSecretLine(r io.Reader, what string) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(r, delegate.MaxTokenLen+2)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	line = strings.TrimSpace(line)
	if line == "" {
		return "", usageError{fmt.Errorf("no %s on stdin", what)}
	}
	return line, nil
}

func (c *cli) forwardCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "forward [status|token|clear|check]",
		Short: "The forward executor: approved tasks relayed to a local A2A agent (a2a.forward in config.toml)",
		Long: `With a2a.forward.url set in config.toml, approved incoming A2A tasks go to that
agent instead of this device's capabilities: meshtray is the consent layer in
front of it. ` + "`meshtray forward token`" + ` reads the agent's bearer token from the first
line of stdin and keeps it in the OS keychain (preferred over a2a.forward.token
in the config file); ` + "`clear`" + ` removes it; ` + "`check`" + ` fetches and verifies its card now.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError{errors.New("at most one action")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			action := "status"
			if len(args) == 1 {
				action = args[0]
			}
			var v app.ForwardView
			var err error
			switch action {
			case "status":
				err = c.withAPI(cmd, func(ctx context.Context, cl *app.Client) (err error) {
					v, err = cl.Forward(ctx)
					return err
				})
			case "check":
				err = c.withAPI(cmd, func(ctx context.Context, cl *app.Client) (err error) {
					v, err = cl.CheckForward(ctx)
					return err
				})
			case "token":
				tok, err := readSecretLine(c.opts.Stdin, "token")
				if err != nil {
					return err
				}
				if err := c.withAPI(cmd, func(ctx context.Context, cl *app.Client) error { return cl.SetForwardToken(ctx, tok) }); err != nil {
					return err
				}
				fmt.Fprintln(c.opts.Stdout, "forward token kept in the keychain")
				return nil
			case "clear":
				if err := c.withAPI(cmd, func(ctx context.Context, cl *app.Client) error { return cl.ClearForwardToken(ctx) }); err != nil {
					return err
				}
				fmt.Fprintln(c.opts.Stdout, "forward token removed")
				return nil
			default:
				return usageError{fmt.Errorf("forward %q: want status, token, clear or check", action)}
			}
			if err != nil {
				return err
			}
			if c.asJSON {
				return c.printJSON(v)
			}
			if !v.Configured {
				fmt.Fprintln(c.opts.Stdout, "forwarding off: approved tasks run on this device's capabilities (set a2a.forward.url in config.toml)")
				return nil
			}
			fmt.Fprintf(c.opts.Stdout, "forwarding approved tasks to %s (token: %s)\n", v.URL, v.TokenSource)
			if st := v.Status; st != nil {
				switch {
				case st.Ready:
					fmt.Fprintf(c.opts.Stdout, "agent %q verified %s\n", st.Agent, ago(st.Checked))
				case st.Problem != "":
					fmt.Fprintf(c.opts.Stdout, "problem: %s\n", oneLine(st.Problem, 300))
				default:
					fmt.Fprintln(c.opts.Stdout, "not checked yet (its card is fetched at the first task; `meshtray forward check`)")
				}
			}
			return nil
		},
	}
	c.jsonFlag(cmd)
	return cmd
}
