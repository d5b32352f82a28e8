package a2a

import (
	"context"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/pairing"
)

// Executor runs the work of approved tasks. The task engine owns states,
// history, the event log and cancellation; an Executor only does the work and
// reports through the Execution it is handed.
//
// Execute runs one turn: the first after the owner approved the task, and one
// more each time the caller answers an input-required task with message/send
// on the same taskId. A turn ends when Execute returns. Before returning it
// calls exactly one of ex.Complete, ex.Fail, ex.Reject or
// ex.InputRequired; returning
// without one completes the task when it returns nil and fails it with the
// error's text otherwise. When ctx is canceled (tasks/cancel, shutdown) the
// work must stop and Execute return promptly; the engine then ends the task
// canceled, whatever Execute reported.
type Executor interface {
	Execute(ctx context.Context, ex *Execution) error
}

// Summarizer is an optional Executor interface: Summarize turns the first
// message of a task into the one-line text the owner approves ("device.info",
// `system.notify {"title":"hi"}`). The engine passes it through
// textsafe.EscapeInvisible and bounds it to nodes.MaxSummaryRunes (both
// idempotent), so control and bidirectional characters a caller sent show
// as escapes. Without it the summary is the first line of the message's
// text (else its data as JSON), followed by the names of its files.
type Summarizer interface {
	Summarize(caller *pairing.Principal, msg *a2a.Message) string
}

// TaskApproval is what the owner is asked before a new task runs.
type TaskApproval struct {
	TaskID    a2a.TaskID
	ContextID string // as the caller sent it (not namespaced)
	Caller    *pairing.Principal
	// Summary is the one line the owner approves (see Summarizer): escaped,
	// at most nodes.MaxSummaryRunes runes.
	Summary string
	Message *a2a.Message
	// Deadline is when the request is refused unanswered: the task's
	// creation plus Options.ApprovalTimeout, kept across a restart (a task
	// restored waiting for approval is asked again with its original
	// deadline). The approver shows it and refuses at it.
	Deadline time.Time
	// Queued is for an Approver that implements QueueingApprover: it calls
	// it just before the request is queued for a person, and the task then
	// shows "waiting for approval on <device>" to its caller; the engine
	// commits that state to the database before Queued returns, so a
	// request the owner sees always has its task on disk. Never nil; calls
	// after the first, or after the decision, do nothing.
	Queued func()
}

// QueueingApprover is an optional Approver interface. ReportsQueued true
// says that ApproveTask calls TaskApproval.Queued when, and only when, it
// puts the request in front of a person, so a task decided by a policy
// never shows "waiting for approval". For an Approver without it (or
// false) the engine cannot tell, and every task shows that status from its
// creation.
type QueueingApprover interface {
	Approver
	ReportsQueued() bool
}

// Decision is the outcome of an approval.
type Decision struct {
	Approved bool
	// ByOwner is true when a person decided (popup, CLI, API), false when a
	// policy (allow/deny) or the timeout did.
	ByOwner bool
	// Reason explains a refusal ("denied by the owner", "no answer within
	// 2m0s", "policy deny for grant phone").
	Reason string
	// Caller, when set, is the task's caller as the Approver found it now
	// (the same owner, with its grant as it is): a task restored from the
	// database runs under it, since its stored caller holds only the
	// grant's id and name (no policy, no scopes). nil keeps the task's.
	Caller *pairing.Principal
}

// Approver decides whether a new task may run. It blocks until a decision,
// ctx's end, or its own timeout (which is a refusal with a reason).
type Approver interface {
	ApproveTask(ctx context.Context, a TaskApproval) Decision
}
