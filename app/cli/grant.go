package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"meshtray/app"
	"meshtray/pairing"
)

func (c *cli) grantCommand() *cobra.Command {
	grant := &cobra.Command{
		Use:   "grant",
		Short: "Mint, list, pause, resume, revoke and rotate grants (bearer tokens for peers and agents)",
	}
	var req app.GrantRequest
	var scopes, approval string
	create := &cobra.Command{
		Use:   "create --name NAME --scopes agent,node [--approval ask|allow|deny]",
		Short: "Mint a grant and print its token once",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sc, err := scopesFlag(scopes)
			if err != nil {
				return usageError{err}
			}
			req.Scopes = sc
			if req.Approval, err = pairing.ParsePolicy(approval); err != nil {
				return usageError{err}
			}
			if strings.TrimSpace(req.Name) == "" {
				return usageError{errors.New("--name is required")}
			}
			cl, ctx, done, err := c.api(cmd)
			if err != nil {
				return err
			}
			defer done()
			tok, err := cl.CreateGrant(ctx, req)
			if err != nil {
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
	create.Flags().StringVar(&scopes, "scopes", "agent", "scopes: agent, node, full, approve (comma-separated; approve: may approve or deny the requests made to this device, and only it)")
	// --scope, its first spelling, still works for scripts (hidden).
	create.Flags().StringVar(&scopes, "scope", "agent", "same as --scopes")
	_ = create.Flags().MarkHidden("scope")
	create.Flags().StringVar(&approval, "approval", "ask", "approval policy for its delegations: ask, allow, deny")
	c.jsonFlag(create)

	list := &cobra.Command{
		Use:   "list",
		Short: "List the grants this device issued",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return show(c, cmd, func(cl *app.Client, ctx context.Context) ([]pairing.Grant, error) {
				d, err := cl.Devices(ctx)
				return d.Issued, err
			}, func(gs []pairing.Grant) error { c.printIssued(gs); return nil })
		},
	}
	c.jsonFlag(list)
	grant.AddCommand(create, list)

	for _, action := range []string{app.ActionPause, app.ActionResume, app.ActionRevoke, app.ActionRotate} {
		short := map[string]string{
			app.ActionPause:  "Pause a grant: its token is refused until resumed",
			app.ActionResume: "Resume a paused grant",
			app.ActionRevoke: "Revoke a grant for good",
			app.ActionRotate: "Replace a grant's token (the old one stops working) and print the new one once",
		}[action]
		grant.AddCommand(&cobra.Command{
			Use:   action + " ID",
			Short: short,
			Args:  exactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				cl, ctx, done, err := c.api(cmd)
				if err != nil {
					return err
				}
				defer done()
				tok, err := cl.UpdateGrant(ctx, args[0], app.GrantUpdate{Action: action})
				if err != nil {
					return err
				}
				if action == app.ActionRotate {
					fmt.Fprintf(c.opts.Stderr, "grant %s rotated; its new token is shown this once:\n", args[0])
					fmt.Fprintln(c.opts.Stdout, tok.Token)
					return nil
				}
				fmt.Fprintf(c.opts.Stdout, "grant %s: %s\n", args[0], map[string]string{
					app.ActionPause: "paused", app.ActionResume: "resumed", app.ActionRevoke: "revoked"}[action])
				return nil
			},
		})
	}
	var setApproval, setFiles string
	set := &cobra.Command{
		Use:   "set ID --approval ask|allow|deny | --files ask|allow|deny",
		Short: "Set a grant's approval policy for delegations, or for files it sends",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (setApproval == "") == (setFiles == "") {
				return usageError{errors.New("give one of --approval ask|allow|deny or --files ask|allow|deny")}
			}
			u := app.GrantUpdate{}
			what, flag, val := "approval", "approval", setApproval
			if setFiles != "" {
				what, flag, val = "files approval", "files", setFiles
			}
			p, err := pairing.ParsePolicy(val)
			if err != nil {
				return usageError{fmt.Errorf("--%s ask|allow|deny is required (%v)", flag, err)}
			}
			if setFiles != "" {
				u.Files = p
			} else {
				u.Approval = p
			}
			cl, ctx, done, err := c.api(cmd)
			if err != nil {
				return err
			}
			defer done()
			if _, err := cl.UpdateGrant(ctx, args[0], u); err != nil {
				return err
			}
			fmt.Fprintf(c.opts.Stdout, "grant %s: %s %s\n", args[0], what, p)
			return nil
		},
	}
	set.Flags().StringVar(&setApproval, "approval", "", "delegations: ask, allow or deny")
	set.Flags().StringVar(&setFiles, "files", "", "files sent by the grant's device: ask (the default), allow or deny")
	grant.AddCommand(set)
	return grant
}

func (c *cli) printIssued(gs []pairing.Grant) {
	w := c.table()
	fmt.Fprintln(w, "ID\tNAME\tSCOPES\tAPPROVAL\tFILES\tSTATUS\tLAST USED")
	var approvers []string
	for _, g := range gs {
		last := "never"
		if !g.LastUsed.IsZero() {
			last = ago(g.LastUsed)
		}
		files := g.FilesPolicy // "" asks (pairing.Grant.FilesPolicy)
		if files == "" {
			files = pairing.PolicyAsk
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", g.ID, oneLine(g.Name, 64), g.Scopes, g.Policy, files, g.Status, last)
		if g.Scopes.Has(pairing.ScopeApprove) {
			approvers = append(approvers, oneLine(g.Name, 64))
		}
	}
	w.Flush()
	if len(approvers) > 0 {
		slices.Sort(approvers)
		fmt.Fprintf(c.opts.Stdout, "approve: %s may approve or deny the requests made to this device (its own excepted)\n", strings.Join(approvers, ", "))
	}
}

func (c *cli) devicesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "devices",
		Short: "List paired devices: grants issued to them and grants they gave this device",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return show(c, cmd, (*app.Client).Devices, func(d app.Devices) error {
				fmt.Fprintln(c.opts.Stdout, "Issued by this device:")
				c.printIssued(d.Issued)
				fmt.Fprintln(c.opts.Stdout, "\nGiven to this device by:")
				w := c.table()
				fmt.Fprintln(w, "DEVICE\tNAME\tOS\tSCOPES\tURL")
				var on []string
				for _, h := range d.Held {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", pairing.ShortID(h.PeerID), oneLine(h.Name, 64), oneLine(h.OS, 64), h.Scopes, oneLine(h.URL, 80))
					if h.Scopes.Has(pairing.ScopeApprove) {
						on = append(on, oneLine(h.Name, 64))
					}
				}
				if err := w.Flush(); err != nil {
					return err
				}
				if len(on) > 0 {
					slices.Sort(on)
					ref := "DEVICE"
					if len(on) == 1 {
						ref = shellWord(on[0])
					}
					fmt.Fprintf(c.opts.Stdout, "approve: this device may decide the requests made to %s (meshtray approvals --on %s)\n", strings.Join(on, ", "), ref)
				}
				return nil
			})
		},
	}
	c.jsonFlag(cmd)
	return cmd
}
