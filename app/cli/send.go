package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/dustin/go-humanize"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"meshtray/app"
	"meshtray/files"
)

func (c *cli) sendCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "send DEVICE PATH... [--json]",
		Short: "Send files and folders to a paired device",
		Long: `Send the files and folders at PATH to DEVICE, a paired device (its name, or
its device ID or the first 7 or more characters of it; ` + "`meshtray devices`" + `
lists them). A folder is sent as its files, with their paths inside it; links
and special files in it are skipped, each named on stderr first. The node
reads the files (give paths it can read) and streams them to the device over
its pinned HTTPS connection.

The device's owner is asked first (unless they chose "Always allow files from
this device"); the files land in its receive folder (files.dir, by default the
download folder + /meshtray), never replacing a file there ("name (1).ext").
A cut connection resumes where it stopped. Ctrl-C cancels the transfer: the
device removes what it had received of unfinished files.

Progress goes to stderr: a bar for each file under way and one for the whole
transfer on a terminal, one line per file otherwise. At the end the saved
files are printed (stdout): path on the device, size, SHA-256. --json prints
the result object instead ({"task_id", "state", "message", "dir", "files",
and "skipped": {"count", "entries": [{"path", "why"}]} when entries were
skipped, "refused": {"count", "entries": [{"path", "why"}]} when files
were not sent for their names). A file whose name the device would refuse
(files.CleanPath: "..", a backslash or colon, control characters) is not
sent and named on stderr first; the others are (exit 0 when they all
arrive). When nothing is left to send, exit 1; --json prints {"error",
"exit_code", "skipped", "refused"}.

` + sendExitHelp,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usageError{errors.New("give a DEVICE and at least one PATH")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			paths := make([]string, 0, len(args)-1)
			for _, p := range args[1:] {
				abs, err := filepath.Abs(p)
				if err != nil {
					return err
				}
				if _, err := os.Stat(abs); err != nil {
					return err
				}
				paths = append(paths, abs)
			}
			cl, err := c.dial()
			if err != nil {
				return err
			}
			pr := newSendPrinter(c.opts.Stderr, c.asJSON)
			res, err := cl.SendFiles(cmd.Context(), args[0], paths, pr.event)
			pr.finish()
			if err != nil && cmd.Context().Err() != nil {
				// Ctrl-C (or SIGTERM) cancelled the transfer: the
				// canceled code the help promises, not "nothing sent".
				return &exitError{code: ExitTaskCanceled, msg: "canceled: the device removes what it had of unfinished files"}
			}
			if errors.Is(err, app.ErrNodeLost) {
				// The node died under the send: the transfer failed; its
				// partial file stays at the receiver until this node
				// starts again (it cancels the transfer there) or the
				// receiver's idle bound ends it.
				res = app.SendResult{State: string(a2a.TaskStateFailed), Message: nodeLostText, Files: []files.Saved{}}
				if c.asJSON {
					if err := c.printJSON(res); err != nil {
						return err
					}
				}
				return &exitError{code: ExitTaskFailed, msg: nodeLostText}
			}
			var nothing *app.NothingToSendError
			if errors.As(err, &nothing) {
				// What was left out, as a send that goes ahead shows it:
				// listed on stderr, and beside the error in --json.
				if nothing.Skipped != nil {
					pr.event(app.SendEvent{Type: app.SendEventSkipped, Skipped: nothing.Skipped})
				}
				if nothing.Refused != nil {
					printRefused(c.opts.Stderr, *nothing.Refused, false)
				}
				if c.asJSON {
					out := map[string]any{"error": nothing.Msg, "exit_code": ExitError}
					if nothing.Skipped != nil {
						out["skipped"] = nothing.Skipped
					}
					if nothing.Refused != nil {
						out["refused"] = nothing.Refused
					}
					if err := c.printJSON(out); err != nil {
						return err
					}
				}
				return &exitError{code: ExitError, msg: nothing.Msg}
			}
			if err != nil {
				return err
			}
			if c.asJSON {
				if err := c.printJSON(res); err != nil {
					return err
				}
			} else {
				c.printSendResult(args[0], res)
			}
			return sendExit(res, pr.said())
		},
	}
	c.jsonFlag(cmd)
	return cmd
}

const sendExitHelp = `Exit codes: 0 every file saved; 10 failed, after the transfer began (the
device restarted while the bytes flowed, a file changed while it was sent,
the device's disk filled up meanwhile, the connection was lost for good, or
this device's node stopped or was lost); 11 canceled (Ctrl-C, or the
device's owner canceled it);
12 rejected, before any byte was sent (the owner or a policy of the device
refused, or the device cannot take the files: its limits, or its free space
counting the transfers it has already admitted); 1 when nothing could be
sent (unknown device, unreadable path, device unreachable), 4 when no node
runs. With --json an exit 1 prints {"error": "...", "exit_code": 1} on
stdout.`

// nodeLostText is said when the local node stopped in the middle of a send.
const nodeLostText = "the local meshtray node stopped during the transfer; the receiving device removes what it received of unfinished files when this node starts again (or after 10 minutes without bytes): start the node and run meshtray send again (it starts over)"

// sendExit is the exit code of a transfer's final state, with its message
// unless the last state line (said) already showed it.
func sendExit(res app.SendResult, said string) error {
	line := stateLine(res.State, res.Message)
	msg := line
	if line == said {
		msg = ""
	}
	switch a2a.TaskState(res.State) {
	case a2a.TaskStateCompleted:
		return nil
	case a2a.TaskStateRejected:
		return &exitError{code: ExitTaskRejected, msg: msg}
	case a2a.TaskStateCanceled:
		return &exitError{code: ExitTaskCanceled, msg: msg}
	case a2a.TaskStateFailed:
		return &exitError{code: ExitTaskFailed, msg: msg}
	}
	return &exitError{code: ExitError, msg: "the transfer ended " + line}
}

// refusedShown bounds the refused files listed on stderr.
const refusedShown = 20

// printRefused lists the files not sent for their names, one a line;
// others says files are sent all the same.
func printRefused(w io.Writer, r files.NotSent, others bool) {
	noun := "files"
	if r.Count == 1 {
		noun = "file"
	}
	rest := ""
	if others {
		rest = " (the others are sent)"
	}
	fmt.Fprintf(w, "not sending %d %s whose name the device would refuse%s:\n", r.Count, noun, rest)
	printNotSent(w, r, refusedShown)
}

// printNotSent lists the first shown entries of ns, one a line, and how
// many more there are.
func printNotSent(w io.Writer, ns files.NotSent, shown int) {
	for i, e := range ns.Entries {
		if i == shown {
			break
		}
		fmt.Fprintf(w, "  %s (%s)\n", pathText(e.Path, 200), oneLine(e.Why, 100))
	}
	if more := ns.Count - min(len(ns.Entries), shown); more > 0 {
		fmt.Fprintf(w, "  … and %d more\n", more)
	}
}

func (c *cli) printSendResult(device string, res app.SendResult) {
	if len(res.Files) == 0 {
		return
	}
	if res.Dir != "" {
		fmt.Fprintf(c.opts.Stdout, "saved in %s:\n", oneLine(res.Dir, 300))
	} else {
		fmt.Fprintf(c.opts.Stdout, "saved in the receive folder of %s:\n", oneLine(device, 64))
	}
	w := c.table()
	for _, f := range res.Files {
		fmt.Fprintf(w, "  %s\t%s\t%s\n", pathText(f.Path, 200), humanize.IBytes(uint64(f.Size)), f.SHA256)
	}
	w.Flush()
}

// sendPrinter shows a transfer's progress on stderr: on a terminal a
// progress bar per file being sent (files go up two at a time) and one for
// the whole transfer, redrawn at most 10 times a second, a finished file's
// bar left in place; otherwise one line per state change and per file
// sent.
type sendPrinter struct {
	w     io.Writer
	tty   bool
	quiet bool // --json: state lines only

	mu        sync.Mutex
	total     *progressbar.ProgressBar
	bars      map[int]*progressbar.ProgressBar // files under way
	order     []int                            // their indices, in the order they started
	finished  map[int]bool
	lines     int // bar lines on screen (the cursor is at the end of the last)
	last      time.Time
	lastState string
}

func newSendPrinter(w io.Writer, asJSON bool) *sendPrinter {
	tty := false
	if f, ok := w.(*os.File); ok && !asJSON {
		tty = term.IsTerminal(int(f.Fd()))
	}
	return &sendPrinter{w: w, tty: tty, quiet: asJSON, bars: map[int]*progressbar.ProgressBar{}, finished: map[int]bool{}}
}

// descWidth is the width of a bar's description (the file's path).
const descWidth = 28

func newBar(max int64, desc string) *progressbar.ProgressBar {
	return progressbar.NewOptions64(max,
		progressbar.OptionSetWriter(io.Discard), // drawn by sendPrinter, several lines at once
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowBytes(true),
		progressbar.OptionUseIECUnits(true),
		progressbar.OptionSetWidth(24),
		progressbar.OptionSetTheme(progressbar.ThemeASCII),
		progressbar.OptionThrottle(0),
		progressbar.OptionSetPredictTime(true),
	)
}

// savedName is the name the device saves p under (files.CleanPath:
// "CON" -> "_CON", "trail. " -> "trail"); p itself when it keeps it (or
// refuses it: such files are not sent).
func savedName(p string) string {
	if c, err := files.CleanPath(p); err == nil {
		return c
	}
	return p
}

// padDesc fits a path (as the device saves it) to descWidth columns: cut from the left ("…" in
// front), padded on the right.
func padDesc(p string) string {
	r := []rune(pathText(savedName(p), 300))
	if len(r) > descWidth {
		r = append([]rune("…"), r[len(r)-descWidth+1:]...)
	}
	return string(r) + strings.Repeat(" ", descWidth-len(r))
}

func (p *sendPrinter) event(ev app.SendEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch ev.Type {
	case app.SendEventSkipped:
		if ev.Skipped != nil && ev.Skipped.Count > 0 {
			p.clearLocked()
			printSkipped(p.w, *ev.Skipped)
			p.drawLocked(true)
		}
	case app.SendEventRefused:
		if ev.Refused != nil && ev.Refused.Count > 0 {
			p.clearLocked()
			printRefused(p.w, *ev.Refused, true)
			p.drawLocked(true)
		}
	case app.SendEventState:
		if ev.State == "working" && ev.Message == "" {
			return // approved; the receiver's "receiving …" follows at once
		}
		line := stateLine(ev.State, ev.Message)
		if line == p.lastState {
			return
		}
		p.lastState = line
		p.clearLocked()
		fmt.Fprintln(p.w, p.lastState)
		p.drawLocked(true)
	case app.SendEventProgress:
		if p.quiet || p.finished[ev.File] {
			return
		}
		done := ev.Done >= ev.Size
		if !p.tty {
			if done {
				p.finished[ev.File] = true
				name := pathText(ev.Path, 200)
				if saved := savedName(ev.Path); saved != ev.Path {
					name += " as " + pathText(saved, 200)
				}
				fmt.Fprintf(p.w, "sent %s (%s), %s of %s\n", name, humanize.IBytes(uint64(ev.Size)), humanize.IBytes(uint64(ev.TotalDone)), humanize.IBytes(uint64(ev.Total)))
			}
			return
		}
		if p.total == nil {
			p.total = newBar(max(ev.Total, 1), padDesc("all files"))
		}
		p.total.Set64(ev.TotalDone)
		if done {
			p.finished[ev.File] = true
			p.clearLocked()
			if b := p.bars[ev.File]; b != nil && ev.Size > 0 {
				b.Set64(ev.Done)
				fmt.Fprintln(p.w, barLine(b))
			} else {
				fmt.Fprintf(p.w, "%s %s\n", padDesc(ev.Path), humanize.IBytes(uint64(ev.Size)))
			}
			p.dropLocked(ev.File)
			p.drawLocked(true)
			return
		}
		b := p.bars[ev.File]
		if b == nil {
			b = newBar(ev.Size, padDesc(ev.Path))
			p.bars[ev.File] = b
			p.order = append(p.order, ev.File)
		}
		b.Set64(ev.Done)
		p.drawLocked(false)
	}
}

// printSkipped lists the entries of the folders that are not sent, one a
// line (the node lists the first files.MaxNotSentListed, then says how
// many more).
func printSkipped(w io.Writer, sk files.NotSent) {
	noun := "entries"
	if sk.Count == 1 {
		noun = "entry"
	}
	fmt.Fprintf(w, "skipped %d %s of the folders (links and special files are not sent):\n", sk.Count, noun)
	printNotSent(w, sk, files.MaxNotSentListed)
}

// stateLine is a transfer's state and its message as one printed line.
func stateLine(state, msg string) string {
	if msg != "" {
		state += ": " + msg
	}
	return oneLine(state, 300)
}

// said is the last state line printed.
func (p *sendPrinter) said() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastState
}

func (p *sendPrinter) dropLocked(i int) {
	delete(p.bars, i)
	for k, x := range p.order {
		if x == i {
			p.order = append(p.order[:k], p.order[k+1:]...)
			break
		}
	}
}

// barLine is a bar's rendering as one line.
func barLine(b *progressbar.ProgressBar) string {
	return strings.TrimRight(strings.TrimLeft(b.String(), "\r"), " ")
}

// drawLocked redraws the bars of the files under way and the total (at
// most every 100 ms unless force), leaving the cursor at the end of the
// total's line.
func (p *sendPrinter) drawLocked(force bool) {
	if !p.tty || p.total == nil {
		return
	}
	if !force && time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last = time.Now()
	p.clearLocked()
	for _, i := range p.order {
		fmt.Fprintln(p.w, barLine(p.bars[i]))
	}
	fmt.Fprint(p.w, barLine(p.total))
	p.lines = len(p.order) + 1
}

// clearLocked erases the bar lines and leaves the cursor where they began.
func (p *sendPrinter) clearLocked() {
	if p.lines == 0 {
		return
	}
	fmt.Fprint(p.w, "\r\x1b[K")
	for range p.lines - 1 {
		fmt.Fprint(p.w, "\x1b[1A\r\x1b[K")
	}
	p.lines = 0
}

// finish ends the display: the bars still on screen stay, as they are.
func (p *sendPrinter) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.tty || p.total == nil {
		return
	}
	p.clearLocked()
	for _, i := range p.order {
		fmt.Fprintln(p.w, barLine(p.bars[i]))
	}
	fmt.Fprintln(p.w, barLine(p.total))
}
