package a2a

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/pairing"
)

// Execution is one executor turn of one task, handed to Executor.Execute.
// Its methods are safe for concurrent use. Reports made after ctx is
// canceled, after the task became terminal, or after Execute returned are
// ignored: the engine owns the task's state.
type Execution struct {
	s   *Server
	t   *task
	msg *a2a.Message
	ctx context.Context

	// guarded by t.mu
	ended   bool
	outcome *outcome
}

type outcome struct {
	state a2a.TaskState
	msg   *a2a.Message
}

// TaskID is the task's server-minted id.
func (e *Execution) TaskID() a2a.TaskID { return e.t.id }

// ContextID is the task's contextId as the caller knows it (the engine
// namespaces it by owner internally; see Server).
func (e *Execution) ContextID() string { return e.t.contextID }

// Caller is the authenticated principal that created the task. For a task
// restored from the database (Options.Store) it is rebuilt from what was
// stored (grant id and name, listener) until the caller answers it; the
// answering request's principal (the same owner) is the caller from then.
func (e *Execution) Caller() *pairing.Principal {
	e.t.mu.Lock()
	defer e.t.mu.Unlock()
	return e.t.caller
}

// Message is this turn's message from the caller: the task's first message
// on the first turn, the caller's answer on a resumed input-required task.
// It is shared with the task's history: read it, do not change it.
func (e *Execution) Message() *a2a.Message { return e.msg }

// History is a copy of the task's history so far (caller messages and the
// agent's input-required questions, oldest first; this turn's message last).
func (e *Execution) History() []*a2a.Message {
	e.t.mu.Lock()
	defer e.t.mu.Unlock()
	return append([]*a2a.Message(nil), e.t.history...)
}

// ApprovedSummary is the summary the owner approved for this task, or ""
// when no person decided (the grant's policy allowed it). An executor may
// treat exactly that action as already consented to.
func (e *Execution) ApprovedSummary() string {
	e.t.mu.Lock()
	defer e.t.mu.Unlock()
	return e.t.approvedSummary
}

// Value returns the executor-private state kept on the task across turns
// (nil at first). It is never sent on the wire. With Options.Store it is
// also written to the database as JSON (encoding/json), so it must
// encode; in a task restored from the database it is that JSON, a
// json.RawMessage, which DecodeValue decodes.
func (e *Execution) Value() any {
	e.t.mu.Lock()
	defer e.t.mu.Unlock()
	return e.t.value
}

// DecodeValue decodes into v (a pointer) the state of a task restored
// from the database, where Value is the JSON it was stored as. It reports
// false, leaving v as it is, when Value is not such JSON (nil, or a value
// set in this process) or does not decode into v.
func (e *Execution) DecodeValue(v any) bool {
	raw, ok := e.Value().(json.RawMessage)
	if !ok || len(raw) == 0 {
		return false
	}
	return json.Unmarshal(raw, v) == nil
}

// SetValue replaces the executor-private state kept across turns. With
// Options.Store it is encoded to JSON here, on the caller's goroutine, and
// written with the task (behind, or with the turn's end): v must not
// change while SetValue runs, and changes made to it afterwards reach the
// database only with the next SetValue (so an executor sets it again at
// the end of its turn, and whenever what it holds must survive a restart
// of a running turn, see Reattacher). A value that does not encode is
// logged and not written.
func (e *Execution) SetValue(v any) {
	var enc []byte
	if e.s.db != nil && v != nil {
		var err error
		if enc, err = json.Marshal(v); err != nil {
			e.s.log.Error("executor state does not encode to JSON: not written to the database", "task", e.t.id, "type", fmt.Sprintf("%T", v), "err", err)
		}
	}
	e.t.mu.Lock()
	defer e.t.mu.Unlock()
	if !e.ended {
		e.t.value, e.t.valueJSON = v, enc
		e.s.persistLocked(e.t, false)
	}
}

// activeLocked reports whether reports are still taken.
func (e *Execution) activeLocked() bool {
	return !e.ended && e.ctx.Err() == nil && !e.t.status.State.Terminal()
}

// Working reports progress: a status-update in state working carrying text
// (no message when text is empty).
func (e *Execution) Working(text string) {
	now := e.s.now()
	e.t.mu.Lock()
	defer e.t.mu.Unlock()
	if e.activeLocked() {
		e.t.setStatusLocked(a2a.TaskStateWorking, agentMessage(text), now)
	}
}

// Artifact adds a new artifact named name to the task and emits its
// artifact-update event; it returns the artifact's id for AppendArtifact
// ("" when the report was ignored, or dropped: over MaxArtifacts,
// MaxArtifactBytes or the store's MaxStoredBytes).
func (e *Execution) Artifact(name string, parts ...a2a.Part) a2a.ArtifactID {
	art := &a2a.Artifact{ID: a2a.NewArtifactID(), Name: name, Parts: parts}
	now := e.s.now()
	e.t.mu.Lock()
	defer e.t.mu.Unlock()
	if !e.activeLocked() {
		return ""
	}
	if len(e.t.artifacts) >= e.s.opts.MaxArtifacts {
		e.s.log.Warn("artifact dropped: per-task limit", "task", e.t.id, "limit", e.s.opts.MaxArtifacts)
		return ""
	}
	if err := e.reserveLocked(parts); err != nil {
		e.s.log.Warn("artifact dropped", "task", e.t.id, "err", err)
		return ""
	}
	e.t.artifacts = append(e.t.artifacts, art)
	e.t.updated = now
	e.t.emitLocked(&a2a.TaskArtifactUpdateEvent{TaskID: e.t.id, ContextID: e.t.contextID, Artifact: art}, false)
	e.s.persistLocked(e.t, false)
	return art.ID
}

// AppendArtifact appends parts to the artifact id made by Artifact and
// emits an artifact-update with append:true (A2A spec §7.2.2); lastChunk
// marks the artifact's last chunk. Parts over the task's MaxArtifactBytes
// are refused with an error wrapping ErrUnavailable, over the store's
// MaxStoredBytes with one wrapping ErrStoreFull.
func (e *Execution) AppendArtifact(id a2a.ArtifactID, lastChunk bool, parts ...a2a.Part) error {
	now := e.s.now()
	e.t.mu.Lock()
	defer e.t.mu.Unlock()
	if !e.activeLocked() {
		return fmt.Errorf("%w: the turn has ended", ErrUnavailable)
	}
	for i, a := range e.t.artifacts {
		if a.ID != id {
			continue
		}
		if err := e.reserveLocked(parts); err != nil {
			return err
		}
		// Copy on write: snapshots already handed out keep the old value.
		na := *a
		na.Parts = append(append(a2a.ContentParts(nil), a.Parts...), parts...)
		e.t.artifacts[i] = &na
		e.t.updated = now
		chunk := &a2a.Artifact{ID: id, Name: a.Name, Parts: parts}
		e.t.emitLocked(&a2a.TaskArtifactUpdateEvent{
			TaskID: e.t.id, ContextID: e.t.contextID, Artifact: chunk, Append: true, LastChunk: lastChunk,
		}, false)
		e.s.persistLocked(e.t, false)
		return nil
	}
	return fmt.Errorf("a2a: no artifact %q in task %s", id, e.t.id)
}

// reserveLocked books the bytes of artifact parts against the task's
// MaxArtifactBytes and the store's MaxStoredBytes (evicting terminal
// tasks as needed).
func (e *Execution) reserveLocked(parts []a2a.Part) error {
	var n int64
	for _, p := range parts {
		n += PartSize(p)
	}
	if limit := e.s.opts.MaxArtifactBytes; e.t.artBytes+n > limit {
		return fmt.Errorf("%w: the artifacts of task %s would exceed %d bytes", ErrUnavailable, e.t.id, limit)
	}
	e.s.mu.Lock()
	err := e.s.reserveLocked(false, n)
	if err == nil {
		e.t.bytes += n
	}
	e.s.mu.Unlock()
	if err != nil {
		return err
	}
	e.t.artBytes += n
	return nil
}

// InputRequired ends the turn asking the caller for more: the task goes to
// input-required with an agent message of text and parts when Execute
// returns. The caller answers with message/send on the same taskId, which
// starts the next turn.
func (e *Execution) InputRequired(text string, parts ...a2a.Part) {
	e.setOutcome(a2a.TaskStateInputRequired, text, parts)
}

// Complete ends the task completed, with an optional agent message, when
// Execute returns.
func (e *Execution) Complete(text string, parts ...a2a.Part) {
	e.setOutcome(a2a.TaskStateCompleted, text, parts)
}

// Fail ends the task failed, with a message saying why, when Execute
// returns.
func (e *Execution) Fail(text string, parts ...a2a.Part) {
	e.setOutcome(a2a.TaskStateFailed, text, parts)
}

// Reject ends the task rejected, with a message saying why, when Execute
// returns: the work was refused (the owner or a policy denied it), not
// attempted and failed (A2A 0.3.0 §6.3 TaskState "rejected").
func (e *Execution) Reject(text string, parts ...a2a.Part) {
	e.setOutcome(a2a.TaskStateRejected, text, parts)
}

func (e *Execution) setOutcome(state a2a.TaskState, text string, parts []a2a.Part) {
	e.t.mu.Lock()
	defer e.t.mu.Unlock()
	if e.ended || e.outcome != nil {
		return
	}
	e.outcome = &outcome{state: state, msg: agentMessage(text, parts...)}
}

// agentMessage builds an agent message of text (when not empty) followed
// by parts; nil when both are empty.
func agentMessage(text string, parts ...a2a.Part) *a2a.Message {
	if text == "" && len(parts) == 0 {
		return nil
	}
	ps := make(a2a.ContentParts, 0, len(parts)+1)
	if text != "" {
		ps = append(ps, a2a.TextPart{Text: text})
	}
	ps = append(ps, parts...)
	return &a2a.Message{ID: a2a.NewMessageID(), Role: a2a.MessageRoleAgent, Parts: ps}
}
