package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"meshtray/app"
	"meshtray/jsonout"
)

func (c *cli) auditCommand() *cobra.Command {
	var (
		since  string
		grant  string
		kind   string
		limit  int
		follow bool
	)
	cmd := &cobra.Command{
		Use:   "audit [--since DURATION|TIME] [--grant ID] [--kind KIND] [--follow] [--json]",
		Short: "Show the audit trail: decisions, capability runs, grant and pairing changes, A2A and LAN switches",
		Long: `Show the node's audit trail, oldest first: every approval decision (who
asked, approved or denied by whom and where, or withdrawn: nobody decided
before the request went away), every capability run (capability,
parameter summary, caller, result, duration), every change of a grant
(issued, paused, resumed, revoked, rotated, approval policy) and of a
pairing (paired, denied, expired, a device that revoked this one's grant),
the A2A and LAN switches, and a database reset (--reset-database moved an
unreadable database aside: the first entry of the new one). No token, code
or SAS is ever recorded.

Each entry carries a SHA-256 hash over the one before it, so an entry
edited or removed in the database is found: run 'meshtray audit verify'
(the chain has no key: someone who can rewrite the database file can
rewrite the chain too).

Columns: TIME (local), KIND, WHO (the caller, or who decided), WHAT, RESULT,
WHERE (tray, cli, phone, device: another meshtray holding the approve
scope, policy, timeout, or the listener a request came on). Text from
other devices is shown with invisible and control characters escaped
(\uXXXX).

--since takes a duration back from now (90m, 24h, 7d) or a time (RFC 3339
such as 2026-05-01T09:00:00Z, or 2026-05-01 / "2026-05-01 09:00" in local
time). Without --limit the newest 100 matching entries are shown.
--follow keeps printing new entries as they are written, until Ctrl-C;
with --json it prints one JSON object a line (NDJSON).

How long entries are kept: [audit] max_entries (100000) and max_age
(365 days) in config.toml.`,
		Example: `  meshtray audit --since 24h
  meshtray audit --grant 4d9a5aa93be23a07 --json
  meshtray audit --kind capability --follow
  meshtray audit verify`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := app.AuditQuery{GrantID: grant, Kind: kind, Limit: limit, Latest: true}
			if since != "" {
				t, err := parseSince(since, time.Now())
				if err != nil {
					return usageError{err}
				}
				q.Since = t
			}
			if kind != "" {
				if err := app.CheckAuditKind(kind); err != nil {
					return usageError{fmt.Errorf("--%w", err)}
				}
			}
			if limit <= 0 || limit > 10000 {
				return usageError{fmt.Errorf("--limit %d: want 1 to 10000", limit)}
			}
			if follow {
				return c.followAudit(cmd, q)
			}
			return show(c, cmd, func(cl *app.Client, ctx context.Context) ([]app.AuditEntry, error) {
				es, err := cl.AuditEntries(ctx, q)
				if es == nil {
					es = []app.AuditEntry{}
				}
				return es, err
			}, func(es []app.AuditEntry) error {
				if len(es) == 0 {
					fmt.Fprintln(c.opts.Stderr, "no audit entries match")
					return nil
				}
				p := auditPrinter{w: c.opts.Stdout}
				for _, e := range es {
					p.print(e)
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&since, "since", "", "entries from this time on: a duration back from now (24h, 7d) or a time (RFC 3339, or YYYY-MM-DD[ HH:MM] local)")
	f.StringVar(&grant, "grant", "", "only entries about this grant ID (meshtray grant list, meshtray devices)")
	f.StringVar(&kind, "kind", "", "only entries of this kind: approval, capability, grant, pairing, a2a, lan, database")
	f.IntVar(&limit, "limit", 100, "at most this many entries (the newest), 1 to 10000")
	f.BoolVarP(&follow, "follow", "f", false, "keep printing new entries as they are written (Ctrl-C ends)")
	c.jsonFlag(cmd)
	cmd.AddCommand(c.auditVerifyCommand())
	return cmd
}

func (c *cli) auditVerifyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check the audit trail's hash chain: exit 0 when intact, 1 naming the first broken entry",
		Long: `Recompute the hash chain of the audit trail. Every entry's hash covers
the entry and the hash before it, so an entry that was edited, removed,
reordered or added outside meshtray breaks the chain there.

Exit 0 and "N entries, chain intact"; otherwise exit 1 naming the first
broken entry and why. The chain has no secret key: it finds changes made
by tools and mistakes, not someone who rewrites the database file and its
chain head by hand (keep a copy elsewhere for that: audit --follow --json). Entries pruned by retention ([audit] max_entries,
max_age) are not a break: the chain is checked from the newest pruned one.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var v app.AuditVerify
			err := show(c, cmd, func(cl *app.Client, ctx context.Context) (app.AuditVerify, error) {
				var err error
				v, err = cl.VerifyAudit(ctx)
				return v, err
			}, func(v app.AuditVerify) error {
				if v.OK {
					fmt.Fprintf(c.opts.Stdout, "%d entries, chain intact", v.Entries)
					if v.AnchorSeq > 0 {
						fmt.Fprintf(c.opts.Stdout, " (from entry %d: older entries were pruned by retention)", v.AnchorSeq+1)
					}
					fmt.Fprintln(c.opts.Stdout)
				}
				return nil
			})
			if err == nil && !v.OK {
				// --json too: the exit code says it.
				err = &exitError{code: ExitError, msg: fmt.Sprintf("audit trail broken at entry %d: %s", v.BrokenSeq, oneLine(v.Reason, 200))}
			}
			return err
		},
	}
	c.jsonFlag(cmd)
	return cmd
}

// followAudit prints the entries of q, then each new one, until Ctrl-C or
// the node stops.
func (c *cli) followAudit(cmd *cobra.Command, q app.AuditQuery) error {
	cl, err := c.dial()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	s, err := cl.FollowAudit(ctx, q)
	if err != nil {
		return err
	}
	defer s.Close()
	p := auditPrinter{w: c.opts.Stdout}
	for {
		e, err := s.Next()
		switch {
		case ctx.Err() != nil:
			return nil // Ctrl-C
		case isJSONError(err):
			return fmt.Errorf("the node sent an audit entry this meshtray cannot read: %w", err)
		case err != nil:
			// A clean end (EOF) or a cut one (unexpected EOF, a reset):
			// the node went away either way.
			return &exitError{code: ExitError, msg: "the node stopped, so the audit trail is no longer followed (start it again, then run meshtray audit --follow again)"}
		}
		if c.asJSON {
			c.printedJSON = true // a stream of JSON lines: a failure adds no object
			if err := jsonout.WriteLine(c.opts.Stdout, e); err != nil {
				return err
			}
			continue
		}
		p.print(e)
	}
}

// isJSONError reports an answer that is not the JSON it should be (as
// opposed to a stream that ended).
func isJSONError(err error) bool {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	return errors.As(err, &se) || errors.As(err, &te)
}

// auditPrinter prints entries as fixed-width rows (so rows printed one at
// a time, --follow, line up), the header before the first.
type auditPrinter struct {
	w      io.Writer
	header bool
}

const auditRow = "%-19s  %-10s  %-20s  %-56s  %-22s  %s\n"

func (p *auditPrinter) print(e app.AuditEntry) {
	if !p.header {
		fmt.Fprintf(p.w, auditRow, "TIME", "KIND", "WHO", "WHAT", "RESULT", "WHERE")
		p.header = true
	}
	fmt.Fprintf(p.w, auditRow, e.Time.Local().Format("2006-01-02 15:04:05"), e.Kind,
		oneLine(e.Who(), 20), oneLine(e.What(), 56), oneLine(e.ResultText(), 22), oneLine(e.Where(), 16))
}

// parseSince reads --since: a duration back from now (Go's form, plus a
// day suffix "7d"), an RFC 3339 time, or a local date "2006-01-02" with an
// optional " 15:04" or " 15:04:05".
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.ParseFloat(d, 64); err == nil && n >= 0 {
			return now.Add(-time.Duration(n * float64(24*time.Hour))), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			d = -d
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02", "2006-01-02 15:04", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02T15:04:05"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("--since %q: want a duration (90m, 24h, 7d) or a time (2026-05-01T09:00:00Z, 2026-05-01, \"2026-05-01 09:00\")", s)
}
