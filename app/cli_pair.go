package app

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/skip2/go-qrcode"
	"github.com/spf13/cobra"
	"golang.org/x/term"
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

With --join, claim the code another meshtray shows: this device pins that
device's certificate, shows the verification code, waits for its owner to
approve, keeps the grant it receives in the keychain and, with --give, gives
that device a grant back (mutual pairing).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if join != "" {
				return c.pairJoin(cmd, JoinRequest{URL: join, Code: code, FP: fp}, ask, give)
			}
			return c.pairStart(cmd, noWait)
		},
	}
	f := cmd.Flags()
	f.StringVar(&join, "join", "", "claim the pairing URL another device shows (https://host:port/pair#c=CODE&fp=FP)")
	f.StringVar(&code, "code", "", "with --join: the one-time code, when the URL has none")
	f.StringVar(&fp, "fp", "", "with --join: the other device's certificate fingerprint, when the URL has none")
	f.StringVar(&ask, "ask", "agent,node", "with --join: scopes to ask for (the other owner decides)")
	f.StringVar(&give, "give", "agent", `with --join: scopes to give the other device back ("none": a one-way pairing)`)
	f.BoolVar(&noWait, "no-wait", false, "print the code and exit without waiting for the claim")
	c.jsonFlag(cmd)
	return cmd
}

func (c *cli) pairStart(cmd *cobra.Command, noWait bool) error {
	cl, err := c.dial()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	var ps PairingSession
	if err := cl.Do(ctx, http.MethodPost, "/pair/sessions", nil, &ps); err != nil {
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
	ctx, cancel := context.WithDeadline(ctx, ps.Expires)
	defer cancel()
	return c.awaitPairingClaims(ctx, cl)
}

// awaitPairingClaims shows each pairing request as it arrives and, on a
// terminal, asks the owner to approve it here.
func (c *cli) awaitPairingClaims(ctx context.Context, cl *Client) error {
	seen := map[string]bool{}
	changed := make(chan struct{}, 1)
	go cl.Events(ctx, func(ts []EventType) {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	interactive := false
	if f, ok := c.opts.Stdin.(*os.File); ok {
		interactive = term.IsTerminal(int(f.Fd()))
	}
	in := bufio.NewReader(c.opts.Stdin)
	for {
		var as []Approval
		if err := cl.Do(ctx, http.MethodGet, "/approvals", nil, &as); err != nil {
			if ctx.Err() != nil {
				return errors.New("the pairing code expired; start again with `meshtray pair`")
			}
			return err
		}
		for _, a := range as {
			if a.Kind != KindPairing || seen[a.ID] {
				continue
			}
			seen[a.ID] = true
			fmt.Fprintf(c.opts.Stdout, "\n%s (%s) claims the code from %s, asking for %s.\n", oneLine(a.Peer, 64), oneLine(orUnknown(a.OS), 64), a.Addr, scopesOrNone(a.Scopes))
			fmt.Fprintf(c.opts.Stdout, "Verification code: %s — it must be the one the other device shows.\n", spacedSAS(a.SAS))
			if a.Detail != "" {
				fmt.Fprintln(c.opts.Stdout, safeText(a.Detail, true))
			}
			if !interactive {
				fmt.Fprintf(c.opts.Stdout, "Approve with:  meshtray approve %s [--scopes agent,node]\nDeny with:     meshtray deny %s\n", a.ID, a.ID)
				continue
			}
			scopes := defaultPairingScopes(a.Scopes)
			fmt.Fprintf(c.opts.Stdout, "Approve and grant %s? [y/N/scopes, e.g. agent,node,full] ", scopes)
			line, _ := in.ReadString('\n')
			line = strings.TrimSpace(strings.ToLower(line))
			d := ApprovalDecision{Decision: DecisionDeny}
			switch {
			case line == "y" || line == "yes":
				d = ApprovalDecision{Decision: DecisionApprove, Scopes: scopes}
			case line != "" && line != "n" && line != "no":
				sc, err := parseScopes(line)
				if err != nil {
					fmt.Fprintln(c.opts.Stderr, err, "— denied")
					break
				}
				d = ApprovalDecision{Decision: DecisionApprove, Scopes: sc}
			}
			if err := cl.Do(ctx, http.MethodPost, "/approvals/"+pathEscape(a.ID), d, nil); err != nil {
				return err
			}
			if d.Approved() {
				fmt.Fprintf(c.opts.Stdout, "Paired with %s (%s).\n", a.Peer, d.Scopes)
				return nil
			}
			fmt.Fprintln(c.opts.Stdout, "Denied.")
		}
		select {
		case <-ctx.Done():
			return errors.New("the pairing code expired; start again with `meshtray pair`")
		case <-changed:
		case <-time.After(5 * time.Second):
		}
	}
}

func (c *cli) pairJoin(cmd *cobra.Command, req JoinRequest, ask, give string) error {
	var err error
	if req.Ask, err = parseScopes(ask); err != nil {
		return usageError{fmt.Errorf("--ask: %w", err)}
	}
	if give != "none" && give != "" {
		if req.Give, err = parseScopes(give); err != nil {
			return usageError{fmt.Errorf("--give: %w", err)}
		}
	}
	cl, err := c.dial()
	if err != nil {
		return err
	}
	b, _ := json.Marshal(req)
	hreq, err := http.NewRequestWithContext(cmd.Context(), http.MethodPost, cl.base+"/pair/join", bytes.NewReader(b))
	if err != nil {
		return err
	}
	hreq.Header.Set("Authorization", "Bearer "+cl.token)
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := cl.hc.Do(hreq)
	if err != nil {
		return fmt.Errorf("%w (state dir %s)", ErrNotRunning, cl.StateDir)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		json.NewDecoder(resp.Body).Decode(&e)
		return &APIError{Status: resp.StatusCode, Message: e.Error}
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var ev JoinEvent
		if err := dec.Decode(&ev); err != nil {
			return fmt.Errorf("pairing: the node stopped answering: %w", err)
		}
		switch {
		case ev.Error != "":
			return errors.New(ev.Error)
		case ev.SAS != "":
			name := "the other device"
			if ev.Peer != nil {
				name = fmt.Sprintf("%s (%s, %s)", oneLine(ev.Peer.Name, 64), oneLine(orUnknown(ev.Peer.OS), 64), shortID(ev.Peer.ID))
			}
			fmt.Fprintf(c.opts.Stdout, "Claimed the code of %s.\nVerification code: %s — check that %s shows the same, and approve there.\nWaiting for approval…\n",
				name, spacedSAS(ev.SAS), name)
		case ev.Result != nil:
			r := ev.Result
			if c.asJSON {
				return c.printJSON(r)
			}
			fmt.Fprintf(c.opts.Stdout, "Paired with %s (%s): it gave this device %s.\n", oneLine(r.Peer.Name, 64), oneLine(orUnknown(r.Peer.OS), 64), scopesOrNone(r.Peer.Scopes))
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

func spacedSAS(s string) string {
	if len(s) == 6 {
		return s[:3] + " " + s[3:]
	}
	return s
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown OS"
	}
	return s
}
