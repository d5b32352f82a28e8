package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"meshtray/a2a/delegate"
	"meshtray/app"
	"meshtray/jsonout"
	"meshtray/pairing"
)

// Exit codes of delegate, answer and `outbound --follow`: the task's final
// state (completed is ExitOK).
const (
	ExitTaskFailed        = 10
	ExitTaskCanceled      = 11
	ExitTaskRejected      = 12
	ExitTaskInputRequired = 13
	ExitTaskAuthRequired  = 14
)

const exitCodesHelp = `Exit codes: 0 completed, 10 failed, 11 canceled, 12 rejected,
13 input-required (answer with ` + "`meshtray answer TASK ...`" + `), 14 auth-required;
1 when the delegation could not be sent, or the agent stayed unreachable
for the whole follow-up (an hour) or failed in a way retrying cannot fix,
4 when no node runs.`

// messageFlags are the content flags of delegate and answer.
type messageFlags struct {
	data   string
	file   string
	detach bool
}

func (m *messageFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&m.data, "data", "", `a JSON object sent as a data part, e.g. '{"capability":"device.info"}'`)
	f.StringVar(&m.file, "file", "", fmt.Sprintf("a file sent inline as a file part (at most %d KiB)", delegate.MaxFileBytes>>10))
	f.BoolVar(&m.detach, "detach", false, "print the task once the agent took it and exit (it goes on in the node; see: meshtray outbound)")
}

func (m *messageFlags) input(text string) (delegate.MessageInput, error) {
	in := delegate.MessageInput{Text: text}
	if m.data != "" {
		dec := json.NewDecoder(strings.NewReader(m.data))
		dec.UseNumber()
		if err := dec.Decode(&in.Data); err != nil || in.Data == nil {
			return in, usageError{fmt.Errorf("--data must be a JSON object: %v", err)}
		}
	}
	if m.file != "" {
		f, err := os.Open(m.file)
		if err != nil {
			return in, err
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, delegate.MaxFileBytes+1))
		if err != nil {
			return in, err
		}
		if len(b) > delegate.MaxFileBytes {
			return in, usageError{fmt.Errorf("--file %s is over %d KiB", m.file, delegate.MaxFileBytes>>10)}
		}
		in.File = &delegate.FileInput{Name: m.file, Bytes: b}
	}
	if strings.TrimSpace(in.Text) == "" && in.Data == nil && in.File == nil {
		return in, usageError{errors.New("nothing to send: give TEXT, --data or --file")}
	}
	return in, nil
}

func textArgs(cmd *cobra.Command, args []string, min int) error {
	if len(args) < min || len(args) > min+1 {
		return usageError{fmt.Errorf("accepts %d or %d arg(s), received %d", min, min+1, len(args))}
	}
	return nil
}

func (c *cli) delegateCommand() *cobra.Command {
	var mf messageFlags
	var stream bool
	cmd := &cobra.Command{
		Use:   "delegate AGENT [TEXT] [--data JSON] [--file PATH] [--stream]",
		Short: "Delegate work to an agent (a paired device or an added agent) and follow it",
		Long: `Send a message to AGENT and follow the task it starts. AGENT is, as
` + "`meshtray agents`" + ` lists them: a paired device's ID (or its first 7 or more
characters) or name, or an added agent's URL, id or name. A device ID always
means that device; a name that could mean two agents is refused with both
listed (name a device by its ID, an added agent by its URL). Status changes and
artifacts are printed as they arrive (a progress line on a terminal while the
agent works). The node sends and follows the task (it holds the grants and
tokens); Ctrl-C stops watching, not the task: see ` + "`meshtray outbound`" + `.

With --stream (the default) the node uses message/stream when the agent's card
advertises streaming; --stream=false sends message/send and polls tasks/get
with backoff.

` + exitCodesHelp,
		Args: func(cmd *cobra.Command, args []string) error { return textArgs(cmd, args, 1) },
		RunE: func(cmd *cobra.Command, args []string) error {
			text := ""
			if len(args) == 2 {
				text = args[1]
			}
			in, err := mf.input(text)
			if err != nil {
				return err
			}
			req := app.DelegateRequest{DelegateRequest: delegate.DelegateRequest{Agent: args[0], MessageInput: in, Stream: &stream}}
			return c.follow(cmd, mf.detach,
				func(ctx context.Context, cl *app.Client) (delegate.OutboundTask, error) { return cl.Delegate(ctx, req) },
				func(ctx context.Context, cl *app.Client) (*app.Stream[delegate.OutboundEvent], error) {
					return cl.DelegateWatch(ctx, req)
				})
		},
	}
	mf.add(cmd)
	cmd.Flags().BoolVar(&stream, "stream", true, "use message/stream when the agent supports it (false: message/send and tasks/get polling)")
	c.jsonFlag(cmd)
	return cmd
}

func (c *cli) answerCommand() *cobra.Command {
	var mf messageFlags
	cmd := &cobra.Command{
		Use:   "answer TASK [TEXT] [--data JSON] [--file PATH]",
		Short: "Answer a delegated task that asks for input, and follow it again",
		Long: `Answer a task in input-required (see ` + "`meshtray outbound`" + `): the message goes to
the same task at its agent, which resumes. TASK is the id ` + "`meshtray outbound`" + `
shows (or a prefix of it, or the agent's task id).

` + exitCodesHelp,
		Args: func(cmd *cobra.Command, args []string) error { return textArgs(cmd, args, 1) },
		RunE: func(cmd *cobra.Command, args []string) error {
			text := ""
			if len(args) == 2 {
				text = args[1]
			}
			in, err := mf.input(text)
			if err != nil {
				return err
			}
			req := app.AnswerRequest{MessageInput: in}
			return c.follow(cmd, mf.detach,
				func(ctx context.Context, cl *app.Client) (delegate.OutboundTask, error) {
					return cl.Answer(ctx, args[0], req)
				},
				func(ctx context.Context, cl *app.Client) (*app.Stream[delegate.OutboundEvent], error) {
					return cl.AnswerWatch(ctx, args[0], req)
				})
		},
	}
	mf.add(cmd)
	c.jsonFlag(cmd)
	return cmd
}

func (c *cli) cancelCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cancel TASK",
		Short: "Cancel a delegated task at its agent, or a file transfer this device is receiving",
		Long: `Cancel TASK: a task this device delegated (meshtray outbound lists them) is
canceled at its agent, where the work stops; a file transfer this device is
receiving (meshtray status lists them as "receiving") ends canceled, its
partial files removed and the free space it held released.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if done, err := c.cancelIncoming(cmd, args[0]); done {
				return err
			}
			return show(c, cmd, func(cl *app.Client, ctx context.Context) (delegate.OutboundTask, error) {
				t, err := cl.Cancel(ctx, args[0])
				if ae, ok := errors.AsType[*app.APIError](err); ok && ae.Status == http.StatusNotFound {
					// cancel takes both kinds of id: say so, not the outbound
					// store's own "a2a: no such outbound task".
					err = &app.APIError{Status: ae.Status, Message: fmt.Sprintf("no outbound task or incoming transfer has the id %s (see meshtray outbound and meshtray status)", shellWord(args[0]))}
				}
				return t, err
			}, func(t delegate.OutboundTask) error {
				fmt.Fprintf(c.opts.Stdout, "task %s at %s: %s\n", t.ID, oneLine(t.AgentName, 64), t.State)
				return nil
			})
		},
	}
	c.jsonFlag(cmd)
	return cmd
}

// cancelIncoming cancels the incoming transfer of task when one is under
// way; done is false when there is none (task names a delegated task).
func (c *cli) cancelIncoming(cmd *cobra.Command, task string) (done bool, err error) {
	cl, ctx, closeAPI, err := c.api(cmd)
	if err != nil {
		return true, err
	}
	defer closeAPI()
	ts, err := cl.IncomingFiles(ctx)
	if err != nil || !slices.ContainsFunc(ts, func(t app.IncomingTransfer) bool { return t.TaskID == task }) {
		return false, nil
	}
	if err := cl.CancelIncoming(ctx, task); err != nil {
		return true, err
	}
	if c.asJSON {
		return true, c.printJSON(map[string]string{"task_id": task, "state": "canceled"})
	}
	fmt.Fprintf(c.opts.Stdout, "incoming transfer %s: canceled (its partial files are removed)\n", task)
	return true, nil
}

func (c *cli) outboundCommand() *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "outbound [TASK] [--follow]",
		Short: "The tasks this device delegated: agent, request, state, last update, artifacts",
		Long: `Without TASK, list the delegated tasks (the node keeps the last 128; finished
ones go first). A task that asks for input shows its question. With TASK, show
it whole (artifacts included); --follow watches it until it ends or asks.

` + exitCodesHelp,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError{errors.New("at most one task")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 && follow {
				return c.follow(cmd, false, nil, func(ctx context.Context, cl *app.Client) (*app.Stream[delegate.OutboundEvent], error) {
					return cl.Watch(ctx, args[0])
				})
			}
			cl, ctx, done, err := c.api(cmd)
			if err != nil {
				return err
			}
			defer done()
			if len(args) == 0 {
				ts, err := cl.Outbound(ctx)
				if err != nil {
					return err
				}
				if c.asJSON {
					return c.printJSON(ts)
				}
				c.printOutbound(ts)
				return nil
			}
			t, err := cl.OutboundTask(ctx, args[0])
			if err != nil {
				return err
			}
			if c.asJSON {
				return c.printJSON(t)
			}
			c.printTaskDetail(t)
			return nil
		},
	}
	cmd.Flags().BoolVar(&follow, "follow", false, "with TASK: follow it until it ends or asks for input")
	c.jsonFlag(cmd)
	return cmd
}

func (c *cli) printTaskDetail(t delegate.OutboundTask) {
	w := c.table()
	fmt.Fprintf(w, "task\t%s (at the agent: %s)\n", t.ID, t.TaskID)
	fmt.Fprintf(w, "agent\t%s (%s %s)\n", oneLine(t.AgentName, 64), t.AgentKind, pairing.ShortID(t.Agent))
	fmt.Fprintf(w, "request\t%s\n", oneLine(t.Request, 200))
	state := string(t.State)
	if t.Following {
		state += " (followed)"
	}
	fmt.Fprintf(w, "state\t%s\n", state)
	if t.Message != "" {
		fmt.Fprintf(w, "message\t%s\n", oneLine(t.Message, 200))
	}
	if t.Error != "" {
		fmt.Fprintf(w, "error\t%s\n", oneLine(t.Error, 300))
	}
	fmt.Fprintf(w, "created\t%s\n", t.Created.Local().Format(time.DateTime))
	fmt.Fprintf(w, "updated\t%s (%s)\n", t.Updated.Local().Format(time.DateTime), ago(t.Updated))
	w.Flush()
	p := newTaskPrinter(c.opts.Stdout, c.opts.Stderr, false)
	p.mu.Lock()
	for _, a := range t.Artifacts {
		p.artifactLocked(a, false)
	}
	p.endLineLocked()
	p.mu.Unlock()
	if t.State == a2a.TaskStateInputRequired || t.State == a2a.TaskStateAuthRequired {
		fmt.Fprintf(c.opts.Stderr, "answer with:  meshtray answer %s \"...\"\n", t.ID)
	}
}

func (c *cli) printOutbound(ts []delegate.OutboundTask) {
	if len(ts) == 0 {
		fmt.Fprintln(c.opts.Stdout, "no delegated tasks yet (`meshtray delegate AGENT TEXT`)")
		return
	}
	w := c.table()
	fmt.Fprintln(w, "ID\tAGENT\tSTATE\tUPDATED\tARTIFACTS\tREQUEST")
	for _, t := range ts {
		state := string(t.State)
		if t.Following {
			state += "…"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\n", t.ID, oneLine(t.AgentName, 40), state, ago(t.Updated), len(t.Artifacts), oneLine(t.Request, 50))
		switch {
		case t.State == a2a.TaskStateInputRequired || t.State == a2a.TaskStateAuthRequired:
			fmt.Fprintf(w, "\t\t\t\t\t↳ asks: %s\n", oneLine(t.Message, 100))
		case t.Error != "":
			fmt.Fprintf(w, "\t\t\t\t\t↳ %s\n", oneLine(t.Error, 100))
		case t.Message != "" && t.State.Terminal():
			fmt.Fprintf(w, "\t\t\t\t\t↳ %s\n", oneLine(t.Message, 100))
		}
	}
	w.Flush()
}

// follow runs a delegation, an answer or a watch: detached, the task once
// the agent took it (send); otherwise the stream of its events (watch),
// printed as they come, and the exit code of its final state.
func (c *cli) follow(cmd *cobra.Command, detach bool,
	send func(context.Context, *app.Client) (delegate.OutboundTask, error),
	watch func(context.Context, *app.Client) (*app.Stream[delegate.OutboundEvent], error)) error {
	cl, err := c.dial()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if detach {
		t, err := send(ctx, cl)
		if err != nil {
			return err
		}
		if c.asJSON {
			return c.printJSON(t)
		}
		fmt.Fprintf(c.opts.Stdout, "%s\n", t.ID)
		fmt.Fprintf(c.opts.Stderr, "task %s at %s: %s (follow it with `meshtray outbound %s --follow`)\n", t.ID, oneLine(t.AgentName, 64), t.State, t.ID)
		return nil
	}

	tty := false
	if f, ok := c.opts.Stderr.(*os.File); ok && !c.asJSON {
		tty = term.IsTerminal(int(f.Fd()))
	}
	events, err := watch(ctx, cl)
	if err != nil {
		return err
	}
	defer events.Close()
	p := newTaskPrinter(c.opts.Stdout, c.opts.Stderr, tty)
	defer p.finish()
	var last *delegate.OutboundTask
	for {
		ev, err := events.Next()
		if err != nil {
			p.stop()
			if ctx.Err() != nil {
				id := ""
				if last != nil {
					id = " " + last.ID
				}
				return &exitError{code: ExitError, msg: "stopped watching; the task goes on in the node: `meshtray outbound" + id + "`"}
			}
			return fmt.Errorf("the node stopped answering: %w", err)
		}
		if ev.Error != "" {
			p.stop()
			return errors.New(ev.Error)
		}
		if c.asJSON {
			c.printedJSON = true // a stream of JSON lines: a failure adds no object
			if err := jsonout.WriteLine(c.opts.Stdout, ev); err != nil {
				return err
			}
		} else {
			p.event(ev)
		}
		if ev.Task != nil {
			t := *ev.Task
			last = &t
		}
		if ev.End {
			break
		}
	}
	p.finish()
	return exitFor(last)
}

// exitFor maps a followed task's end to the exit code.
func exitFor(t *delegate.OutboundTask) error {
	if t == nil {
		return errors.New("the node ended the stream without the task")
	}
	switch t.State {
	case a2a.TaskStateCompleted:
		return nil
	case a2a.TaskStateFailed:
		return &exitError{code: ExitTaskFailed}
	case a2a.TaskStateCanceled:
		return &exitError{code: ExitTaskCanceled}
	case a2a.TaskStateRejected:
		return &exitError{code: ExitTaskRejected}
	case a2a.TaskStateInputRequired:
		return &exitError{code: ExitTaskInputRequired}
	case a2a.TaskStateAuthRequired:
		return &exitError{code: ExitTaskAuthRequired}
	}
	msg := fmt.Sprintf("the node lost track of task %s (%s)", t.ID, t.State)
	if t.Error != "" {
		msg += ": " + t.Error
	}
	return &exitError{code: ExitError, msg: msg}
}

// taskPrinter renders a followed task for a person: status lines and the
// progress line on stderr, artifacts and the agent's final answer on
// stdout. It prints each artifact part once, whether it arrives as an
// event or in a task snapshot, and a final answer that repeats an
// artifact's text (an agent's one-line summary in both) is not printed
// again.
type taskPrinter struct {
	out, errw io.Writer
	tty       bool // stderr is a terminal: draw the progress line
	shared    bool // stdout is that terminal too: end stdout's line before a status line

	mu      sync.Mutex
	printed map[string]int              // parts printed per artifact
	texts   map[string]*strings.Builder // text printed per artifact (the first maxEchoText bytes)
	state   a2a.TaskState
	msg     string
	open    bool // stdout's last write did not end a line
	id      string
	since   time.Time
	spin    int
	line    bool // a progress line is on stderr
	quit    chan struct{}
	done    chan struct{}
}

func newTaskPrinter(out, errw io.Writer, tty bool) *taskPrinter {
	p := &taskPrinter{out: out, errw: errw, tty: tty, printed: map[string]int{}, texts: map[string]*strings.Builder{}, since: time.Now()}
	if f, ok := out.(*os.File); ok && tty {
		p.shared = term.IsTerminal(int(f.Fd()))
	}
	if tty {
		p.quit, p.done = make(chan struct{}), make(chan struct{})
		go p.progress()
	}
	return p
}

// progress redraws the progress line while the agent works.
func (p *taskPrinter) progress() {
	defer close(p.done)
	t := time.NewTicker(150 * time.Millisecond)
	defer t.Stop()
	frames := []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}
	for {
		select {
		case <-p.quit:
			return
		case <-t.C:
		}
		p.mu.Lock()
		if p.state == a2a.TaskStateSubmitted || p.state == a2a.TaskStateWorking {
			p.spin++
			status := string(p.state)
			if p.msg != "" {
				status += ": " + oneLine(p.msg, 60)
			}
			fmt.Fprintf(p.errw, "\r\033[K%s %s %s", frames[p.spin%len(frames)], status, time.Since(p.since).Round(time.Second))
			p.line = true
		}
		p.mu.Unlock()
	}
}

func (p *taskPrinter) stop() {
	if p.quit == nil {
		return
	}
	select {
	case <-p.quit:
	default:
		close(p.quit)
		<-p.done
	}
	p.mu.Lock()
	p.clearLocked()
	p.mu.Unlock()
}

// finish ends an open stdout line: the output ends with a newline.
func (p *taskPrinter) finish() {
	p.stop()
	p.mu.Lock()
	if p.open {
		fmt.Fprintln(p.out)
		p.open = false
	}
	p.mu.Unlock()
}

// clearLocked removes the progress line and, on a shared terminal, ends an
// open stdout line before stderr writes one.
func (p *taskPrinter) clearLocked() {
	if p.line {
		fmt.Fprint(p.errw, "\r\033[K")
		p.line = false
	}
	if p.open && p.shared {
		fmt.Fprintln(p.out)
		p.open = false
	}
}

func (p *taskPrinter) event(ev delegate.OutboundEvent) {
	switch {
	case ev.Task != nil && !ev.End:
		p.header(*ev.Task)
		p.task(*ev.Task)
	case ev.Artifact != nil:
		p.mu.Lock()
		p.artifactLocked(*ev.Artifact, ev.Append)
		p.mu.Unlock()
	case ev.State != "":
		p.status(ev.State, ev.Message)
	case ev.Waiting != "":
		p.waiting(ev.Waiting)
	case ev.End && ev.Task != nil:
		p.task(*ev.Task)
		p.end(*ev.Task)
	}
}

func (p *taskPrinter) header(t delegate.OutboundTask) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
	p.id = t.ID
	fmt.Fprintf(p.errw, "→ %s: task %s\n", oneLine(t.AgentName, 64), t.ID)
	if !t.RetryAt.IsZero() && t.Error != "" {
		fmt.Fprintf(p.errw, "waiting: %s\n", oneLine(t.Error, 300))
	}
}

// waiting says the node cannot reach the agent now and tries again.
func (p *taskPrinter) waiting(why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
	fmt.Fprintf(p.errw, "waiting: %s\n", oneLine(why, 300))
}

// task prints what a snapshot adds: artifacts not printed, a new state.
func (p *taskPrinter) task(t delegate.OutboundTask) {
	p.mu.Lock()
	for _, a := range t.Artifacts {
		n := p.printed[a.ID]
		switch {
		case n == 0 && len(a.Parts) > 0:
			p.artifactLocked(a, false)
		case len(a.Parts) > n:
			p.artifactLocked(delegate.OutboundArtifact{ID: a.ID, Name: a.Name, Parts: a.Parts[n:]}, true)
		}
	}
	p.mu.Unlock()
	p.status(t.State, t.Message)
}

func (p *taskPrinter) status(st a2a.TaskState, msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st == p.state && msg == p.msg {
		return
	}
	p.state, p.msg = st, msg
	p.clearLocked()
	switch {
	case st == a2a.TaskStateCompleted:
		if msg != "" && !p.printedTextLocked(msg) {
			p.endLineLocked()
			fmt.Fprintln(p.out, outputText(p.out, msg))
		}
		fmt.Fprintln(p.errw, "completed")
	case st == a2a.TaskStateInputRequired || st == a2a.TaskStateAuthRequired:
		fmt.Fprintf(p.errw, "%s: the agent asks:\n", st)
		p.endLineLocked()
		fmt.Fprintln(p.out, outputText(p.out, msg))
	case msg != "":
		fmt.Fprintf(p.errw, "%s: %s\n", st, safeText(msg, true))
	default:
		fmt.Fprintln(p.errw, st)
	}
}

func (p *taskPrinter) artifactLocked(a delegate.OutboundArtifact, appended bool) {
	if p.line {
		fmt.Fprint(p.errw, "\r\033[K")
		p.line = false
	}
	if !appended {
		if p.open {
			fmt.Fprintln(p.out)
			p.open = false
		}
		name := a.Name
		if name == "" {
			name = "artifact"
		}
		fmt.Fprintf(p.out, "── %s ──\n", oneLine(name, 80))
	}
	for _, part := range a.Parts {
		switch v := part.(type) {
		case a2a.TextPart:
			fmt.Fprint(p.out, outputText(p.out, v.Text))
			p.open = !strings.HasSuffix(v.Text, "\n") && v.Text != ""
			p.keepTextLocked(a.ID, v.Text)
		case a2a.DataPart:
			if p.open {
				fmt.Fprintln(p.out)
			}
			fmt.Fprintf(p.out, "%s\n", outputText(p.out, indentJSON(v.Data)))
			p.open = false
		case a2a.FilePart:
			if p.open {
				fmt.Fprintln(p.out)
			}
			switch f := v.File.(type) {
			case a2a.FileBytes:
				n := base64.StdEncoding.DecodedLen(len(f.Bytes))
				fmt.Fprintf(p.out, "[file %s (%s, about %d bytes)]\n", oneLine(f.Name, 80), oneLine(f.MimeType, 40), n)
			case a2a.FileURI:
				fmt.Fprintf(p.out, "[file %s]\n", oneLine(f.URI, 200))
			}
			p.open = false
		}
	}
	p.printed[a.ID] += len(a.Parts) // an open text line stays open: appended chunks continue it
}

// indentJSON is v as indented JSON for a person (jsonout.MarshalIndent:
// "<", ">" and "&" as they are).
func indentJSON(v any) string {
	b, err := jsonout.MarshalIndent(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// maxEchoText bounds the text kept per artifact to recognise a final
// answer that repeats it.
const maxEchoText = 64 << 10

func (p *taskPrinter) keepTextLocked(id, text string) {
	b := p.texts[id]
	if b == nil {
		if len(p.texts) >= 64 {
			return
		}
		b = &strings.Builder{}
		p.texts[id] = b
	}
	if b.Len()+len(text) <= maxEchoText {
		b.WriteString(text)
	}
}

// printedTextLocked reports whether msg is the text of an artifact already
// printed (surrounding space aside).
func (p *taskPrinter) printedTextLocked(msg string) bool {
	msg = strings.TrimSpace(msg)
	for _, b := range p.texts {
		if strings.TrimSpace(b.String()) == msg {
			return true
		}
	}
	return false
}

// endLineLocked ends an open stdout line before more stdout.
func (p *taskPrinter) endLineLocked() {
	if p.open {
		fmt.Fprintln(p.out)
		p.open = false
	}
}

// end prints what a person does next.
func (p *taskPrinter) end(t delegate.OutboundTask) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
	switch {
	case t.State == a2a.TaskStateInputRequired || t.State == a2a.TaskStateAuthRequired:
		fmt.Fprintf(p.errw, "answer with:  meshtray answer %s \"...\"  (or --data JSON)\n", t.ID)
	case t.Error != "":
		fmt.Fprintf(p.errw, "lost track: %s\n", oneLine(t.Error, 300))
	case t.Truncated:
		fmt.Fprintln(p.errw, "note: some parts were dropped (over the node's per-task bound)")
	}
}
