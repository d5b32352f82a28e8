package a2a

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/pairing"
	"meshtray/store"
)

// TaskStore is where a Server keeps its tasks across restarts
// (Options.Store); *store.Store is one. The engine serves every read from
// memory and writes each change through: CreateTask once, then
// UpdateTask, both with the whole task (the store admits the write
// against its own bounds at once, then commits it: submitted and working
// behind, an interrupted or terminal state before the call returns, a
// terminal one synced to the disk too per the store's Durability; see
// package store). Commit waits for every write queued so far, committed
// (a task whose id reaches its caller before the task settles); Flush for
// every one, synced (a person's decision). Tasks is read once, by Restore.
type TaskStore interface {
	CreateTask(ctx context.Context, t store.Task) error
	UpdateTask(ctx context.Context, t store.Task) error
	Tasks(ctx context.Context, f store.TaskFilter) ([]store.Task, error)
	Commit(ctx context.Context) error
	Flush(ctx context.Context) error
}

var _ TaskStore = (*store.Store)(nil)

// Reattacher is an optional Executor interface for the tasks Restore finds
// running (approved, working) when the node stopped: Reattach runs in
// place of Execute for that turn, with the Execution of the restored task
// (Value is the stored JSON, see Execution.DecodeValue; Message is the
// turn's message), and reports like Execute. It picks up the work where
// it runs on, an upstream agent's task for instance, or ends the task
// saying why it cannot. Without it, such a task ends failed with
// RestartedText.
type Reattacher interface {
	Reattach(ctx context.Context, ex *Execution) error
}

// WaitingRestorer is an optional Executor interface: Restore hands it each
// task it restores waiting for its caller (input-required, auth-required),
// before the task takes messages, so the executor can look after work it
// keeps elsewhere meanwhile (the forward executor's sweep cancels an
// upstream task whose local task ended unanswered). The Execution is for
// reading (TaskID, Caller, DecodeValue, History); it takes no reports.
type WaitingRestorer interface {
	RestoredWaiting(ex *Execution)
}

// RestartedText is the status message of a task that was running when the
// node stopped and that nothing could pick up again.
const RestartedText = "the node restarted while this ran"

// ShutdownText is the status message of a task the node's clean stop
// ended canceled (what its open streams are told; the database keeps the
// task as it was, so after the restart it ends as after a crash).
const ShutdownText = "node shutting down"

// flushDelay is how long a write-behind change waits, so that the changes
// of a short turn (working, progress, artifacts) reach the database
// together with its end, as one write, and a long one's progress in
// batches of at most one write per task per flushDelay.
const flushDelay = 50 * time.Millisecond

// persister is the write-behind queue of tasks with changes not yet handed
// to the store (task.dirty), drained by the flusher goroutine.
type persister struct {
	mu    sync.Mutex
	queue []queuedTask // oldest first
	kick  chan struct{}
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

func (s *Server) startPersister() {
	s.pq.kick = make(chan struct{}, 1)
	s.pq.stop = make(chan struct{})
	s.pq.done = make(chan struct{})
	go s.flusher()
}

type queuedTask struct {
	t  *task
	at time.Time
}

// stopPersister stops the flusher (once) and waits for it.
func (s *Server) stopPersister() {
	if s.db == nil {
		return
	}
	s.pq.once.Do(func() { close(s.pq.stop) })
	<-s.pq.done
}

func (s *Server) flusher() {
	defer close(s.pq.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-s.pq.kick:
		case <-timer.C:
		case <-s.pq.stop:
			timer.Stop()
			s.flushDirty(time.Time{})
			return
		}
		if next := s.flushDirty(time.Now().Add(-flushDelay)); !next.IsZero() {
			// At most one wake per flushDelay/5 under a stream of tasks.
			timer.Reset(max(time.Until(next.Add(flushDelay)), flushDelay/5))
		}
	}
}

// flushDirty writes the pending change of every queued task that was
// queued before cutoff (every one for the zero time), and returns when the
// oldest one left was queued (zero when none is left). The queue is in
// the order tasks were queued.
func (s *Server) flushDirty(cutoff time.Time) time.Time {
	s.pq.mu.Lock()
	n := len(s.pq.queue)
	if !cutoff.IsZero() {
		n, _ = slices.BinarySearchFunc(s.pq.queue, cutoff, func(e queuedTask, c time.Time) int { return e.at.Compare(c) })
	}
	due := slices.Clone(s.pq.queue[:n])
	s.pq.queue = slices.Delete(s.pq.queue, 0, n)
	var next time.Time
	if len(s.pq.queue) > 0 {
		next = s.pq.queue[0].at
	}
	s.pq.mu.Unlock()
	for _, e := range due {
		t := e.t
		t.mu.Lock()
		t.queued = false
		if t.dirty && !s.frozen.Load() {
			s.writeLocked(t)
		}
		t.mu.Unlock()
	}
	return next
}

// persistLocked hands t's change to the store: at once with sync (a
// terminal or interrupted state: the store commits it, a terminal one
// synced, before this returns, and t.mu held meanwhile keeps every reader
// of the new state waiting for it), else through the flusher. Nothing is
// written without a store, or once Shutdown began (a graceful stop leaves
// the database as a kill would). The caller holds t.mu.
func (s *Server) persistLocked(t *task, sync bool) {
	if s.db == nil || s.frozen.Load() {
		return
	}
	if sync {
		s.writeLocked(t)
		return
	}
	t.dirty = true
	if t.queued {
		return
	}
	t.queued = true
	s.pq.mu.Lock()
	first := len(s.pq.queue) == 0
	s.pq.queue = append(s.pq.queue, queuedTask{t: t, at: time.Now()})
	s.pq.mu.Unlock()
	if first {
		select {
		case s.pq.kick <- struct{}{}:
		default:
		}
	}
}

// durableLocked writes t now and waits until the write is synced to the
// disk, whatever its state (an approval's effect). The caller holds t.mu.
func (s *Server) durableLocked(t *task) {
	if s.db == nil || s.frozen.Load() {
		return
	}
	if !s.writeLocked(t) {
		return
	}
	if err := s.db.Flush(context.Background()); err != nil {
		s.log.Error("task not synced to the database", "task", t.id, "err", err)
	}
}

// revealLocked readies live task t for a list: the caller is about to hand
// t's id to someone who may not have had it from t's own answer
// (ListTasks), and t must then be in the file, as an early id is
// (create). A blocking send's task is not in the store while it runs (it
// is written first at its end: one write for a short task) and a later
// change may be queued but not yet committed: revealLocked writes t if it
// is not stored and reports that the caller must commit
// (TaskStore.Commit) before it answers. A terminal task was committed
// before anyone could read its state. The caller holds t.mu.
func (s *Server) revealLocked(t *task) bool {
	if s.db == nil || s.frozen.Load() || !t.liveLocked() {
		return false
	}
	if !t.stored {
		s.writeLocked(t)
	}
	return true
}

// writeLocked writes t's current state (CreateTask the first time, then
// UpdateTask) and reports success; a failure is logged: the task goes on in
// memory, and the database keeps its last written state. The caller holds
// t.mu.
func (s *Server) writeLocked(t *task) bool {
	t.dirty = false
	rec, err := t.recordLocked()
	if err != nil {
		s.log.Error("task not written to the database: it does not encode", "task", t.id, "err", err)
		return false
	}
	err = s.put(t, rec)
	if errors.Is(err, store.ErrTooBig) {
		// The store's per-record bounds count the JSON (base64 file bytes),
		// the engine's the parts as sent: keep the task's state and
		// messages at least, without what does not fit.
		if rec.ExecState != nil {
			s.log.Warn("executor state too big for the database: the task is written without it", "task", t.id, "bytes", len(rec.ExecState))
			rec.ExecState = nil
			err = s.put(t, rec)
		}
		if errors.Is(err, store.ErrTooBig) && rec.Artifacts != nil {
			s.log.Warn("artifacts too big for the database: the task is written without them", "task", t.id, "bytes", len(rec.Artifacts))
			rec.Artifacts = nil
			err = s.put(t, rec)
		}
	}
	if err != nil {
		if errors.Is(err, store.ErrTerminal) {
			return true // written terminal before (a late report)
		}
		if errors.Is(err, store.ErrFailed) && !s.dbFailed.Swap(true) {
			s.log.Error("the task database failed: new tasks are refused until meshtray restarts", "err", err)
		}
		s.log.Error("task not written to the database", "task", t.id, "state", t.status.State, "err", err)
		return false
	}
	t.stored = true
	return true
}

// put creates or updates rec, t's record.
func (s *Server) put(t *task, rec store.Task) error {
	ctx := context.Background()
	if t.stored {
		return s.db.UpdateTask(ctx, rec)
	}
	err := s.db.CreateTask(ctx, rec)
	if errors.Is(err, store.ErrExists) {
		err = s.db.UpdateTask(ctx, rec)
	}
	return err
}

// recordLocked is t as the store keeps it. The caller holds t.mu.
func (t *task) recordLocked() (store.Task, error) {
	r := store.Task{
		ID:              string(t.id),
		Owner:           t.owner,
		ContextID:       t.contextID,
		State:           store.State(t.status.State),
		Summary:         t.summary,
		ApprovedSummary: t.approvedSummary,
		Turns:           t.turns,
		Created:         t.created,
		Updated:         t.updated,
	}
	if t.caller != nil {
		r.Caller, r.Via = t.caller.DisplayName(), string(t.caller.Listener)
	}
	if t.status.State == a2a.TaskStateSubmitted {
		r.ApprovalDeadline = t.deadline
	}
	// The JSON cache (taskjson.go): each message and artifact is encoded
	// once, for this record and the task's answers.
	var err error
	if r.Status, err = t.statusJSONLocked(); err != nil {
		return r, err
	}
	hist, err := t.historyJSONLocked(0)
	if err != nil {
		return r, err
	}
	r.History = joinJSON(hist)
	if len(t.artifacts) > 0 {
		arts, err := t.artifactsJSONLocked()
		if err != nil {
			return r, err
		}
		r.Artifacts = joinJSON(arts)
	}
	// Encoded by SetValue (the executor may be changing the value now).
	r.ExecState = t.valueJSON
	return r, nil
}

// taskFromRecord rebuilds a stored task (not yet in the engine).
func (s *Server) taskFromRecord(r store.Task) (*task, error) {
	t := &task{
		srv:             s,
		id:              a2a.TaskID(r.ID),
		owner:           r.Owner,
		contextID:       r.ContextID,
		summary:         r.Summary,
		created:         r.Created,
		deadline:        r.ApprovalDeadline,
		approvedSummary: r.ApprovedSummary,
		updated:         r.Updated,
		turns:           r.Turns,
		restored:        true,
		stored:          true,
	}
	if t.deadline.IsZero() {
		t.deadline = t.created.Add(s.opts.ApprovalTimeout)
	}
	if r.Owner == "local" {
		t.caller = &pairing.Principal{Local: true, Listener: pairing.Listener(r.Via)}
	} else {
		t.caller = &pairing.Principal{Grant: pairing.Grant{ID: r.Owner, Name: r.Caller}, Listener: pairing.Listener(r.Via)}
	}
	if st := a2a.TaskState(r.State); st.Terminal() {
		// Read only if someone asks for it: a start with a full store
		// reads states, it decodes no histories.
		t.status = a2a.TaskStatus{State: st}
		t.lazy = &lazyTask{status: r.Status, history: r.History, artifacts: r.Artifacts}
		t.bytes = int64(len(r.History) + len(r.Artifacts))
		return t, nil
	}
	if err := json.Unmarshal(r.Status, &t.status); err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	if t.status.State == "" {
		t.status.State = a2a.TaskState(r.State)
	}
	var raws []json.RawMessage
	if len(r.History) > 0 {
		if err := json.Unmarshal(r.History, &raws); err != nil {
			return nil, fmt.Errorf("history: %w", err)
		}
	}
	live := !t.status.State.Terminal()
	for _, raw := range raws {
		m := new(a2a.Message)
		if err := json.Unmarshal(raw, m); err != nil {
			return nil, fmt.Errorf("history: %w", err)
		}
		t.history = append(t.history, m)
		if live { // a live task is written again: keep its history's JSON
			t.json.msgs = append(t.json.msgs, raw)
			t.json.size += len(raw)
		}
		t.bytes += int64(len(raw))
	}
	if len(r.Artifacts) > 0 {
		if err := json.Unmarshal(r.Artifacts, &t.artifacts); err != nil {
			return nil, fmt.Errorf("artifacts: %w", err)
		}
	}
	for _, a := range t.artifacts {
		for _, p := range a.Parts {
			t.artBytes += PartSize(p)
		}
	}
	t.bytes += t.artBytes
	if len(r.ExecState) > 0 && !bytes.Equal(r.ExecState, []byte("null")) {
		t.valueJSON = bytes.Clone(r.ExecState)
		t.value = json.RawMessage(t.valueJSON)
	}
	return t, nil
}

// lazyTask is the stored JSON of a restored terminal task's status,
// history and artifacts, decoded at its first snapshot (decodeLazyLocked;
// until then its status holds only the state).
type lazyTask struct {
	status, history, artifacts []byte
}

// decodeLazyLocked decodes a restored terminal task's history and
// artifacts; JSON that does not decode is logged and left out. The caller
// holds t.mu.
func (t *task) decodeLazyLocked() {
	l := t.lazy
	t.lazy = nil
	var st a2a.TaskStatus
	if err := json.Unmarshal(l.status, &st); err != nil || st.State != t.status.State {
		t.srv.log.Error("stored task status does not decode", "task", t.id, "err", err)
	} else {
		t.status = st
	}
	if len(l.history) > 0 {
		if err := json.Unmarshal(l.history, &t.history); err != nil {
			t.history = nil
			t.srv.log.Error("stored task history does not decode", "task", t.id, "err", err)
		}
	}
	if len(l.artifacts) > 0 {
		if err := json.Unmarshal(l.artifacts, &t.artifacts); err != nil {
			t.artifacts = nil
			t.srv.log.Error("stored task artifacts do not decode", "task", t.id, "err", err)
		}
	}
}

// Restored counts what Restore did.
type Restored struct {
	Tasks      int `json:"tasks"`      // tasks loaded
	Waiting    int `json:"waiting"`    // waiting for their callers again (input-required, auth-required)
	Approvals  int `json:"approvals"`  // asked of the Approver again, with their deadlines
	Reattached int `json:"reattached"` // running turns handed to the executor's Reattach
	Failed     int `json:"failed"`     // running when the node stopped: failed, RestartedText
	Rejected   int `json:"rejected"`   // waiting for approval past their deadlines: rejected
	Skipped    int `json:"skipped"`    // rows that do not decode (logged, left in the database)
}

// Restore loads the tasks of Options.Store into the engine, once, before
// the server serves: the owner reads them again over tasks/get, GetTask
// and ListTasks, and then
//
//   - a task waiting for its caller (input-required, auth-required) waits
//     again, answerable with message/send, its next turn on the executor
//     with the stored Execution.Value and history; its InterruptedTTL
//     counts from its last status;
//   - a task waiting for approval (submitted) is asked of the Approver
//     again with its stored deadline (TaskApproval.Deadline); past it, it
//     is rejected "no answer within <timeout>" without asking;
//   - a task that was running (working) goes to the executor's Reattach
//     (Reattacher) or, without one, ends failed with RestartedText.
//
// Terminal tasks are kept as they are, within MaxTasks and MaxStoredBytes
// (the oldest evicted from memory first). Without Options.Store, Restore
// does nothing. Errors: the store's, when its tasks cannot be read.
func (s *Server) Restore(ctx context.Context) (Restored, error) {
	var res Restored
	if s.db == nil {
		return res, nil
	}
	s.mu.Lock()
	if s.restoredOnce {
		s.mu.Unlock()
		return res, errors.New("a2a: Restore called twice")
	}
	s.restoredOnce = true
	s.mu.Unlock()
	rows, err := s.db.Tasks(ctx, store.TaskFilter{})
	if err != nil {
		return res, fmt.Errorf("a2a: restoring tasks: %w", err)
	}
	var terminal, approvals, running, expired, waiting []*task
	now := s.now()
	s.mu.Lock()
	for _, r := range rows {
		if _, dup := s.tasks[a2a.TaskID(r.ID)]; dup {
			continue
		}
		t, err := s.taskFromRecord(r)
		if err != nil {
			s.log.Error("stored task does not decode; left in the database", "task", r.ID, "err", err)
			res.Skipped++
			continue
		}
		res.Tasks++
		s.tasks[t.id] = t
		s.bytes += t.bytes
		st := t.status.State
		switch {
		case st.Terminal():
			terminal = append(terminal, t)
			continue
		case interrupted(st):
			s.live++
			t.parked = true
			s.parked[t.owner] = append(s.parked[t.owner], t)
			since := t.updated
			if ts := t.status.Timestamp; ts != nil {
				since = *ts
			}
			if left := s.opts.InterruptedTTL - now.Sub(since); left > 0 {
				turn := t.turns
				t.expiry = time.AfterFunc(left, func() { s.expire(t, turn) })
			} else {
				expired = append(expired, t)
			}
			waiting = append(waiting, t)
			res.Waiting++
			continue
		}
		s.live++
		s.liveByOwner[t.owner]++
		if st == a2a.TaskStateSubmitted {
			approvals = append(approvals, t)
		} else {
			running = append(running, t)
		}
	}
	// Oldest ended first, as they would have been evicted.
	slices.SortStableFunc(terminal, func(a, b *task) int { return a.updated.Compare(b.updated) })
	s.terminal = append(s.terminal, terminal...)
	for len(s.tasks) > s.opts.MaxTasks || s.bytes > s.opts.MaxStoredBytes {
		if !s.evictLocked() {
			break // only live tasks left: kept, they were admitted
		}
	}
	for owner := range s.parked {
		slices.SortStableFunc(s.parked[owner], func(a, b *task) int { return cmp.Compare(a.updated.UnixNano(), b.updated.UnixNano()) })
	}
	s.mu.Unlock()

	for _, t := range expired {
		s.expire(t, t.turns)
	}
	if wr, ok := s.opts.Executor.(WaitingRestorer); ok {
		for _, t := range waiting {
			ex := &Execution{s: s, t: t, msg: lastUserMessage(t), ctx: context.Background(), ended: true}
			wr.RestoredWaiting(ex)
		}
	}
	if s.opts.RequirePublished && !s.published.Load() {
		// A2A is off: nothing of the last run goes on (as if switched off
		// now; SetPublished(false) ran before the tasks were here).
		if n := s.cancelWhere(func(*task) bool { return true }, errSwitchedOff); n > 0 {
			s.log.Info("A2A is off: restored live tasks canceled", "tasks", n)
		}
		approvals, running = nil, nil
	}
	for _, t := range approvals {
		if !t.deadline.After(now) {
			s.settle(t, a2a.TaskStateRejected, agentMessage(fmt.Sprintf("rejected: no answer within %s; the deadline passed while this device was stopped",
				t.deadline.Sub(t.created).Round(time.Second))))
			res.Rejected++
			continue
		}
		if !s.startRestoredTurn(t, turnApprove, firstMessage(t)) {
			break
		}
		res.Approvals++
	}
	ra, canReattach := s.opts.Executor.(Reattacher)
	_ = ra
	for _, t := range running {
		if !canReattach {
			s.settle(t, a2a.TaskStateFailed, agentMessage(RestartedText))
			res.Failed++
			continue
		}
		if !s.startRestoredTurn(t, turnReattach, lastUserMessage(t)) {
			break
		}
		res.Reattached++
	}
	owners := make(map[string]bool)
	s.mu.Lock()
	for owner := range s.parked {
		owners[owner] = true
	}
	s.mu.Unlock()
	for owner := range owners {
		s.trimParked(owner)
	}
	if res.Tasks > 0 {
		s.log.Info("tasks restored from the database", "tasks", res.Tasks, "waiting", res.Waiting, "approvals", res.Approvals,
			"reattached", res.Reattached, "failed", res.Failed, "rejected", res.Rejected, "skipped", res.Skipped)
	}
	return res, nil
}

// startRestoredTurn starts the turn of a restored task; false once the
// server is shutting down.
func (s *Server) startRestoredTurn(t *task, kind turnKind, msg *a2a.Message) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.inflight++
	s.mu.Unlock()
	ctx, cancel := context.WithCancelCause(context.Background())
	t.cancel, t.done = cancel, make(chan struct{})
	ex := &Execution{s: s, t: t, msg: msg, ctx: ctx}
	go s.runTurn(ctx, t, ex, kind)
	return true
}

func firstMessage(t *task) *a2a.Message {
	if len(t.history) > 0 {
		return t.history[0]
	}
	return &a2a.Message{Role: a2a.MessageRoleUser, TaskID: t.id, ContextID: t.contextID}
}

// lastUserMessage is the message of the turn that was running: the last
// one from the caller.
func lastUserMessage(t *task) *a2a.Message {
	for i := len(t.history) - 1; i >= 0; i-- {
		if m := t.history[i]; m.Role == a2a.MessageRoleUser {
			return m
		}
	}
	return firstMessage(t)
}

// reattach runs the executor's Reattach, turning a panic into an error.
func (s *Server) reattach(ctx context.Context, ex *Execution) (err error) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("executor panic", "task", ex.t.id, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			err = errors.New("the executor failed unexpectedly")
		}
	}()
	return s.opts.Executor.(Reattacher).Reattach(ctx, ex)
}
