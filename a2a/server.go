package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"

	"meshtray/nodes"
	"meshtray/pairing"
)

// Defaults of Options.
const (
	DefaultMaxTasks             = 512
	DefaultMaxLiveTasksPerOwner = 16
	DefaultMaxParkedPerOwner    = 16
	DefaultMaxBodyBytes         = 1 << 20  // 1 MiB per request
	DefaultMaxStoredBytes       = 64 << 20 // caller messages kept in the store
	DefaultMaxTurns             = 32
	DefaultMaxSubscribers       = 8
	DefaultMaxArtifacts         = 64
	DefaultMaxArtifactBytes     = 8 << 20 // artifact parts of one task
	DefaultCancelWait           = 5 * time.Second
	DefaultKeepAlive            = 15 * time.Second
	DefaultInterruptedTTL       = 10 * time.Minute
	DefaultApprovalTimeout      = 2 * time.Minute
)

// ManifestSource gives the node manifest the Agent Card's skills are
// derived from; *nodes.Registry is one.
type ManifestSource interface {
	Manifest() nodes.Manifest
}

// Options configure a Server. Zero values take the defaults above.
type Options struct {
	// DeviceName is this device's name: the card's name and the "waiting
	// for approval on <device>" status text.
	DeviceName string
	// OSEnvironment is the OS environment string, e.g. "Debian GNU/Linux 12
	// (x86_64)", shown in the card's description.
	OSEnvironment string
	// Version is the meshtray version, the card's version.
	Version string
	// Executor runs approved tasks. Required.
	Executor Executor
	// Approver decides on every new task. nil refuses every task ("no
	// approver configured"): nothing runs without a decision.
	Approver Approver
	// Manifest feeds the card's skills; nil means no skills.
	Manifest ManifestSource
	// Store keeps the tasks across restarts (a *store.Store; see
	// TaskStore for what is written when, and Restore for what a start
	// does with them). nil keeps them in memory only.
	Store TaskStore
	// ApprovalTimeout is how long a new task waits for its approval
	// (default 2 min): TaskApproval.Deadline is its creation plus this,
	// and it is stored, so a task restored waiting for approval keeps it.
	ApprovalTimeout time.Duration
	// SignCard, when set, signs the card JSON before it is served (A2A
	// 1.0 §8.4; app passes cardsig.Signer with the device identity). An
	// error is logged and the card served unsigned.
	SignCard func(card []byte) ([]byte, error)

	// MaxTasks bounds the store (default 512): a new task evicts the oldest
	// terminal task; when every stored task is live it is refused with
	// CodeStoreFull. A live task is never evicted.
	MaxTasks int
	// MaxLiveTasksPerOwner bounds the running tasks of one owner: live
	// tasks not waiting for their caller (default 16). More are refused
	// with CodeLiveTaskLimit, and so is the answer that would resume a
	// parked task while the owner is at the bound.
	MaxLiveTasksPerOwner int
	// MaxParkedPerOwner bounds, apart from the running ones, the tasks of
	// one owner that wait for their caller (input-required,
	// auth-required; default 16). When one more would wait, the oldest
	// waiting one ends canceled, its status message saying why: a caller
	// that leaves questions unanswered never locks its own grant out.
	MaxParkedPerOwner int
	// MaxBodyBytes bounds one request body (default 1 MiB); a larger body
	// is answered -32600.
	MaxBodyBytes int64
	// MaxStoredBytes bounds the bytes the whole store keeps: caller
	// messages and artifacts (default 64 MiB). Terminal tasks are evicted
	// to stay under it; when live tasks alone would exceed it, new
	// messages are refused with CodeStoreFull and new artifact parts are
	// dropped (Execution.Artifact, AppendArtifact).
	MaxStoredBytes int64
	// MaxTurns bounds the executor turns of one task (default 32); a
	// further message is refused with CodeUnavailable.
	MaxTurns int
	// MaxSubscribers bounds the open streams of one task (default 8).
	MaxSubscribers int
	// MaxArtifacts bounds the artifacts of one task (default 64).
	MaxArtifacts int
	// MaxArtifactBytes bounds the artifact parts of one task, appended
	// chunks included (default 8 MiB; text and file bytes as sent, data
	// parts as JSON). Artifact bytes also count toward MaxStoredBytes.
	MaxArtifactBytes int64
	// CancelWait is how long tasks/cancel waits for the executor to stop
	// (default 5 s) before reporting the task canceled anyway.
	CancelWait time.Duration
	// KeepAlive is the interval of SSE comment lines on an idle stream
	// (default 15 s), so proxies keep a stream waiting for approval open.
	KeepAlive time.Duration
	// InterruptedTTL is how long a task may wait for its caller
	// (input-required, auth-required) before it ends canceled with "no
	// answer within <TTL>" (default 10 min): a waiting task holds one of
	// its owner's MaxParkedPerOwner slots.
	InterruptedTTL time.Duration
	// RequirePublished makes the JSON-RPC endpoint follow the publish
	// switch (SetPublished), like the Agent Card: while unpublished,
	// ServeHTTP answers a plain 404, as for a path that does not exist, and
	// switching off cancels every live task ("A2A switched off by the
	// owner"). Without it, publishing only shows or hides the card.
	RequirePublished bool
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Server is meshtray's A2A JSON-RPC server (1.0 and 0.3) and task engine: it serves
// POST /a2a/v1 (ServeHTTP) and the Agent Card (CardHandler), keeps the
// bounded in-memory task store, asks the Approver about every new task and
// runs approved ones on the Executor.
//
// Ownership: every task belongs to the Principal.Owner() that created it;
// every method answers -32001 for a task of another owner, exactly as for
// an unknown one. contextIds are the caller's: the engine keys them by
// (owner, contextId), so two callers using the same contextId never share
// a context, while each sees its own id on the wire.
type Server struct {
	opts Options
	log  *slog.Logger

	published atomic.Bool

	// mu protects the fields below it.
	mu          sync.Mutex
	tasks       map[a2a.TaskID]*task
	terminal    []*task // terminal tasks, oldest first, from terminalHead
	termHead    int
	live        int
	liveByOwner map[string]int     // live tasks not parked, per owner
	parked      map[string][]*task // parked tasks per owner, oldest first
	bytes       int64
	closed      bool
	inflight    int           // requests and turns running
	idle        chan struct{} // closed when closed && inflight == 0

	restoredOnce bool // Restore ran

	shutdown chan struct{} // closed by Shutdown

	// db is Options.Store (nil: memory only); pq its write-behind queue.
	// frozen is set when Shutdown begins: from then on nothing is written,
	// so what Shutdown does to the tasks (cancel) is not what a restart
	// finds (the tasks as they were, like after a kill).
	db     TaskStore
	pq     persister
	frozen atomic.Bool
	// dbFailed is set once a write failed with store.ErrFailed (the store
	// takes none any more): new tasks and answers are refused.
	dbFailed atomic.Bool
}

var (
	errCanceledByCaller = errors.New("canceled by the caller")
	errShuttingDown     = errors.New(ShutdownText)
	errSwitchedOff      = errors.New("A2A switched off by the owner")
	errDatabaseFailed   = errors.New("this device cannot write its task database; its owner restarts meshtray")
)

// ErrSwitchedOff and ErrCanceledByCaller are the causes (context.Cause)
// of the ctx of a turn (an approval included) that the owner's A2A switch
// (SetPublished false, with Options.RequirePublished) or the caller's
// tasks/cancel stopped.
var (
	ErrSwitchedOff      = errSwitchedOff
	ErrCanceledByCaller = errCanceledByCaller
)

// ErrShutdown is the cause (context.Cause) of the ctx of a turn that
// Shutdown stopped. With Options.Store the task outlives the node
// (Restore): an executor then leaves work running elsewhere (an upstream
// agent's task) as it is, where another cause would cancel it.
var ErrShutdown = errShuttingDown

// NewServer returns a Server; Options.Executor is required.
func NewServer(opts Options) *Server {
	if opts.Executor == nil {
		panic("a2a.NewServer: Options.Executor is nil")
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&opts.MaxTasks, DefaultMaxTasks)
	def(&opts.MaxLiveTasksPerOwner, DefaultMaxLiveTasksPerOwner)
	def(&opts.MaxParkedPerOwner, DefaultMaxParkedPerOwner)
	def(&opts.MaxTurns, DefaultMaxTurns)
	def(&opts.MaxSubscribers, DefaultMaxSubscribers)
	def(&opts.MaxArtifacts, DefaultMaxArtifacts)
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxStoredBytes <= 0 {
		opts.MaxStoredBytes = DefaultMaxStoredBytes
	}
	if opts.MaxArtifactBytes <= 0 {
		opts.MaxArtifactBytes = DefaultMaxArtifactBytes
	}
	if opts.CancelWait <= 0 {
		opts.CancelWait = DefaultCancelWait
	}
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = DefaultKeepAlive
	}
	if opts.InterruptedTTL <= 0 {
		opts.InterruptedTTL = DefaultInterruptedTTL
	}
	if opts.ApprovalTimeout <= 0 {
		opts.ApprovalTimeout = DefaultApprovalTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		opts:        opts,
		log:         log,
		tasks:       make(map[a2a.TaskID]*task),
		liveByOwner: make(map[string]int),
		parked:      make(map[string][]*task),
		idle:        make(chan struct{}),
		shutdown:    make(chan struct{}),
		db:          opts.Store,
	}
	if s.db != nil {
		s.startPersister()
	}
	return s
}

func (s *Server) now() time.Time { return s.opts.Now() }

// Status is the server's state for the local control surface.
type Status struct {
	Published bool `json:"published"`
	LiveTasks int  `json:"live_tasks"`
}

// unpublished reports whether the endpoint answers 404 (RequirePublished and
// unpublished).
func (s *Server) unpublished() bool { return s.opts.RequirePublished && !s.published.Load() }

// Gate wraps h, the middleware in front of this server (authentication),
// with the same 404 as ServeHTTP while the endpoint is closed: a caller
// without a token cannot tell a device that switched A2A off from one that
// never spoke it (a 401 challenge would say "an agent lives here").
func (s *Server) Gate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.unpublished() {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Status reports whether the card is published and how many tasks are live.
func (s *Server) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Status{Published: s.published.Load(), LiveTasks: s.live}
}

// SetPublished turns the Agent Card on or off. Publishing is not
// authorizing: the JSON-RPC endpoint stays behind the auth middleware
// either way. With Options.RequirePublished, switching off also closes the
// endpoint (404) and cancels every live task with "A2A switched off by the
// owner", waiting for running turns as CancelOwner does.
func (s *Server) SetPublished(on bool) {
	// Under mu, so a task admitted after this point sees the switch
	// (admitLocked) and one admitted before is in the store to cancel.
	s.mu.Lock()
	s.published.Store(on)
	s.mu.Unlock()
	if !on && s.opts.RequirePublished {
		if n := s.cancelWhere(func(*task) bool { return true }, errSwitchedOff); n > 0 {
			s.log.Info("A2A switched off: live tasks canceled", "tasks", n)
		}
	}
}

// CancelOwner ends every live task of owner (a pairing.Principal.Owner(),
// the grant ID) with a final canceled status carrying reason ("canceled by
// the owner of this device" when empty), and returns how many it ended.
// A task waiting for approval has its approval's ctx canceled (the
// approvals queue withdraws it); a running executor has its ctx canceled;
// an input-required task ends at once. Their streams get the final event
// and close. Like tasks/cancel it waits for running turns to stop, at most
// Options.CancelWait, and ends a turn that has not stopped by then anyway
// (its late reports are dropped). For app: a grant revoked or paused.
func (s *Server) CancelOwner(owner, reason string) int {
	if reason == "" {
		reason = "canceled by the owner of this device"
	}
	return s.cancelWhere(func(t *task) bool { return t.owner == owner }, errors.New(reason))
}

// CancelTask ends the live task id, whoever's it is, as CancelOwner ends
// an owner's (a final canceled status carrying reason); false when no live
// task has that id. For app: the owner canceling an incoming transfer.
func (s *Server) CancelTask(id a2a.TaskID, reason string) bool {
	return s.cancelWhere(func(t *task) bool { return t.id == id }, errors.New(reason)) > 0
}

// cancelWhere cancels every live task match selects with cause and waits
// for their running turns (at most CancelWait in all); it returns how many
// live tasks it ended.
func (s *Server) cancelWhere(match func(*task) bool, cause error) int {
	s.mu.Lock()
	var ts []*task
	for _, t := range s.tasks {
		if match(t) {
			ts = append(ts, t)
		}
	}
	s.mu.Unlock()
	type turn struct {
		t    *task
		done <-chan struct{}
	}
	var running []turn
	n := 0
	for _, t := range ts {
		live, done := s.cancelTask(t, cause)
		if live {
			n++
		}
		if done != nil {
			running = append(running, turn{t, done})
		}
	}
	if len(running) == 0 {
		return n
	}
	timer := time.NewTimer(s.opts.CancelWait)
	defer timer.Stop()
	expired := false
	for _, r := range running {
		if !expired {
			select {
			case <-r.done:
				continue
			case <-timer.C:
				expired = true
			}
		}
		select {
		case <-r.done:
		default:
			s.log.Warn("executor did not stop after cancel", "task", r.t.id, "waited", s.opts.CancelWait)
			s.settle(r.t, a2a.TaskStateCanceled, agentMessage(cause.Error()))
		}
	}
	return n
}

// Tasks returns a snapshot of every stored task, oldest first.
func (s *Server) Tasks() []TaskInfo {
	s.mu.Lock()
	ts := make([]*task, 0, len(s.tasks))
	for _, t := range s.tasks {
		ts = append(ts, t)
	}
	s.mu.Unlock()
	out := make([]TaskInfo, 0, len(ts))
	for _, t := range ts {
		t.mu.Lock()
		out = append(out, TaskInfo{
			ID: string(t.id), Owner: t.owner, Caller: t.caller.DisplayName(),
			State: t.status.State, Summary: t.summary, Created: t.created, Updated: t.updated,
		})
		t.mu.Unlock()
	}
	sortTaskInfos(out)
	return out
}

// enter registers one request or turn; false once Shutdown has begun.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.inflight++
	return true
}

func (s *Server) leave() {
	s.mu.Lock()
	s.inflight--
	if s.closed && s.inflight == 0 {
		close(s.idle)
	}
	s.mu.Unlock()
}

// Shutdown stops the engine and waits for every request handler and
// executor turn to return, or for ctx. A second call waits again and
// returns the same.
//
// Without Options.Store the tasks end with the process: new requests are
// refused (CodeUnavailable), every live task ends canceled with "node
// shutting down" (running executors see their ctx canceled; streams get
// that final event and close).
//
// With Options.Store the tasks outlive the process: the changes made so
// far are handed to the store first, and nothing Shutdown does is written,
// so the next start finds the tasks as a kill would have left them
// (Restore). Running turns are stopped (their ctx's cause is ErrShutdown)
// and leave their task's state as it is; no task is told a state it does
// not keep. Open streams and waiting message/send calls end with the
// CodeRestarting error naming their task (no final event), and so does
// every request from then on (restartingError): the caller reads the task
// again after the restart.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.db != nil && !s.frozen.Load() {
		s.flushDirty(time.Time{})
		s.frozen.Store(true)
	}
	s.mu.Lock()
	first := !s.closed
	if first {
		s.closed = true
		close(s.shutdown)
		if s.inflight == 0 {
			close(s.idle)
		}
	}
	ts := make([]*task, 0, s.live)
	for _, t := range s.tasks {
		ts = append(ts, t)
	}
	s.mu.Unlock()

	for _, t := range ts {
		if s.db != nil {
			s.stopForRestart(t)
			continue
		}
		s.cancelTask(t, errShuttingDown)
	}
	select {
	case <-s.idle:
		s.stopPersister()
		return nil
	case <-ctx.Done():
		// Executors that ignore their ctx: end their tasks anyway, so every
		// stream gets its final event; their late reports are dropped.
		// (With a store the streams have ended already: the tasks stay.)
		for _, t := range ts {
			if s.db != nil {
				continue
			}
			s.settle(t, a2a.TaskStateCanceled, agentMessage(errShuttingDown.Error()))
		}
		s.stopPersister()
		return fmt.Errorf("a2a: shutdown: %w", ctx.Err())
	}
}

// stopForRestart stops t's running turn, if any, with errShuttingDown
// (endTurn then leaves its state as it is) and its expiry timer: a
// Shutdown with a store keeps every task as it is, for the restart.
func (s *Server) stopForRestart(t *task) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.expiry != nil {
		t.expiry.Stop()
		t.expiry = nil
	}
	if t.cancel != nil {
		t.cancel(errShuttingDown)
	}
}

// restarting reports a Shutdown with a store under way: from then on no
// task is shown (its state may have changed after the last write), every
// call on one gets restartingError.
func (s *Server) restarting() bool { return s.db != nil && s.frozen.Load() }

// restartWait is closed when a Shutdown with a store begins (nil without
// a store: a wait on it never ends).
func (s *Server) restartWait() <-chan struct{} {
	if s.db == nil {
		return nil
	}
	return s.shutdown
}

// cancelTask stops t's running turn with cause, or cancels an idle live
// task (input-required) at once. live reports whether t was live; done is
// the running turn's done channel, nil when no turn was running.
func (s *Server) cancelTask(t *task, cause error) (live bool, done <-chan struct{}) {
	t.mu.Lock()
	if !t.liveLocked() {
		t.mu.Unlock()
		return false, nil
	}
	if t.cancel != nil {
		t.cancel(cause)
		done := t.done
		t.mu.Unlock()
		return true, done
	}
	if t.setStatusLocked(a2a.TaskStateCanceled, agentMessage(cause.Error()), s.now()) {
		s.retire(t)
	}
	t.mu.Unlock()
	return true, nil
}

// settle moves t to state with msg; for a terminal state it also updates
// the store's live counts.
func (s *Server) settle(t *task, state a2a.TaskState, msg *a2a.Message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.setStatusLocked(state, msg, s.now()) && state.Terminal() {
		s.retire(t)
	}
}

// retire books a task that just became terminal. The caller holds t.mu (the
// lock order is t.mu, then s.mu), so the live counts change before anyone
// woken by the terminal status can read them: a caller whose blocking send
// just returned never finds its finished task still counted live (nor
// meets the per-owner cap with it).
func (s *Server) retire(t *task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live--
	if t.parked {
		s.unparkLocked(t)
	} else {
		s.dropRunningLocked(t.owner)
	}
	if _, stored := s.tasks[t.id]; stored {
		s.terminal = append(s.terminal, t)
	}
}

// dropRunningLocked takes one task off owner's running count.
func (s *Server) dropRunningLocked(owner string) {
	if n := s.liveByOwner[owner] - 1; n > 0 {
		s.liveByOwner[owner] = n
	} else {
		delete(s.liveByOwner, owner)
	}
}

// parkLocked moves t, which now waits for its caller with no turn
// running, from its owner's running count to the parked list. The caller
// holds t.mu.
func (s *Server) parkLocked(t *task) {
	s.dropRunningLocked(t.owner)
	t.parked = true
	s.parked[t.owner] = append(s.parked[t.owner], t)
}

// unparkLocked takes t off its owner's parked list. The caller holds t.mu.
func (s *Server) unparkLocked(t *task) {
	t.parked = false
	list := s.parked[t.owner]
	if i := slices.Index(list, t); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(s.parked, t.owner)
	} else {
		s.parked[t.owner] = list
	}
}

// trimParked ends the oldest parked tasks of owner while there are more
// than MaxParkedPerOwner: canceled, with a status message saying why. A
// task answered meanwhile has left the list (resume unparks it under the
// same locks that change its state), so the loop always progresses.
func (s *Server) trimParked(owner string) {
	for {
		s.mu.Lock()
		list := s.parked[owner]
		if len(list) <= s.opts.MaxParkedPerOwner {
			s.mu.Unlock()
			return
		}
		victim := list[0]
		s.mu.Unlock()

		victim.mu.Lock()
		changed := false
		if interrupted(victim.status.State) && victim.cancel == nil {
			msg := fmt.Sprintf("canceled to make room: more than %d tasks of this caller were waiting for an answer, and this was the oldest", s.opts.MaxParkedPerOwner)
			changed = victim.setStatusLocked(a2a.TaskStateCanceled, agentMessage(msg), s.now())
			if changed {
				s.retire(victim)
			}
		}
		victim.mu.Unlock()
		if !changed {
			s.mu.Lock()
			stuck := len(s.parked[owner]) > 0 && s.parked[owner][0] == victim
			s.mu.Unlock()
			if stuck {
				s.log.Error("parked task neither waiting nor removable", "task", victim.id)
				return
			}
			continue
		}
		if changed {
			s.log.Info("oldest task waiting for its caller canceled to make room", "task", victim.id, "owner", owner, "bound", s.opts.MaxParkedPerOwner)
		}
	}
}

// evictLocked drops the oldest terminal task; false when there is none.
func (s *Server) evictLocked() bool {
	if s.termHead >= len(s.terminal) {
		return false
	}
	t := s.terminal[s.termHead]
	s.terminal[s.termHead] = nil
	s.termHead++
	if s.termHead > 64 && s.termHead*2 > len(s.terminal) {
		n := copy(s.terminal, s.terminal[s.termHead:])
		clear(s.terminal[n:])
		s.terminal = s.terminal[:n]
		s.termHead = 0
	}
	delete(s.tasks, t.id)
	s.bytes -= t.bytes
	return true
}

// reserveLocked makes room for a task (when newTask) and n more stored
// bytes, evicting terminal tasks as needed.
func (s *Server) reserveLocked(newTask bool, n int64) error {
	for newTask && len(s.tasks) >= s.opts.MaxTasks {
		if !s.evictLocked() {
			return fmt.Errorf("%w: %d tasks are live; retry when one ends", ErrStoreFull, len(s.tasks))
		}
	}
	for s.bytes+n > s.opts.MaxStoredBytes {
		if !s.evictLocked() {
			return fmt.Errorf("%w: live tasks hold %d bytes of messages", ErrStoreFull, s.bytes)
		}
	}
	s.bytes += n
	return nil
}

// lookup returns the task id of owner; another owner's task is reported
// exactly like a missing one.
func (s *Server) lookup(owner string, id a2a.TaskID) (*task, error) {
	s.mu.Lock()
	t := s.tasks[id]
	s.mu.Unlock()
	if t == nil || t.owner != owner {
		return nil, fmt.Errorf("%w: no task %q", a2a.ErrTaskNotFound, truncate(string(id), 64))
	}
	return t, nil
}

// ServeHTTP serves both A2A JSON-RPC bindings at POST /a2a/v1: 0.3 (the
// default) and 1.0, chosen per request by the A2A-Version header or query
// parameter (A2A 1.0 §3.6; requestVersion); any other version is answered
// -32009 naming the supported ones. The caller must have been
// authenticated by the auth middleware (pairing.PrincipalFrom); without
// one the request fails -32603.
//
// Non-streaming answers, errors included, are HTTP 200 with Content-Type
// application/json. The streaming methods (message/stream,
// tasks/resubscribe, SendStreamingMessage, SubscribeToTask) answer
// text/event-stream: one "data: <JSON-RPC response>" line per event, the
// Task first, closed after the event that ends it (A2A 0.3 §7.2, 1.0
// §9.4); their errors are such a stream too, of one event. With
// Options.RequirePublished, every request is answered a plain 404 while
// unpublished.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.unpublished() {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	ver, asked, known := requestVersion(r)
	c := &call{w: w, r: r, id: nullID, ver: ver, hint: wantsStream(r)}
	p, ok := pairing.PrincipalFrom(r.Context())
	if !ok || p == nil {
		s.log.Error("a2a request without a principal: the auth middleware is missing")
		c.fail(ErrNoPrincipal)
		return
	}
	c.p = p
	if !s.enter() {
		if s.db != nil {
			c.fail(restartingError(""))
			return
		}
		c.fail(fmt.Errorf("%w: %w", ErrUnavailable, errShuttingDown))
		return
	}
	defer s.leave()

	body, err := readBody(w, r, s.opts.MaxBodyBytes)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			c.fail(&rpcError{
				Code:    CodeInvalidRequest,
				Message: fmt.Sprintf("invalid request: the body exceeds %d bytes", mbe.Limit),
				Data:    map[string]any{"limit": mbe.Limit},
			})
			return
		}
		c.fail(newRPCError(CodeParseError, "parse error: reading the body failed"))
		return
	}
	req, id, rerr := decodeRequest(body)
	if req != nil && req.Notification {
		// JSON-RPC 2.0 §4.1: the server must not reply to a notification,
		// and nothing is done for one: every A2A method's only use is its
		// result (message/send's task id is the only handle on the task,
		// and would start work, and an owner approval, nobody can follow;
		// tasks/cancel answers with the task's state). HTTP needs a
		// response, so: 204 with no body, and no JSON-RPC error (-32600
		// would be a reply).
		s.log.Debug("JSON-RPC notification ignored", "method", truncate(req.Method, 64))
		w.WriteHeader(http.StatusNoContent)
		return
	}
	c.id = id
	if req != nil {
		c.method, c.params, c.size = req.Method, req.Params, len(body)
	}
	if !known {
		if c.method != "" && v03Method(c.method) {
			c.ver = v03
		} else {
			c.ver = v10
		}
		c.fail(&rpcError{
			Code: CodeVersionNotSupported,
			Message: fmt.Sprintf("A2A version %q is not supported: this agent speaks %s (send %s: %s, or no %s for %s)",
				truncate(asked, 32), strings.Join(SupportedVersions, " and "), VersionHeader, Version10, VersionHeader, Version03),
			Data: map[string]any{"supportedVersions": SupportedVersions},
		})
		return
	}
	if rerr != nil {
		c.fail(rerr)
		return
	}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("a2a handler panic", "method", req.Method, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			c.fail(errors.New("panic"))
		}
	}()
	if c.ver == v10 {
		s.dispatchV1(c)
		return
	}

	switch c.method {
	case MethodMessageSend:
		s.onSend(c)
	case MethodMessageStream:
		s.onStream(c)
	case MethodTasksGet:
		s.onGet(c)
	case MethodTasksCancel:
		s.onCancel(c)
	case MethodTasksResubscribe:
		s.onResubscribe(c)
	case MethodPushConfigSet, MethodPushConfigGet, MethodPushConfigList, MethodPushConfigDelete:
		c.fail(newRPCError(CodePushNotSupported, "push notifications are not supported: use message/stream or tasks/get"))
	case MethodExtendedAgentCard:
		c.fail(newRPCError(CodeExtendedCard, "no authenticated extended card: the public card is complete"))
	default:
		if !v03Method(c.method) {
			c.fail(newRPCError(CodeMethodNotFound, "method not found: %q is not an A2A 0.3 method; for A2A 1.0 send the header %s: %s", truncate(c.method, 64), VersionHeader, Version10))
			return
		}
		c.fail(newRPCError(CodeMethodNotFound, "method not found: %q", truncate(c.method, 64)))
	}
}

// dispatchV1 serves one A2A 1.0 request (A2A 1.0 §9.4).
func (s *Server) dispatchV1(c *call) {
	switch c.method {
	case MethodSendMessage:
		s.onSend(c)
	case MethodSendStreamingMessage:
		s.onStream(c)
	case MethodGetTask:
		s.onGet(c)
	case MethodListTasks:
		s.onList(c)
	case MethodCancelTask:
		s.onCancel(c)
	case MethodSubscribeToTask:
		s.onResubscribe(c)
	case MethodCreatePushConfig, MethodGetPushConfig, MethodListPushConfigs, MethodDeletePushConfig:
		c.fail(newRPCError(CodePushNotSupported, "push notifications are not supported: use SendStreamingMessage or GetTask"))
	case MethodGetExtendedCard:
		c.fail(newRPCError(CodeExtendedCard, "no extended agent card: the public card is complete"))
	default:
		if v03Method(c.method) {
			c.fail(newRPCError(CodeMethodNotFound, "method not found: %q is an A2A 0.3 method, served without the %s header", truncate(c.method, 64), VersionHeader))
			return
		}
		c.fail(newRPCError(CodeMethodNotFound, "method not found: %q", truncate(c.method, 64)))
	}
}

// call is one JSON-RPC request being answered.
type call struct {
	w      http.ResponseWriter
	r      *http.Request
	p      *pairing.Principal
	id     json.RawMessage
	ver    protoVersion
	method string // "" while the envelope is not decoded
	params json.RawMessage
	size   int  // the body's bytes
	hint   bool // Accept: text/event-stream, for errors before the method is known
}

// streaming reports whether the answer is an SSE stream.
func (c *call) streaming() bool {
	if c.method == "" {
		return c.hint
	}
	return streamingMethod(c.method)
}

// fail answers err as a JSON-RPC error (rpcErrorFrom) in the call's
// version: a JSON response, or for a streaming method an SSE stream of one
// event.
func (c *call) fail(err error) {
	e := rpcErrorFrom(err)
	if c.streaming() {
		writeStreamError(c.w, c.ver, c.id, e)
		return
	}
	writeJSON(c.w, c.ver, c.id, nil, e)
}

// readBody reads the whole body, at most limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	rd := http.MaxBytesReader(w, r.Body, limit)
	defer rd.Close()
	size := int64(512)
	if r.ContentLength > 0 && r.ContentLength <= limit {
		size = r.ContentLength + 1
	}
	buf := make([]byte, 0, size)
	for {
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
	}
}

// decodeSendParams decodes and checks message/send and message/stream
// params (checkSendParams).
func decodeSendParams(raw json.RawMessage) (*a2a.MessageSendParams, int, error) {
	var p a2a.MessageSendParams
	if err := decodeParams(raw, &p); err != nil {
		return nil, 0, err
	}
	return checkSendParams(&p)
}

// checkSendParams checks send params of either version (in the engine's
// form) and returns them with their historyLength (-1 when unset).
func checkSendParams(p *a2a.MessageSendParams) (*a2a.MessageSendParams, int, error) {
	m := p.Message
	switch {
	case m == nil:
		return nil, 0, newRPCError(CodeInvalidParams, "invalid params: message is required")
	case m.ID == "":
		return nil, 0, newRPCError(CodeInvalidParams, "invalid params: message.messageId is required")
	case m.Role != a2a.MessageRoleUser:
		return nil, 0, newRPCError(CodeInvalidParams, `invalid params: message.role must be "user"`)
	case len(m.Parts) == 0:
		return nil, 0, newRPCError(CodeInvalidParams, "invalid params: message.parts is empty")
	}
	for _, part := range m.Parts {
		if part == nil {
			return nil, 0, newRPCError(CodeInvalidParams, "invalid params: a message part is null")
		}
	}
	hl := -1
	if p.Config != nil && p.Config.HistoryLength != nil {
		if hl = *p.Config.HistoryLength; hl < 0 {
			return nil, 0, newRPCError(CodeInvalidParams, "invalid params: historyLength must be >= 0")
		}
	}
	return p, hl, nil
}

// begin creates a task (no taskId) or resumes an input-required one, and
// starts its turn. With stream it also subscribes and returns the Task
// snapshot taken at subscription, atomically, so no event is missed.
//
// ver is the form the subscription reads events in.
func (s *Server) begin(p *pairing.Principal, params *a2a.MessageSendParams, size int, stream bool, ver protoVersion) (*task, *subscriber, *a2a.Task, error) {
	msg := params.Message
	owner := p.Owner()
	if msg.TaskID != "" {
		return s.resume(p, params, size, stream, ver)
	}

	now := s.now()
	ctxID := msg.ContextID
	if ctxID == "" {
		ctxID = a2a.NewContextID()
	}
	t := &task{
		srv:       s,
		id:        a2a.NewTaskID(),
		owner:     owner,
		contextID: ctxID,
		caller:    p,
		summary:   s.summarize(p, msg),
		created:   now,
		deadline:  now.Add(s.opts.ApprovalTimeout),
		updated:   now,
		bytes:     int64(size),
		turns:     1,
	}
	msg.TaskID, msg.ContextID = t.id, ctxID
	t.history = []*a2a.Message{msg}
	ts := now
	t.status = a2a.TaskStatus{State: a2a.TaskStateSubmitted, Timestamp: &ts}
	if !s.reportsQueued() {
		// The approver does not say when a person is asked: assume one is.
		t.status.Message = agentMessage(s.waitingText())
		t.status.Message.TaskID, t.status.Message.ContextID = t.id, ctxID
	}

	// Everything is set before the task is published in the store (t is
	// not shared yet, so no lock).
	ctx, cancel := context.WithCancelCause(context.Background())
	t.cancel, t.done = cancel, make(chan struct{})
	var sub *subscriber
	var snap *a2a.Task
	if stream {
		sub = t.subscribeLocked(ver)
		snap = t.snapshotLocked(historyLen(params))
	}

	s.mu.Lock()
	err := s.admitLocked(owner, t)
	if err == nil {
		s.tasks[t.id] = t
		s.live++
		s.liveByOwner[owner]++
		s.inflight++ // the turn
	}
	s.mu.Unlock()
	if err != nil {
		cancel(nil)
		return nil, nil, nil, err
	}
	// A caller that gets the task id before the task settles (a stream,
	// a non-blocking send) finds the task in the database after a
	// restart, a kill -9 included: it is committed before the id goes
	// out. For a blocking send the id comes with the settled state,
	// written then, so a short task costs one write.
	early := stream || (params.Config != nil && params.Config.Blocking != nil && !*params.Config.Blocking)
	if err := s.create(t, early); err != nil {
		cancel(nil)
		return nil, nil, nil, err
	}

	ex := &Execution{s: s, t: t, msg: msg, ctx: ctx}
	go s.runTurn(ctx, t, ex, turnApprove)
	return t, sub, snap, nil
}

// create writes the new task t (admitted, its turn not started yet) to the
// store: now when early, else through the flusher. A task the store
// refuses now is taken back out of the engine, and the caller gets the
// error (ErrStoreFull).
func (s *Server) create(t *task, early bool) error {
	if s.db == nil {
		return nil
	}
	t.mu.Lock()
	ok := true
	if early {
		ok = s.frozen.Load() || s.writeLocked(t)
		if ok && !s.frozen.Load() {
			if err := s.db.Commit(context.Background()); err != nil {
				s.log.Error("task not committed to the database", "task", t.id, "err", err)
				ok = false
			}
		}
	} else {
		s.persistLocked(t, false)
	}
	t.mu.Unlock()
	if ok {
		return nil
	}
	s.mu.Lock()
	delete(s.tasks, t.id)
	s.bytes -= t.bytes
	s.live--
	s.dropRunningLocked(t.owner)
	s.inflight--
	if s.closed && s.inflight == 0 {
		close(s.idle)
	}
	s.mu.Unlock()
	return fmt.Errorf("%w: the database did not take the task", ErrStoreFull)
}

// openLocked reports whether the engine takes work: not shutting down, and
// published when Options.RequirePublished (a request that passed
// ServeHTTP's check as the owner switched A2A off is refused here).
func (s *Server) openLocked() error {
	if s.db != nil && (s.closed || s.frozen.Load()) {
		return restartingError("")
	}
	if s.closed {
		return fmt.Errorf("%w: %w", ErrUnavailable, errShuttingDown)
	}
	if s.opts.RequirePublished && !s.published.Load() {
		return fmt.Errorf("%w: %w", ErrUnavailable, errSwitchedOff)
	}
	if s.dbFailed.Load() {
		// Nothing could be kept: take no work whose end would not be.
		return fmt.Errorf("%w: %w", ErrUnavailable, errDatabaseFailed)
	}
	return nil
}

// admitLocked checks that owner may create t now and reserves its room.
func (s *Server) admitLocked(owner string, t *task) error {
	if err := s.openLocked(); err != nil {
		return err
	}
	if n := s.liveByOwner[owner]; n >= s.opts.MaxLiveTasksPerOwner {
		return fmt.Errorf("%w: %d running tasks (the limit); wait for one to end or cancel one", ErrLiveTaskLimit, n)
	}
	return s.reserveLocked(true, t.bytes)
}

// resume starts the next turn of an input-required task of p's owner.
// It is not approved again: the owner approved the task.
func (s *Server) resume(p *pairing.Principal, params *a2a.MessageSendParams, size int, stream bool, ver protoVersion) (*task, *subscriber, *a2a.Task, error) {
	msg := params.Message
	t, err := s.lookup(p.Owner(), msg.TaskID)
	if err != nil {
		return nil, nil, nil, err
	}
	now := s.now()
	t.mu.Lock()
	state := t.status.State
	switch {
	case state.Terminal():
		t.mu.Unlock()
		return nil, nil, nil, fmt.Errorf("%w: task %s is %s; a terminal task takes no more messages", a2a.ErrUnsupportedOperation, t.id, stateName(ver, state))
	case msg.ContextID != "" && msg.ContextID != t.contextID:
		t.mu.Unlock()
		return nil, nil, nil, newRPCError(CodeInvalidParams, "invalid params: contextId %q contradicts the task's contextId %q", truncate(msg.ContextID, 64), t.contextID)
	case !interrupted(state) || t.cancel != nil:
		t.mu.Unlock()
		return nil, nil, nil, fmt.Errorf("%w: task %s is %s; it takes a message only in %s", a2a.ErrUnsupportedOperation, t.id, stateName(ver, state), stateName(ver, a2a.TaskStateInputRequired))
	case t.turns >= s.opts.MaxTurns:
		t.mu.Unlock()
		return nil, nil, nil, fmt.Errorf("%w: task %s reached its limit of %d turns", ErrUnavailable, t.id, s.opts.MaxTurns)
	case stream && len(t.subs) >= s.opts.MaxSubscribers:
		t.mu.Unlock()
		return nil, nil, nil, fmt.Errorf("%w: task %s has %d open streams", ErrUnavailable, t.id, len(t.subs))
	}
	s.mu.Lock()
	if err := s.openLocked(); err != nil {
		s.mu.Unlock()
		t.mu.Unlock()
		return nil, nil, nil, err
	}
	if n := s.liveByOwner[t.owner]; t.parked && n >= s.opts.MaxLiveTasksPerOwner {
		s.mu.Unlock()
		t.mu.Unlock()
		return nil, nil, nil, fmt.Errorf("%w: %d running tasks (the limit); wait for one to end or cancel one, then answer again", ErrLiveTaskLimit, n)
	}
	if err := s.reserveLocked(false, int64(size)); err != nil {
		s.mu.Unlock()
		t.mu.Unlock()
		return nil, nil, nil, err
	}
	s.inflight++
	t.bytes += int64(size)
	if t.parked {
		s.unparkLocked(t)
		s.liveByOwner[t.owner]++
	}
	s.mu.Unlock()

	if t.restored {
		t.caller, t.restored = p, false // the same owner, with its grant as it is now
	}
	t.turns++
	msg.ContextID = t.contextID
	if q := t.status.Message; q != nil {
		t.history = append(t.history, q) // the question being answered
	}
	t.history = append(t.history, msg)
	t.setStatusLocked(a2a.TaskStateWorking, nil, now)
	ctx, cancel := context.WithCancelCause(context.Background())
	t.cancel, t.done = cancel, make(chan struct{})
	var sub *subscriber
	var snap *a2a.Task
	if stream {
		sub = t.subscribeLocked(ver)
		snap = t.snapshotLocked(historyLen(params))
	}
	t.mu.Unlock()
	ex := &Execution{s: s, t: t, msg: msg, ctx: ctx}
	go s.runTurn(ctx, t, ex, turnExecute)
	return t, sub, snap, nil
}

func historyLen(p *a2a.MessageSendParams) int {
	if p.Config != nil && p.Config.HistoryLength != nil {
		return *p.Config.HistoryLength
	}
	return -1
}

func (s *Server) deviceName() string {
	if s.opts.DeviceName != "" {
		return s.opts.DeviceName
	}
	return "this device"
}

// summarize is the one-line text the owner approves: the Summarizer's,
// else textSummary's; bounded and escaped either way (nodes.BoundSummary).
func (s *Server) summarize(p *pairing.Principal, msg *a2a.Message) string {
	if sm, ok := s.opts.Executor.(Summarizer); ok {
		return nodes.BoundSummary(sm.Summarize(p, msg))
	}
	return textSummary(msg, "(a message without text)")
}

// reportsQueued reports whether the Approver says when it queues a request
// (QueueingApprover).
func (s *Server) reportsQueued() bool {
	qa, ok := s.opts.Approver.(QueueingApprover)
	return ok && qa.ReportsQueued()
}

// waitingText is the status text of a task queued for the owner.
func (s *Server) waitingText() string { return "waiting for approval on " + s.deviceName() }

// queued shows that t waits for a person's approval, once, while it is
// still submitted.
func (s *Server) queued(t *task) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.status.State != a2a.TaskStateSubmitted || t.status.Message != nil {
		return
	}
	t.setStatusLocked(a2a.TaskStateSubmitted, agentMessage(s.waitingText()), s.now())
	// The owner may see the request as soon as this returns (the approvals
	// queue keeps it across a restart): the task it decides is on disk,
	// synced, with its deadline by then, so the request finds its task
	// after a crash.
	s.durableLocked(t)
}

// turnKind is what a turn starts with.
type turnKind int

const (
	turnExecute  turnKind = iota // the executor (an answer to input-required)
	turnApprove                  // the approval, then the executor (a new task)
	turnReattach                 // the executor's Reattach (restored running)
)

// runTurn is the goroutine of one turn: the approval (first turn), then
// the executor. It settles the task's state when the executor returns.
func (s *Server) runTurn(ctx context.Context, t *task, ex *Execution, kind turnKind) {
	defer s.leave()
	if s.db != nil {
		growStack()
	}

	if kind == turnApprove {
		dec := s.approve(ctx, t, ex.msg)
		if ctx.Err() == nil && !dec.Approved {
			reason := dec.Reason
			if reason == "" {
				reason = "refused"
			}
			s.endTurn(ctx, t, ex, a2a.TaskStateRejected, agentMessage("rejected: "+reason))
			return
		}
		if ctx.Err() != nil {
			s.endTurn(ctx, t, ex, a2a.TaskStateCanceled, nil)
			return
		}
		t.mu.Lock()
		if dec.ByOwner {
			t.approvedSummary = t.summary
		}
		if t.restored && dec.Caller != nil && dec.Caller.Owner() == t.owner {
			t.caller, t.restored = dec.Caller, false
		}
		t.setStatusLocked(a2a.TaskStateWorking, nil, s.now())
		if dec.ByOwner {
			// A person's decision is on disk before anyone reads its
			// effect: a restart then fails the task instead of asking
			// again.
			s.durableLocked(t)
		}
		t.mu.Unlock()
	}

	var err error
	if kind == turnReattach {
		err = s.reattach(ctx, ex)
	} else {
		err = s.execute(ctx, ex)
	}

	t.mu.Lock()
	oc := ex.outcome
	t.mu.Unlock()
	switch {
	case oc != nil:
		s.endTurn(ctx, t, ex, oc.state, oc.msg)
	case err == nil:
		s.endTurn(ctx, t, ex, a2a.TaskStateCompleted, nil)
	default:
		s.endTurn(ctx, t, ex, a2a.TaskStateFailed, agentMessage(err.Error()))
	}
}

// endTurn settles the task at the end of a turn, in one critical section
// with clearing the turn's cancel func: a tasks/cancel either reaches the
// turn before (and the task ends canceled, whatever the executor reported)
// or finds no turn running.
func (s *Server) endTurn(ctx context.Context, t *task, ex *Execution, state a2a.TaskState, msg *a2a.Message) {
	t.mu.Lock()
	ex.ended = true
	if ctx.Err() != nil && s.db != nil && errors.Is(context.Cause(ctx), errShuttingDown) {
		// Stopped by a Shutdown that keeps the tasks: the task stays as it
		// is in the database, and its restart takes it from there.
		t.cancel(nil)
		t.cancel = nil
		close(t.done)
		t.done = nil
		t.mu.Unlock()
		return
	}
	if ctx.Err() != nil {
		state, msg = a2a.TaskStateCanceled, agentMessage(context.Cause(ctx).Error())
	}
	changed := t.setStatusLocked(state, msg, s.now())
	t.cancel(nil)
	t.cancel = nil
	close(t.done)
	t.done = nil
	parked := changed && interrupted(state)
	if parked {
		turn := t.turns
		t.expiry = time.AfterFunc(s.opts.InterruptedTTL, func() { s.expire(t, turn) })
		s.mu.Lock()
		s.parkLocked(t)
		s.mu.Unlock()
	}
	if changed && state.Terminal() {
		s.retire(t)
	}
	t.mu.Unlock()
	if parked {
		s.trimParked(t.owner)
	}
}

// expire ends a task that has waited for its caller since turn for
// InterruptedTTL: canceled, "no answer within <TTL>".
func (s *Server) expire(t *task, turn int) {
	t.mu.Lock()
	if t.turns != turn || t.cancel != nil || !interrupted(t.status.State) {
		t.mu.Unlock() // answered (or ended) meanwhile
		return
	}
	changed := t.setStatusLocked(a2a.TaskStateCanceled, agentMessage(fmt.Sprintf("no answer within %s", s.opts.InterruptedTTL)), s.now())
	if changed {
		s.retire(t)
	}
	t.mu.Unlock()
	if changed {
		s.log.Info("task waiting for its caller expired", "task", t.id, "ttl", s.opts.InterruptedTTL)
	}
}

func (s *Server) approve(ctx context.Context, t *task, msg *a2a.Message) Decision {
	if s.opts.Approver == nil {
		return Decision{Reason: "no approver configured"}
	}
	t.mu.Lock()
	caller := t.caller
	t.mu.Unlock()
	return s.opts.Approver.ApproveTask(ctx, TaskApproval{
		TaskID: t.id, ContextID: t.contextID, Caller: caller, Summary: t.summary, Message: msg,
		Deadline: t.deadline,
		Queued:   func() { s.queued(t) },
	})
}

// execute runs the executor, turning a panic into an error.
func (s *Server) execute(ctx context.Context, ex *Execution) (err error) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("executor panic", "task", ex.t.id, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			err = errors.New("the executor failed unexpectedly")
		}
	}()
	return s.opts.Executor.Execute(ctx, ex)
}

// decodeSend decodes send params in the call's version.
func decodeSend(c *call) (*a2a.MessageSendParams, int, error) {
	if c.ver == v10 {
		return decodeSendParamsV1(c.params)
	}
	return decodeSendParams(c.params)
}

// decodeTaskID decodes tasks/cancel, tasks/resubscribe, CancelTask and
// SubscribeToTask params, and requires the id.
func decodeTaskID(c *call) (*a2a.TaskIDParams, error) {
	var q *a2a.TaskIDParams
	if c.ver == v10 {
		var err error
		if q, err = decodeTaskIDV1(c.params); err != nil {
			return nil, err
		}
	} else {
		q = new(a2a.TaskIDParams)
		if err := decodeParams(c.params, q); err != nil {
			return nil, err
		}
	}
	if q.ID == "" {
		return nil, newRPCError(CodeInvalidParams, "invalid params: id is required")
	}
	return q, nil
}

// reply writes a method's result in the call's version (marshalResult).
func (s *Server) reply(c *call, ev a2a.Event, wrap bool) {
	data, err := marshalResult(c.ver, ev, wrap)
	if err != nil {
		s.log.Error("marshal result", "err", err)
		c.fail(err)
		return
	}
	writeJSON(c.w, c.ver, c.id, data, nil)
}

// taskResultLocked is t (its last historyLength messages, all when < 0)
// as the call's result: over 0.3 from the task's JSON cache
// (marshalTask03Locked), over 1.0 as reply marshals it. The caller holds
// t.mu and writes the result (replyResult) once it let go of it.
func (s *Server) taskResultLocked(c *call, t *task, historyLength int, wrap bool) ([]byte, error) {
	if c.ver != v03 {
		return marshalResult(c.ver, t.snapshotLocked(historyLength), wrap)
	}
	return t.marshalTask03Locked(historyLength)
}

// replyResult writes data, a result taskResultLocked made, or its error.
func (s *Server) replyResult(c *call, data []byte, err error) {
	if err != nil {
		s.log.Error("marshal result", "err", err)
		c.fail(err)
		return
	}
	writeJSON(c.w, c.ver, c.id, data, nil)
}

// onSend serves message/send and SendMessage. Over 1.0 the Task comes in
// a SendMessageResponse ({"task": ...}).
func (s *Server) onSend(c *call) {
	params, hl, err := decodeSend(c)
	if err != nil {
		c.fail(err)
		return
	}
	t, _, _, err := s.begin(c.p, params, c.size, false, c.ver)
	if err != nil {
		c.fail(err)
		return
	}
	blocking := params.Config == nil || params.Config.Blocking == nil || *params.Config.Blocking
	// Blocking (the default, as in a2a-go and a2a-python; 1.0's
	// returnImmediately false): wait until the task is terminal or waits
	// for input. The task does not depend on this request: if the caller
	// goes away it runs on, readable with tasks/get.
	ctx := c.r.Context()
	down := s.restartWait()
	for {
		t.mu.Lock()
		if blocking && s.restarting() {
			t.mu.Unlock()
			c.fail(restartingError(t.id))
			return
		}
		st := t.status.State
		if !blocking || st.Terminal() || interrupted(st) {
			data, err := s.taskResultLocked(c, t, hl, c.ver == v10)
			t.mu.Unlock()
			s.replyResult(c, data, err)
			return
		}
		ch := t.waitLocked()
		t.mu.Unlock()
		select {
		case <-ch:
		case <-down:
		case <-ctx.Done():
			return
		}
	}
}

// onGet serves tasks/get and GetTask: historyLength unset is the whole
// history, 0 none, n the last n messages; negative is -32602.
func (s *Server) onGet(c *call) {
	var q *a2a.TaskQueryParams
	if c.ver == v10 {
		var err error
		if q, err = decodeTaskQueryV1(c.params); err != nil {
			c.fail(err)
			return
		}
	} else {
		q = new(a2a.TaskQueryParams)
		if err := decodeParams(c.params, q); err != nil {
			c.fail(err)
			return
		}
	}
	hl := -1
	if q.HistoryLength != nil {
		if hl = *q.HistoryLength; hl < 0 {
			c.fail(newRPCError(CodeInvalidParams, "invalid params: historyLength must be >= 0"))
			return
		}
	}
	if q.ID == "" {
		c.fail(newRPCError(CodeInvalidParams, "invalid params: id is required"))
		return
	}
	t, err := s.lookup(c.p.Owner(), q.ID)
	if err != nil {
		c.fail(err)
		return
	}
	t.mu.Lock()
	if s.restarting() {
		t.mu.Unlock()
		c.fail(restartingError(t.id))
		return
	}
	data, err := s.taskResultLocked(c, t, hl, false)
	t.mu.Unlock()
	s.replyResult(c, data, err)
}

// onCancel serves tasks/cancel and CancelTask.
func (s *Server) onCancel(c *call) {
	q, err := decodeTaskID(c)
	if err != nil {
		c.fail(err)
		return
	}
	t, err := s.lookup(c.p.Owner(), q.ID)
	if err != nil {
		c.fail(err)
		return
	}
	t.mu.Lock()
	state := t.status.State
	t.mu.Unlock()
	if state.Terminal() {
		c.fail(newRPCError(CodeTaskNotCancelable, "task %s is %s and cannot be canceled", t.id, stateName(c.ver, state)))
		return
	}
	if _, done := s.cancelTask(t, errCanceledByCaller); done != nil {
		timer := time.NewTimer(s.opts.CancelWait)
		select {
		case <-done:
		case <-timer.C:
			// The executor ignores its ctx; the task is canceled regardless
			// and its late reports are dropped.
			s.log.Warn("executor did not stop after cancel", "task", t.id, "waited", s.opts.CancelWait)
			s.settle(t, a2a.TaskStateCanceled, agentMessage(fmt.Sprintf("canceled; the work did not confirm it stopped within %s", s.opts.CancelWait)))
		}
		timer.Stop()
	}
	t.mu.Lock()
	if s.restarting() {
		// The cancel may not have reached the database: the task is
		// read again after the restart.
		t.mu.Unlock()
		c.fail(restartingError(t.id))
		return
	}
	snap := t.snapshotLocked(-1)
	t.mu.Unlock()
	if snap.Status.State != a2a.TaskStateCanceled {
		// The task ended on its own first.
		c.fail(newRPCError(CodeTaskNotCancelable, "task %s is %s and cannot be canceled", t.id, stateName(c.ver, snap.Status.State)))
		return
	}
	s.reply(c, snap, false)
}

// stateName is a state as ver spells it.
func stateName(ver protoVersion, st a2a.TaskState) string {
	if ver == v10 {
		return string(a2av0.ToV1TaskState(st))
	}
	return string(st)
}

// onStream serves message/stream and SendStreamingMessage.
func (s *Server) onStream(c *call) {
	params, _, err := decodeSend(c)
	if err != nil {
		c.fail(err)
		return
	}
	if _, ok := c.w.(http.Flusher); !ok {
		c.fail(errors.New("streaming unsupported by the response writer"))
		return
	}
	t, sub, snap, err := s.begin(c.p, params, c.size, true, c.ver)
	if err != nil {
		c.fail(err)
		return
	}
	s.stream(c, t, sub, snap)
}

// onResubscribe serves tasks/resubscribe and SubscribeToTask. Over 0.3 a
// task that no longer changes gets its Task and the end of the stream;
// over 1.0 a terminal task is -32004 UnsupportedOperation (A2A 1.0: a
// task in a terminal state cannot be subscribed to).
func (s *Server) onResubscribe(c *call) {
	q, err := decodeTaskID(c)
	if err != nil {
		c.fail(err)
		return
	}
	t, err := s.lookup(c.p.Owner(), q.ID)
	if err != nil {
		c.fail(err)
		return
	}
	if _, ok := c.w.(http.Flusher); !ok {
		c.fail(errors.New("streaming unsupported by the response writer"))
		return
	}
	t.mu.Lock()
	if s.restarting() {
		t.mu.Unlock()
		c.fail(restartingError(t.id))
		return
	}
	if st := t.status.State; c.ver == v10 && st.Terminal() {
		t.mu.Unlock()
		c.fail(fmt.Errorf("%w: task %s is %s; a terminal task has no more events (read it with %s)", a2a.ErrUnsupportedOperation, t.id, stateName(c.ver, st), MethodGetTask))
		return
	}
	if len(t.subs) >= s.opts.MaxSubscribers {
		n := len(t.subs)
		t.mu.Unlock()
		c.fail(fmt.Errorf("%w: task %s has %d open streams", ErrUnavailable, t.id, n))
		return
	}
	snap := t.snapshotLocked(-1)
	var sub *subscriber
	if st := snap.Status.State; !st.Terminal() && !interrupted(st) {
		sub = t.subscribeLocked(c.ver)
	}
	t.mu.Unlock()
	s.stream(c, t, sub, snap)
}

// stream writes the SSE response: the Task snapshot first, then the task's
// events in generation order, until one that ends the stream (or, when sub
// is nil, right after the Task), the client leaving, or shutdown. A
// Shutdown with a store ends it with the CodeRestarting error event, not
// with the events that followed the last write. It keeps no goroutine: the
// request's own goroutine waits on the task's change channel.
func (s *Server) stream(c *call, t *task, sub *subscriber, snap *a2a.Task) {
	if sub != nil {
		defer func() {
			t.mu.Lock()
			t.unsubscribeLocked(sub)
			t.mu.Unlock()
		}()
	}
	w := c.w
	fl := w.(http.Flusher)
	data, err := marshalResult(c.ver, snap, true)
	if err != nil {
		s.log.Error("marshal task", "err", err)
		c.fail(err)
		return
	}
	setStreamHeaders(w.Header())
	w.WriteHeader(http.StatusOK)
	buf := make([]byte, 0, 512+len(data))
	buf = appendEvent(buf, c.ver, c.id, data)
	if _, err := w.Write(buf); err != nil {
		return
	}
	fl.Flush()
	if sub == nil {
		return
	}

	ctx := c.r.Context()
	down := s.restartWait()
	keep := time.NewTimer(s.opts.KeepAlive)
	defer keep.Stop()
	for {
		t.mu.Lock()
		if s.restarting() {
			t.mu.Unlock()
			buf = append(buf[:0], "data: "...)
			buf = appendResponse(buf, c.ver, c.id, nil, restartingError(t.id))
			buf = append(buf, "\n\n"...)
			if _, err := w.Write(buf); err == nil {
				fl.Flush()
			}
			return
		}
		evs := t.nextLocked(sub)
		ch := t.waitLocked()
		t.mu.Unlock()
		if len(evs) > 0 {
			buf = buf[:0]
			final := false
			for _, ev := range evs {
				if d := ev.data[c.ver]; d != nil {
					buf = appendEvent(buf, c.ver, c.id, d)
				}
				if ev.final {
					final = true
					break
				}
			}
			if _, err := w.Write(buf); err != nil {
				return
			}
			fl.Flush()
			if final {
				return
			}
			keep.Reset(s.opts.KeepAlive)
			continue
		}
		select {
		case <-ch:
		case <-down:
		case <-ctx.Done():
			return
		case <-keep.C:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
				return
			}
			fl.Flush()
			keep.Reset(s.opts.KeepAlive)
		}
	}
}

// appendEvent appends one SSE event: a single data line holding a JSON-RPC
// response whose result is the event (A2A 0.3 §7.2, 1.0 §9.4; single-line
// JSON, the "data: " prefix with its space, a blank line after).
func appendEvent(dst []byte, ver protoVersion, id json.RawMessage, result []byte) []byte {
	dst = append(dst, "data: "...)
	dst = appendResponse(dst, ver, id, result, nil)
	return append(dst, "\n\n"...)
}

// truncate shortens s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// growStack grows the calling goroutine's stack to about 32 KiB at once.
// A turn that writes its task through to the database (Options.Store)
// runs the JSON encoder's and SQLite's deep frames at its end; grown there,
// the stack would double several times, each time copying and adjusting
// every frame of the deep call chain (runtime.copystack, about a tenth of
// a short task's CPU). Grown here, with a few frames on it, it is copied
// once, cheaply.
//
//go:noinline
func growStack() {
	var b [32 << 10]byte
	touchStack(&b)
}

// touchStack keeps growStack's array (on the stack: the pointer does not
// escape) from being optimized away.
//
//go:noinline
func touchStack(b *[32 << 10]byte) { b[0] = 1 }
