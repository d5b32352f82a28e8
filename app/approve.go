package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/a2aproject/a2a-go/a2a"

	agent "meshtray/a2a"
	"meshtray/jsonout"
	"meshtray/nodes"
	"meshtray/pairing"
	"meshtray/store"
)

// maxDetail bounds the text an approval shows of a request (bytes).
const maxDetail = 4 << 10

// LogValue implements slog.LogValuer without the SAS and the request's
// detail (the message text).
func (a Approval) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("id", a.ID),
		slog.String("kind", string(a.Kind)),
		slog.String("grant_id", a.GrantID),
		slog.String("peer", a.Peer),
		slog.String("via", a.Via),
	)
}

// taskApprover decides on new incoming A2A tasks: the grant's policy, and
// the approvals queue for policy ask.
type taskApprover struct{ n *Node }

var _ agent.Approver = taskApprover{}

var _ agent.QueueingApprover = taskApprover{}

// ReportsQueued tells the engine ApproveTask calls TaskApproval.Queued
// exactly when the request goes to the approvals queue (policy ask), never
// for allow/deny: a caller sees "waiting for approval" only when it waits.
func (taskApprover) ReportsQueued() bool { return true }

func (ta taskApprover) ApproveTask(ctx context.Context, t agent.TaskApproval) agent.Decision {
	n := ta.n
	p := t.Caller
	if p == nil || p.Local {
		return agent.Decision{Reason: "no grant behind the request"}
	}
	// Re-read the grant: its policy may have changed since authentication.
	g, err := n.grants.Get(p.Grant.ID)
	if err != nil {
		return agent.Decision{Reason: "grant no longer exists"}
	}
	if in, err, ok := (transferExecutor{n: n}).isTransfer(t.Message); ok {
		return n.approveFiles(ctx, t, g, in, err)
	}
	a := approvalFrom(p, g)
	a.Kind = KindDelegation
	a.Summary = t.Summary
	a.TaskID = string(t.TaskID)
	a.Expires = t.Deadline // the engine's, kept across a restart
	if dec, ok := n.decideByPolicy(a, g.Policy, fmt.Sprintf("delegations from %q are denied by policy", g.Name)); ok {
		dec.Caller = withGrant(p, g) // a task approved by policy runs under the grant as it is now
		return dec
	}
	a.Detail = messageDetail(t.Message)
	d, err := n.approvals.askQueued(ctx, a, t.Queued)
	if err != nil {
		return agent.Decision{Reason: d.Reason}
	}
	if d.Approved() {
		// The grant may have been paused or revoked while the owner read
		// the request: an approval of a grant that no longer reaches this
		// surface runs nothing.
		if reason := n.grantGone(p.Grant.ID); reason != "" {
			return agent.Decision{Reason: reason}
		}
		n.applyAlways(g, d)
	}
	return agent.Decision{Approved: d.Approved(), ByOwner: d.ByOwner, Reason: d.Reason, Caller: withGrant(p, g)}
}

// withGrant is p with grant g as it is now: the caller a task restored from
// the database runs under once approved (its stored caller has only the
// grant's id and name).
func withGrant(p *pairing.Principal, g pairing.Grant) *pairing.Principal {
	np := *p
	np.Grant = g
	return &np
}

// taskWaiting reports whether the database holds task id live (not
// terminal): the engine restores it and asks again for its approval.
func (n *Node) taskWaiting(id string) bool {
	ctx, cancel := context.WithTimeout(n.ctx, dbTimeout)
	defer cancel()
	t, err := n.db.Task(ctx, id)
	return err == nil && !t.State.Terminal()
}

// decideByPolicy applies a grant policy of allow or deny to a, with denied
// as the refusal's reason: the decision is recorded (audited, on disk)
// before it is returned, and an approval that cannot be recorded runs
// nothing. ok is false for the policy ask (the owner decides), and for a
// task whose decision was recorded before a restart (loadDecided): that
// decision answers it (askQueued), not the policy a second time.
func (n *Node) decideByPolicy(a Approval, policy pairing.Policy, denied string) (dec agent.Decision, ok bool) {
	if policy != pairing.PolicyAllow && policy != pairing.PolicyDeny {
		return agent.Decision{}, false
	}
	if _, decided := n.approvals.peekDecided(a.TaskID); decided {
		return agent.Decision{}, false
	}
	d := ApprovalDecision{Decision: DecisionApprove, By: decidedByPolicy, Where: store.WherePolicy}
	if policy == pairing.PolicyDeny {
		d.Decision, d.Reason = DecisionDeny, denied
	}
	if err := n.approvals.record(a, d); err != nil && d.Approved() {
		return agent.Decision{Reason: "the approval could not be recorded: " + err.Error()}, true
	}
	return agent.Decision{Approved: d.Approved(), Reason: d.Reason}, true
}

// grantGone returns why grant id no longer authorizes work ("" when it is
// active): revoked or paused since the request was authenticated.
func (n *Node) grantGone(id string) string {
	g, err := n.grants.Get(id)
	switch {
	case err != nil:
		return "the grant was revoked"
	case g.Status != pairing.StatusActive:
		return "the grant was paused"
	}
	return ""
}

// capabilityApprover asks the owner about capability calls under policy ask.
type capabilityApprover struct{ n *Node }

var _ nodes.Approver = capabilityApprover{}

func (ca capabilityApprover) ApproveCall(ctx context.Context, c nodes.CallApproval) (bool, string) {
	n := ca.n
	a := Approval{Kind: KindCapability, Peer: "this device", Summary: c.Summary, Detail: string(c.Call.Params)}
	var g pairing.Grant
	if p := c.Call.Caller; p != nil && !p.Local {
		var err error
		if g, err = n.grants.Get(p.Grant.ID); err != nil {
			return false, "grant no longer exists"
		}
		a = approvalFrom(p, g)
		a.Kind, a.Summary, a.Detail = KindCapability, c.Summary, truncate(string(c.Call.Params), maxDetail)
	}
	d, err := n.approvals.Ask(ctx, a)
	if err != nil {
		return false, d.Reason
	}
	if d.Approved() && g.ID != "" {
		if reason := n.grantGone(g.ID); reason != "" {
			return false, reason
		}
	}
	// "Always allow" is for delegations only (a capability approval does
	// not widen the grant's policy): Decide refuses it here.
	return d.Approved(), d.Reason
}

// applyAlways turns "Always allow from this device" on a delegation into
// the grant's policy.
func (n *Node) applyAlways(g pairing.Grant, d ApprovalDecision) {
	if !d.Approved() || !d.Always || g.ID == "" {
		return
	}
	err := n.asActor(changeKey(pairing.ChangePolicy, g.ID), actor{by: d.By, where: d.Where}, func() error {
		return n.grants.SetPolicy(g.ID, pairing.PolicyAllow)
	})
	if err != nil {
		n.log.Warn("cannot set grant policy to allow", "grant_id", g.ID, "err", err)
		return
	}
	n.log.Info("grant policy set to allow by the owner", "grant_id", g.ID)
}

// approvalFrom fills who is asking from the principal and its grant.
func approvalFrom(p *pairing.Principal, g pairing.Grant) Approval {
	a := Approval{GrantID: g.ID, Peer: g.Name, DeviceID: g.PeerID, OS: g.OS, Via: string(p.Listener)}
	if p.RemoteAddr.IsValid() {
		a.Addr = p.RemoteAddr.Addr().String()
	}
	if p.Tailnet != nil {
		a.TailnetUser, a.TailnetNode = p.Tailnet.User, p.Tailnet.Node
	}
	return a
}

// onPairingRequest queues a pairing claim for the owner; the decision goes
// back to the pairer.
func (n *Node) onPairingRequest(r pairing.Request) {
	a := Approval{
		Kind:     KindPairing,
		Peer:     r.Name,
		DeviceID: r.DeviceID,
		OS:       r.OS,
		Via:      string(r.Listener),
		Summary:  fmt.Sprintf("pair with %s, asking for %s", r.Name, r.RequestedScopes.Describe()),
		Scopes:   r.RequestedScopes,
		SAS:      r.SAS,
		Expires:  r.Expires,
	}
	if r.Source.IsValid() {
		a.Addr = r.Source.Addr().String()
	}
	if r.Tailnet != nil {
		a.TailnetUser, a.TailnetNode = r.Tailnet.User, r.Tailnet.Node
	}
	if len(r.Replaces) > 0 {
		a.Detail = fmt.Sprintf("This device is already paired; approving replaces %d earlier grant(s).", len(r.Replaces))
	}
	_, err := n.approvals.postPairing(a, r, n.pairingDecision(r))
	if err != nil {
		n.log.Warn("pairing request refused", "err", err)
		// No approval entry records this refusal: the denial's own entry
		// does (onTrustChange), told before Decide returns.
		n.unqueuedPairings.Store(r.ID, "refused before the owner saw it: "+err.Error())
		n.pairer.Decide(r.ID, false, nil)
		n.unqueuedPairings.Delete(r.ID)
	}
}

// pairingDecision delivers the queue's decision on pairing request r to the
// pairer.
//
// In the audit trail the queue's approval entry (written before this runs)
// is the decision, with who decided where; the pairer's own report of a
// denial or expiry of a queued request is the same event and is not
// recorded again (onTrustChange). An approval leads to two more entries,
// each a different fact: the grant issued (its ID and scopes, which the
// approval entry predates; valid once collected), and the device
// collecting its token ("grant collected", later, or never: then the
// grant's revocation is recorded instead). Only a person denies a pairing: a timeout or shutdown leaves the
// request to the pairer, which reports it expired (the claimant must not
// read "declined by the owner").
func (n *Node) pairingDecision(r pairing.Request) func(ApprovalDecision) error {
	return func(d ApprovalDecision) error {
		if !d.Approved() {
			if !d.ByOwner {
				return nil
			}
			if _, err := n.pairer.Decide(r.ID, false, nil); err != nil {
				n.log.Debug("pairing denial not delivered", "err", err)
			}
			return nil
		}
		scopes := d.Scopes
		if len(scopes) == 0 {
			scopes = pairing.DefaultPairingScopes(r.RequestedScopes)
		}
		g, err := n.pairer.Decide(r.ID, true, scopes)
		if err != nil {
			n.log.Warn("pairing approval failed", "err", err)
			return fmt.Errorf("approved, but no grant was issued: %w", err)
		}
		n.log.Info("paired", "grant", g)
		return nil
	}
}

// Decide applies the owner's decision to a pending approval. For a pairing,
// the scopes are checked here so a typo is an error, not a silent default.
// Scopes apply only to a pairing and Always only to a delegation: given
// with an approval of another kind they are an error (badRequest), not
// silently dropped or applied to the whole grant.
//
// Every decision is logged at info (what, from whom, the decision): the
// owner can read afterwards what was approved.
func (n *Node) Decide(id string, d ApprovalDecision) error {
	a, ok := n.approvals.Get(id)
	if !ok {
		return fmt.Errorf("%w: %s (meshtray approvals lists them)", ErrNoApproval, clipID(id))
	}
	if d.Approved() && (d.Always || len(d.Scopes) > 0) {
		if d.Always && a.Kind != KindDelegation && a.Kind != KindFiles {
			return badRequest("\"always allow\" applies only to delegations and files; %s is a %s request", id, a.Kind)
		}
		if len(d.Scopes) > 0 && a.Kind != KindPairing {
			return badRequest("scopes apply only to pairing requests; %s is a %s request", id, a.Kind)
		}
	}
	if len(d.Scopes) > 0 {
		sc, err := pairing.NormalizeScopes(d.Scopes)
		if err != nil {
			return badRequest("%v", err)
		}
		d.Scopes = sc
	}
	if a.Kind == KindPairing && d.Approved() {
		// Refuse before anything is recorded: an approval the pairer cannot
		// carry out (a grant for a claimant that stopped waiting would
		// reach nobody) is not recorded as one.
		switch err := n.pairer.Approvable(n.approvals.pairingRequest(id)); {
		case errors.Is(err, pairing.ErrClaimantAway):
			return fmt.Errorf("%w: %s asked before this node restarted and has not polled since (it stopped waiting, "+
				"or has not reconnected yet), so nothing was granted. If its screen still says it is waiting, "+
				"approve again in a few seconds; otherwise deny it and pair again with a new code", err, a.Peer)
		case err != nil:
			return fmt.Errorf("%w: %s (nothing was granted)", ErrNoApproval, err)
		}
	}
	if err := n.approvals.Decide(id, d); err != nil {
		if errors.Is(err, ErrNoApproval) {
			return fmt.Errorf("%w: %s (it was decided, withdrawn or expired meanwhile)", ErrNoApproval, clipID(id))
		}
		return err
	}
	attrs := []any{"id", a.ID, "kind", a.Kind, "peer", a.Peer, "summary", a.Summary, "decision", d.Decision}
	if a.GrantID != "" {
		attrs = append(attrs, "grant", a.GrantID)
	}
	if d.Always {
		attrs = append(attrs, "always", true)
	}
	if len(d.Scopes) > 0 {
		attrs = append(attrs, "scopes", d.Scopes.String())
	}
	n.log.Info("approval decided", attrs...)
	return nil
}

// clipID cuts an approval ID from a request to a length fit for a message.
func clipID(id string) string {
	if len(id) > 40 {
		return id[:40] + "…"
	}
	return id
}

// Approvals lists the pending approvals.
func (n *Node) Approvals() []Approval { return n.approvals.List() }

// askQueued is Ask that calls queued (if not nil) once a is in the queue,
// before waiting: the A2A engine then tells the caller the task waits for
// the owner. A request that cannot be queued is a denial with the reason;
// one withdrawn (ctx ended) returns ctx's error and a denial saying why.
func (q *Approvals) askQueued(ctx context.Context, a Approval, queued func()) (ApprovalDecision, error) {
	if d, ok := q.takeDecided(a.TaskID); ok {
		return d, nil // decided before a restart: not asked twice
	}
	// The engine writes the waiting task before the request is queued
	// (and so listed): a crash between the two leaves a task that asks
	// again at the next start, never a request without its task.
	if queued != nil {
		queued()
	}
	ch := make(chan ApprovalDecision, 1)
	id, err := q.Post(a, func(d ApprovalDecision) { ch <- d })
	if err != nil {
		return ApprovalDecision{Decision: DecisionDeny, Reason: err.Error()}, nil
	}
	select {
	case d := <-ch:
		return d, nil
	case <-ctx.Done():
		d := ApprovalDecision{Decision: DecisionDeny, By: decidedByNode, Reason: withdrawnReason(ctx), Withdrawn: true}
		if q.isClosing() {
			// The engine's shutdown ended the wait: the row stays for
			// the next start.
			d.Reason, d.Withdrawn = reasonShutdown, false
		}
		q.finish(id, d)
		return ApprovalDecision{Decision: DecisionDeny, Reason: d.Reason, Withdrawn: d.Withdrawn}, ctx.Err()
	}
}

// withdrawnReason says why the requester's ctx ended before anyone
// decided (context.Cause), in the owner's words: "withdrawn: A2A was
// switched off", "withdrawn: the caller canceled it" (tasks/cancel),
// "withdrawn: the caller went away" (its request ended), or
// "withdrawn: " and meshtray's own cause ("the grant was paused").
func withdrawnReason(ctx context.Context) string {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, agent.ErrSwitchedOff):
		return "withdrawn: A2A was switched off"
	case errors.Is(cause, agent.ErrCanceledByCaller):
		return "withdrawn: the caller canceled it"
	case cause == nil || cause == context.Canceled || cause == context.DeadlineExceeded:
		return "withdrawn: the caller went away"
	}
	return "withdrawn: " + cause.Error()
}

func (q *Approvals) isClosing() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closing
}

// record audits a decision no person was asked for (a grant's policy):
// durable before it returns. A request kept across a restart for a's task
// (restore) is decided by it: its row goes with the entry, in one
// transaction, and its own deadline no longer runs.
func (q *Approvals) record(a Approval, d ApprovalDecision) error {
	q.mu.Lock()
	db := q.db
	var kept *pendingApproval
	if a.taskKind() && a.TaskID != "" {
		if kept = q.restored[a.TaskID]; kept != nil {
			delete(q.restored, a.TaskID)
			kept.timer.Stop()
		}
	}
	q.mu.Unlock()
	if db == nil {
		return nil
	}
	if kept != nil {
		a.ID, a.Created = kept.a.ID, kept.a.Created
		return q.resolve(db, a, d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	if _, err := db.Append(ctx, approvalEntry(a, d)); err != nil {
		q.log.Error("approval decision not recorded", "approval", a, "decision", d.Decision, "err", err)
		return err
	}
	return nil
}

// WithdrawGrant refuses every pending approval asked for grant id (the
// owner paused or revoked it): each requester sees a denial with reason.
// It returns how many it withdrew.
func (q *Approvals) WithdrawGrant(id, reason string) int {
	if id == "" {
		return 0
	}
	q.mu.Lock()
	var ids []string
	for _, aid := range q.order {
		if q.items[aid].a.GrantID == id {
			ids = append(ids, aid)
		}
	}
	q.mu.Unlock()
	n := 0
	for _, aid := range ids {
		if q.finish(aid, ApprovalDecision{Decision: DecisionDeny, By: decidedByNode, Reason: reason, Withdrawn: true}) == nil {
			n++
		}
	}
	return n
}

// messageDetail is what the owner reads of an A2A message: its text
// (agent.MessageText), then each data part as JSON (jsonout.Marshal, "<"
// and "&" as sent) and each file it carries ("[file name]"), one a line, at
// most maxDetail bytes. It is not escaped: every surface that shows it
// escapes invisible characters (textsafe.EscapeInvisibleText in the
// windows and the CLI), none interprets markup.
func messageDetail(m *a2a.Message) string {
	if m == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString(agent.MessageText(m))
	for _, p := range m.Parts {
		if b.Len() > maxDetail {
			break
		}
		switch p := p.(type) {
		case a2a.DataPart:
			j, _ := jsonout.Marshal(p.Data)
			b.WriteByte('\n')
			b.Write(j)
		case a2a.FilePart:
			b.WriteString("\n[file " + agent.FileName(p) + "]")
		}
	}
	return truncate(strings.TrimSpace(b.String()), maxDetail)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }
