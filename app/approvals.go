package app

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"meshtray/pairing"
	"meshtray/store"
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
	// Restored marks a request kept across a restart of the node (its
	// row in the database). A restored pairing request has no SAS.
	Restored bool `json:"restored,omitempty"`
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
	// short device ID of the device that decided (an approve grant); the
	// queue sets decidedByNode for a timeout, a withdrawal or a restart.
	By string `json:"-"`
	// Reason is filled by the queue for refusals: "denied by the owner",
	// "no answer within 2m0s", "withdrawn".
	Reason string `json:"-"`
	// ByOwner is true when a person decided.
	ByOwner bool `json:"-"`
	// Withdrawn: nobody decided; the request went away first (its caller
	// canceled it or went away, A2A was switched off, its grant was paused
	// or revoked). A denial, audited with the outcome "withdrawn".
	Withdrawn bool `json:"-"`
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
	// ErrShuttingDown: the node is stopping; a decision now is not taken
	// (the request is kept for the next start).
	ErrShuttingDown = errors.New("the node is shutting down: decide after it starts again")
)

// Bounds of the approvals queue: a stranger with a grant must not be able to
// flood the owner's screen or our memory.
const (
	maxPendingApprovals  = 64
	maxPendingPerGrant   = 8
	approvalIDEntropyLen = 10 // bytes of randomness in an approval id
)

// Audit vocabulary of the queue's decisions (store.KindApproval entries):
// DecidedBy is "owner" or a device ID for a person (DecidedVia tray, cli or
// phone), "policy" for the grant's policy (DecidedVia policy), and
// decidedByNode when nobody decided: a timeout (DecidedVia timeout), the
// request withdrawn (its caller went away, its grant paused or revoked) or
// the node restarted (DecidedVia ""). Result is "approved", "denied", or
// "withdrawn" for a request that went away before anyone decided
// (ApprovalDecision.Withdrawn). Params says why a request was refused
// (the decision's Reason: withdrawnReason's words for a withdrawal) or
// what an approval granted.
const (
	decidedByOwner  = "owner"
	decidedByPolicy = "policy"
	decidedByNode   = "node"

	// reasonRestarted ends a request nobody can answer after a restart: a
	// capability call (its caller's request ended with the process), or
	// a delegation whose task was not restored waiting.
	reasonRestarted = "the node restarted"
	reasonShutdown  = "node shutting down"
)

// dbTimeout bounds one database write of the queue (a disk that stalls
// must not hold a request or a decision forever).
const dbTimeout = 10 * time.Second

// Approvals is the one queue of requests waiting for the owner: delegations,
// capability calls and pairing claims. The tray popup, the CLI and the local
// API all read and decide through it.
//
// With a database (attach) every pending request is a row (store.Approval),
// written before the request is listed, and every decision removes the row
// and appends its audit entry in one durable transaction
// (store.ResolveApproval) before the requester learns the decision and
// before Decide returns: what the owner was told was decided is on disk.
// A graceful stop leaves the rows as a kill -9 does: the next start lists
// them again (restore).
type Approvals struct {
	timeout time.Duration
	publish func() // change notice; never blocks
	log     *slog.Logger

	mu    sync.Mutex
	db    *store.Store                // nil: in memory only; guarded by mu
	items map[string]*pendingApproval // guarded by mu
	order []string                    // guarded by mu; ids in arrival order
	// restored holds delegation rows of an earlier run by task ID, until
	// the engine asks again for their task (Post re-uses them) or they
	// expire; guarded by mu.
	restored map[string]*pendingApproval
	// decided holds, by task ID, the decisions the audit trail has for
	// tasks the database still has waiting (a kill -9 came between the
	// decision's commit and the task's next write): the engine's re-ask
	// gets the recorded decision, not a second question; guarded by mu.
	decided map[string]ApprovalDecision
	closing bool // guarded by mu: decisions are no longer written
}

type pendingApproval struct {
	a        Approval
	onDecide func(ApprovalDecision) error // called exactly once, without mu held
	timer    *time.Timer
	ready    bool // on disk (or in memory only) and listed
	// pairing: the pairer's request ID and the SHA-256 of its claimant's
	// poll token (what the row keeps of it).
	requestID string
	pollHash  []byte
}

func newApprovals(timeout time.Duration, publish func()) *Approvals {
	if publish == nil {
		publish = func() {}
	}
	return &Approvals{timeout: timeout, publish: publish, log: slog.New(slog.DiscardHandler),
		items: make(map[string]*pendingApproval), restored: make(map[string]*pendingApproval),
		decided: make(map[string]ApprovalDecision)}
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
// zero) or is withdrawn. It returns the approval id. With a database the
// request is stored before Post returns (its error then refuses it).
//
// A delegation or file transfer whose a.TaskID is a restored row's task
// takes that row back: the same id and Created, a.Expires (the engine's
// deadline) or else the row's, and the row's address when a has none.
func (q *Approvals) Post(a Approval, onDecide func(ApprovalDecision)) (string, error) {
	return q.post(a, nil, func(d ApprovalDecision) error { onDecide(d); return nil })
}

// postPairing is Post of pairing request r (kept with its request ID and
// poll hash); onDecide's error is Decide's.
func (q *Approvals) postPairing(a Approval, r pairing.Request, onDecide func(ApprovalDecision) error) (string, error) {
	return q.post(a, &r, onDecide)
}

func (q *Approvals) post(a Approval, r *pairing.Request, onDecide func(ApprovalDecision) error) (string, error) {
	now := time.Now()
	q.mu.Lock()
	if q.closing {
		q.mu.Unlock()
		return "", ErrShuttingDown
	}
	if a.taskKind() && a.TaskID != "" {
		if r := q.restored[a.TaskID]; r != nil {
			delete(q.restored, a.TaskID)
			r.timer.Stop()
			a.ID, a.Created, a.Restored = r.a.ID, r.a.Created, true
			if a.Expires.IsZero() {
				a.Expires = r.a.Expires
			}
			// Where the request came from is the row's: the engine's
			// restored caller knows only its grant and listener.
			if a.Addr == "" && a.TailnetUser == "" && a.TailnetNode == "" {
				a.Addr, a.TailnetUser, a.TailnetNode = r.a.Addr, r.a.TailnetUser, r.a.TailnetNode
			}
			p := &pendingApproval{a: a, onDecide: onDecide, ready: true}
			q.queueLocked(p)
			q.mu.Unlock()
			q.log.Info("approval restored for its task", "approval", a)
			q.publish()
			return a.ID, nil
		}
	}
	a.ID = newApprovalID()
	a.Created = now
	if a.Expires.IsZero() {
		a.Expires = now.Add(q.timeout)
	}
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
	// Counted against the bounds at once, listed once stored.
	p := &pendingApproval{a: a, onDecide: onDecide}
	if r != nil {
		p.requestID, p.pollHash = r.ID, r.PollHash[:]
	}
	q.items[a.ID] = p
	q.order = append(q.order, a.ID)
	db := q.db
	q.mu.Unlock()

	if db != nil {
		ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
		row := storedApproval(a)
		row.RequestID, row.PollHash = p.requestID, p.pollHash
		err := db.PutApproval(ctx, row)
		cancel()
		if err != nil {
			q.mu.Lock()
			q.dropLocked(a.ID)
			q.mu.Unlock()
			q.log.Error("approval not stored: the request is refused", "approval", a, "err", err)
			return "", fmt.Errorf("the request could not be stored: %w", err)
		}
	}
	q.mu.Lock()
	p.ready = true
	q.startTimerLocked(p)
	q.mu.Unlock()
	q.publish()
	return a.ID, nil
}

// taskKind reports an approval of an incoming A2A task (a delegation or a
// file transfer): the engine asks again for it after a restart.
func (a Approval) taskKind() bool { return a.Kind == KindDelegation || a.Kind == KindFiles }

// queueLocked lists p (ready) and starts its timer.
func (q *Approvals) queueLocked(p *pendingApproval) {
	q.items[p.a.ID] = p
	q.order = append(q.order, p.a.ID)
	q.startTimerLocked(p)
}

// startTimerLocked refuses p at its expiry.
func (q *Approvals) startTimerLocked(p *pendingApproval) {
	id, wait := p.a.ID, p.a.Expires.Sub(p.a.Created)
	p.timer = time.AfterFunc(time.Until(p.a.Expires), func() {
		q.finish(id, ApprovalDecision{Decision: DecisionDeny, By: decidedByNode, Where: store.WhereTimeout,
			Reason: "no answer within " + wait.Round(time.Second).String()})
	})
}

func (q *Approvals) dropLocked(id string) {
	delete(q.items, id)
	q.order = slices.DeleteFunc(q.order, func(x string) bool { return x == id })
}

// Ask queues a and waits for the decision. It returns a denial with a reason
// when a expires, and ctx's error (the approval withdrawn) when ctx ends first.
func (q *Approvals) Ask(ctx context.Context, a Approval) (ApprovalDecision, error) {
	return q.askQueued(ctx, a, nil)
}

// Decide records the owner's decision for id: on disk (with its audit
// entry) before the requester learns it and before Decide returns. d.By
// is "owner" when empty; d.Where is the client's (store.WhereCLI when
// empty). Errors: ErrBadDecision, ErrNoApproval, ErrShuttingDown, a
// database error (nothing was decided: the request stays pending), or the
// requester's failure to act on an approval (it was recorded).
func (q *Approvals) Decide(id string, d ApprovalDecision) error {
	if d.Decision != DecisionApprove && d.Decision != DecisionDeny {
		return ErrBadDecision
	}
	d.ByOwner = true
	if d.By == "" {
		d.By = decidedByOwner
	}
	if d.Where == "" {
		d.Where = store.WhereCLI
	}
	if d.Decision == DecisionDeny && d.Reason == "" {
		d.Reason = "denied by the owner"
	}
	return q.finish(id, d)
}

// Withdraw removes id without a decision from the owner (the requester went
// away); its onDecide sees a denial "withdrawn".
func (q *Approvals) Withdraw(id string) {
	q.finish(id, ApprovalDecision{Decision: DecisionDeny, By: decidedByNode, Reason: "withdrawn", Withdrawn: true})
}

// finish ends pending approval id with d: its row removed and d audited
// (unless the node is closing: then the row stays for the next start),
// then onDecide. A person's decision that cannot be written is not taken:
// the request stays pending and the error is returned. ErrNoApproval when
// id is not pending.
func (q *Approvals) finish(id string, d ApprovalDecision) error {
	q.mu.Lock()
	p, ok := q.items[id]
	if !ok || !p.ready {
		q.mu.Unlock()
		return ErrNoApproval
	}
	closing, db := q.closing, q.db
	if closing && d.ByOwner {
		q.mu.Unlock()
		return ErrShuttingDown
	}
	at := slices.Index(q.order, id)
	q.dropLocked(id)
	p.timer.Stop()
	q.mu.Unlock()

	if db != nil && !closing {
		if err := q.resolve(db, p.a, d); err != nil {
			if d.ByOwner {
				q.mu.Lock()
				if !q.closing {
					q.items[id] = p
					q.order = slices.Insert(q.order, min(at, len(q.order)), id)
					q.startTimerLocked(p)
				}
				q.mu.Unlock()
				return fmt.Errorf("the decision could not be recorded, so it was not taken (the request is still pending): %w", err)
			}
			// A refusal by the node is safe to deliver unrecorded: the
			// row stays, and the next start ends it as restarted.
		}
	}
	err := p.onDecide(d)
	q.publish()
	return err
}

// resolve removes a's row and appends d's audit entry, one durable
// transaction. A row already gone (a request the database never held)
// still gets its entry.
func (q *Approvals) resolve(db *store.Store, a Approval, d ApprovalDecision) error {
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	e := approvalEntry(a, d)
	_, err := db.ResolveApproval(ctx, a.ID, e)
	if errors.Is(err, store.ErrNotFound) {
		_, err = db.Append(ctx, e)
	}
	if err != nil {
		q.log.Error("approval decision not recorded", "approval", a, "decision", d.Decision, "err", err)
	}
	return err
}

// approvalEntry is the audit entry of decision d on a.
func approvalEntry(a Approval, d ApprovalDecision) store.Entry {
	e := store.Entry{
		Kind: store.KindApproval, GrantID: a.GrantID, Peer: a.Peer, Via: a.Via,
		Subject: string(a.Kind) + ": " + a.Summary, Result: "denied",
		DecidedBy: d.By, DecidedVia: d.Where, Params: d.Reason, TaskID: a.TaskID,
	}
	if d.Withdrawn {
		e.Result = "withdrawn"
	}
	if a.DeviceID != "" && a.GrantID == "" {
		e.Peer += " (" + pairing.ShortID(a.DeviceID) + ")"
	}
	if d.Approved() {
		e.Result, e.Params = "approved", ""
		switch {
		case a.Kind == KindPairing:
			sc := d.Scopes
			if len(sc) == 0 {
				sc = pairing.DefaultPairingScopes(a.Scopes)
			}
			e.Params = "scopes " + sc.String()
		case d.Always:
			e.Params = "always allow from this device"
		}
	}
	return e
}

// storedApproval is a's database row.
func storedApproval(a Approval) store.Approval {
	return store.Approval{
		ID: a.ID, Kind: store.ApprovalKind(a.Kind), GrantID: a.GrantID, Peer: a.Peer, DeviceID: a.DeviceID,
		OS: a.OS, Via: a.Via, Addr: a.Addr, TailnetUser: a.TailnetUser, TailnetNode: a.TailnetNode,
		Summary: a.Summary, Detail: a.Detail, Scopes: scopeStrings(a.Scopes), TaskID: a.TaskID,
		Created: a.Created, Expires: a.Expires,
	}
}

func scopeStrings(sc pairing.Scopes) []string {
	out := make([]string, len(sc))
	for i, s := range sc {
		out[i] = string(s)
	}
	return out
}

// fromStored is the approval of row r (without SAS: none is stored).
func fromStored(r store.Approval) Approval {
	sc := make(pairing.Scopes, 0, len(r.Scopes))
	for _, s := range r.Scopes {
		sc = append(sc, pairing.Scope(s))
	}
	return Approval{
		ID: r.ID, Kind: ApprovalKind(r.Kind), GrantID: r.GrantID, Peer: r.Peer, DeviceID: r.DeviceID, OS: r.OS,
		Via: r.Via, Addr: r.Addr, TailnetUser: r.TailnetUser, TailnetNode: r.TailnetNode, Summary: r.Summary,
		Detail: r.Detail, Scopes: sc, TaskID: r.TaskID, Created: r.Created, Expires: r.Expires, Restored: true,
	}
}

// Get returns the pending approval id.
func (q *Approvals) Get(id string) (Approval, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	p, ok := q.items[id]
	if !ok || !p.ready {
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
		if p := q.items[id]; p.ready {
			out = append(out, p.a)
		}
	}
	return out
}

// beginClose stops writing decisions: from here on a request that ends
// (its caller's context canceled by the engine's shutdown, a timeout)
// keeps its row for the next start, and a person's decision is refused
// (ErrShuttingDown). Close ends the waits.
func (q *Approvals) beginClose() {
	q.mu.Lock()
	q.closing = true
	for _, r := range q.restored {
		r.timer.Stop()
	}
	q.mu.Unlock()
}

// Close ends every wait with a denial "node shutting down". The rows stay
// in the database: after a graceful stop, as after a kill -9, the next
// start lists the requests again.
func (q *Approvals) Close() {
	q.beginClose()
	for _, a := range q.List() {
		q.finish(a.ID, ApprovalDecision{Decision: DecisionDeny, By: decidedByNode, Reason: reasonShutdown})
	}
}

// pairingRequest is the pairer's request ID of pending approval id ("" when
// none).
func (q *Approvals) pairingRequest(id string) string {
	q.mu.Lock()
	defer q.mu.Unlock()
	if p := q.items[id]; p != nil {
		return p.requestID
	}
	return ""
}

// restore attaches db and takes back the rows an earlier run left (after a
// kill -9 or a graceful stop alike). It returns the pairing rows still
// pending, for restorePairing once the pairer runs. Every other row:
//   - past its expiry: refused as a timeout ("the deadline passed while
//     the node was down");
//   - a delegation or file transfer whose task waits again (waiting(task
//     ID), the engine's restored store): kept, unlisted, until the engine
//     asks again for that task (Post re-uses it) or its expiry passes;
//   - anything else (a capability call, whose caller's request ended with
//     the process; a delegation whose task is gone or ended): refused
//     with an audit entry "the node restarted".
//
// It runs before the engine starts and before any listener serves.
func (q *Approvals) restore(ctx context.Context, db *store.Store, log *slog.Logger, waiting func(taskID string) bool) ([]store.Approval, error) {
	q.mu.Lock()
	q.db, q.log = db, log
	q.mu.Unlock()
	rows, err := db.Approvals(ctx)
	if err != nil {
		return nil, fmt.Errorf("approvals: %w", err)
	}
	var pairs []store.Approval
	now := time.Now()
	for _, r := range rows {
		a := fromStored(r)
		switch {
		case !now.Before(r.Expires):
			q.resolve(db, a, ApprovalDecision{Decision: DecisionDeny, By: decidedByNode, Where: store.WhereTimeout,
				Reason: "the deadline passed while the node was down"})
		case a.Kind == KindPairing:
			pairs = append(pairs, r)
		case a.taskKind() && a.TaskID != "" && waiting(a.TaskID):
			p := &pendingApproval{a: a, ready: true}
			taskID, wait := a.TaskID, a.Expires.Sub(a.Created)
			p.timer = time.AfterFunc(time.Until(a.Expires), func() {
				q.mu.Lock()
				cur := q.restored[taskID]
				if cur == p {
					delete(q.restored, taskID)
				}
				closing := q.closing
				q.mu.Unlock()
				if cur == p && !closing {
					q.resolve(db, a, ApprovalDecision{Decision: DecisionDeny, By: decidedByNode, Where: store.WhereTimeout,
						Reason: "no answer within " + wait.Round(time.Second).String()})
				}
			})
			q.mu.Lock()
			q.restored[taskID] = p
			q.mu.Unlock()
		default:
			q.resolve(db, a, ApprovalDecision{Decision: DecisionDeny, By: decidedByNode, Reason: reasonRestarted})
		}
	}
	if len(rows) > 0 {
		log.Info("approvals kept across the restart", "rows", len(rows), "pairing", len(pairs))
	}
	if err := q.loadDecided(ctx, db, rows); err != nil {
		return nil, fmt.Errorf("approvals: %w", err)
	}
	return pairs, nil
}

// loadDecided finds the tasks the database has waiting for approval with
// no pending row (their decision committed, the task's own write lost to a
// kill -9) and takes their decisions from the audit trail.
func (q *Approvals) loadDecided(ctx context.Context, db *store.Store, rows []store.Approval) error {
	pending := make(map[string]bool, len(rows))
	for _, r := range rows {
		pending[r.TaskID] = true
	}
	live, err := db.Tasks(ctx, store.TaskFilter{Live: true})
	if err != nil {
		return err
	}
	want := map[string]bool{}
	var since time.Time
	for _, t := range live {
		if t.State != store.StateSubmitted || pending[t.ID] {
			continue
		}
		want[t.ID] = true
		if since.IsZero() || t.Created.Before(since) {
			since = t.Created
		}
	}
	if len(want) == 0 {
		return nil
	}
	es, err := db.Query(ctx, store.Filter{Kind: store.KindApproval, Since: since, Limit: 10000})
	if err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, e := range es {
		if !want[e.TaskID] {
			continue
		}
		d := ApprovalDecision{Decision: DecisionDeny, Reason: e.Params, By: e.DecidedBy, Where: e.DecidedVia,
			ByOwner: e.DecidedBy != decidedByNode && e.DecidedBy != decidedByPolicy}
		if e.Result == "approved" {
			d.Decision, d.Reason = DecisionApprove, ""
		}
		q.decided[e.TaskID] = d
	}
	if len(q.decided) > 0 {
		q.log.Info("decisions recorded before the restart answer their tasks", "tasks", len(q.decided))
	}
	return nil
}

// peekDecided is takeDecided without taking it.
func (q *Approvals) peekDecided(id string) (ApprovalDecision, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	d, ok := q.decided[id]
	return d, ok
}

// takeDecided returns (once) the recorded decision of task id (loadDecided).
func (q *Approvals) takeDecided(id string) (ApprovalDecision, bool) {
	if id == "" {
		return ApprovalDecision{}, false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	d, ok := q.decided[id]
	delete(q.decided, id)
	return d, ok
}

// restoredPairingNote is what a restored pairing request tells the owner in
// place of its SAS.
const restoredPairingNote = "This request was made before this node restarted: its check code (SAS) was not kept, " +
	"so the screens cannot be compared. Approve only if %s is the device you are pairing and it still says it is waiting."

// restorePairing puts the kept pairing rows back into the pairer and the
// queue: listed again, denied at once, approved once the claimant polls
// again (Decide says so before). A row the pairer cannot take back is
// refused with an audit entry saying why.
func (n *Node) restorePairing(rows []store.Approval) {
	q := n.approvals
	for _, r := range rows {
		a := fromStored(r)
		req := pairing.Request{
			ID: r.RequestID, Name: r.Peer, OS: r.OS, DeviceID: r.DeviceID, RequestedScopes: a.Scopes,
			Listener: pairing.Listener(r.Via), Created: r.Created, Expires: r.Expires,
		}
		if id, err := pairing.ParseDeviceID(r.DeviceID); err == nil {
			req.Fingerprint = id.Fingerprint()
		}
		if ip, err := netip.ParseAddr(r.Addr); err == nil {
			req.Source = netip.AddrPortFrom(ip, 0)
		}
		if r.TailnetUser != "" || r.TailnetNode != "" {
			req.Tailnet = &pairing.TailnetIdentity{User: r.TailnetUser, Node: r.TailnetNode}
		}
		if len(r.PollHash) == len(req.PollHash) {
			copy(req.PollHash[:], r.PollHash)
		}
		if err := n.pairer.Restore(req); err != nil {
			q.resolve(n.db, a, ApprovalDecision{Decision: DecisionDeny, By: decidedByNode,
				Reason: reasonRestarted + ": the pairing request could not be restored (" + err.Error() + ")"})
			continue
		}
		if a.Detail != "" {
			a.Detail += "\n"
		}
		a.Detail += fmt.Sprintf(restoredPairingNote, a.Peer)
		p := &pendingApproval{a: a, onDecide: n.pairingDecision(req), ready: true, requestID: req.ID, pollHash: r.PollHash}
		q.mu.Lock()
		q.queueLocked(p)
		q.mu.Unlock()
	}
	if len(rows) > 0 {
		q.publish()
	}
}
