package delegate

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/a2aproject/a2a-go/a2a"

	agent "meshtray/a2a"
	"meshtray/jsonout"
)

// The outbound side: delegations this device sent to other
// agents, followed in the node (where the held grants and agent tokens
// are) and shown in one bounded view (GET /a2a/outbound, the tray).

// Defaults and bounds of the outbound view.
const (
	// DefaultMaxOutbound bounds the view; the oldest terminal task goes
	// first, then the oldest one nobody follows (input-required, lost).
	DefaultMaxOutbound = 128
	// DefaultMaxOutboundBytes bounds the parts (artifacts) kept per task;
	// later parts are replaced by a marker and the task marked truncated.
	DefaultMaxOutboundBytes = 1 << 20
	// MaxOutboundArtifacts bounds the artifacts kept per task.
	MaxOutboundArtifacts = 64
	// MaxFileBytes bounds a file sent with a delegation (before base64).
	MaxFileBytes = 512 << 10
	// MaxMessageText bounds the text of a delegation or answer.
	MaxMessageText = 64 << 10
	// maxStatusText bounds the status text kept per task.
	maxStatusText = 4 << 10
	// DefaultMaxFollow bounds how long one exchange (a stream, or polling)
	// follows a task; after it the node stops following and says so.
	DefaultMaxFollow = time.Hour
)

// forgotten is the status text of a task its agent no longer knows.
const forgotten = "the agent no longer knows this task (it restarted?)"

// errFollowLimit ends an exchange that ran for MaxFollow.
var errFollowLimit = errors.New("followed for too long")

// Errors of the outbound view.
var (
	// ErrOutboundNotFound: no outbound task by that id.
	ErrOutboundNotFound = errors.New("a2a: no such outbound task")
	// ErrOutboundState: the task is not in a state for that (answering a
	// task that does not wait for input, canceling a finished one).
	ErrOutboundState = errors.New("a2a: outbound task not in a state for that")
	// ErrOutboundFull: the view holds only live, followed tasks.
	ErrOutboundFull = errors.New("a2a: too many delegations in progress")
)

// MessageInput is the content of a delegation or an answer: text, a JSON
// object as a DataPart, a file as a FilePart (bytes, base64 in JSON); at
// least one.
type MessageInput struct {
	Text string         `json:"text,omitempty"`
	Data map[string]any `json:"data,omitempty"`
	File *FileInput     `json:"file,omitempty"`
}

// FileInput is a file sent inline (FileBytes, A2A 0.3.0 §6.6.2).
type FileInput struct {
	Name     string `json:"name"`
	MimeType string `json:"mime_type,omitempty"` // default: from the name's extension
	Bytes    []byte `json:"bytes"`               // base64 in JSON
}

// message builds the user message of in (no ids but its own messageId).
func (in MessageInput) message() (*a2a.Message, error) {
	var parts []a2a.Part
	if strings.TrimSpace(in.Text) != "" {
		if len(in.Text) > MaxMessageText {
			return nil, fmt.Errorf("%w: the text is over %d bytes", ErrInvalidInput, MaxMessageText)
		}
		if !utf8.ValidString(in.Text) {
			return nil, fmt.Errorf("%w: the text is not UTF-8", ErrInvalidInput)
		}
		parts = append(parts, a2a.TextPart{Text: in.Text})
	}
	if in.Data != nil {
		parts = append(parts, a2a.DataPart{Data: in.Data})
	}
	if f := in.File; f != nil {
		if len(f.Bytes) > MaxFileBytes {
			return nil, fmt.Errorf("%w: the file is %d bytes; at most %d", ErrInvalidInput, len(f.Bytes), MaxFileBytes)
		}
		name := filepath.Base(strings.TrimSpace(f.Name))
		if name == "." || name == "/" {
			name = ""
		}
		mt := f.MimeType
		if mt == "" {
			mt = mime.TypeByExtension(filepath.Ext(name))
		}
		if mt == "" {
			mt = "application/octet-stream"
		}
		parts = append(parts, a2a.FilePart{File: a2a.FileBytes{
			FileMeta: a2a.FileMeta{Name: agent.Truncate(name, 200), MimeType: agent.Truncate(mt, 100)},
			Bytes:    base64.StdEncoding.EncodeToString(f.Bytes),
		}})
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: nothing to send: give text, data or a file", ErrInvalidInput)
	}
	return a2a.NewMessage(a2a.MessageRoleUser, parts...), nil
}

// requestLine is the first line of what was asked, for the view.
func requestLine(in MessageInput) string {
	if line, _, _ := strings.Cut(strings.TrimSpace(in.Text), "\n"); line != "" {
		return agent.Truncate(line, 200)
	}
	if in.Data != nil {
		b, _ := jsonout.Marshal(in.Data)
		return agent.Truncate(string(b), 200)
	}
	if in.File != nil {
		return "[file " + agent.Truncate(filepath.Base(in.File.Name), 100) + "]"
	}
	return ""
}

// DelegateRequest is one delegation (POST /a2a/outbound).
type DelegateRequest struct {
	// Agent names the agent: a device ID (or a prefix of at least
	// MinDevicePrefix characters), an added agent's URL or id, or a name;
	// a reference that could mean two agents is refused (Agents.Get).
	Agent string `json:"agent"`
	MessageInput
	// Stream: nil or true uses message/stream when the agent's card
	// advertises streaming; false (or a card without it) sends message/send
	// with blocking:false and polls tasks/get with backoff.
	Stream *bool `json:"stream,omitempty"`
}

// OutboundTask is one delegated task as the owner sees it. JSON names are
// meshtray's snake_case; parts are A2A wire parts.
type OutboundTask struct {
	// ID is meshtray's short id for the task (commands take it, or the
	// agent's task id).
	ID        string        `json:"id"`
	TaskID    string        `json:"task_id,omitempty"` // the agent's task id ("" until it answered)
	ContextID string        `json:"context_id,omitempty"`
	Agent     string        `json:"agent"` // agent id
	AgentName string        `json:"agent_name"`
	AgentKind AgentKind     `json:"agent_kind"`
	Request   string        `json:"request"` // first line of the request
	State     a2a.TaskState `json:"state"`
	// Message is the text of the task's current status message: the
	// question while input-required, the reason when failed or rejected.
	Message string `json:"message,omitempty"`
	// Error is meshtray's own trouble following the task (contact lost,
	// token refused); the task may still run at the agent. While the
	// agent cannot be reached it is "cannot reach the agent: <why>;
	// trying again at <time of day>".
	Error string `json:"error,omitempty"`
	// RetryAt is when the node tries an agent it cannot reach again (zero
	// when no try is planned); the task is live and followed meanwhile.
	RetryAt   time.Time          `json:"retry_at,omitzero"`
	Following bool               `json:"following"` // a stream or poll loop watches it now
	Streaming bool               `json:"streaming"` // followed with message/stream
	Artifacts []OutboundArtifact `json:"artifacts,omitempty"`
	Truncated bool               `json:"truncated,omitempty"` // parts were dropped (MaxOutbound* bounds)
	Created   time.Time          `json:"created"`
	Updated   time.Time          `json:"updated"`
}

// OutboundArtifact is one artifact a delegated task produced.
type OutboundArtifact struct {
	ID    string           `json:"id"`
	Name  string           `json:"name,omitempty"`
	Parts a2a.ContentParts `json:"parts"`
}

// OutboundEvent is one line of a watch (Outbound.Watch; the NDJSON of
// POST /a2a/outbound and answers): first Task (the task as it is), then
// artifacts (a new one, or new parts of one with Append) and status changes
// as they happen, last Task again with End.
type OutboundEvent struct {
	Task     *OutboundTask     `json:"task,omitempty"`
	State    a2a.TaskState     `json:"state,omitempty"`
	Message  string            `json:"message,omitempty"`
	Artifact *OutboundArtifact `json:"artifact,omitempty"`
	Append   bool              `json:"append,omitempty"`
	// Waiting says the node cannot reach the agent now and when it tries
	// again (the task's Error), each time it begins such a wait; the
	// watch goes on.
	Waiting string `json:"waiting,omitempty"`
	End     bool   `json:"end,omitempty"`
	// Error ends a watch that failed (only in app's NDJSON streams).
	Error string `json:"error,omitempty"`
}

// OutboundOptions configure the view.
type OutboundOptions struct {
	Agents *Agents // required
	// Max bounds the view (default DefaultMaxOutbound).
	Max int
	// MaxBytes bounds the parts kept per task (default
	// DefaultMaxOutboundBytes).
	MaxBytes int64
	// MaxFollow bounds how long one delegation or answer is followed
	// (default DefaultMaxFollow): then the node stops following it, the
	// view says so, and the task may go on at its agent (cancel it there
	// with Cancel). It also bounds how long an agent that cannot be
	// reached is tried again (from the first try).
	MaxFollow time.Duration
	// FollowUpFirst and FollowUpMax pace the tries at an agent that cannot
	// be reached (after a restart, or when contact is lost): the first
	// after FollowUpFirst (default DefaultFollowUpFirst), doubling up to
	// FollowUpMax (default DefaultFollowUpMax), each jittered by ±20%.
	FollowUpFirst, FollowUpMax time.Duration
	// Store keeps the view across restarts (package store's Store; nil:
	// memory only). A change of state or of who follows a task is written
	// before anyone sees it; new artifacts and status texts are written in
	// batches (progressDelay). Restore reads it back at start.
	Store OutboundStore
	// OnChange is called (without locks held) after any change.
	OnChange func()
	Logger   *slog.Logger
	Now      func() time.Time
}

// Outbound runs delegations and keeps the bounded view of them. Each
// delegation is followed on its own goroutine (a stream, or polling) until
// the task is terminal or waits for input; Close stops following (the
// tasks themselves go on at their agents) and waits.
type Outbound struct {
	o   OutboundOptions
	log *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// wmu serializes the changes of entries and their writes to the store:
	// whoever changes an entry holds wmu, then mu. Readers take mu alone,
	// so a slow disk never holds up List or Get. Taken before mu.
	wmu sync.Mutex

	// mu guards every entry and the fields below.
	mu         sync.Mutex
	byID       map[string]*outEntry
	order      []*outEntry // creation order
	closed     bool
	dirty      map[*outEntry]struct{} // changed since written (progress)
	flushTimer *time.Timer            // the next batch write; nil when none is due
}

type outEntry struct {
	view       OutboundTask
	agent      Agent // as resolved at delegation
	wantStream bool
	arts       artifactTracker
	artIdx     map[a2a.ArtifactID]int
	bytes      int64
	changed    chan struct{} // closed at the next change; made on demand
	stored     bool          // written to the store at least once
	final      bool          // written in a terminal state: the store takes no more
	checking   bool          // Following is a follow-up after a restart (an answer waits for it)
}

// NewOutbound returns the outbound view over o.Agents.
func NewOutbound(o OutboundOptions) *Outbound {
	if o.Agents == nil {
		panic("a2a.NewOutbound: Agents is nil")
	}
	if o.Max <= 0 {
		o.Max = DefaultMaxOutbound
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxOutboundBytes
	}
	if o.MaxFollow <= 0 {
		o.MaxFollow = DefaultMaxFollow
	}
	if o.FollowUpFirst <= 0 {
		o.FollowUpFirst = DefaultFollowUpFirst
	}
	if o.FollowUpMax <= 0 {
		o.FollowUpMax = DefaultFollowUpMax
	}
	o.FollowUpMax = max(o.FollowUpMax, o.FollowUpFirst)
	if o.Now == nil {
		o.Now = time.Now
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Outbound{o: o, log: log, ctx: ctx, cancel: cancel, byID: make(map[string]*outEntry), dirty: make(map[*outEntry]struct{})}
}

// Close stops following every task (they go on at their agents, and are
// followed up after a restart), waits for the followers to end and writes
// what is not written yet.
func (o *Outbound) Close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	o.cancel()
	o.wg.Wait()
	o.flush()
}

func (o *Outbound) changed() {
	if o.o.OnChange != nil {
		o.o.OnChange()
	}
}

func (e *outEntry) notifyLocked() {
	if e.changed != nil {
		close(e.changed)
		e.changed = nil
	}
}

func (e *outEntry) snapshotLocked() OutboundTask {
	v := e.view
	v.Artifacts = make([]OutboundArtifact, len(e.view.Artifacts))
	for i, a := range e.view.Artifacts {
		v.Artifacts[i] = OutboundArtifact{ID: a.ID, Name: a.Name, Parts: slices.Clone(a.Parts)}
	}
	if len(v.Artifacts) == 0 {
		v.Artifacts = nil
	}
	return v
}

func newShortID() string {
	var b [5]byte
	rand.Read(b[:])
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// insertLocked adds e, evicting the oldest terminal task, else the oldest
// one nobody follows, to stay within Max.
func (o *Outbound) insertLocked(e *outEntry) error {
	if o.closed {
		return fmt.Errorf("%w: shutting down", agent.ErrUnavailable)
	}
	for len(o.order) >= o.o.Max {
		victim := -1
		for i, x := range o.order {
			if x.view.State.Terminal() && !x.view.Following {
				victim = i
				break
			}
		}
		if victim < 0 {
			for i, x := range o.order {
				if !x.view.Following {
					victim = i
					break
				}
			}
		}
		if victim < 0 {
			return fmt.Errorf("%w: %d delegations are in progress; cancel one or wait", ErrOutboundFull, len(o.order))
		}
		delete(o.byID, o.order[victim].view.ID)
		o.order = slices.Delete(o.order, victim, victim+1)
	}
	for o.byID[e.view.ID] != nil {
		e.view.ID = newShortID()
	}
	o.byID[e.view.ID] = e
	o.order = append(o.order, e)
	return nil
}

func (o *Outbound) removeLocked(e *outEntry) {
	if o.byID[e.view.ID] != e {
		return
	}
	delete(o.byID, e.view.ID)
	if i := slices.Index(o.order, e); i >= 0 {
		o.order = slices.Delete(o.order, i, i+1)
	}
	e.notifyLocked()
}

// Delegate sends a message to an agent and follows the task it starts. It
// returns once the agent answered (the task is known, in whatever state)
// or failed to: an unknown, disabled or unverified agent, an unreachable
// one, a refused token, a malformed answer and a pin mismatch are errors
// (see AgentError). The task is then followed in the node, whatever
// happens to ctx.
func (o *Outbound) Delegate(ctx context.Context, req DelegateRequest) (OutboundTask, error) {
	msg, err := req.message()
	if err != nil {
		return OutboundTask{}, err
	}
	rem, ag, err := o.o.Agents.open(ctx, req.Agent, false)
	if err != nil {
		return OutboundTask{}, err
	}
	want := req.Stream == nil || *req.Stream
	now := o.o.Now()
	e := &outEntry{
		agent:      ag,
		wantStream: want,
		view: OutboundTask{
			ID: newShortID(), Agent: ag.ID, AgentName: rem.name, AgentKind: ag.Kind,
			Request: requestLine(req.MessageInput),
			State:   a2a.TaskStateSubmitted, Message: "sending to " + rem.name,
			Following: true, Streaming: want && rem.card.Streaming,
			Created: now, Updated: now,
		},
	}
	o.mu.Lock()
	err = o.insertLocked(e)
	o.mu.Unlock()
	if err != nil {
		rem.Close()
		return OutboundTask{}, err
	}
	o.changed()
	return o.follow(ctx, e, rem, &a2a.MessageSendParams{Message: msg}, true)
}

// follow runs the exchange on its own goroutine and returns once the first
// event arrived (the entry's snapshot) or the exchange failed before it.
// A new entry whose exchange fails before any event is removed.
func (o *Outbound) follow(ctx context.Context, e *outEntry, rem *remote, params *a2a.MessageSendParams, isNew bool) (OutboundTask, error) {
	first := make(chan error, 1)
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		rem.Close()
		return OutboundTask{}, fmt.Errorf("%w: shutting down", agent.ErrUnavailable)
	}
	o.wg.Add(1)
	stream, id := e.view.Streaming, e.view.ID
	o.mu.Unlock()
	rem.pollTolerance = 1 // a lost agent goes to the follow-up (followUp) at once
	go func() {
		defer o.wg.Done()
		got := false
		err := func() error {
			defer rem.Close()
			fctx, cancel := context.WithTimeoutCause(o.ctx, o.o.MaxFollow, errFollowLimit)
			defer cancel()
			err := rem.exchange(fctx, params, stream, o.log, func(ev a2a.Event) {
				o.apply(e, ev)
				if !got {
					got = true
					first <- nil
				}
			})
			if err != nil && fctx.Err() != nil && errors.Is(context.Cause(fctx), errFollowLimit) {
				err = fmt.Errorf("%w: the node stopped following this task after %s; it may go on at the agent (`meshtray cancel %s` stops it there)",
					errFollowLimit, o.o.MaxFollow, id)
			}
			return err
		}()
		if err == nil || !errors.Is(err, context.Canceled) && !errors.Is(err, errFollowLimit) {
			o.o.Agents.report(e.agent, err)
		}
		if got && transient(err) && o.ctx.Err() == nil {
			// Contact lost (the agent went away, or said it restarts)
			// while the task was live there: followed up as after a
			// restart of this node, tried again with backoff.
			o.log.Info("lost contact with the agent of a delegated task; following it up", "task", id, "agent", e.agent.ID, "err", err)
			o.followUp(e, err)
			return
		}
		o.finish(e, err, got, isNew)
		if !got {
			if err == nil {
				err = rem.classify(errors.New("the agent answered nothing"))
			}
			first <- err
		}
	}()
	select {
	case err := <-first:
		if err != nil {
			return OutboundTask{}, err
		}
		return o.Get(id)
	case <-ctx.Done():
		return OutboundTask{}, ctx.Err()
	}
}

// finish records the end of an exchange.
func (o *Outbound) finish(e *outEntry, err error, got, isNew bool) {
	if !got && isNew {
		o.wmu.Lock()
		o.mu.Lock()
		o.removeLocked(e)
		delete(o.dirty, e)
		o.mu.Unlock()
		o.wmu.Unlock()
		o.changed()
		return
	}
	now := o.o.Now()
	o.commit(e, always, func(e *outEntry) bool {
		e.view.Following, e.checking = false, false
		switch {
		case err == nil:
			e.view.Error = ""
		case errors.Is(err, a2a.ErrTaskNotFound) && e.view.TaskID != "":
			o.forgetLocked(e)
			o.log.Info("delegated task unknown at its agent", "task", e.view.ID, "agent", e.view.Agent)
		case errors.Is(err, context.Canceled) && o.ctx.Err() != nil:
			e.view.Error = "the node stopped following this task (shutting down)"
		case !got:
			// An answer that failed before any event: the task still waits.
			e.view.Error = err.Error()
		default:
			e.view.Error = err.Error()
			o.log.Info("lost track of a delegated task", "task", e.view.ID, "agent", e.view.Agent, "err", err)
		}
		e.view.Updated = now
		return true
	})
}

// forgetLocked ends a task its agent answered "task not found" for (it
// restarted and lost its in-memory tasks, or evicted it): nothing will
// ever move it again.
func (o *Outbound) forgetLocked(e *outEntry) {
	if !e.view.State.Terminal() {
		e.view.State = a2a.TaskStateFailed
		e.view.Message = forgotten
	}
	e.view.Error = ""
}

// apply folds one event of the agent into the entry (a new state is
// written before it is shown, see commit).
func (o *Outbound) apply(e *outEntry, ev a2a.Event) {
	now := o.o.Now()
	o.commit(e, func(cur *outEntry) bool { return newState(cur.view.State, ev) }, func(x *outEntry) bool {
		o.foldLocked(x, ev)
		x.view.Updated = now
		return true
	})
}

// newState reports whether ev moves a task in state cur to another state.
func newState(cur a2a.TaskState, ev a2a.Event) bool {
	var next a2a.TaskState
	switch v := ev.(type) {
	case *a2a.Task:
		next = v.Status.State
	case *a2a.TaskStatusUpdateEvent:
		next = v.Status.State
	case *a2a.Message:
		next = a2a.TaskStateCompleted
	}
	return next != "" && next != cur && !cur.Terminal()
}

// foldLocked folds one event of the agent into e.
func (o *Outbound) foldLocked(e *outEntry, ev a2a.Event) {
	if id := ev.TaskInfo().TaskID; id != "" && e.view.TaskID != "" && string(id) != e.view.TaskID {
		o.log.Debug("event of another task ignored", "task", e.view.ID, "event_task", id)
		return
	}
	onNew := func(a *a2a.Artifact) { o.addArtifactLocked(e, a) }
	onAppend := func(a *a2a.Artifact, parts a2a.ContentParts) { o.appendArtifactLocked(e, a, parts) }
	switch v := ev.(type) {
	case *a2a.Task:
		e.view.TaskID = string(v.ID)
		if v.ContextID != "" {
			e.view.ContextID = v.ContextID
		}
		e.setStatusLocked(v.Status)
		e.arts.snapshot(v, onNew, onAppend)
	case *a2a.TaskStatusUpdateEvent:
		if e.view.TaskID == "" {
			e.view.TaskID = string(v.TaskID)
		}
		if v.ContextID != "" && e.view.ContextID == "" {
			e.view.ContextID = v.ContextID
		}
		e.setStatusLocked(v.Status)
	case *a2a.TaskArtifactUpdateEvent:
		if e.view.TaskID == "" {
			e.view.TaskID = string(v.TaskID)
		}
		e.arts.update(v, onNew, onAppend)
	case *a2a.Message:
		// A direct reply without a task (A2A 0.3.0 §7.1): the exchange is
		// complete; parts other than text are kept as a "reply" artifact.
		if v.ContextID != "" {
			e.view.ContextID = v.ContextID
		}
		e.view.State = a2a.TaskStateCompleted
		e.view.Message = agent.Truncate(agent.MessageText(v), maxStatusText)
		var other a2a.ContentParts
		for _, p := range v.Parts {
			if _, isText := p.(a2a.TextPart); !isText {
				other = append(other, p)
			}
		}
		if len(other) > 0 {
			o.addArtifactLocked(e, &a2a.Artifact{ID: a2a.ArtifactID("reply-" + v.ID), Name: "reply", Parts: other})
		}
	}
}

func (e *outEntry) setStatusLocked(st a2a.TaskStatus) {
	if st.State == "" {
		return
	}
	if e.view.State.Terminal() && st.State != e.view.State {
		return // terminal states are final
	}
	e.view.State = st.State
	e.view.Message = agent.Truncate(agent.MessageText(st.Message), maxStatusText)
	if e.view.Message == "" && st.Message != nil {
		e.view.Message = agent.Truncate(dataText(st.Message.Parts), maxStatusText)
	}
}

// dataText renders data parts as JSON, for a status message without text.
func dataText(ps a2a.ContentParts) string {
	var b strings.Builder
	for _, p := range ps {
		if d, ok := p.(a2a.DataPart); ok {
			j, _ := jsonout.Marshal(d.Data)
			b.Write(j)
		}
	}
	return b.String()
}

// boundPartsLocked keeps parts within the per-task byte bound.
func (o *Outbound) boundPartsLocked(e *outEntry, parts a2a.ContentParts) a2a.ContentParts {
	out := make(a2a.ContentParts, 0, len(parts))
	for _, p := range parts {
		n := agent.PartSize(p)
		if e.bytes+n > o.o.MaxBytes {
			if !e.view.Truncated {
				e.view.Truncated = true
				out = append(out, a2a.TextPart{Text: fmt.Sprintf("[parts dropped: over the %d-byte bound of one outbound task]", o.o.MaxBytes)})
			}
			continue
		}
		e.bytes += n
		out = append(out, p)
	}
	return out
}

func (o *Outbound) addArtifactLocked(e *outEntry, a *a2a.Artifact) {
	if e.artIdx == nil {
		e.artIdx = make(map[a2a.ArtifactID]int)
	}
	parts := o.boundPartsLocked(e, a.Parts)
	if i, ok := e.artIdx[a.ID]; ok { // replaced (append:false on a known id)
		e.view.Artifacts[i].Parts = parts
		return
	}
	if len(e.view.Artifacts) >= MaxOutboundArtifacts {
		e.view.Truncated = true
		return
	}
	e.artIdx[a.ID] = len(e.view.Artifacts)
	e.view.Artifacts = append(e.view.Artifacts, OutboundArtifact{ID: string(a.ID), Name: agent.Truncate(a.Name, 200), Parts: parts})
}

func (o *Outbound) appendArtifactLocked(e *outEntry, a *a2a.Artifact, parts a2a.ContentParts) {
	i, ok := e.artIdx[a.ID]
	if !ok {
		o.addArtifactLocked(e, &a2a.Artifact{ID: a.ID, Name: a.Name, Parts: parts})
		return
	}
	cur := e.view.Artifacts[i].Parts
	e.view.Artifacts[i].Parts = append(cur[:len(cur):len(cur)], o.boundPartsLocked(e, parts)...)
}

// findLocked finds an entry by meshtray id, the agent's task id, or a
// unique prefix (4+ characters) of either.
func (o *Outbound) findLocked(ref string) (*outEntry, error) {
	ref = strings.TrimSpace(ref)
	if e := o.byID[ref]; e != nil {
		return e, nil
	}
	var hits []*outEntry
	for _, e := range o.order {
		if e.view.TaskID == ref && ref != "" {
			return e, nil
		}
		if len(ref) >= 4 && (strings.HasPrefix(e.view.ID, ref) || strings.HasPrefix(e.view.TaskID, ref)) {
			hits = append(hits, e)
		}
	}
	if len(hits) == 1 {
		return hits[0], nil
	}
	if len(hits) > 1 {
		return nil, fmt.Errorf("%w: %q matches %d outbound tasks; give more of the id", ErrInvalidInput, agent.Truncate(ref, 64), len(hits))
	}
	return nil, fmt.Errorf("%w: %q (see `meshtray outbound`)", ErrOutboundNotFound, agent.Truncate(ref, 64))
}

// Get returns one task of the view.
func (o *Outbound) Get(ref string) (OutboundTask, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e, err := o.findLocked(ref)
	if err != nil {
		return OutboundTask{}, err
	}
	return e.snapshotLocked(), nil
}

// List returns the view, oldest first.
func (o *Outbound) List() []OutboundTask {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]OutboundTask, 0, len(o.order))
	for _, e := range o.order {
		out = append(out, e.snapshotLocked())
	}
	return out
}

// Live counts the tasks that are not terminal.
func (o *Outbound) Live() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, e := range o.order {
		if !e.view.State.Terminal() {
			n++
		}
	}
	return n
}

// Answer answers a task that waits for input (input-required or
// auth-required) with message/send on the same taskId, and follows it
// again. It returns once the agent answered, like Delegate. A task being
// followed up after a restart (Restore) is answered once that follow-up
// has read it from the agent (one tasks/get).
func (o *Outbound) Answer(ctx context.Context, ref string, in MessageInput) (OutboundTask, error) {
	msg, err := in.message()
	if err != nil {
		return OutboundTask{}, err
	}
	o.wmu.Lock()
	o.mu.Lock()
	e, err := o.findLocked(ref)
	if err != nil {
		o.mu.Unlock()
		o.wmu.Unlock()
		return OutboundTask{}, err
	}
	for e.checking && agent.Interrupted(e.view.State) {
		// A follow-up after a restart is asking the agent about the
		// question: wait for its answer (one tasks/get).
		ch := e.waitLocked()
		o.mu.Unlock()
		o.wmu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return OutboundTask{}, ctx.Err()
		}
		o.wmu.Lock()
		o.mu.Lock()
		if o.byID[e.view.ID] != e {
			id := e.view.ID
			o.mu.Unlock()
			o.wmu.Unlock()
			return OutboundTask{}, fmt.Errorf("%w: %s left the view", ErrOutboundNotFound, id)
		}
	}
	st, following := e.view.State, e.view.Following
	if !agent.Interrupted(st) || following || e.view.TaskID == "" {
		id := e.view.ID
		o.mu.Unlock()
		o.wmu.Unlock()
		if following && !agent.Interrupted(st) {
			return OutboundTask{}, fmt.Errorf("%w: task %s is %s; answer it when it asks (input-required)", ErrOutboundState, id, st)
		}
		return OutboundTask{}, fmt.Errorf("%w: task %s is %s; only a task asking for input (input-required) takes an answer", ErrOutboundState, id, st)
	}
	// Reserve it (one answer at a time); in memory only: what the agent
	// answers is written.
	e.view.Following = true
	agentID, taskID, ctxID, want := e.agent.ID, e.view.TaskID, e.view.ContextID, e.wantStream
	o.mu.Unlock()
	o.wmu.Unlock()

	rem, _, err := o.o.Agents.open(ctx, agentID, false)
	if err != nil {
		o.edit(e, func(e *outEntry) { e.view.Following = false })
		return OutboundTask{}, err
	}
	msg.TaskID, msg.ContextID = a2a.TaskID(taskID), ctxID
	o.edit(e, func(e *outEntry) {
		e.view.Streaming = want && rem.card.Streaming
		e.view.Error = ""
	})
	return o.follow(ctx, e, rem, &a2a.MessageSendParams{Message: msg}, false)
}

// Cancel asks the agent to cancel the task (tasks/cancel) and returns the
// task as the agent then reports it. A disabled agent is still reached for
// a cancel. An agent that no longer knows the task (-32001) ends it
// failed, "the agent no longer knows this task (it restarted?)"; so does
// a tasks/get or an answer that gets that error.
func (o *Outbound) Cancel(ctx context.Context, ref string) (OutboundTask, error) {
	o.mu.Lock()
	e, err := o.findLocked(ref)
	if err != nil {
		o.mu.Unlock()
		return OutboundTask{}, err
	}
	st, taskID, agentID, id := e.view.State, e.view.TaskID, e.agent.ID, e.view.ID
	o.mu.Unlock()
	switch {
	case st.Terminal():
		return OutboundTask{}, fmt.Errorf("%w: task %s is already %s", ErrOutboundState, id, st)
	case taskID == "":
		return OutboundTask{}, fmt.Errorf("%w: task %s has no task id at the agent yet (it did not answer); try again", ErrOutboundState, id)
	}
	rem, _, err := o.o.Agents.open(ctx, agentID, true)
	if err != nil {
		return OutboundTask{}, err
	}
	t, err := rem.cancel(ctx, a2a.TaskID(taskID))
	rem.Close()
	if err != nil {
		switch {
		case errors.Is(err, a2a.ErrTaskNotFound):
			now := o.o.Now()
			o.commit(e, always, func(e *outEntry) bool {
				o.forgetLocked(e)
				e.view.Updated = now
				return true
			})
			o.log.Info("canceled task unknown at its agent", "task", id, "agent", agentID)
			return o.Get(id)
		case errors.Is(err, a2a.ErrTaskNotCancelable):
			return OutboundTask{}, fmt.Errorf("%w: %v", ErrOutboundState, err)
		}
		return OutboundTask{}, err
	}
	if t.ID == "" {
		t.ID = a2a.TaskID(taskID)
	}
	o.apply(e, t)
	o.log.Info("delegated task canceled", "task", id, "agent", agentID, "state", t.Status.State)
	return o.Get(id)
}

// Watch calls fn with the task's events (see OutboundEvent) until nobody
// follows it any more (it is terminal, waits for input, or the node gave
// up on it; an agent that cannot be reached and is tried again keeps the
// watch open), ctx ends, or fn fails. The last event carries the task with End.
func (o *Outbound) Watch(ctx context.Context, ref string, fn func(OutboundEvent) error) error {
	o.mu.Lock()
	e, err := o.findLocked(ref)
	if err != nil {
		o.mu.Unlock()
		return err
	}
	snap, ch := e.snapshotLocked(), e.waitLocked()
	o.mu.Unlock()
	first := snap
	if err := fn(OutboundEvent{Task: &first}); err != nil {
		return err
	}
	sent := make(map[string]int, len(snap.Artifacts))
	for _, a := range snap.Artifacts {
		sent[a.ID] = len(a.Parts)
	}
	state, msg, retry := snap.State, snap.Message, snap.RetryAt
	for {
		if !snap.Following && snap.RetryAt.IsZero() {
			return fn(OutboundEvent{Task: &snap, End: true})
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
		o.mu.Lock()
		if o.byID[snap.ID] != e {
			o.mu.Unlock()
			return fmt.Errorf("%w: %s left the view", ErrOutboundNotFound, snap.ID)
		}
		snap, ch = e.snapshotLocked(), e.waitLocked()
		o.mu.Unlock()
		for _, a := range snap.Artifacts {
			n, ok := sent[a.ID]
			switch {
			case !ok:
				if err := fn(OutboundEvent{Artifact: &a}); err != nil {
					return err
				}
			case len(a.Parts) > n:
				if err := fn(OutboundEvent{Artifact: &OutboundArtifact{ID: a.ID, Name: a.Name, Parts: a.Parts[n:]}, Append: true}); err != nil {
					return err
				}
			}
			sent[a.ID] = len(a.Parts)
		}
		if snap.State != state || snap.Message != msg {
			state, msg = snap.State, snap.Message
			if err := fn(OutboundEvent{State: state, Message: msg}); err != nil {
				return err
			}
		}
		if !snap.RetryAt.Equal(retry) {
			retry = snap.RetryAt
			if !retry.IsZero() {
				if err := fn(OutboundEvent{Waiting: snap.Error}); err != nil {
					return err
				}
			}
		}
	}
}

func (e *outEntry) waitLocked() <-chan struct{} {
	if e.changed == nil {
		e.changed = make(chan struct{})
	}
	return e.changed
}
