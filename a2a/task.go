package a2a

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/pairing"
)

// task is one task in the store. Fields above mu are set at creation and
// never change; the rest is guarded by mu.
type task struct {
	srv       *Server
	id        a2a.TaskID
	owner     string // pairing.Principal.Owner() of the creator
	contextID string // the caller's contextId (the wire form); the store key is (owner, contextID)
	summary   string // what the owner is (or was) asked to approve
	created   time.Time
	// deadline is when the approval of the task's first turn is refused
	// (created + Options.ApprovalTimeout, or as restored).
	deadline time.Time

	// mu protects everything below.
	mu sync.Mutex
	// caller is the principal that created the task. A task restored from
	// the database has one rebuilt from what was stored (grant id, name,
	// listener) until its caller answers it: the answering request's
	// principal (the same owner) replaces it before the turn starts.
	caller          *pairing.Principal
	restored        bool
	status          a2a.TaskStatus
	history         []*a2a.Message
	artifacts       []*a2a.Artifact
	updated         time.Time
	approvedSummary string
	value           any    // executor-private state across turns
	valueJSON       []byte // value's JSON as SetValue encoded it (Options.Store)
	turns           int    // executor turns started

	// bytes is what the task holds in the store (caller messages and
	// artifacts); guarded by the Server's mu (lock order: task.mu before
	// Server.mu, never the reverse).
	bytes int64
	// artBytes is the artifact part of bytes (Options.MaxArtifactBytes);
	// guarded by mu.
	artBytes int64

	// log holds the marshaled events not yet read by every subscriber:
	// log[i] is event number logBase+i. With no subscriber nothing is kept.
	log     []logEntry
	logBase int
	subs    map[*subscriber]struct{}
	// changed is closed on every change of state or log, to wake waiters
	// (blocking message/send, streams) without a goroutine per waiter; it
	// is made on demand by waitLocked, so a task nobody waits on keeps none.
	changed chan struct{}

	// cancel stops the running turn (approval or executor) with a cause;
	// nil while no turn runs. done is closed when that turn's goroutine
	// has finished.
	cancel context.CancelCauseFunc
	done   chan struct{}

	// expiry ends the task when it has waited for its caller
	// (input-required) for Options.InterruptedTTL; nil otherwise. Any
	// status change stops it.
	expiry *time.Timer

	// parked is set while the task waits for its caller with no turn
	// running, and is then in Server.parked[owner]; guarded by the
	// Server's mu, changed only with t.mu held too.
	parked bool

	// Persistence (Options.Store), guarded by mu: stored once the store
	// took the task's row; dirty while a change waits for the write-behind
	// flusher (queued says it is in its list).
	stored bool
	dirty  bool
	queued bool
	// json caches the JSON of the task's parts for its record and its
	// 0.3 answers (taskjson.go).
	json taskJSON
	// lazy holds a restored terminal task's history and artifacts as
	// stored, until its first snapshot decodes them.
	lazy *lazyTask
}

type logEntry struct {
	// data is the event's JSON in each version's form, made only for the
	// versions a subscriber reads: over 0.3 the TaskStatusUpdateEvent or
	// TaskArtifactUpdateEvent, over 1.0 the StreamResponse holding it.
	data  [2][]byte
	final bool // the stream closes after this event
}

type subscriber struct {
	cursor int          // absolute index of the next event to send
	ver    protoVersion // the form it reads events in
}

// interrupted reports a state in which the task waits for the caller
// (A2A spec §6.3: input-required, auth-required).
func interrupted(s a2a.TaskState) bool {
	return s == a2a.TaskStateInputRequired || s == a2a.TaskStateAuthRequired
}

// live reports a task that is not terminal.
func (t *task) liveLocked() bool { return !t.status.State.Terminal() }

// notifyLocked wakes every waiter.
func (t *task) notifyLocked() {
	if t.changed != nil {
		close(t.changed)
		t.changed = nil
	}
}

// waitLocked returns a channel closed at the task's next change.
func (t *task) waitLocked() <-chan struct{} {
	if t.changed == nil {
		t.changed = make(chan struct{})
	}
	return t.changed
}

// emitLocked appends ev to the log (only when someone listens) and wakes
// waiters. The event is marshaled once per version some subscriber reads;
// each stream wraps it in its own JSON-RPC response.
func (t *task) emitLocked(ev a2a.Event, final bool) {
	if len(t.subs) > 0 {
		e := logEntry{final: final}
		for s := range t.subs {
			if e.data[s.ver] == nil {
				data, err := marshalResult(s.ver, ev, true)
				if err != nil {
					continue
				}
				e.data[s.ver] = data
			}
		}
		t.log = append(t.log, e)
	}
	t.notifyLocked()
}

// setStatusLocked moves the task to state with msg (may be nil) and emits
// the status-update event. It reports false, changing nothing, when the
// task is already terminal: no transition leaves a terminal state.
func (t *task) setStatusLocked(state a2a.TaskState, msg *a2a.Message, now time.Time) bool {
	if t.status.State.Terminal() {
		return false
	}
	if t.expiry != nil {
		t.expiry.Stop()
		t.expiry = nil
	}
	if msg != nil {
		msg.TaskID = t.id
		msg.ContextID = t.contextID
	}
	ts := now
	t.status = a2a.TaskStatus{State: state, Message: msg, Timestamp: &ts}
	t.updated = now
	final := state.Terminal() || interrupted(state)
	if state.Terminal() {
		t.value, t.valueJSON = nil, nil // executor state is of no use any more; free it
	}
	t.emitLocked(&a2a.TaskStatusUpdateEvent{
		TaskID:    t.id,
		ContextID: t.contextID,
		Status:    t.status,
		Final:     final,
	}, final)
	// Waiters woken above wait for mu, so a terminal or interrupted state
	// is on disk before anyone reads it (persistLocked).
	if t.srv != nil {
		t.srv.persistLocked(t, final)
	}
	if state.Terminal() && t.json.size > keepJSON {
		t.dropJSONLocked()
	}
	return true
}

// snapshotLocked copies the task for the wire. historyLength < 0 means the
// whole history. Messages and artifacts are immutable once stored (an
// appended artifact is replaced, not changed), so copying the slices is
// enough.
func (t *task) snapshotLocked(historyLength int) *a2a.Task {
	if t.lazy != nil {
		t.decodeLazyLocked()
	}
	out := &a2a.Task{
		ID:        t.id,
		ContextID: t.contextID,
		Status:    t.status,
	}
	h := t.history
	if historyLength >= 0 && historyLength < len(h) {
		h = h[len(h)-historyLength:]
	}
	if len(h) > 0 {
		out.History = append([]*a2a.Message(nil), h...)
	}
	if len(t.artifacts) > 0 {
		out.Artifacts = append([]*a2a.Artifact(nil), t.artifacts...)
	}
	return out
}

// subscribeLocked registers a stream reading events from now on, in
// ver's form.
func (t *task) subscribeLocked(ver protoVersion) *subscriber {
	s := &subscriber{cursor: t.logBase + len(t.log), ver: ver}
	if t.subs == nil {
		t.subs = make(map[*subscriber]struct{}, 1)
	}
	t.subs[s] = struct{}{}
	return s
}

// unsubscribeLocked drops s and the events every remaining subscriber has
// read.
func (t *task) unsubscribeLocked(s *subscriber) {
	delete(t.subs, s)
	t.trimLocked()
}

// trimLocked drops log entries before the slowest subscriber's cursor.
func (t *task) trimLocked() {
	if len(t.subs) == 0 {
		t.logBase += len(t.log)
		t.log = nil
		return
	}
	minCursor := t.logBase + len(t.log)
	for s := range t.subs {
		minCursor = min(minCursor, s.cursor)
	}
	if n := minCursor - t.logBase; n > 0 {
		clear(t.log[:n])
		t.log = t.log[n:]
		t.logBase = minCursor
	}
}

// nextLocked returns the events s has not read yet and advances its
// cursor past them.
func (t *task) nextLocked(s *subscriber) []logEntry {
	i := s.cursor - t.logBase
	if i >= len(t.log) {
		return nil
	}
	evs := append([]logEntry(nil), t.log[i:]...)
	s.cursor = t.logBase + len(t.log)
	t.trimLocked()
	return evs
}

// TaskInfo is a read-only summary of one stored task for the local admin
// surface (Server.Tasks). JSON names are meshtray's snake_case.
type TaskInfo struct {
	ID      string        `json:"id"`
	Owner   string        `json:"owner"`  // grant ID, or "local"
	Caller  string        `json:"caller"` // the grant's display name
	State   a2a.TaskState `json:"state"`
	Summary string        `json:"summary"`
	Created time.Time     `json:"created"`
	Updated time.Time     `json:"updated"`
}

func sortTaskInfos(ts []TaskInfo) {
	slices.SortFunc(ts, func(a, b TaskInfo) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}
