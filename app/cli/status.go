package cli

import (
	"context"
	"fmt"

	"github.com/dustin/go-humanize"

	"github.com/spf13/cobra"

	"meshtray/app"
)

func (c *cli) idCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "id",
		Short: "Print this device's ID (compare it with what peers show)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, ctx, done, err := c.api(cmd)
			if err != nil {
				return err
			}
			defer done()
			st, err := cl.Status(ctx)
			if err != nil {
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
		Short: "Show the running node: name, OS, A2A, listeners, control socket, approvals",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			status := func(cl *app.Client, ctx context.Context) (app.Status, error) {
				// GET /mesh/peers checks the paired devices' cards first (as
				// `meshtray peers` does), so "peers N online" counts the
				// rows that table shows online.
				if _, err := cl.Peers(ctx); err != nil {
					return app.Status{}, err
				}
				return cl.Status(ctx)
			}
			return show(c, cmd, status, func(st app.Status) error {
				w := c.table()
				fmt.Fprintf(w, "device\t%s — %s\n", st.Name, st.OS)
				fmt.Fprintf(w, "id\t%s\n", st.DeviceID)
				fmt.Fprintf(w, "a2a\t%s\n", onOff(st.A2A.Enabled))
				fmt.Fprintf(w, "lan\t%s\n", onOff(st.LAN))
				fmt.Fprintf(w, "tailscale\t%s\n", st.Tailscale)
				for _, l := range st.Listeners {
					fmt.Fprintf(w, "listening\t%s %s\n", l.Kind, l.URL)
				}
				if st.ControlSocket != "" {
					fmt.Fprintf(w, "control socket\t%s\n", st.ControlSocket)
				}
				fmt.Fprintf(w, "approvals\t%d pending\n", st.PendingApprovals)
				fmt.Fprintf(w, "peers\t%d online\n", st.OnlinePeers)
				for _, it := range st.Incoming {
					last := "none yet"
					if !it.LastByte.IsZero() {
						last = ago(it.LastByte)
					}
					fmt.Fprintf(w, "receiving\t%s from %s: %s of %s, last byte %s (meshtray cancel %s stops it)\n",
						it.TaskID, oneLine(it.Peer, 64), humanize.IBytes(uint64(it.Received)), humanize.IBytes(uint64(it.Size)),
						last, it.TaskID)
				}
				if st.LogDir != "" {
					fmt.Fprintf(w, "logs\t%s\n", st.LogDir)
				}
				return w.Flush()
			})
		},
	}
	c.jsonFlag(cmd)
	return cmd
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
			if len(args) == 0 {
				args = []string{"status"}
			}
			if a := args[0]; a != "on" && a != "off" && a != "status" {
				return usageError{fmt.Errorf("a2a %q: want on, off or status", a)}
			}
			cl, ctx, done, err := c.api(cmd)
			if err != nil {
				return err
			}
			defer done()
			var st app.A2AStatus
			if args[0] == "status" {
				st, err = cl.A2AStatus(ctx)
			} else {
				st, err = cl.SetA2A(ctx, args[0] == "on")
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
			if len(args) == 0 {
				args = []string{"status"}
			}
			if a := args[0]; a != "on" && a != "off" && a != "status" {
				return usageError{fmt.Errorf("lan %q: want on, off or status", a)}
			}
			cl, ctx, done, err := c.api(cmd)
			if err != nil {
				return err
			}
			defer done()
			var st app.Settings
			if args[0] == "status" {
				st, err = cl.Config(ctx)
			} else {
				on := args[0] == "on"
				st, err = cl.UpdateConfig(ctx, app.ConfigUpdate{LAN: &on})
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
