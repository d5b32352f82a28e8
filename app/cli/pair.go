package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/skip2/go-qrcode"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"meshtray/app"
	"meshtray/pairing"
)

func (c *cli) pairCommand() *cobra.Command {
	var join, code, fp, ask, give string
	var noWait bool
	cmd := &cobra.Command{
		Use:   "pair [--join URL]",
		Short: "Pair a device: show a QR code and one-time code, or claim another device's code",
		Long: `Without --join, start pairing on this device: print a QR code, the URL and a
one-time code (10 minutes, single use) for a phone or another computer, then
wait for the claim, show its verification code (SAS) and ask you to approve.

With --join, claim the code another meshtray shows (--join - reads the URL
from stdin, so the code is not in the process list): this device pins that
device's certificate, shows the verification code, waits for its owner to
approve, keeps the grant it receives in the keychain and, with --give, gives
that device a grant back (mutual pairing).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("join") {
				if join == "-" {
					// From stdin: the URL carries the one-time code, and
					// argv is visible to every user of the machine (ps).
					line, err := readSecretLine(c.opts.Stdin, "pairing URL")
					if err != nil {
						return err
					}
					join = line
				}
				if strings.TrimSpace(join) == "" {
					return usageError{errors.New("--join needs the pairing URL the other device shows (https://host:port/pair#c=CODE&fp=FP)")}
				}
				return c.pairJoin(cmd, app.JoinRequest{URL: join, Code: code, FP: fp}, ask, give)
			}
			for _, f := range []string{"code", "fp", "ask", "give"} {
				if cmd.Flags().Changed(f) {
					return usageError{fmt.Errorf("--%s goes with --join", f)}
				}
			}
			return c.pairStart(cmd, noWait)
		},
	}
	f := cmd.Flags()
	f.StringVar(&join, "join", "", `claim the pairing URL another device shows (https://host:port/pair#c=CODE&fp=FP); "-" reads it from stdin, out of sight of ps`)
	f.StringVar(&code, "code", "", "with --join: the one-time code, when the URL has none")
	f.StringVar(&fp, "fp", "", "with --join: the other device's certificate fingerprint, when the URL has none")
	f.StringVar(&ask, "ask", "agent,node", "with --join: scopes to ask for (the other owner decides; approve: to decide its requests from here)")
	f.StringVar(&give, "give", "agent", `with --join: scopes to give the other device back (approve lets it decide this device's requests; "none": a one-way pairing, which also revokes what this device gave it before)`)
	f.BoolVar(&noWait, "no-wait", false, "print the code and exit without waiting for the claim")
	f.BoolVar(&c.asJSON, "json", false, "print JSON for scripts: without --join, {url, urls, code, fingerprint, expires} at once, without waiting for a claim (decide it with meshtray approvals/approve); with --join, the result")
	return cmd
}

func (c *cli) pairStart(cmd *cobra.Command, noWait bool) error {
	cl, err := c.dial()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	ps, err := cl.StartPairing(ctx)
	if err != nil {
		return err
	}
	if c.asJSON {
		u := ps.URL
		if u == "" {
			u = ps.URLs[len(ps.URLs)-1]
		}
		return c.printJSON(map[string]any{"url": u, "urls": ps.URLs, "code": ps.Code,
			"fingerprint": ps.Fingerprint, "expires": ps.Expires})
	}
	out := c.opts.Stdout
	show := ps.URL
	if show == "" {
		fmt.Fprintf(c.opts.Stderr, "note: %s\n\n", ps.Hint)
		show = ps.URLs[len(ps.URLs)-1]
	}
	if qr, err := qrcode.New(show, qrcode.Medium); err == nil {
		fmt.Fprintln(out, qr.ToSmallString(false))
	}
	fmt.Fprintf(out, "Scan the QR code with the phone, or open:\n  %s\n", show)
	for _, u := range ps.URLs {
		if u != show {
			fmt.Fprintf(out, "  %s\n", u)
		}
	}
	fmt.Fprintf(out, "One-time code: %s (valid until %s)\n", ps.Code, ps.Expires.Local().Format("15:04:05"))
	fmt.Fprintf(out, "This device: %s\nCertificate fingerprint: %s\n", ps.DeviceID, ps.Fingerprint)
	if noWait {
		return nil
	}
	fmt.Fprintln(out, "\nWaiting for a device to claim the code (Ctrl-C to stop)…")
	return c.awaitPairingClaims(ctx, cl, ps.Expires)
}

// grantIDs is the set of grants this device issued, by ID.
func grantIDs(ctx context.Context, cl *app.Client) (map[string]bool, error) {
	d, err := cl.Devices(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(d.Issued))
	for _, g := range d.Issued {
		out[g.ID] = true
	}
	return out, nil
}

// pairedGrant looks for the grant a decided pairing request a produced: a
// grant issued since before (by ID) to a's device ID, or, for a phone
// (no device ID), under a's name.
func pairedGrant(ctx context.Context, cl *app.Client, a app.Approval, before map[string]bool) (pairing.Grant, bool, error) {
	d, err := cl.Devices(ctx)
	if err != nil {
		return pairing.Grant{}, false, err
	}
	for _, g := range d.Issued {
		if before[g.ID] {
			continue
		}
		if (a.DeviceID != "" && g.PeerID == a.DeviceID) || (a.DeviceID == "" && g.PeerID == "" && g.Name == a.Peer) {
			return g, true, nil
		}
	}
	return pairing.Grant{}, false, nil
}

// awaitPairingClaims shows each pairing request as it arrives and, on a
// terminal, asks the owner to approve it here; elsewhere it says how to
// decide (meshtray approve/deny) and notices the decision: the request
// leaves the approvals queue, and the devices list has its new grant
// (paired) or not (denied, or expired undecided). It returns when a claim
// was decided, the code expired (error), or ctx ended (Ctrl-C: it says it
// stopped).
func (c *cli) awaitPairingClaims(parent context.Context, cl *app.Client, expires time.Time) error {
	ctx, cancel := context.WithDeadline(parent, expires)
	defer cancel()
	ended := func() error {
		if parent.Err() != nil {
			return &exitError{code: ExitError, msg: fmt.Sprintf("stopped waiting; the code stays valid until %s (meshtray approvals shows a claim made meanwhile)", expires.Local().Format("15:04:05"))}
		}
		return errors.New("the pairing code expired; start again with `meshtray pair`")
	}
	before, err := grantIDs(ctx, cl)
	if err != nil {
		if ctx.Err() != nil {
			return ended()
		}
		return err
	}
	seen := map[string]bool{}
	waiting := map[string]app.Approval{} // shown, decided elsewhere
	changed := make(chan struct{}, 1)
	evCtx, stopEvents := context.WithCancel(ctx)
	evDone := make(chan struct{})
	go func() {
		defer close(evDone)
		cl.Events(evCtx, func(ts []app.EventType) {
			select {
			case changed <- struct{}{}:
			default:
			}
		})
	}()
	defer func() {
		stopEvents()
		<-evDone
	}()
	interactive := false
	if f, ok := c.opts.Stdin.(*os.File); ok {
		interactive = term.IsTerminal(int(f.Fd()))
	}
	in := bufio.NewReader(c.opts.Stdin)
	for {
		as, err := cl.Approvals(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ended()
			}
			return err
		}
		pending := map[string]bool{}
		for _, a := range as {
			pending[a.ID] = true
		}
		for id, a := range waiting {
			if pending[id] {
				continue
			}
			delete(waiting, id)
			// Decided: the grant is issued as the approval leaves the
			// queue; look once more after the next change if not yet.
			g, ok, err := pairedGrant(ctx, cl, a, before)
			if err == nil && !ok {
				select {
				case <-changed:
				case <-time.After(3 * time.Second):
				case <-ctx.Done():
				}
				g, ok, err = pairedGrant(ctx, cl, a, before)
			}
			switch {
			case err != nil && ctx.Err() != nil:
				return ended()
			case err != nil:
				return err
			case ok:
				fmt.Fprintf(c.opts.Stdout, "Paired with %s: granted %s.\n", oneLine(a.Peer, 64), g.Scopes)
				return nil
			case !time.Now().Before(a.Expires):
				return fmt.Errorf("the pairing request of %s expired undecided; start again with `meshtray pair`", oneLine(a.Peer, 64))
			default:
				return &exitError{code: ExitError, msg: fmt.Sprintf("pairing with %s denied", oneLine(a.Peer, 64))}
			}
		}
		for _, a := range as {
			if a.Kind != app.KindPairing || seen[a.ID] {
				continue
			}
			seen[a.ID] = true
			fmt.Fprintf(c.opts.Stdout, "\n%s (%s) claims the code from %s, asking for %s.\n", oneLine(a.Peer, 64), oneLine(orUnknown(a.OS), 64), a.Addr, a.Scopes.Describe())
			if a.SAS != "" {
				fmt.Fprintf(c.opts.Stdout, "Verification code: %s — it must be the one the other device shows.\n", spacedSAS(a.SAS))
			} else {
				fmt.Fprintln(c.opts.Stdout, "No verification code: this request was made before this device restarted.")
			}
			if a.Scopes.Has(pairing.ScopeApprove) {
				fmt.Fprintln(c.opts.Stdout, "It asks for approve: it could then approve or deny the requests made to this device. Granted only if you name it.")
			}
			if a.Detail != "" {
				fmt.Fprintln(c.opts.Stdout, safeText(a.Detail, true))
			}
			if !interactive {
				fmt.Fprintf(c.opts.Stdout, "Approve with:  meshtray approve %s [--scopes agent,node]\nDeny with:     meshtray deny %s\n", a.ID, a.ID)
				waiting[a.ID] = a
				continue
			}
			scopes := pairing.DefaultPairingScopes(a.Scopes)
			fmt.Fprintf(c.opts.Stdout, "Approve and grant %s? [y/N/scopes, e.g. agent,node,full,approve] ", scopes)
			line, _ := in.ReadString('\n')
			line = strings.TrimSpace(strings.ToLower(line))
			d := app.ApprovalDecision{Decision: app.DecisionDeny}
			switch {
			case line == "y" || line == "yes":
				d = app.ApprovalDecision{Decision: app.DecisionApprove, Scopes: scopes}
			case line != "" && line != "n" && line != "no":
				sc, err := scopesFlag(line)
				if err != nil {
					fmt.Fprintln(c.opts.Stderr, err, "— denied")
					break
				}
				d = app.ApprovalDecision{Decision: app.DecisionApprove, Scopes: sc}
			}
			d.Where = app.WhereCLI
			if err := cl.Decide(ctx, a.ID, d); err != nil {
				if ctx.Err() != nil {
					return ended()
				}
				return err
			}
			if d.Approved() {
				fmt.Fprintf(c.opts.Stdout, "Paired with %s: granted %s.\n", oneLine(a.Peer, 64), d.Scopes)
				return nil
			}
			// The code was used by this claim: nothing else can come.
			return &exitError{code: ExitError, msg: fmt.Sprintf("pairing with %s denied", oneLine(a.Peer, 64))}
		}
		select {
		case <-ctx.Done():
			return ended()
		case <-changed:
		case <-time.After(5 * time.Second):
		}
	}
}

func (c *cli) pairJoin(cmd *cobra.Command, req app.JoinRequest, ask, give string) error {
	_, urlCode, _, err := pairing.ParsePairURL(req.URL)
	if err != nil {
		return usageError{fmt.Errorf("--join: %w", err)}
	}
	if urlCode == "" && strings.TrimSpace(req.Code) == "" {
		return usageError{errors.New("the URL has no pairing code (#c=CODE): give the code the other device shows with --code CODE")}
	}
	if req.Ask, err = scopesFlag(ask); err != nil {
		return usageError{fmt.Errorf("--ask: %w", err)}
	}
	if give != "none" && give != "" {
		if req.Give, err = scopesFlag(give); err != nil {
			return usageError{fmt.Errorf("--give: %w", err)}
		}
	}
	cl, err := c.dial()
	if err != nil {
		return err
	}
	events, err := cl.Join(cmd.Context(), req)
	if err != nil {
		return err
	}
	defer events.Close()
	for {
		ev, err := events.Next()
		if err != nil {
			return fmt.Errorf("pairing: the node stopped answering: %w", err)
		}
		switch {
		case ev.Error != "":
			return errors.New(ev.Error)
		case ev.SAS != "":
			name := "the other device"
			if ev.Peer != nil {
				name = fmt.Sprintf("%s (%s, %s)", oneLine(ev.Peer.Name, 64), oneLine(orUnknown(ev.Peer.OS), 64), pairing.ShortID(ev.Peer.ID))
			}
			fmt.Fprintf(c.opts.Stdout, "Claimed the code of %s.\nVerification code: %s — check that %s shows the same, and approve there.\nWaiting for approval…\n",
				name, spacedSAS(ev.SAS), name)
		case ev.Result != nil:
			r := ev.Result
			if c.asJSON {
				return c.printJSON(r)
			}
			fmt.Fprintf(c.opts.Stdout, "Paired with %s (%s): it gave this device %s.\n", oneLine(r.Peer.Name, 64), oneLine(orUnknown(r.Peer.OS), 64), r.Peer.Scopes.Describe())
			for _, id := range r.Revoked {
				fmt.Fprintf(c.opts.Stdout, "One-way pairing: the grant %s this device gave it before is revoked.\n", id)
			}
			if r.Gave != "" {
				fmt.Fprintf(c.opts.Stdout, "This device gave it grant %s (%s).\n", r.Gave, req.Give)
			}
			if r.FirstContact {
				fmt.Fprintln(c.opts.Stdout, "Its certificate was pinned on first contact: the matching verification codes are what vouch for it.")
			}
			return nil
		}
	}
}
