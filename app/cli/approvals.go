package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"meshtray/app"
	"meshtray/pairing"
)

func (c *cli) approvalsCommand() *cobra.Command {
	var on string
	cmd := &cobra.Command{
		Use:   "approvals [--on DEVICE]",
		Short: "List requests waiting for your decision (here, or on a device that gave this one the approve scope)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if on != "" {
				return c.approvalsOn(cmd, on)
			}
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
	cmd.Flags().StringVar(&on, "on", "", "the requests waiting on DEVICE (a paired device that gave this one the approve scope: its name or device ID)")
	c.jsonFlag(cmd)
	return cmd
}

// approvalsOn lists the requests waiting on device, as its approve grant
// shows them.
func (c *cli) approvalsOn(cmd *cobra.Command, device string) error {
	return show(c, cmd, func(cl *app.Client, ctx context.Context) (app.RemoteApprovals, error) {
		return cl.ApprovalsOn(ctx, device)
	}, func(ra app.RemoteApprovals) error {
		name := oneLine(ra.Device, 64)
		if len(ra.Approvals) == 0 {
			fmt.Fprintf(c.opts.Stdout, "no pending approvals on %s\n", name)
			return nil
		}
		fmt.Fprintf(c.opts.Stdout, "Waiting on %s (%s):\n\n", name, pairing.ShortID(ra.DeviceID))
		// Count down with the other device's clock, which set Expires.
		skew := time.Since(ra.Now)
		for i, a := range ra.Approvals {
			if i > 0 {
				fmt.Fprintln(c.opts.Stdout)
			}
			a.Expires = a.Expires.Add(skew)
			c.printApprovalBody(a.Approval)
			ref := shellWord(device)
			switch {
			case a.Own:
				fmt.Fprintf(c.opts.Stdout, "  decide:   not here: this device made it (%s)\n", oneLine(a.Note, 120))
			case !a.CanApprove:
				fmt.Fprintf(c.opts.Stdout, "  decide:   meshtray deny --on %s %s (%s)\n", ref, a.ID, oneLine(a.Note, 120))
			case a.CanAlways:
				fmt.Fprintf(c.opts.Stdout, "  decide:   meshtray approve --on %s %s [--always] | meshtray deny --on %s %s\n", ref, a.ID, ref, a.ID)
			default:
				fmt.Fprintf(c.opts.Stdout, "  decide:   meshtray approve --on %s %s | meshtray deny --on %s %s\n", ref, a.ID, ref, a.ID)
			}
		}
		return nil
	})
}

// shellWord quotes s for a command line the user may paste, when needed.
func shellWord(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(oneLine(s, 64), "'", `'\''`) + "'"
}

// maxDetailLines bounds the lines of a request's detail `approvals` shows.
const maxDetailLines = 12

// printApproval shows one pending request with everything the owner should
// read before deciding: who, over what, what exactly (the detail: message
// text, call parameters), and how to decide.
func (c *cli) printApproval(a app.Approval) {
	c.printApprovalBody(a)
	out := c.opts.Stdout
	switch a.Kind {
	case app.KindPairing:
		fmt.Fprintf(out, "  decide:   meshtray approve %s [--scopes agent,node] | meshtray deny %s\n", a.ID, a.ID)
	case app.KindDelegation, app.KindFiles:
		fmt.Fprintf(out, "  decide:   meshtray approve %s [--always] | meshtray deny %s\n", a.ID, a.ID)
	default:
		fmt.Fprintf(out, "  decide:   meshtray approve %s | meshtray deny %s\n", a.ID, a.ID)
	}
}

// printApprovalBody is printApproval without how to decide.
func (c *cli) printApprovalBody(a app.Approval) {
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
	if a.Kind == app.KindPairing && a.Scopes.Has(pairing.ScopeApprove) {
		fmt.Fprintln(out, "  warning:  it asks for approve: that device could approve or deny the requests made to this one (never granted unless you name it)")
	}
	if a.Kind == app.KindFiles {
		for _, f := range a.Files {
			fmt.Fprintf(out, "  file:     %s (%s)\n", oneLine(f.Path, 200), humanize.IBytes(uint64(f.Size)))
		}
		if a.FilesMore > 0 {
			fmt.Fprintf(out, "  file:     … and %d more (--json lists the first %d)\n", a.FilesMore, len(a.Files))
		}
		fmt.Fprintf(out, "  total:    %s, saved in %s\n", humanize.IBytes(uint64(a.TotalSize)), oneLine(a.Dir, 300))
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
}

func (c *cli) approveCommand() *cobra.Command {
	var scopes, on string
	var always bool
	cmd := &cobra.Command{
		Use:   "approve ID [--scopes agent,node] [--always] [--on DEVICE]",
		Short: "Approve a pending request and say what it granted",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if on != "" {
				return c.decideOn(cmd, on, args[0], app.RemoteDecision{Decision: app.DecisionApprove, Always: always}, scopes != "")
			}
			d := app.ApprovalDecision{Decision: app.DecisionApprove, Always: always, Where: app.WhereCLI}
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
	cmd.Flags().StringVar(&scopes, "scopes", "", "pairing: scopes to grant (agent, node, full, approve; default: those requested, never full or approve)")
	cmd.Flags().BoolVar(&always, "always", false, "delegations and files: always allow from this device from now on (files: only files)")
	cmd.Flags().StringVar(&on, "on", "", "decide a request waiting on DEVICE (a paired device that gave this one the approve scope)")
	return cmd
}

// decideOn decides request id waiting on device and says what it did.
// withScopes: approve was given --scopes, which no request decided on
// another device takes (a pairing is approved only at its device).
func (c *cli) decideOn(cmd *cobra.Command, device, id string, d app.RemoteDecision, withScopes bool) error {
	cl, ctx, done, err := c.api(cmd)
	if err != nil {
		return err
	}
	defer done()
	ra, err := cl.ApprovalsOn(ctx, device)
	if err != nil {
		return err
	}
	var a *app.RemoteApproval
	for i := range ra.Approvals {
		if ra.Approvals[i].ID == id {
			a = &ra.Approvals[i]
		}
	}
	name := oneLine(ra.Device, 64)
	if a == nil {
		return &app.APIError{Status: http.StatusNotFound, Message: fmt.Sprintf("%v on %s: %s (meshtray approvals --on %s lists them)", app.ErrNoApproval, name, id, shellWord(device))}
	}
	switch {
	case withScopes && a.Kind == app.KindPairing:
		return usageError{fmt.Errorf("--scopes goes with approving a pairing, and a pairing is approved only at the device itself (on %s); meshtray deny --on %s %s refuses it", name, shellWord(device), a.ID)}
	case withScopes:
		return usageError{fmt.Errorf("--scopes applies only to pairing requests; %s is a %s request (approve it without --scopes)", a.ID, a.Kind)}
	}
	if d.Always && !a.CanAlways {
		return usageError{fmt.Errorf("--always is for delegations and files (it lets every later one of that device through unasked); %s is a %s request", a.ID, a.Kind)}
	}
	if err := cl.DecideOn(ctx, device, id, d); err != nil {
		return err
	}
	verb := "denied"
	if d.Decision == app.DecisionApprove {
		verb = "approved"
	}
	fmt.Fprintf(c.opts.Stdout, "%s %s on %s: %s from %s: %s\n", verb, a.ID, name, a.Kind, oneLine(a.Peer, 64), oneLine(a.Summary, 120))
	if d.Always {
		what := "delegation"
		if a.Kind == app.KindFiles {
			what = "file transfer"
		}
		fmt.Fprintf(c.opts.Stdout, "every later %s from %s to %s goes through without asking\n", what, oneLine(a.Peer, 64), name)
	}
	return nil
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
	var on string
	cmd := &cobra.Command{
		Use:   "deny ID [--on DEVICE]",
		Short: "Deny a pending request",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if on != "" {
				return c.decideOn(cmd, on, args[0], app.RemoteDecision{Decision: app.DecisionDeny}, false)
			}
			cl, ctx, done, err := c.api(cmd)
			if err != nil {
				return err
			}
			defer done()
			if err := cl.Decide(ctx, args[0], app.ApprovalDecision{Decision: app.DecisionDeny, Where: app.WhereCLI}); err != nil {
				return err
			}
			fmt.Fprintf(c.opts.Stdout, "denied %s\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&on, "on", "", "deny a request waiting on DEVICE (a paired device that gave this one the approve scope)")
	return cmd
}

// scopesFlag reads the scopes of a flag or prompt (pairing.ParseScopes):
// at least one.
func scopesFlag(s string) (pairing.Scopes, error) {
	sc, err := pairing.ParseScopes(s)
	if err == nil && len(sc) == 0 {
		err = errors.New("no scope given: want agent, node, full or approve")
	}
	return sc, err
}
