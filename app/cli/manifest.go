package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"meshtray/app"
	"meshtray/nodes"
	"meshtray/pairing"
)

// manifestCommand is `meshtray manifest [--json]` (GET /nodes/manifest: the
// capabilities this node offers paired devices) and `meshtray manifest set
// CAP ask|allow|deny` (a capability's approval policy, POST /config
// capability_policies, kept in settings.json).
func (c *cli) manifestCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "manifest [set CAPABILITY ask|allow|deny]",
		Short: "List this node's capabilities and their approval policies",
		Long: "List the capabilities this node offers paired devices (the node manifest), with their\n" +
			"effects, approval policy and availability. `manifest set` changes a capability's policy;\n" +
			"the stricter of the grant's and the capability's policy applies to each call.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return show(c, cmd, (*app.Client).Manifest, func(m nodes.Manifest) error {
				w := c.table()
				fmt.Fprintln(w, "CAPABILITY\tEFFECTS\tAPPROVAL\tAVAILABLE\tDESCRIPTION")
				for _, cp := range m.Capabilities {
					avail := "yes"
					if !cp.Available {
						avail = "no: " + oneLine(cp.Reason, 60)
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", oneLine(cp.Name, 40), cp.Effects, cp.Approval, avail, oneLine(cp.Description, 70))
				}
				return w.Flush()
			})
		},
	}
	c.jsonFlag(cmd)
	cmd.AddCommand(&cobra.Command{
		Use:   "set CAPABILITY ask|allow|deny",
		Short: "Set a capability's approval policy",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := pairing.ParsePolicy(args[1])
			if err != nil || args[1] == "" {
				return usageError{errors.New("the policy is ask, allow or deny")}
			}
			cl, ctx, done, err := c.api(cmd)
			if err != nil {
				return err
			}
			defer done()
			u := app.ConfigUpdate{CapabilityPolicies: map[string]pairing.Policy{args[0]: p}}
			if _, err := cl.UpdateConfig(ctx, u); err != nil {
				return err
			}
			fmt.Fprintf(c.opts.Stdout, "%s: approval %s\n", oneLine(args[0], 40), p)
			return nil
		},
	})
	return cmd
}
