package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// State is an A2A task state in the 0.3 wire form (A2A 0.3 §6.3
// TaskState: "submitted", "working", ...). ParseState also takes the 1.0
// form ("TASK_STATE_SUBMITTED", A2A 1.0 §4.1.3), so a task written by
// either protocol's engine reads the same.
type State string

// Task states.
const (
	StateSubmitted     State = "submitted"
	StateWorking       State = "working"
	StateInputRequired State = "input-required"
	StateAuthRequired  State = "auth-required"
	StateCompleted     State = "completed"
	StateCanceled      State = "canceled"
	StateFailed        State = "failed"
	StateRejected      State = "rejected"
)

// ParseState returns the State for a 0.3 or 1.0 wire name.
func ParseState(v string) (State, error) {
	s := v
	if rest, ok := strings.CutPrefix(v, "TASK_STATE_"); ok {
		s = strings.ReplaceAll(strings.ToLower(rest), "_", "-")
		if s == "cancelled" {
			s = "canceled"
		}
	}
	switch st := State(s); st {
	case StateSubmitted, StateWorking, StateInputRequired, StateAuthRequired,
		StateCompleted, StateCanceled, StateFailed, StateRejected:
		return st, nil
	}
	return "", fmt.Errorf("%w: unknown task state %q", ErrInvalid, v)
}

// Terminal reports completed, canceled, failed and rejected: no transition
// leaves them (A2A 0.3 §6.3).
func (s State) Terminal() bool {
	switch s {
	case StateCompleted, StateCanceled, StateFailed, StateRejected:
		return true
	}
	return false
}

// Interrupted reports input-required and auth-required: the task waits for
// its caller.
func (s State) Interrupted() bool {
	return s == StateInputRequired || s == StateAuthRequired
}

// Task is one incoming A2A task as the engine stores it. The JSON fields
// are the engine's own (the store neither parses nor changes them); their
// bytes count toward the bounds.
type Task struct {
	ID        string // the task id the server minted
	Owner     string // pairing.Principal.Owner() of the creator
	ContextID string // the caller's contextId (the wire form)
	State     State
	// Caller is the requester's name and Via the listener its request
	// arrived on (loopback, tailnet, lan), for the approval after a
	// restart.
	Caller string
	Via    string
	// Summary is what the owner is (or was) asked to approve;
	// ApprovedSummary what was approved.
	Summary         string
	ApprovedSummary string
	Status          []byte // the task's status JSON (state, message, timestamp)
	History         []byte // JSON array of the task's messages
	Artifacts       []byte // JSON array of the task's artifacts
	ExecState       []byte // the executor's state across turns (Execution.Value)
	Turns           int    // executor turns started
	Created         time.Time
	Updated         time.Time
	// ApprovalDeadline is when a task waiting for approval is rejected;
	// zero when it does not wait.
	ApprovalDeadline time.Time
}

func (t *Task) bytes() int64 { return int64(len(t.History) + len(t.Artifacts)) }

// MaxText bounds every text field of a record (ids, names, summaries,
// details), in bytes; a longer one is ErrTooBig. The JSON fields have
// their own bounds (Options).
const MaxText = 64 << 10

// checkText refuses a text field over MaxText.
func checkText(what string, fields ...string) error {
	for _, f := range fields {
		if len(f) > MaxText {
			return fmt.Errorf("%w: a %s text field is %d bytes, over %d", ErrTooBig, what, len(f), MaxText)
		}
	}
	return nil
}

func (s *Store) checkTask(t *Task) error {
	if t.ID == "" || t.Owner == "" {
		return fmt.Errorf("%w: a task needs an id and an owner", ErrInvalid)
	}
	if err := checkText("task", t.ID, t.Owner, t.ContextID, t.Caller, t.Via, t.Summary, t.ApprovedSummary); err != nil {
		return err
	}
	if n := len(t.Status) + len(t.ExecState); n > MaxText {
		return fmt.Errorf("%w: task %s status and executor state are %d bytes, over %d", ErrTooBig, t.ID, n, MaxText)
	}
	st, err := ParseState(string(t.State))
	if err != nil {
		return err
	}
	t.State = st
	if n := int64(len(t.History)); n > s.opts.MaxTaskHistoryBytes {
		return fmt.Errorf("%w: task %s history is %d bytes, over %d", ErrTooBig, t.ID, n, s.opts.MaxTaskHistoryBytes)
	}
	if n := int64(len(t.Artifacts)); n > s.opts.MaxTaskArtifactBytes {
		return fmt.Errorf("%w: task %s artifacts are %d bytes, over %d", ErrTooBig, t.ID, n, s.opts.MaxTaskArtifactBytes)
	}
	if t.Created.IsZero() {
		t.Created = s.now()
	}
	if t.Updated.IsZero() {
		t.Updated = t.Created
	}
	return nil
}

// taskIndex is what the store knows of its tasks in memory, so a task
// write is admitted (bounds, duplicates, owner, terminal state) when it is
// made and only its rows go to the writer: the rules are the in-memory
// engine's (a2a.Server.reserveLocked and evictLocked), and the writer's
// statements cannot refuse.
type taskIndex struct {
	mu    sync.Mutex
	byID  map[string]*taskMeta
	ended []*taskMeta // terminal tasks in the order they ended, from head
	head  int
	bytes int64 // history + artifact bytes of every stored task
	seq   int64 // last ended_seq given
	// evicted are tasks evicted from the index whose rows are still in the
	// file (their bytes: evictedBytes); the write that brings them to
	// evictChunk rows or evictBytes deletes them all (deferEvictedLocked).
	evicted      map[string]bool
	evictedBytes int64
}

// Evicted rows are deleted in chunks: rows that ended one after the other
// share their b-tree pages, so one DELETE of many costs the WAL about the
// pages of one, where a DELETE per new task writes them every time. The
// file holds at most evictChunk-1 evicted rows and evictBytes of their
// messages and artifacts beyond the bounds; nothing reads them (reads go
// through the index), and Open deletes what a stop left.
const (
	evictChunk = 64
	evictBytes = 1 << 20
)

type taskMeta struct {
	id      string
	owner   string
	created time.Time
	bytes   int64
	ended   int64 // ended_seq; 0 while live
	gone    bool  // deleted or evicted (still in ended until popped)
	// pending is the task as last written behind, until the commit that
	// carries it: Task reads it from here.
	pending atomic.Pointer[Task]
}

// loadIndex reads the index from the tasks table.
func (s *Store) loadIndex(ctx context.Context) error {
	s.idx.byID = make(map[string]*taskMeta)
	rows, err := s.wc.QueryContext(ctx, "SELECT id, owner, created, bytes, coalesce(ended_seq, 0) FROM tasks ORDER BY ended_seq IS NULL, ended_seq")
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		m := &taskMeta{}
		var created int64
		if err := rows.Scan(&m.id, &m.owner, &created, &m.bytes, &m.ended); err != nil {
			return err
		}
		m.created = fromNS(created)
		s.idx.byID[m.id] = m
		s.idx.bytes += m.bytes
		if m.ended != 0 {
			s.idx.ended = append(s.idx.ended, m)
			s.idx.seq = max(s.idx.seq, m.ended)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	rows.Close()
	return s.trimTasks(ctx)
}

// trimTasks deletes, at Open, the oldest terminal tasks beyond MaxTasks
// and MaxStoredBytes: evicted rows a stop left in the file (evictChunk), or
// a bound lowered since the last run.
func (s *Store) trimTasks(ctx context.Context) error {
	x := &s.idx
	var ids []string
	for len(x.byID) > s.opts.MaxTasks || x.bytes > s.opts.MaxStoredBytes {
		if x.head >= len(x.ended) {
			break // only live tasks left: kept
		}
		v := x.ended[x.head] // removeLocked moves head past the removed
		s.removeLocked(v)
		ids = append(ids, v.id)
	}
	if len(ids) == 0 {
		return nil
	}
	tx, err := s.wc.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, id := range ids {
		if _, err := tx.ExecContext(ctx, "DELETE FROM tasks WHERE id = ?", id); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// victimsLocked returns the oldest terminal tasks to evict so that one
// more task (when newTask) and grow more bytes fit, without changing the
// index; ErrFull when live tasks alone leave no room.
func (s *Store) victimsLocked(newTask bool, grow int64) ([]*taskMeta, error) {
	x := &s.idx
	count, bytes := len(x.byID), x.bytes
	var out []*taskMeta
	i := x.head
	for (newTask && count >= s.opts.MaxTasks) || bytes+grow > s.opts.MaxStoredBytes {
		for i < len(x.ended) && x.ended[i].gone {
			i++
		}
		if i >= len(x.ended) {
			if newTask && count >= s.opts.MaxTasks {
				return nil, fmt.Errorf("%w: %d tasks are stored and all are live", ErrFull, count)
			}
			return nil, fmt.Errorf("%w: live tasks hold %d bytes of messages and artifacts", ErrFull, bytes)
		}
		v := x.ended[i]
		i++
		out = append(out, v)
		count--
		bytes -= v.bytes
	}
	return out, nil
}

// removeLocked drops m from the index (its ended entry is skipped later).
func (s *Store) removeLocked(m *taskMeta) {
	x := &s.idx
	m.gone = true
	delete(x.byID, m.id)
	x.bytes -= m.bytes
	for x.head < len(x.ended) && x.ended[x.head].gone {
		x.ended[x.head] = nil
		x.head++
	}
	if x.head > 64 && x.head*2 > len(x.ended) {
		n := copy(x.ended, x.ended[x.head:])
		clear(x.ended[n:])
		x.ended = x.ended[:n]
		x.head = 0
	}
}

// endLocked books m as terminal now and returns its ended_seq.
func (s *Store) endLocked(m *taskMeta) int64 {
	s.idx.seq++
	m.ended = s.idx.seq
	s.idx.ended = append(s.idx.ended, m)
	return m.ended
}

// taskWriteLocked queues an admitted task write: write-behind for submitted and
// working (nothing was acknowledged that a restart must keep), committed
// for input-required and auth-required (the caller was asked), committed
// for a terminal state too, and synced under DurableSync. The caller holds
// s.idx.mu, so writes reach the queue in the order they were admitted.
func (s *Store) taskWriteLocked(m *taskMeta, t *Task, fn func(b *batch) error) (wait *op, err error) {
	o := &op{fn: fn}
	if t.State.Terminal() {
		o.sync = syncTask
	}
	if t.State.Terminal() || t.State.Interrupted() {
		o.done = make(chan error, 1)
		m.pending.Store(nil) // reads wait for the commits queued before
	} else {
		p := new(Task)
		*p = *t
		p.Created = m.created
		m.pending.Store(p)
		o.committed = func() { m.pending.CompareAndSwap(p, nil) }
	}
	// Not ctx: the index already counts the write, so it must be queued
	// (the writer always drains the queue).
	if err := s.enqueue(context.Background(), o); err != nil {
		return nil, err
	}
	if o.done == nil {
		return nil, nil
	}
	return o, nil
}

func deleteVictims(b *batch, victims []*taskMeta) error {
	for _, v := range victims {
		if _, err := b.exec("DELETE FROM tasks WHERE id = ?", v.id); err != nil {
			return err
		}
	}
	return nil
}

// deferEvictedLocked books victims (already removed from the index) as
// evicted and returns the ids whose rows the write must delete now: none
// until evictChunk rows or evictBytes are waiting, then all of them; all of
// them, too, when id (the task being created) is among them. The caller
// holds s.idx.mu.
func (s *Store) deferEvictedLocked(victims []*taskMeta, id string) []string {
	x := &s.idx
	if x.evicted == nil {
		x.evicted = make(map[string]bool)
	}
	for _, v := range victims {
		x.evicted[v.id] = true
		x.evictedBytes += v.bytes
	}
	if len(x.evicted) < evictChunk && x.evictedBytes < evictBytes && !x.evicted[id] {
		return nil
	}
	ids := make([]string, 0, len(x.evicted))
	for id := range x.evicted {
		ids = append(ids, id)
	}
	clear(x.evicted)
	x.evictedBytes = 0
	return ids
}

// deleteEvicted deletes the rows of ids.
func deleteEvicted(b *batch, ids []string) error {
	for _, id := range ids {
		if _, err := b.exec("DELETE FROM tasks WHERE id = ?", id); err != nil {
			return err
		}
	}
	return nil
}

// CreateTask stores a new task. To make room it evicts the oldest terminal
// tasks (in the order they ended, like the in-memory store), never a live
// one: with MaxTasks live tasks stored, or live tasks holding
// MaxStoredBytes, it is refused with ErrFull. Other errors: ErrExists,
// ErrTooBig, ErrInvalid, ErrFailed, ErrClosed.
//
// A task created submitted or working is written behind: CreateTask
// returns once the write is admitted and queued, and the next group commit
// (normally within a millisecond) carries it; reads see it at once.
// Created input-required or auth-required, it returns once committed;
// created terminal, once committed (and synced to the disk under
// DurableSync).
func (s *Store) CreateTask(ctx context.Context, t Task) error {
	if err := s.checkTask(&t); err != nil {
		return err
	}
	s.idx.mu.Lock()
	if _, ok := s.idx.byID[t.ID]; ok {
		s.idx.mu.Unlock()
		return fmt.Errorf("%w: task %s", ErrExists, t.ID)
	}
	victims, err := s.victimsLocked(true, t.bytes())
	if err != nil {
		s.idx.mu.Unlock()
		return err
	}
	if err := s.failure(); err != nil {
		s.idx.mu.Unlock()
		return err
	}
	for _, v := range victims {
		s.removeLocked(v)
	}
	gone := s.deferEvictedLocked(victims, t.ID)
	m := &taskMeta{id: t.ID, owner: t.Owner, created: t.Created, bytes: t.bytes()}
	s.idx.byID[t.ID] = m
	s.idx.bytes += m.bytes
	var ended any
	if t.State.Terminal() {
		ended = s.endLocked(m)
	}
	wait, err := s.taskWriteLocked(m, &t, func(b *batch) error {
		if err := deleteEvicted(b, gone); err != nil {
			return err
		}
		_, err := b.exec(`INSERT INTO tasks (id, owner, context_id, state, caller, via, summary, approved_summary,
			status, history, artifacts, exec_state, turns, bytes, created, updated, approval_deadline, ended_seq)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			t.ID, t.Owner, t.ContextID, string(t.State), t.Caller, t.Via, t.Summary, t.ApprovedSummary,
			t.Status, t.History, t.Artifacts, t.ExecState, t.Turns, t.bytes(), ns(t.Created), ns(t.Updated),
			ns(t.ApprovalDeadline), ended)
		return err
	})
	s.idx.mu.Unlock()
	if err != nil || wait == nil {
		return err
	}
	return s.await(wait)
}

// UpdateTask replaces the stored task t.ID of t.Owner (another owner's
// task is ErrNotFound, as a missing one; Created stays as stored). A
// terminal task takes no update (ErrTerminal): no transition leaves a
// terminal state. Growing bytes may evict terminal tasks (ErrFull when
// only live ones are left). Durability as for CreateTask, by t.State:
// submitted and working are written behind, input-required and
// auth-required committed, a terminal state committed (synced under
// DurableSync) before UpdateTask returns. Errors: ErrNotFound, ErrTerminal, ErrTooBig, ErrFull,
// ErrInvalid, ErrFailed, ErrClosed.
func (s *Store) UpdateTask(ctx context.Context, t Task) error {
	if t.Updated.IsZero() {
		t.Updated = s.now()
	}
	if err := s.checkTask(&t); err != nil {
		return err
	}
	s.idx.mu.Lock()
	m := s.idx.byID[t.ID]
	if m == nil || m.owner != t.Owner {
		s.idx.mu.Unlock()
		return fmt.Errorf("%w: task %s", ErrNotFound, t.ID)
	}
	if m.ended != 0 {
		s.idx.mu.Unlock()
		return fmt.Errorf("%w: task %s has ended", ErrTerminal, t.ID)
	}
	// m is live, so it is never among the victims.
	victims, err := s.victimsLocked(false, t.bytes()-m.bytes)
	if err != nil {
		s.idx.mu.Unlock()
		return err
	}
	if err := s.failure(); err != nil {
		s.idx.mu.Unlock()
		return err
	}
	for _, v := range victims {
		s.removeLocked(v)
	}
	gone := s.deferEvictedLocked(victims, "")
	s.idx.bytes += t.bytes() - m.bytes
	m.bytes = t.bytes()
	var ended any
	if t.State.Terminal() {
		ended = s.endLocked(m)
	}
	wait, err := s.taskWriteLocked(m, &t, func(b *batch) error {
		if err := deleteEvicted(b, gone); err != nil {
			return err
		}
		_, err := b.exec(`UPDATE tasks SET context_id = ?, state = ?, caller = ?, via = ?, summary = ?,
			approved_summary = ?, status = ?, history = ?, artifacts = ?, exec_state = ?, turns = ?, bytes = ?,
			updated = ?, approval_deadline = ?, ended_seq = ? WHERE id = ?`,
			t.ContextID, string(t.State), t.Caller, t.Via, t.Summary, t.ApprovedSummary, t.Status, t.History,
			t.Artifacts, t.ExecState, t.Turns, t.bytes(), ns(t.Updated), ns(t.ApprovalDeadline), ended, t.ID)
		return err
	})
	s.idx.mu.Unlock()
	if err != nil || wait == nil {
		return err
	}
	return s.await(wait)
}

// DeleteTask removes task id (ErrNotFound when there is none). It returns
// once committed.
func (s *Store) DeleteTask(ctx context.Context, id string) error {
	s.idx.mu.Lock()
	m := s.idx.byID[id]
	if m == nil {
		s.idx.mu.Unlock()
		return fmt.Errorf("%w: task %s", ErrNotFound, id)
	}
	if err := s.failure(); err != nil {
		s.idx.mu.Unlock()
		return err
	}
	s.removeLocked(m)
	o := &op{fn: func(b *batch) error { return deleteVictims(b, []*taskMeta{m}) }, done: make(chan error, 1)}
	err := s.enqueue(context.Background(), o) // the index already dropped it
	s.idx.mu.Unlock()
	if err != nil {
		return err
	}
	return s.await(o)
}

const taskColumns = `id, owner, context_id, state, caller, via, summary, approved_summary, status, history,
	artifacts, exec_state, turns, created, updated, approval_deadline`

func scanTask(sc interface{ Scan(...any) error }) (Task, error) {
	var t Task
	var state string
	var created, updated, deadline int64
	err := sc.Scan(&t.ID, &t.Owner, &t.ContextID, &state, &t.Caller, &t.Via, &t.Summary, &t.ApprovedSummary,
		&t.Status, &t.History, &t.Artifacts, &t.ExecState, &t.Turns, &created, &updated, &deadline)
	t.State = State(state)
	t.Created, t.Updated, t.ApprovalDeadline = fromNS(created), fromNS(updated), fromNS(deadline)
	return t, err
}

// Task returns task id (ErrNotFound when there is none): a task last
// written behind is answered from memory (the same bytes that are being
// committed), any other from the database.
func (s *Store) Task(ctx context.Context, id string) (Task, error) {
	if err := s.failure(); err != nil {
		return Task{}, err
	}
	s.idx.mu.Lock()
	m := s.idx.byID[id]
	s.idx.mu.Unlock()
	if m == nil {
		return Task{}, fmt.Errorf("%w: task %s", ErrNotFound, id)
	}
	if p := m.pending.Load(); p != nil {
		return *p, nil
	}
	if err := s.settle(ctx); err != nil {
		return Task{}, err
	}
	t, err := scanTask(s.queryRow(ctx, "SELECT "+taskColumns+" FROM tasks WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return Task{}, fmt.Errorf("%w: task %s", ErrNotFound, id)
	}
	return t, err
}

// TaskFilter selects tasks for Tasks; zero fields select everything.
type TaskFilter struct {
	Owner     string
	ContextID string // with Owner
	Live      bool   // only tasks not in a terminal state
}

// Tasks returns the tasks matching f, oldest first (by creation).
func (s *Store) Tasks(ctx context.Context, f TaskFilter) ([]Task, error) {
	if err := s.settle(ctx); err != nil {
		return nil, err
	}
	q := "SELECT " + taskColumns + " FROM tasks WHERE 1=1"
	var args []any
	if f.Owner != "" {
		q += " AND owner = ?"
		args = append(args, f.Owner)
		if f.ContextID != "" {
			q += " AND context_id = ?"
			args = append(args, f.ContextID)
		}
	}
	if f.Live {
		q += " AND ended_seq IS NULL"
	}
	q += " ORDER BY created, id"
	rows, err := s.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, err
		}
		if !s.indexed(t.ID) {
			continue // evicted, its row not deleted yet (evictChunk)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// TaskCount returns the number of stored tasks and of live ones.
func (s *Store) TaskCount(ctx context.Context) (total, live int, err error) {
	if err := s.settle(ctx); err != nil {
		return 0, 0, err
	}
	// From the index: the file may hold evicted rows (evictChunk).
	s.idx.mu.Lock()
	defer s.idx.mu.Unlock()
	for _, m := range s.idx.byID {
		total++
		if m.ended == 0 {
			live++
		}
	}
	return total, live, nil
}

// indexed reports whether task id is stored (in the index).
func (s *Store) indexed(id string) bool {
	s.idx.mu.Lock()
	defer s.idx.mu.Unlock()
	return s.idx.byID[id] != nil
}

// ContextLink maps a caller's context (Owner, ContextID) to the context an
// upstream agent minted for it (the forward executor's map).
type ContextLink struct {
	Owner     string
	ContextID string
	Upstream  string
	Used      time.Time
}

// PutContext stores (or refreshes) a link, evicting the least recently used
// beyond MaxContexts. It returns once committed.
func (s *Store) PutContext(ctx context.Context, l ContextLink) error {
	if l.Owner == "" || l.ContextID == "" || l.Upstream == "" {
		return fmt.Errorf("%w: a context link needs an owner, a contextId and an upstream contextId", ErrInvalid)
	}
	if err := checkText("context link", l.Owner, l.ContextID, l.Upstream); err != nil {
		return err
	}
	if l.Used.IsZero() {
		l.Used = s.now()
	}
	return s.write(ctx, false, func(b *batch) error {
		var n int
		if err := b.queryRow("SELECT count(*) FROM contexts WHERE owner = ? AND context_id = ?", l.Owner, l.ContextID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			for b.st.contexts >= s.opts.MaxContexts {
				if _, err := b.exec(`DELETE FROM contexts WHERE (owner, context_id) =
					(SELECT owner, context_id FROM contexts ORDER BY used LIMIT 1)`); err != nil {
					return err
				}
				b.st.contexts--
			}
			b.st.contexts++
		}
		_, err := b.exec(`INSERT INTO contexts (owner, context_id, upstream, used) VALUES (?, ?, ?, ?)
			ON CONFLICT (owner, context_id) DO UPDATE SET upstream = excluded.upstream, used = excluded.used`,
			l.Owner, l.ContextID, l.Upstream, ns(l.Used))
		return err
	})
}

// Contexts returns every link, least recently used first.
func (s *Store) Contexts(ctx context.Context) ([]ContextLink, error) {
	rows, err := s.query(ctx, "SELECT owner, context_id, upstream, used FROM contexts ORDER BY used")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ContextLink
	for rows.Next() {
		var l ContextLink
		var used int64
		if err := rows.Scan(&l.Owner, &l.ContextID, &l.Upstream, &used); err != nil {
			return nil, err
		}
		l.Used = fromNS(used)
		out = append(out, l)
	}
	return out, rows.Err()
}

// DeleteContexts removes every link of owner (a revoked grant).
func (s *Store) DeleteContexts(ctx context.Context, owner string) error {
	return s.write(ctx, false, func(b *batch) error {
		res, err := b.exec("DELETE FROM contexts WHERE owner = ?", owner)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		b.st.contexts -= int(n)
		return nil
	})
}
