package app

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"meshtray/pairing"
)

// ApprovalKind is what an approval is about.
type ApprovalKind string

const (
	KindDelegation ApprovalKind = "delegation" // a new incoming A2A task
	KindCapability ApprovalKind = "capability" // a capability call under policy ask
	KindPairing    ApprovalKind = "pairing"    // a device claiming a pairing code
	KindFiles      ApprovalKind = "files"      // files sent to this device (an incoming A2A task with FileParts)
)

// Approval is one request waiting for the owner (GET /approvals).
type Approval struct {
	ID      string       `json:"id"`
	Kind    ApprovalKind `json:"kind"`
	GrantID string       `json:"grant_id,omitempty"`
	// Peer is the requester's name: the grant's name, or the name a pairing
	// claimant gave.
	Peer     string `json:"peer"`
	DeviceID string `json:"device_id,omitempty"` // short device ID when known
	OS       string `json:"os,omitempty"`
	// Via is the listener the request arrived on: loopback, tailnet or lan.
	Via         string `json:"via,omitempty"`
	Addr        string `json:"addr,omitempty"`
	TailnetUser string `json:"tailnet_user,omitempty"`
	TailnetNode string `json:"tailnet_node,omitempty"`
	// Summary is one line: the message's first line, the capability call,
	// or "pair as <name>".
	Summary string `json:"summary"`
	// Detail is the full text the owner should read before deciding: the
	// message text, the call's parameters.
	Detail string         `json:"detail,omitempty"`
	Scopes pairing.Scopes `json:"scopes,omitempty"` // requested scopes (pairing)
	SAS    string         `json:"sas,omitempty"`    // pairing: must match the claimant's screen
	TaskID string         `json:"task_id,omitempty"`
	// Files are the files of a transfer (KindFiles), in sending order, at
	// most maxApprovalFiles (FilesMore counts the rest); TotalSize is the
	// bytes of all of them and Dir the folder they are saved in.
	Files     []ApprovalFile `json:"files,omitempty"`
	FilesMore int            `json:"files_more,omitempty"`
	TotalSize int64          `json:"total_size,omitempty"`
	Dir       string         `json:"dir,omitempty"`
	// Created and Expires bound the wait; at Expires the request is refused.
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
}

// ApprovalFile is one file of a transfer waiting for the owner.
type ApprovalFile struct {
	// Path is the path it was sent under ("folder/name.ext"), escaped like
	// summaries (textsafe.EscapeInvisible) and bounded.
	Path      string `json:"path"`
	Size      int64  `json:"size"`
	MediaType string `json:"media_type,omitempty"`
}

// Decision values of ApprovalDecision.Decision.
const (
	DecisionApprove = "approve"
	DecisionDeny    = "deny"
)

// ApprovalDecision is the owner's answer (POST /approvals/{id}).
type ApprovalDecision struct {
	Decision string `json:"decision"` // approve | deny
	// Scopes are the scopes granted to a pairing claimant (default: what it
	// requested, narrowed to agent,node... see Decide).
	Scopes pairing.Scopes `json:"scopes,omitempty"`
	// Always sets the grant's policy to allow (delegations and capability
	// calls): "Always allow from this device"; for files, the grant's
	// files policy: "Always allow files from this device".
	Always bool `json:"always,omitempty"`
	// Where the decision was made: store.WhereTray, WhereCLI or WherePhone
	// as the deciding client says; the node sets WherePolicy and
	// WhereTimeout itself. Empty is read as the CLI.
	Where string `json:"where,omitempty"`
	// By is who decided: "owner" for the person at this device, else the
	// short device ID of the device that decided (an approve grant).
	By string `json:"-"`
	// Reason is filled by the queue for refusals: "denied by the owner",
	// "no answer within 2m0s", "withdrawn".
	Reason string `json:"-"`
	// ByOwner is true when a person decided.
	ByOwner bool `json:"-"`
}

// Approved reports whether the decision is an approval.
func (d ApprovalDecision) Approved() bool { return d.Decision == DecisionApprove }

var (
	// ErrNoApproval: no pending approval has that id (decided, expired or unknown).
	ErrNoApproval = errors.New("no pending approval with that id")
	// ErrQueueFull: too many approvals are pending; the request is refused
	// at once rather than queued.
	ErrQueueFull = errors.New("too many pending approvals")
	// ErrBadDecision: the decision is neither approve nor deny.
	ErrBadDecision = errors.New(`decision must be "approve" or "deny"`)
)

// Bounds of the approvals queue: a stranger with a grant must not be able to
// flood the owner's screen or our memory.
const (
	maxPendingApprovals  = 64
	maxPendingPerGrant   = 8
	approvalIDEntropyLen = 10 // bytes of randomness in an approval id
)

// Approvals is the one queue of requests waiting for the owner: delegations,
// capability calls and pairing claims. The tray popup, the CLI and the local
// API all read and decide through it.
type Approvals struct {
	timeout time.Duration
	publish func() // change notice; never blocks

	mu    sync.Mutex
	items map[string]*pendingApproval // guarded by mu
	order []string                    // guarded by mu; ids in arrival order
}

type pendingApproval struct {
	a        Approval
	onDecide func(ApprovalDecision) // called exactly once, without mu held
	timer    *time.Timer
}

func newApprovals(timeout time.Duration, publish func()) *Approvals {
	if publish == nil {
		publish = func() {}
	}
	return &Approvals{timeout: timeout, publish: publish, items: make(map[string]*pendingApproval)}
}

func newApprovalID() string {
	b := make([]byte, approvalIDEntropyLen)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b)
}

// Post queues a; onDecide is called exactly once with the owner's decision,
// or a denial when a expires (a.Expires, or now + the queue timeout when
// zero) or is withdrawn. It returns the approval id.
func (q *Approvals) Post(a Approval, onDecide func(ApprovalDecision)) (string, error) {
	now := time.Now()
	a.ID = newApprovalID()
	a.Created = now
	if a.Expires.IsZero() {
		a.Expires = now.Add(q.timeout)
	}
	q.mu.Lock()
	if len(q.items) >= maxPendingApprovals {
		q.mu.Unlock()
		return "", ErrQueueFull
	}
	if a.GrantID != "" {
		n := 0
		for _, p := range q.items {
			if p.a.GrantID == a.GrantID {
				n++
			}
		}
		if n >= maxPendingPerGrant {
			q.mu.Unlock()
			return "", fmt.Errorf("%w from %s", ErrQueueFull, a.Peer)
		}
	}
	p := &pendingApproval{a: a, onDecide: onDecide}
	q.items[a.ID] = p
	q.order = append(q.order, a.ID)
	wait := time.Until(a.Expires)
	p.timer = time.AfterFunc(wait, func() {
		q.finish(a.ID, ApprovalDecision{Decision: DecisionDeny, Reason: "no answer within " + wait.Round(time.Second).String()})
	})
	q.mu.Unlock()
	q.publish()
	return a.ID, nil
}

// Ask queues a and waits for the decision. It returns a denial with a reason
// when a expires, and ctx's error (the approval withdrawn) when ctx ends first.
func (q *Approvals) Ask(ctx context.Context, a Approval) (ApprovalDecision, error) {
	return q.askQueued(ctx, a, nil)
}

// Decide records the owner's decision for id.
func (q *Approvals) Decide(id string, d ApprovalDecision) error {
	if d.Decision != DecisionApprove && d.Decision != DecisionDeny {
		return ErrBadDecision
	}
	d.ByOwner = true
	if d.Decision == DecisionDeny && d.Reason == "" {
		d.Reason = "denied by the owner"
	}
	if !q.finish(id, d) {
		return ErrNoApproval
	}
	return nil
}

// Withdraw removes id without a decision from the owner (the requester went
// away); its onDecide sees a denial "withdrawn".
func (q *Approvals) Withdraw(id string) {
	q.finish(id, ApprovalDecision{Decision: DecisionDeny, Reason: "withdrawn"})
}

func (q *Approvals) finish(id string, d ApprovalDecision) bool {
	q.mu.Lock()
	p, ok := q.items[id]
	if ok {
		delete(q.items, id)
		q.order = slices.DeleteFunc(q.order, func(x string) bool { return x == id })
		p.timer.Stop()
	}
	q.mu.Unlock()
	if !ok {
		return false
	}
	p.onDecide(d)
	q.publish()
	return true
}

// Get returns the pending approval id.
func (q *Approvals) Get(id string) (Approval, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	p, ok := q.items[id]
	if !ok {
		return Approval{}, false
	}
	return p.a, true
}

// List returns the pending approvals, oldest first.
func (q *Approvals) List() []Approval {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]Approval, 0, len(q.order))
	for _, id := range q.order {
		out = append(out, q.items[id].a)
	}
	return out
}

// Close refuses every pending approval ("node shutting down").
func (q *Approvals) Close() {
	for _, a := range q.List() {
		q.finish(a.ID, ApprovalDecision{Decision: DecisionDeny, Reason: "node shutting down"})
	}
}
