package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
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

func (s *Store) checkTask(t *Task) error {
	if t.ID == "" || t.Owner == "" {
		return fmt.Errorf("%w: a task needs an id and an owner", ErrInvalid)
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

// CreateTask stores a new task. To make room it evicts the oldest terminal
// tasks (in the order they ended, like the in-memory store), never a live
// one: with MaxTasks live tasks stored, or live tasks holding
// MaxStoredBytes, it is refused with ErrFull. Other errors: ErrExists,
// ErrTooBig, ErrInvalid. It returns once committed (synced when the task is
// created terminal).
func (s *Store) CreateTask(ctx context.Context, t Task) error {
	if err := s.checkTask(&t); err != nil {
		return err
	}
	return s.write(ctx, t.State.Terminal(), func(b *batch) error {
		// A refused write's evictions are undone with its savepoint.
		for b.st.tasks >= s.opts.MaxTasks {
			ok, err := s.evictTask(b)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%w: %d tasks are stored and all are live", ErrFull, b.st.tasks)
			}
		}
		if err := s.reserveTaskBytes(b, t.bytes()); err != nil {
			return err
		}
		var ended any
		if t.State.Terminal() {
			b.st.ended++
			ended = b.st.ended
		}
		_, err := b.exec(`INSERT INTO tasks (id, owner, context_id, state, caller, via, summary, approved_summary,
			status, history, artifacts, exec_state, turns, bytes, created, updated, approval_deadline, ended_seq)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			t.ID, t.Owner, t.ContextID, string(t.State), t.Caller, t.Via, t.Summary, t.ApprovedSummary,
			t.Status, t.History, t.Artifacts, t.ExecState, t.Turns, t.bytes(), ns(t.Created), ns(t.Updated),
			ns(t.ApprovalDeadline), ended)
		if err != nil {
			if isUniqueViolation(err) {
				return fmt.Errorf("%w: task %s", ErrExists, t.ID)
			}
			return err
		}
		b.st.tasks++
		b.st.bytes += t.bytes()
		return nil
	})
}

// reserveTaskBytes evicts terminal tasks until n more bytes fit.
func (s *Store) reserveTaskBytes(b *batch, n int64) error {
	for b.st.bytes+n > s.opts.MaxStoredBytes {
		ok, err := s.evictTask(b)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: live tasks hold %d bytes of messages and artifacts", ErrFull, b.st.bytes)
		}
	}
	return nil
}

// evictTask deletes the oldest terminal task; false when there is none.
func (s *Store) evictTask(b *batch) (bool, error) {
	var id string
	var n int64
	err := b.queryRow("SELECT id, bytes FROM tasks WHERE ended_seq IS NOT NULL ORDER BY ended_seq LIMIT 1").Scan(&id, &n)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if _, err := b.exec("DELETE FROM tasks WHERE id = ?", id); err != nil {
		return false, err
	}
	b.st.tasks--
	b.st.bytes -= n
	return true, nil
}

// UpdateTask replaces the stored task t.ID of t.Owner (another owner's
// task is ErrNotFound, as a missing one; Created stays as stored). A terminal task takes no update (ErrTerminal): no transition
// leaves a terminal state. Growing bytes may evict terminal tasks (ErrFull
// when only live ones are left). A task reaching a terminal state is synced
// to the disk before UpdateTask returns; any other update is committed.
// Errors: ErrNotFound, ErrTerminal, ErrTooBig, ErrFull, ErrInvalid.
func (s *Store) UpdateTask(ctx context.Context, t Task) error {
	if t.Updated.IsZero() {
		t.Updated = s.now()
	}
	if err := s.checkTask(&t); err != nil {
		return err
	}
	return s.write(ctx, t.State.Terminal(), func(b *batch) error {
		var old, owner string
		var oldBytes int64
		err := b.queryRow("SELECT state, owner, bytes FROM tasks WHERE id = ?", t.ID).Scan(&old, &owner, &oldBytes)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && owner != t.Owner) {
			return fmt.Errorf("%w: task %s", ErrNotFound, t.ID)
		}
		if err != nil {
			return err
		}
		if State(old).Terminal() {
			return fmt.Errorf("%w: task %s is %s", ErrTerminal, t.ID, old)
		}
		if grow := t.bytes() - oldBytes; grow > 0 {
			// The task itself is live, so eviction never takes it.
			if err := s.reserveTaskBytes(b, grow); err != nil {
				return err
			}
		}
		var ended any
		if t.State.Terminal() {
			b.st.ended++
			ended = b.st.ended
		}
		if _, err := b.exec(`UPDATE tasks SET context_id = ?, state = ?, caller = ?, via = ?, summary = ?,
			approved_summary = ?, status = ?, history = ?, artifacts = ?, exec_state = ?, turns = ?, bytes = ?,
			updated = ?, approval_deadline = ?, ended_seq = ? WHERE id = ?`,
			t.ContextID, string(t.State), t.Caller, t.Via, t.Summary, t.ApprovedSummary, t.Status, t.History,
			t.Artifacts, t.ExecState, t.Turns, t.bytes(), ns(t.Updated), ns(t.ApprovalDeadline), ended, t.ID); err != nil {
			return err
		}
		b.st.bytes += t.bytes() - oldBytes
		return nil
	})
}

// DeleteTask removes task id (ErrNotFound when there is none).
func (s *Store) DeleteTask(ctx context.Context, id string) error {
	return s.write(ctx, false, func(b *batch) error {
		var n int64
		err := b.queryRow("DELETE FROM tasks WHERE id = ? RETURNING bytes", id).Scan(&n)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: task %s", ErrNotFound, id)
		}
		if err != nil {
			return err
		}
		b.st.tasks--
		b.st.bytes -= n
		return nil
	})
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

// Task returns task id (ErrNotFound when there is none).
func (s *Store) Task(ctx context.Context, id string) (Task, error) {
	t, err := scanTask(s.db.QueryRowContext(ctx, "SELECT "+taskColumns+" FROM tasks WHERE id = ?", id))
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
	rows, err := s.db.QueryContext(ctx, q, args...)
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
		out = append(out, t)
	}
	return out, rows.Err()
}

// TaskCount returns the number of stored tasks and of live ones.
func (s *Store) TaskCount(ctx context.Context) (total, live int, err error) {
	err = s.db.QueryRowContext(ctx, "SELECT count(*), count(*) - count(ended_seq) FROM tasks").Scan(&total, &live)
	return total, live, err
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
	rows, err := s.db.QueryContext(ctx, "SELECT owner, context_id, upstream, used FROM contexts ORDER BY used")
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
