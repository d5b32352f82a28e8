package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"meshtray/jsonout"
	"meshtray/nodes"
	"meshtray/pairing"
	"meshtray/store"
)

// The audit trail as the node writes and serves it: entries for capability
// runs (nodes.Options.OnRun), changes of trust (pairing.Grants.Observe:
// grants, held grants, pairing requests), the A2A and LAN switches; the
// control routes that list, follow and verify it; and its retention.
// Approval decisions are written by the approvals queue
// (store.ResolveApproval).

// Where a control client acts from (Client.Where, ApprovalDecision.Where):
// the store's names, for packages that do not import store.
const (
	WhereCLI   = store.WhereCLI
	WhereTray  = store.WhereTray
	WherePhone = store.WherePhone
)

// AuditPruneEvery is how often the node applies the audit retention
// bounds (Config.Audit) besides at start.
const AuditPruneEvery = time.Hour

// AuditEntry is one audit entry on the control API (GET /audit). Hash is
// the entry's link in the chain (lowercase hex SHA-256, see store.Entry).
type AuditEntry struct {
	Seq        int64     `json:"seq"`
	Time       time.Time `json:"time"`
	Kind       string    `json:"kind"` // approval, capability, grant, pairing, a2a, lan, database
	GrantID    string    `json:"grant_id,omitempty"`
	Peer       string    `json:"peer,omitempty"` // the other side's name
	Via        string    `json:"via,omitempty"`  // the listener a request came on
	Subject    string    `json:"subject,omitempty"`
	Result     string    `json:"result,omitempty"`
	DecidedBy  string    `json:"decided_by,omitempty"`
	DecidedVia string    `json:"decided_via,omitempty"` // tray, cli, phone, device, policy, timeout
	Params     string    `json:"params,omitempty"`
	TaskID     string    `json:"task_id,omitempty"`
	DurationMS float64   `json:"duration_ms,omitempty"`
	Hash       string    `json:"hash"`
}

// The columns people read (meshtray audit, the Activity window). The text
// is as recorded: escape it for the surface (textsafe) before showing it.

// Who is who acted: the caller of a run or the requester of an approval;
// who decided a change.
func (e AuditEntry) Who() string {
	switch store.Kind(e.Kind) {
	case store.KindCapability, store.KindApproval:
		if e.Peer != "" {
			return e.Peer
		}
	}
	if e.DecidedBy != "" {
		return e.DecidedBy
	}
	if e.Peer != "" {
		return e.Peer
	}
	return "-"
}

// What is what happened: the subject, the grant or device it was about,
// the parameters or details.
func (e AuditEntry) What() string {
	parts := []string{e.Subject}
	switch store.Kind(e.Kind) {
	case store.KindGrant, store.KindPairing:
		if e.Peer != "" {
			parts = append(parts, strconv.Quote(e.Peer))
		}
		if e.GrantID != "" {
			parts = append(parts, e.GrantID)
		}
	}
	if e.Params != "" {
		parts = append(parts, e.Params)
	}
	if store.Kind(e.Kind) == store.KindApproval && e.DecidedBy != "" && !strings.Contains(e.Params, e.DecidedBy) {
		// "by owner" after an approval; not after a reason that already
		// names who ("denied by the owner", "denied on desktop (OKEQ5Q4)").
		parts = append(parts, "by "+e.DecidedBy)
	}
	return strings.Join(parts, " ")
}

// ResultText is the result, with a capability run's duration.
func (e AuditEntry) ResultText() string {
	if store.Kind(e.Kind) == store.KindCapability && e.DurationMS > 0 {
		return e.Result + " " + time.Duration(e.DurationMS*float64(time.Millisecond)).Round(time.Microsecond).String()
	}
	return e.Result
}

// Where is where it was decided (tray, cli, phone, device, policy, timeout), else
// the listener a request came on.
func (e AuditEntry) Where() string {
	if e.DecidedVia != "" {
		return e.DecidedVia
	}
	if e.Via != "" {
		return e.Via
	}
	return "-"
}

func auditView(e store.Entry) AuditEntry {
	return AuditEntry{
		Seq: e.Seq, Time: e.Time, Kind: string(e.Kind), GrantID: e.GrantID, Peer: e.Peer, Via: e.Via,
		Subject: e.Subject, Result: e.Result, DecidedBy: e.DecidedBy, DecidedVia: e.DecidedVia,
		Params: e.Params, TaskID: e.TaskID, DurationMS: float64(e.Duration.Microseconds()) / 1000,
		Hash: e.HashHex(),
	}
}

// AuditQuery selects audit entries (the query of GET /audit and
// /audit/follow). Zero fields select everything; Limit defaults to 1000
// and is at most 10000; Latest gives the newest Limit entries (still
// oldest first) instead of the oldest.
type AuditQuery struct {
	Since   time.Time
	GrantID string
	Kind    string
	Limit   int
	Latest  bool
}

// values is q as a URL query.
func (q AuditQuery) values() string {
	v := make([]string, 0, 5)
	if !q.Since.IsZero() {
		v = append(v, "since="+q.Since.UTC().Format(time.RFC3339Nano))
	}
	if q.GrantID != "" {
		v = append(v, "grant="+url.QueryEscape(q.GrantID))
	}
	if q.Kind != "" {
		v = append(v, "kind="+url.QueryEscape(q.Kind))
	}
	if q.Limit > 0 {
		v = append(v, "limit="+strconv.Itoa(q.Limit))
	}
	if q.Latest {
		v = append(v, "latest=1")
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + strings.Join(v, "&")
}

// parseAuditQuery reads an AuditQuery from r's URL query.
func parseAuditQuery(r *http.Request) (store.Filter, error) {
	q := r.URL.Query()
	var f store.Filter
	if s := q.Get("since"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return f, badRequest("since %q: want an RFC 3339 time", clipID(s))
		}
		f.Since = t
	}
	f.GrantID = q.Get("grant")
	if k := q.Get("kind"); k != "" {
		if err := CheckAuditKind(k); err != nil {
			return f, badRequest("%s", err.Error())
		}
		f.Kind = store.Kind(k)
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return f, badRequest("limit %q: want a positive number", clipID(s))
		}
		f.Limit = min(n, 10000)
	}
	f.Latest = q.Get("latest") == "1"
	return f, nil
}

// AuditVerify is the answer of GET /audit/verify: how many entries were
// checked and, when the chain is broken, the first broken entry.
type AuditVerify struct {
	OK        bool   `json:"ok"`
	Entries   int64  `json:"entries"`
	First     int64  `json:"first,omitempty"`
	Last      int64  `json:"last,omitempty"`
	AnchorSeq int64  `json:"anchor_seq,omitempty"` // the newest pruned entry the chain starts from
	BrokenSeq int64  `json:"broken_seq,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// VerifyAudit recomputes the audit trail's hash chain (store.Verify).
func (n *Node) VerifyAudit(ctx context.Context) (AuditVerify, error) {
	v, err := n.db.Verify(ctx)
	out := AuditVerify{OK: err == nil, Entries: v.Entries, First: v.First, Last: v.Last, AnchorSeq: v.AnchorSeq}
	var ce *store.ChainError
	if errors.As(err, &ce) {
		out.BrokenSeq, out.Reason = ce.Seq, ce.Reason
		return out, nil
	}
	return out, err
}

// auditRoutes mounts the audit trail's control routes (owner only).
func (n *Node) auditRoutes(mux *http.ServeMux) {
	owner := n.ownerRoutes(mux)
	owner("GET /audit", func(w http.ResponseWriter, r *http.Request) {
		f, err := parseAuditQuery(r)
		if err != nil {
			writeError(w, statusFor(err), err)
			return
		}
		es, err := n.db.Query(r.Context(), f)
		if err != nil {
			writeError(w, http.StatusInternalServerError, err)
			return
		}
		out := make([]AuditEntry, len(es))
		for i, e := range es {
			out[i] = auditView(e)
		}
		jsonout.Write(w, http.StatusOK, out)
	})
	owner("GET /audit/follow", func(w http.ResponseWriter, r *http.Request) {
		f, err := parseAuditQuery(r)
		if err != nil {
			writeError(w, statusFor(err), err)
			return
		}
		// The stream ends when the client leaves or the node stops.
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		stop := context.AfterFunc(n.ctx, cancel)
		defer stop()
		stream := jsonout.NewStream(w)
		_ = http.NewResponseController(w).Flush() // the client sees the answer start at once
		err = n.db.Follow(ctx, f, func(e store.Entry) error { return stream.Send(auditView(e)) })
		if err != nil && ctx.Err() == nil && !errors.Is(err, store.ErrClosed) {
			n.log.Warn("audit follow ended", "err", err)
		}
	})
	owner("GET /audit/verify", func(w http.ResponseWriter, r *http.Request) {
		v, err := n.VerifyAudit(r.Context())
		if err != nil {
			writeError(w, http.StatusInternalServerError, err)
			return
		}
		jsonout.Write(w, http.StatusOK, v)
	})
}

// pruneAudit applies the retention bounds now and then every
// AuditPruneEvery until ctx ends.
func (n *Node) pruneAuditLoop(ctx context.Context) {
	t := time.NewTicker(AuditPruneEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n.pruneAudit(ctx)
		}
	}
}

func (n *Node) pruneAudit(ctx context.Context) {
	if removed, err := n.db.PruneAudit(ctx); err != nil {
		n.log.Warn("audit retention not applied", "err", err)
	} else if removed > 0 {
		n.log.Info("audit retention applied", "removed", removed,
			"max_entries", n.cfg.Audit.MaxEntries, "max_age", n.cfg.Audit.MaxAge.Duration)
	}
}

// actor is who made a change and where, as the audit trail records it.
type actor struct {
	by      string // "owner", or the short device ID (else grant name) of a grant with scope full
	where   string // store.WhereCLI, WhereTray, WherePhone
	grantID string // the acting grant, when not the owner
}

// checkWhere reads the where a control client names: tray, cli or phone
// ("" is read as the CLI, as for ApprovalDecision.Where); policy and
// timeout are the node's own.
func checkWhere(w string) (string, error) {
	switch w {
	case "":
		return store.WhereCLI, nil
	case store.WhereCLI, store.WhereTray, store.WherePhone:
		return w, nil
	}
	return "", badRequest("where %q: want tray, cli or phone", clipID(w))
}

// actorOf is who sent r (the local owner or a grant with scope full) at
// where.
func actorOf(r *http.Request, where string) (actor, error) {
	w, err := checkWhere(where)
	if err != nil {
		return actor{}, err
	}
	a := actor{by: "owner", where: w}
	if p, ok := pairing.PrincipalFrom(r.Context()); ok && !p.Local {
		a.grantID = p.Grant.ID
		a.by = p.Grant.Name
		if p.Grant.PeerID != "" {
			a.by = pairing.ShortID(p.Grant.PeerID)
		}
	}
	return a, nil
}

// switchEntry records the A2A or LAN switch set to on by a.
func (n *Node) auditSwitch(kind store.Kind, on bool, a actor) {
	res := "off"
	if on {
		res = "on"
	}
	subject := "A2A agent published"
	if kind == store.KindLAN {
		subject = "reachable on the local network"
	}
	n.audit(store.Entry{Kind: kind, Subject: subject, Result: res, GrantID: a.grantID, DecidedBy: a.by, DecidedVia: a.where})
}

// auditCapabilityPolicy records a's change of capability name's approval
// policy from was to now (meshtray manifest set, POST /config): a change
// of trust, like a grant's policy (store.KindGrant, subject "capability
// policy", the capability in Params).
func (n *Node) auditCapabilityPolicy(name string, was, now pairing.Policy, a actor) {
	n.audit(store.Entry{Kind: store.KindGrant, Subject: "capability policy", Result: string(now),
		Params: "capability " + name + "; was " + string(was), GrantID: a.grantID, DecidedBy: a.by, DecidedVia: a.where})
}

// onCapabilityRun records one capability call (nodes.Options.OnRun).
func (n *Node) onCapabilityRun(rr nodes.RunRecord) {
	e := store.Entry{
		Kind: store.KindCapability, Subject: rr.Capability, Params: rr.Params,
		Result: string(rr.State), Duration: rr.Duration, Peer: "this device", Via: string(pairing.ListenerLoopback),
		TaskID: rr.TaskID,
	}
	if c := rr.Caller; c != nil {
		e.Via = string(c.Listener)
		if !c.Local {
			e.GrantID, e.Peer = c.Grant.ID, c.Grant.Name
		}
	}
	n.audit(e)
}

// ownerChange is the grant action under way that a person made (the owner,
// or a device deciding an approval with "always allow"): the change the
// observer will be told of, and who made it where. One at a time (mu), so
// the observer matches it exactly.
type ownerChange struct {
	mu     sync.Mutex // serialises owner grant actions
	actMu  sync.Mutex // guards key, by, active
	key    string
	by     actor
	active bool
}

// changeKey names a change for matching: op and grant ID; an issue by the
// owner (no device, valid at once) has no ID before it happens.
func changeKey(op pairing.ChangeOp, grantID string) string {
	if op == pairing.ChangeIssued {
		return string(op)
	}
	return string(op) + "/" + grantID
}

// asOwner runs fn, an owner's grant action at where that makes the change
// key, so the audit entry of that change names the owner and where.
func (n *Node) asOwner(key, where string, fn func() error) error {
	return n.asActor(key, actor{by: "owner", where: where}, fn)
}

// asActor runs fn, a grant action by a that makes the change key, so the
// audit entry of that change names a.by and a.where. The observer is told
// of the change before the Grants method that made it returns
// (pairing.Grants.Observe), so within fn.
func (n *Node) asActor(key string, a actor, fn func() error) error {
	oc := &n.ownerAct
	oc.mu.Lock()
	defer oc.mu.Unlock()
	oc.actMu.Lock()
	oc.key, oc.by, oc.active = key, a, true
	oc.actMu.Unlock()
	defer func() {
		oc.actMu.Lock()
		oc.active = false
		oc.actMu.Unlock()
	}()
	return fn()
}

// actorOfChange reports whether the change key is the action under way
// (asActor), and who made it where; it matches once.
func (n *Node) actorOfChange(key string) (actor, bool) {
	oc := &n.ownerAct
	oc.actMu.Lock()
	defer oc.actMu.Unlock()
	if !oc.active || oc.key != key {
		return actor{}, false
	}
	oc.active = false
	return oc.by, true
}

// grantSubjects are the store's names of grant changes (store.KindGrant).
var grantSubjects = map[pairing.ChangeOp]string{
	pairing.ChangeIssued: "issue", pairing.ChangePaused: "pause", pairing.ChangeResumed: "resume",
	pairing.ChangePolicy: "policy", pairing.ChangeRevoked: "revoke", pairing.ChangeRotated: "rotate",
	pairing.ChangeFilesPolicy: "files policy",
}

// onTrustChange records a change of trust (pairing.Grants.Observe).
func (n *Node) onTrustChange(c pairing.Change) {
	e := store.Entry{GrantID: c.GrantID, Peer: c.Name}
	details := make([]string, 0, 3)
	if c.PeerID != "" {
		details = append(details, "device "+pairing.ShortID(c.PeerID))
	}
	if len(c.Scopes) > 0 {
		details = append(details, "scopes "+c.Scopes.String())
	}
	if c.Cause != "" {
		details = append(details, c.Cause)
	}
	if subject, ok := grantSubjects[c.Op]; ok {
		e.Kind, e.Subject = store.KindGrant, subject
		switch c.Op {
		case pairing.ChangeRevoked:
			e.Result = "revoked"
		case pairing.ChangePolicy:
			e.Result = string(c.Policy)
		case pairing.ChangeFilesPolicy:
			e.Result = string(c.FilesPolicy)
			if e.Result == "" {
				e.Result = string(pairing.PolicyAsk)
			}
		default:
			e.Result = string(c.Status)
		}
		if c.Op == pairing.ChangeIssued && c.Policy != "" {
			details = append(details, "approval "+string(c.Policy))
		}
		ownerIssue := c.Op != pairing.ChangeIssued || (c.PeerID == "" && c.Cause == "")
		switch a, ok := n.actorOfChange(changeKey(c.Op, c.GrantID)); {
		case ok && ownerIssue:
			e.DecidedBy, e.DecidedVia = a.by, a.where
		case c.Op == pairing.ChangeIssued, c.Cause == "":
			// A pairing the owner approved or joined; a change only the
			// owner makes (an "always allow" given in an approval).
			e.DecidedBy = "owner"
		default:
			e.DecidedBy = "node" // the node's own consequence (a re-pairing, a token never collected)
		}
	} else {
		e.Kind = store.KindPairing
		switch c.Op {
		case pairing.ChangePaired:
			e.Subject, e.Result = "grant collected", "paired"
		case pairing.ChangeHeld:
			e.Subject, e.Result = "grant received", "paired"
		case pairing.ChangeHeldDropped:
			e.Subject, e.Result = "held grant dropped", "dropped"
			if c.Cause != "" { // the device refused its token
				e.Result, e.DecidedBy = "revoked by the device", "device "+pairing.ShortID(c.PeerID)
			}
		case pairing.ChangeDenied, pairing.ChangeExpired:
			// A pairing request the approvals queue took ends there: its
			// approval entry (store.ResolveApproval) is the one record of
			// the owner's denial, with who and where, and of its expiry
			// (where timeout). Only a request the node refused before it
			// reached the queue has no approval entry: it is recorded here.
			reason, ok := n.unqueuedPairings.LoadAndDelete(c.RequestID)
			if !ok || c.RequestID == "" {
				return
			}
			e.Subject, e.Result, e.DecidedBy = "pairing request", "denied", "node"
			details = append(details, reason.(string))
		default:
			e.Subject = string(c.Op)
		}
		e.Via = string(c.Listener)
	}
	e.Params = strings.Join(details, "; ")
	n.audit(e)
}

// CheckAuditKind refuses k unless it is a kind of audit entry (approval,
// capability, grant, pairing, a2a, lan, database): the filter of GET /audit and of
// `meshtray audit --kind`.
func CheckAuditKind(k string) error {
	switch store.Kind(k) {
	case store.KindApproval, store.KindCapability, store.KindGrant, store.KindPairing, store.KindA2A, store.KindLAN, store.KindDatabase:
		return nil
	}
	return fmt.Errorf("kind %q: want approval, capability, grant, pairing, a2a, lan or database", clipID(k))
}
