package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"meshtray/app"
	"meshtray/pairing"
)

func (c *cli) peersCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "peers",
		Short: "List the devices found on the LAN (mDNS), the tailnet, or added by hand",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, ctx, done, err := c.api(cmd)
			if err != nil {
				return err
			}
			defer done()
			ps, err := cl.Peers(ctx)
			if err != nil {
				return err
			}
			if c.asJSON {
				return c.printJSON(ps)
			}
			if len(ps) == 0 {
				st, err := cl.Status(ctx)
				if err != nil {
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
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", pairing.ShortID(p.ID), oneLine(p.Name, 64), oneLine(p.OS, 64),
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
			cl, ctx, done, err := c.api(cmd)
			if err != nil {
				return err
			}
			defer done()
			p, err := cl.AddPeer(ctx, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(c.opts.Stdout, "added %s (%s, %s)\n", oneLine(p.Name, 64), oneLine(p.OS, 64), pairing.ShortID(p.ID))
			return nil
		},
	}
	rm := &cobra.Command{
		Use:   "rm DEVICE",
		Short: "Forget a device added by hand (its name, or its device ID: the 7 characters the table shows are enough)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, ctx, done, err := c.api(cmd)
			if err != nil {
				return err
			}
			defer done()
			if err := cl.RemovePeer(ctx, args[0]); err != nil {
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
func noPeersText(st app.Status) string {
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
