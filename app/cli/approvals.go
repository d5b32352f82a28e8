package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"meshtray/app"
	"meshtray/pairing"
	"meshtray/store"
)

func (c *cli) approvalsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "List requests waiting for your decision",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return show(c, cmd, (*app.Client).Approvals, func(as []app.Approval) error {
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
			})
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
func (c *cli) printApproval(a app.Approval) {
	out := c.opts.Stdout
	from := oneLine(a.Peer, 64)
	if a.DeviceID != "" {
		from += " (" + pairing.ShortID(a.DeviceID) + ")"
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
	if a.Kind == app.KindFiles {
		for _, f := range a.Files {
			fmt.Fprintf(out, "  file:     %s (%s)\n", oneLine(f.Path, 200), humanSize(f.Size))
		}
		if a.FilesMore > 0 {
			fmt.Fprintf(out, "  file:     … and %d more (--json lists the first %d)\n", a.FilesMore, len(a.Files))
		}
		fmt.Fprintf(out, "  total:    %s, saved in %s\n", humanSize(a.TotalSize), oneLine(a.Dir, 300))
	}
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
	case app.KindPairing:
		fmt.Fprintf(out, "  decide:   meshtray approve %s [--scopes agent,node] | meshtray deny %s\n", a.ID, a.ID)
	case app.KindDelegation, app.KindFiles:
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
			d := app.ApprovalDecision{Decision: app.DecisionApprove, Always: always, Where: store.WhereCLI}
			if scopes != "" {
				sc, err := scopesFlag(scopes)
				if err != nil {
					return usageError{err}
				}
				d.Scopes = sc
			}
			cl, ctx, done, err := c.api(cmd)
			if err != nil {
				return err
			}
			defer done()
			a, err := pendingApproval(ctx, cl, args[0])
			if err != nil {
				return err
			}
			if d.Always && a.Kind != app.KindDelegation && a.Kind != app.KindFiles {
				return usageError{fmt.Errorf("--always is for delegations (it lets every later delegation of that device run unasked); %s is a %s request", a.ID, a.Kind)}
			}
			if len(d.Scopes) > 0 && a.Kind != app.KindPairing {
				return usageError{fmt.Errorf("--scopes is for pairing requests; %s is a %s request", a.ID, a.Kind)}
			}
			if err := cl.Decide(ctx, a.ID, d); err != nil {
				return err
			}
			out := c.opts.Stdout
			from := oneLine(a.Peer, 64)
			switch a.Kind {
			case app.KindPairing:
				granted := d.Scopes
				if len(granted) == 0 {
					granted = pairing.DefaultPairingScopes(a.Scopes)
				}
				fmt.Fprintf(out, "approved %s: paired with %s, granted %s\n", a.ID, from, granted)
			case app.KindDelegation:
				fmt.Fprintf(out, "approved %s: delegation from %s: %s\n", a.ID, from, oneLine(a.Summary, 120))
				if d.Always {
					fmt.Fprintf(out, "every later delegation from %s runs without asking (meshtray grant set %s --approval ask undoes it)\n", from, a.GrantID)
				}
			case app.KindFiles:
				fmt.Fprintf(out, "approved %s: files from %s: %s\n", a.ID, from, oneLine(a.Summary, 120))
				if d.Always {
					fmt.Fprintf(out, "every later transfer from %s is saved without asking (meshtray grant set %s --files ask undoes it)\n", from, a.GrantID)
				}
			default:
				fmt.Fprintf(out, "approved %s: %s from %s: %s\n", a.ID, a.Kind, from, oneLine(a.Summary, 120))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&scopes, "scopes", "", "pairing: scopes to grant (agent, node, full; default: those requested, never full)")
	cmd.Flags().BoolVar(&always, "always", false, "delegations and files: always allow from this device from now on (files: only files)")
	return cmd
}

// pendingApproval returns the pending approval id (404 as an APIError when
// none is pending with that id).
func pendingApproval(ctx context.Context, cl *app.Client, id string) (app.Approval, error) {
	as, err := cl.Approvals(ctx)
	if err != nil {
		return app.Approval{}, err
	}
	for _, a := range as {
		if a.ID == id {
			return a, nil
		}
	}
	return app.Approval{}, &app.APIError{Status: http.StatusNotFound, Message: fmt.Sprintf("%v: %s (meshtray approvals lists them)", app.ErrNoApproval, id)}
}

func (c *cli) denyCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "deny ID",
		Short: "Deny a pending request",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, ctx, done, err := c.api(cmd)
			if err != nil {
				return err
			}
			defer done()
			if err := cl.Decide(ctx, args[0], app.ApprovalDecision{Decision: app.DecisionDeny, Where: store.WhereCLI}); err != nil {
				return err
			}
			fmt.Fprintf(c.opts.Stdout, "denied %s\n", args[0])
			return nil
		},
	}
}

// scopesFlag reads the scopes of a flag or prompt (pairing.ParseScopes):
// at least one.
func scopesFlag(s string) (pairing.Scopes, error) {
	sc, err := pairing.ParseScopes(s)
	if err == nil && len(sc) == 0 {
		err = errors.New("no scope given: want agent, node or full")
	}
	return sc, err
}
