package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	agent "meshtray/a2a"
	"meshtray/store"
)

// The outbound view across restarts: every task is written to the node's
// database (OutboundOptions.Store), and Restore reads them back at start
// and follows up each live one at its agent.

// OutboundStore keeps the outbound view: package store's *Store.
type OutboundStore interface {
	// PutOutbound inserts or replaces a task by ID; a terminal one is on
	// the disk when it returns (store.Store.PutOutbound).
	PutOutbound(context.Context, store.Outbound) error
	// OutboundTasks returns every kept task, oldest first.
	OutboundTasks(context.Context) ([]store.Outbound, error)
}

const (
	// progressDelay is how long new artifacts and status texts wait to be
	// written with others (a stream of chunks is one write, not one each).
	progressDelay = 250 * time.Millisecond
	// storeTimeout bounds one write (a stalled disk must not hold a
	// follower forever).
	storeTimeout = 10 * time.Second
)

// Defaults of OutboundOptions.FollowUpFirst and FollowUpMax: an agent that
// cannot be reached is tried again after 1 s, doubling to 1 min.
const (
	DefaultFollowUpFirst = time.Second
	DefaultFollowUpMax   = time.Minute
)

// unreachablePrefix starts the Error of a restored task whose agent cannot
// be reached (it stays live and is tried again).
const unreachablePrefix = "cannot reach the agent: "

// lostAtRestart is the status text of a task the node had sent but the
// agent had not answered when the node stopped: nothing names it at the
// agent, so it cannot be followed.
const lostAtRestart = "the node restarted before the agent answered; whether the agent took this task is unknown"

// always is commit's durable predicate for changes written before they
// are shown whatever they are.
func always(*outEntry) bool { return true }

// commit changes e with fn, which reports whether it changed anything, and
// records the change. Without a Store it is changed in place. With one, a
// change durable reports for e (a new state, an exchange ending, the
// task's first record) is made on a copy, written (a terminal state synced
// to the disk), and only then shown; any other change (new artifacts, a
// new status text) is shown at once and written with the next batch.
func (o *Outbound) commit(e *outEntry, durable func(*outEntry) bool, fn func(*outEntry) bool) bool {
	o.wmu.Lock()
	defer o.wmu.Unlock()
	o.mu.Lock()
	kept := o.o.Store != nil && o.byID[e.view.ID] == e && !e.final
	if !kept || e.stored && !durable(e) {
		ok := fn(e)
		if ok {
			if kept {
				o.dirtyLocked(e)
			}
			e.notifyLocked()
		}
		o.mu.Unlock()
		if ok {
			o.changed()
		}
		return ok
	}
	c := e.cloneLocked()
	if !fn(c) {
		o.mu.Unlock()
		return false
	}
	rec := c.recordLocked()
	o.mu.Unlock()
	o.put(rec)
	o.mu.Lock()
	e.installLocked(c)
	e.stored, e.final = true, rec.State.Terminal()
	delete(o.dirty, e)
	e.notifyLocked()
	o.mu.Unlock()
	o.changed()
	return true
}

// edit changes e in place (a change nobody must see on the disk first)
// and writes it with the next batch.
func (o *Outbound) edit(e *outEntry, fn func(*outEntry)) {
	o.wmu.Lock()
	o.mu.Lock()
	fn(e)
	if o.o.Store != nil && o.byID[e.view.ID] == e && e.stored && !e.final {
		o.dirtyLocked(e)
	}
	e.notifyLocked()
	o.mu.Unlock()
	o.wmu.Unlock()
	o.changed()
}

// dirtyLocked queues e for the next batch write.
func (o *Outbound) dirtyLocked(e *outEntry) {
	o.dirty[e] = struct{}{}
	if o.flushTimer == nil {
		o.flushTimer = time.AfterFunc(progressDelay, o.flush)
	}
}

// flush writes the entries changed since they were last written.
func (o *Outbound) flush() {
	if o.o.Store == nil {
		return
	}
	o.wmu.Lock()
	defer o.wmu.Unlock()
	o.mu.Lock()
	var recs []store.Outbound
	for e := range o.dirty {
		if o.byID[e.view.ID] == e && !e.final {
			r := e.recordLocked()
			recs = append(recs, r)
			e.final = r.State.Terminal()
		}
	}
	clear(o.dirty)
	if o.flushTimer != nil {
		o.flushTimer.Stop()
		o.flushTimer = nil
	}
	o.mu.Unlock()
	slices.SortFunc(recs, func(a, b store.Outbound) int { return a.Created.Compare(b.Created) })
	for _, r := range recs {
		o.put(r)
	}
}

// put writes one record. A failure is logged (the view goes on in memory;
// the task is what its agent says, written or not).
func (o *Outbound) put(r store.Outbound) {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	err := o.o.Store.PutOutbound(ctx, r)
	if errors.Is(err, store.ErrTooBig) && r.Artifacts != nil {
		// Parts whose JSON outgrows the store's bound (escaped text): the
		// task is kept without them, marked truncated.
		o.log.Warn("a delegated task's parts are too big for the database; kept without them", "task", r.ID, "err", err)
		r.Artifacts, r.Truncated = nil, true
		err = o.o.Store.PutOutbound(ctx, r)
	}
	switch {
	case err == nil:
	case errors.Is(err, store.ErrTerminal):
		o.log.Debug("a delegated task is already written as ended", "task", r.ID)
	default:
		o.log.Error("a delegated task was not written to the database", "task", r.ID, "state", r.State, "err", err)
	}
}

// cloneLocked copies what a change of e may touch.
func (e *outEntry) cloneLocked() *outEntry {
	c := &outEntry{view: e.view, agent: e.agent, wantStream: e.wantStream, bytes: e.bytes, stored: e.stored, final: e.final, checking: e.checking}
	if e.view.Artifacts != nil {
		c.view.Artifacts = make([]OutboundArtifact, len(e.view.Artifacts))
		for i, a := range e.view.Artifacts {
			c.view.Artifacts[i] = OutboundArtifact{ID: a.ID, Name: a.Name, Parts: slices.Clone(a.Parts)}
		}
	}
	c.artIdx = maps.Clone(e.artIdx)
	c.arts.parts = maps.Clone(e.arts.parts)
	return c
}

// installLocked takes the changed copy c of e.
func (e *outEntry) installLocked(c *outEntry) {
	e.view, e.arts, e.artIdx, e.bytes, e.checking = c.view, c.arts, c.artIdx, c.bytes, c.checking
}

// recordLocked is e as the store keeps it. A terminal task is written as
// followed by nobody and without meshtray's trouble (its exchange ends with
// the event that ended it). A state the store does not know (an agent's
// "unknown") is kept as working: live, followed up after a restart.
func (e *outEntry) recordLocked() store.Outbound {
	v := e.view
	st, err := store.ParseState(string(v.State))
	if err != nil {
		st = store.StateWorking
	}
	var arts []byte
	if len(v.Artifacts) > 0 {
		arts, _ = json.Marshal(v.Artifacts)
	}
	r := store.Outbound{
		ID: v.ID, TaskID: v.TaskID, ContextID: v.ContextID,
		Agent: v.Agent, AgentName: v.AgentName, AgentKind: string(v.AgentKind),
		Request: v.Request, State: st, Message: v.Message, Error: v.Error,
		Following: v.Following, Streaming: v.Streaming,
		Artifacts: arts, Truncated: v.Truncated, Created: v.Created, Updated: v.Updated,
	}
	if st.Terminal() {
		r.Following, r.Error = false, ""
	}
	return r
}

// entryOf rebuilds an entry from its record.
func (o *Outbound) entryOf(r store.Outbound) (*outEntry, error) {
	e := &outEntry{
		agent:      Agent{ID: r.Agent, Name: r.AgentName, Kind: AgentKind(r.AgentKind)},
		wantStream: r.Streaming, // what the last exchange used: an answer does the same
		stored:     true,
		final:      r.State.Terminal(),
		view: OutboundTask{
			ID: r.ID, TaskID: r.TaskID, ContextID: r.ContextID,
			Agent: r.Agent, AgentName: r.AgentName, AgentKind: AgentKind(r.AgentKind),
			Request: r.Request, State: a2a.TaskState(r.State), Message: r.Message, Error: r.Error,
			Streaming: r.Streaming, Truncated: r.Truncated, Created: r.Created, Updated: r.Updated,
		},
	}
	if len(r.Artifacts) > 0 {
		if err := json.Unmarshal(r.Artifacts, &e.view.Artifacts); err != nil {
			return nil, fmt.Errorf("outbound task %s: artifacts: %w", r.ID, err)
		}
	}
	e.artIdx = make(map[a2a.ArtifactID]int, len(e.view.Artifacts))
	e.arts.parts = make(map[a2a.ArtifactID]int, len(e.view.Artifacts))
	for i, a := range e.view.Artifacts {
		id := a2a.ArtifactID(a.ID)
		e.artIdx[id], e.arts.parts[id] = i, len(a.Parts)
		for _, p := range a.Parts {
			e.bytes += agent.PartSize(p)
		}
	}
	return e, nil
}

// Restore reads the view kept by Store (at start, before any delegation)
// and follows up every live task at its agent on its own goroutine:
// tasks/get (GetTask in 1.0), then polling as a delegation does until the
// task is terminal or waits for input. A task its agent no longer knows
// ends failed saying so; one whose agent cannot be reached stays live with
// Error "cannot reach the agent: ..." and is tried again with backoff
// (followUpFirst doubling to followUpMax) for at most MaxFollow. A
// delegation is written once its agent answered (Delegate returns then), so
// one still waiting for that answer is not kept; a live record without a
// task id (none is written so) would end failed: nothing names it at the
// agent. A record that cannot be read is skipped and logged. It returns
// how many tasks it restored.
func (o *Outbound) Restore(ctx context.Context) (int, error) {
	if o.o.Store == nil {
		return 0, nil
	}
	recs, err := o.o.Store.OutboundTasks(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the outbound tasks: %w", err)
	}
	var live []*outEntry
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return 0, fmt.Errorf("%w: shutting down", agent.ErrUnavailable)
	}
	n := 0
	for _, r := range recs {
		e, err := o.entryOf(r)
		if err != nil {
			o.log.Warn("an outbound task in the database cannot be read; skipped", "err", err)
			continue
		}
		if o.byID[e.view.ID] != nil || len(o.order) >= o.o.Max {
			continue
		}
		o.byID[e.view.ID] = e
		o.order = append(o.order, e)
		n++
		if !e.view.State.Terminal() {
			live = append(live, e)
		}
	}
	o.wg.Add(len(live))
	o.mu.Unlock()
	for _, e := range live {
		go func() {
			defer o.wg.Done()
			o.followUp(e, nil)
		}()
	}
	return n, nil
}

// followUp follows e up at its agent until the task settles or the node
// gives up: a task restored live (Restore; lost nil), and one whose
// exchange lost contact with its agent (lost: the transient error; the
// first try waits). It is the one follow-up of both. Each try is one
// tasks/get, then polling (followUpOnce). While the agent cannot be
// reached the task stays live with Error "cannot reach the agent: ...;
// trying again at ..." and RetryAt, and is tried again after
// FollowUpFirst, doubling up to FollowUpMax (jittered), for at most
// MaxFollow from the start; then Error says the node stopped trying. The
// caller counts it in o.wg.
func (o *Outbound) followUp(e *outEntry, lost error) {
	fctx, cancel := context.WithTimeoutCause(o.ctx, o.o.MaxFollow, errFollowLimit)
	defer cancel()
	o.mu.Lock()
	id, taskID := e.view.ID, e.view.TaskID
	o.mu.Unlock()
	if taskID == "" {
		now := o.o.Now()
		o.commit(e, always, func(e *outEntry) bool {
			e.view.State, e.view.Message, e.view.Error, e.view.Following = a2a.TaskStateFailed, lostAtRestart, "", false
			e.view.Updated = now
			return true
		})
		return
	}
	delay := o.o.FollowUpFirst
	err := lost
	for {
		if err == nil {
			// Take the task unless it ended (a cancel) or someone follows
			// it (an answer) meanwhile.
			if !o.commit(e, always, func(x *outEntry) bool {
				if x.view.State.Terminal() || x.view.Following || o.byID[x.view.ID] != e {
					return false
				}
				x.view.Following, x.checking, x.view.RetryAt = true, true, time.Time{}
				return true
			}) {
				return
			}
			err = o.followUpOnce(fctx, e)
			if fctx.Err() != nil && errors.Is(context.Cause(fctx), errFollowLimit) {
				if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
					err = errors.New("no answer")
				}
				err = fmt.Errorf("%w: the node stopped following this task after %s (%v); it may go on at the agent (`meshtray cancel %s` stops it there)",
					errFollowLimit, o.o.MaxFollow, err, id)
			}
			if err == nil || !errors.Is(err, context.Canceled) && !errors.Is(err, errFollowLimit) {
				o.o.Agents.report(e.agent, err)
			}
			if err == nil || !transient(err) || fctx.Err() != nil {
				o.finish(e, err, true, false)
				return
			}
		}
		wait := jitter(delay)
		now := o.o.Now()
		at := now.Add(wait)
		cause := err
		o.commit(e, always, func(e *outEntry) bool {
			e.view.Following, e.checking = false, false
			e.view.Error = unreachablePrefix + cause.Error() + "; trying again at " + at.Local().Format(time.TimeOnly)
			e.view.RetryAt = at
			e.view.Updated = now
			return true
		})
		o.log.Info("cannot reach the agent of a delegated task; trying again", "task", id, "agent", e.agent.ID, "in", wait.Round(time.Millisecond), "err", err)
		t := time.NewTimer(wait)
		select {
		case <-fctx.Done():
			t.Stop()
			o.edit(e, func(e *outEntry) {
				e.view.RetryAt = time.Time{}
				e.view.Error = unreachablePrefix + cause.Error()
				if errors.Is(context.Cause(fctx), errFollowLimit) {
					e.view.Error = fmt.Sprintf("%s%v; the node stopped trying after %s (`meshtray cancel %s` still reaches the agent when it is back)",
						unreachablePrefix, cause, o.o.MaxFollow, e.view.ID)
				}
			})
			return
		case <-t.C:
		}
		err = nil
		delay = min(delay*2, o.o.FollowUpMax)
	}
}

// followUpOnce asks the agent for the task once (so an agent that forgot it
// or cannot be reached is known at once), then polls it until it settles.
func (o *Outbound) followUpOnce(ctx context.Context, e *outEntry) error {
	o.mu.Lock()
	agentID, taskID := e.agent.ID, a2a.TaskID(e.view.TaskID)
	o.mu.Unlock()
	// A disabled agent is still asked: the task is already there.
	rem, _, err := o.o.Agents.open(ctx, agentID, true)
	if err != nil {
		return err
	}
	defer rem.Close()
	rem.pollTolerance = 1 // lost again: back to followUp's backoff
	t, err := rem.client.GetTask(ctx, &a2a.TaskQueryParams{ID: taskID})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return rem.classify(err)
	}
	if t.ID == "" {
		t.ID = taskID
	}
	// Reached: what kept the node from following is over.
	o.edit(e, func(e *outEntry) { e.view.Error = "" })
	o.apply(e, t)
	if settled(t.Status.State) {
		return nil
	}
	return rem.poll(ctx, taskID, nil, func(ev a2a.Event) { o.apply(e, ev) })
}
