package app

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	agent "meshtray/a2a"
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
1 when the delegation could not be sent or the node lost track of the task,
4 when no node runs.`

func (c *cli) agentsCommand() *cobra.Command {
	var refresh bool
	list := func(cmd *cobra.Command, _ []string) error {
		var as []agent.Agent
		path := "/a2a/agents"
		if refresh {
			path += "?refresh=1"
		}
		if err := c.call(cmd, http.MethodGet, path, nil, &as); err != nil {
			return err
		}
		if c.asJSON {
			return c.printJSON(as)
		}
		c.printAgents(as)
		return nil
	}
	cmd := &cobra.Command{
		Use:   "agents [list|add|rm|enable|disable|refresh]",
		Short: "The agents this device delegates to: paired devices that publish A2A, and agents added by URL",
		Long: `Paired devices that publish their A2A agent card are agents with no extra
step: this device calls them over their pinned certificate with the grant they
gave it. Other A2A agents (LangGraph, ADK, another meshtray you did not pair
with, ...) are added by URL: their Agent Card is fetched and verified first,
their token kept in the OS keychain. A card that no longer verifies marks the
agent invalid and it is not used until a refresh verifies it again.`,
		Args: noArgs,
		RunE: list,
	}
	cmd.Flags().BoolVar(&refresh, "refresh", false, "fetch and verify every card again first")
	c.jsonFlag(cmd)
	ls := &cobra.Command{Use: "list", Short: "List the agents (the default)", Args: noArgs, RunE: list}
	ls.Flags().BoolVar(&refresh, "refresh", false, "fetch and verify every card again first")
	c.jsonFlag(ls)

	var tokenStdin bool
	add := &cobra.Command{
		Use:   "add URL [--token-stdin]",
		Short: "Add an A2A agent by URL (its card is fetched and verified before anything is stored)",
		Long: `Add an A2A agent by its base URL (the card is read from
/.well-known/agent-card.json below it) or by its card's URL. The URL must be
https, or http to a loopback or tailnet address. With --token-stdin the first
line of stdin is the bearer token, kept in the OS keychain (never in a file,
never shown again). Adding a URL again refreshes it (and replaces the token
when one is given).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := AgentRequest{URL: args[0]}
			if tokenStdin {
				tok, err := readSecretLine(c.opts.Stdin, "token")
				if err != nil {
					return err
				}
				req.Token = tok
			}
			var a agent.Agent
			if err := c.call(cmd, http.MethodPost, "/a2a/agents", req, &a); err != nil {
				return err
			}
			if c.asJSON {
				return c.printJSON(a)
			}
			fmt.Fprintf(c.opts.Stdout, "added %s (%s): %s\n", a.ID, oneLine(a.Name, 64), a.Status)
			return nil
		},
	}
	add.Flags().BoolVar(&tokenStdin, "token-stdin", false, "read the agent's bearer token from the first line of stdin")
	c.jsonFlag(add)

	rm := &cobra.Command{
		Use:   "rm ID",
		Short: "Remove an added agent and its token (a paired device is an agent while paired: disable it)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := c.call(cmd, http.MethodDelete, "/a2a/agents/"+pathEscape(args[0]), nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(c.opts.Stdout, "removed %s\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(ls, add, rm)
	for _, action := range []string{"enable", "disable"} {
		cmd.AddCommand(&cobra.Command{
			Use:   action + " ID",
			Short: map[string]string{"enable": "Use an agent again", "disable": "Stop using an agent (kept, not called)"}[action],
			Args:  exactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				var a agent.Agent
				if err := c.call(cmd, http.MethodPost, "/a2a/agents/"+pathEscape(args[0]), AgentUpdate{Action: action}, &a); err != nil {
					return err
				}
				fmt.Fprintf(c.opts.Stdout, "%s (%s): %s\n", a.ID, oneLine(a.Name, 64), a.Status)
				return nil
			},
		})
	}
	refreshCmd := &cobra.Command{
		Use:   "refresh [ID]",
		Short: "Fetch and verify an agent's card again (every agent's without ID)",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError{errors.New("at most one agent")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				refresh = true
				return list(cmd, nil)
			}
			var a agent.Agent
			if err := c.call(cmd, http.MethodPost, "/a2a/agents/"+pathEscape(args[0]), AgentUpdate{Action: "refresh"}, &a); err != nil {
				return err
			}
			if c.asJSON {
				return c.printJSON(a)
			}
			c.printAgents([]agent.Agent{a})
			if !a.Ready() {
				return &exitError{code: ExitError}
			}
			return nil
		},
	}
	c.jsonFlag(refreshCmd)
	cmd.AddCommand(refreshCmd)
	return cmd
}

func (c *cli) printAgents(as []agent.Agent) {
	if len(as) == 0 {
		fmt.Fprintln(c.opts.Stdout, "no agents: pair a device that publishes A2A (`meshtray pair`), or add one with `meshtray agents add URL`")
		return
	}
	w := c.table()
	fmt.Fprintln(w, "ID\tKIND\tNAME\tSTATUS\tSTREAMING\tSKILLS\tURL")
	for _, a := range as {
		id := a.ID
		if a.Kind == agent.AgentPeer {
			id = shortID(a.ID)
		}
		streaming, skills := "-", "-"
		if a.Card != nil {
			streaming, skills = yesNo(a.Card.Streaming), fmt.Sprint(len(a.Card.Skills))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", id, a.Kind, oneLine(a.Name, 64), a.Status, streaming, skills, oneLine(a.URL, 80))
		if a.Problem != "" {
			fmt.Fprintf(w, "\t\t\t\t\t\t↳ %s\n", oneLine(a.Problem, 120))
		}
	}
	w.Flush()
}

// readSecretLine reads the first line of r (a token piped in).
// readSecretLine reads the first line of r (a secret kept out of argv,
// where other users of the machine see it in ps); what names it in the
// error when there is none.
func readSecretLine(r io.Reader, what string) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(r, agent.MaxTokenLen+2)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	line = strings.TrimSpace(line)
	if line == "" {
		return "", usageError{fmt.Errorf("no %s on stdin", what)}
	}
	return line, nil
}

// messageFlags are the content flags of delegate and answer.
type messageFlags struct {
	data   string
	file   string
	detach bool
}

func (m *messageFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&m.data, "data", "", `a JSON object sent as a data part, e.g. '{"capability":"device.info"}'`)
	f.StringVar(&m.file, "file", "", fmt.Sprintf("a file sent inline as a file part (at most %d KiB)", agent.MaxFileBytes>>10))
	f.BoolVar(&m.detach, "detach", false, "print the task once the agent took it and exit (it goes on in the node; see: meshtray outbound)")
}

func (m *messageFlags) input(text string) (agent.MessageInput, error) {
	in := agent.MessageInput{Text: text}
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
		b, err := io.ReadAll(io.LimitReader(f, agent.MaxFileBytes+1))
		if err != nil {
			return in, err
		}
		if len(b) > agent.MaxFileBytes {
			return in, usageError{fmt.Errorf("--file %s is over %d KiB", m.file, agent.MaxFileBytes>>10)}
		}
		in.File = &agent.FileInput{Name: m.file, Bytes: b}
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
			req := DelegateRequest{DelegateRequest: agent.DelegateRequest{Agent: args[0], MessageInput: in, Stream: &stream}, Detach: mf.detach}
			return c.followRequest(cmd, http.MethodPost, "/a2a/outbound", req, mf.detach)
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
			return c.followRequest(cmd, http.MethodPost, "/a2a/outbound/"+pathEscape(args[0])+"/answer",
				AnswerRequest{MessageInput: in, Detach: mf.detach}, mf.detach)
		},
	}
	mf.add(cmd)
	c.jsonFlag(cmd)
	return cmd
}

func (c *cli) cancelCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cancel TASK",
		Short: "Cancel a delegated task at its agent (the work stops there)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var t agent.OutboundTask
			if err := c.call(cmd, http.MethodPost, "/a2a/outbound/"+pathEscape(args[0])+"/cancel", nil, &t); err != nil {
				return err
			}
			if c.asJSON {
				return c.printJSON(t)
			}
			fmt.Fprintf(c.opts.Stdout, "task %s at %s: %s\n", t.ID, oneLine(t.AgentName, 64), t.State)
			return nil
		},
	}
	c.jsonFlag(cmd)
	return cmd
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
			if len(args) == 0 {
				var ts []agent.OutboundTask
				if err := c.call(cmd, http.MethodGet, "/a2a/outbound", nil, &ts); err != nil {
					return err
				}
				if c.asJSON {
					return c.printJSON(ts)
				}
				c.printOutbound(ts)
				return nil
			}
			if follow {
				return c.followRequest(cmd, http.MethodGet, "/a2a/outbound/"+pathEscape(args[0])+"?watch=1", nil, false)
			}
			var t agent.OutboundTask
			if err := c.call(cmd, http.MethodGet, "/a2a/outbound/"+pathEscape(args[0]), nil, &t); err != nil {
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

func (c *cli) printTaskDetail(t agent.OutboundTask) {
	w := c.table()
	fmt.Fprintf(w, "task\t%s (at the agent: %s)\n", t.ID, t.TaskID)
	fmt.Fprintf(w, "agent\t%s (%s %s)\n", oneLine(t.AgentName, 64), t.AgentKind, shortID(t.Agent))
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

func (c *cli) printOutbound(ts []agent.OutboundTask) {
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

// followRequest sends a request whose answer is an NDJSON stream of
// agent.OutboundEvent (or, detached, one agent.OutboundTask), prints it,
// and exits with the task's final state.
func (c *cli) followRequest(cmd *cobra.Command, method, path string, body any, detach bool) error {
	cl, err := c.dial()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, cl.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+cl.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := cl.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w (%v; state dir %s)", ErrNotRunning, err, cl.StateDir)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		return &APIError{Status: resp.StatusCode, Message: e.Error}
	}
	if detach {
		var t agent.OutboundTask
		if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&t); err != nil {
			return fmt.Errorf("the node's answer: %w", err)
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
	p := newTaskPrinter(c.opts.Stdout, c.opts.Stderr, tty)
	defer p.finish()
	enc := json.NewEncoder(c.opts.Stdout)
	enc.SetEscapeHTML(false)
	dec := json.NewDecoder(resp.Body)
	var last *agent.OutboundTask
	for {
		var ev agent.OutboundEvent
		if err := dec.Decode(&ev); err != nil {
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
			if err := enc.Encode(ev); err != nil {
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
func exitFor(t *agent.OutboundTask) error {
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

func (p *taskPrinter) event(ev agent.OutboundEvent) {
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
	case ev.End && ev.Task != nil:
		p.task(*ev.Task)
		p.end(*ev.Task)
	}
}

func (p *taskPrinter) header(t agent.OutboundTask) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
	p.id = t.ID
	fmt.Fprintf(p.errw, "→ %s: task %s\n", oneLine(t.AgentName, 64), t.ID)
}

// task prints what a snapshot adds: artifacts not printed, a new state.
func (p *taskPrinter) task(t agent.OutboundTask) {
	p.mu.Lock()
	for _, a := range t.Artifacts {
		n := p.printed[a.ID]
		switch {
		case n == 0 && len(a.Parts) > 0:
			p.artifactLocked(a, false)
		case len(a.Parts) > n:
			p.artifactLocked(agent.OutboundArtifact{ID: a.ID, Name: a.Name, Parts: a.Parts[n:]}, true)
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

func (p *taskPrinter) artifactLocked(a agent.OutboundArtifact, appended bool) {
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

// indentJSON is v as indented JSON for a person: "<", ">" and "&" as
// they are (encoding/json would write \u003c).
func indentJSON(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(b.String(), "\n")
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
func (p *taskPrinter) end(t agent.OutboundTask) {
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

func (c *cli) forwardCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "forward [status|token|clear|check]",
		Short: "The forward executor: approved tasks relayed to a local A2A agent (a2a.forward in config.toml)",
		Long: `With a2a.forward.url set in config.toml, approved incoming A2A tasks go to that
agent instead of this device's capabilities: meshtray is the consent layer in
front of it. ` + "`meshtray forward token`" + ` reads the agent's bearer token from the first
line of stdin and keeps it in the OS keychain (preferred over a2a.forward.token
in the config file); ` + "`clear`" + ` removes it; ` + "`check`" + ` fetches and verifies its card now.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError{errors.New("at most one action")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			action := "status"
			if len(args) == 1 {
				action = args[0]
			}
			var v ForwardView
			switch action {
			case "status":
				if err := c.call(cmd, http.MethodGet, "/a2a/forward", nil, &v); err != nil {
					return err
				}
			case "check":
				if err := c.call(cmd, http.MethodPost, "/a2a/forward/check", nil, &v); err != nil {
					return err
				}
			case "token":
				tok, err := readSecretLine(c.opts.Stdin, "token")
				if err != nil {
					return err
				}
				if err := c.call(cmd, http.MethodPost, "/a2a/forward", map[string]string{"token": tok}, nil); err != nil {
					return err
				}
				fmt.Fprintln(c.opts.Stdout, "forward token kept in the keychain")
				return nil
			case "clear":
				if err := c.call(cmd, http.MethodDelete, "/a2a/forward", nil, nil); err != nil {
					return err
				}
				fmt.Fprintln(c.opts.Stdout, "forward token removed")
				return nil
			default:
				return usageError{fmt.Errorf("forward %q: want status, token, clear or check", action)}
			}
			if c.asJSON {
				return c.printJSON(v)
			}
			if !v.Configured {
				fmt.Fprintln(c.opts.Stdout, "forwarding off: approved tasks run on this device's capabilities (set a2a.forward.url in config.toml)")
				return nil
			}
			fmt.Fprintf(c.opts.Stdout, "forwarding approved tasks to %s (token: %s)\n", v.URL, v.TokenSource)
			if st := v.Status; st != nil {
				switch {
				case st.Ready:
					fmt.Fprintf(c.opts.Stdout, "agent %q verified %s\n", st.Agent, ago(st.Checked))
				case st.Problem != "":
					fmt.Fprintf(c.opts.Stdout, "problem: %s\n", oneLine(st.Problem, 300))
				default:
					fmt.Fprintln(c.opts.Stdout, "not checked yet (its card is fetched at the first task; `meshtray forward check`)")
				}
			}
			return nil
		},
	}
	c.jsonFlag(cmd)
	return cmd
}
