package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ApprovalKind is what a pending approval asks.
type ApprovalKind string

// Approval kinds (the approvals queue's).
const (
	ApprovalDelegation ApprovalKind = "delegation"
	ApprovalCapability ApprovalKind = "capability"
	ApprovalPairing    ApprovalKind = "pairing"
	ApprovalFiles      ApprovalKind = "files" // a file transfer (an A2A task, like a delegation)
)

// Approval is one pending approval or pairing request. It has no field for
// a pairing code, SAS or token: those stay in memory with the pairing
// session. A pairing request keeps its request ID and the SHA-256 of the
// claimant's poll token (PollHash: it finds the claimant's next poll, it
// cannot be used as the token), so after a restart it is listed again and
// can be denied, or approved once the claimant polls again.
type Approval struct {
	ID          string
	Kind        ApprovalKind
	GrantID     string // the asking grant (delegation, capability)
	Peer        string // the requester's name
	DeviceID    string
	OS          string
	Via         string // listener: loopback, tailnet, lan
	Addr        string
	TailnetUser string
	TailnetNode string
	Summary     string
	Detail      string
	Scopes      []string // requested scopes (pairing)
	TaskID      string
	RequestID   string // pairing: the pairing request's ID
	PollHash    []byte // pairing: SHA-256 of the claimant's poll token (32 bytes)
	Created     time.Time
	Expires     time.Time // at Expires the request is refused
}

// PutApproval stores a new pending approval (ErrExists, ErrFull beyond
// MaxApprovals, ErrInvalid). It returns once committed.
func (s *Store) PutApproval(ctx context.Context, a Approval) error {
	switch a.Kind {
	case ApprovalDelegation, ApprovalCapability, ApprovalPairing, ApprovalFiles:
	default:
		return fmt.Errorf("%w: approval kind %q", ErrInvalid, a.Kind)
	}
	if a.ID == "" || a.Expires.IsZero() {
		return fmt.Errorf("%w: an approval needs an id and an expiry", ErrInvalid)
	}
	if err := checkText("approval", a.ID, a.GrantID, a.Peer, a.DeviceID, a.OS, a.Via, a.Addr, a.TailnetUser,
		a.TailnetNode, a.Summary, a.Detail, strings.Join(a.Scopes, ","), a.TaskID, a.RequestID); err != nil {
		return err
	}
	if a.PollHash != nil && len(a.PollHash) != 32 {
		return fmt.Errorf("%w: a poll token hash is 32 bytes (SHA-256)", ErrInvalid)
	}
	if a.Created.IsZero() {
		a.Created = s.now()
	}
	return s.write(ctx, false, func(b *batch) error {
		if b.st.approvals >= s.opts.MaxApprovals {
			return fmt.Errorf("%w: %d approvals are pending", ErrFull, b.st.approvals)
		}
		_, err := b.exec(`INSERT INTO approvals (id, kind, grant_id, peer, device_id, os, via, addr, tailnet_user,
			tailnet_node, summary, detail, scopes, task_id, request_id, poll_hash, created, expires)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			a.ID, string(a.Kind), a.GrantID, a.Peer, a.DeviceID, a.OS, a.Via, a.Addr, a.TailnetUser, a.TailnetNode,
			a.Summary, a.Detail, strings.Join(a.Scopes, ","), a.TaskID, a.RequestID, a.PollHash, ns(a.Created), ns(a.Expires))
		if isUniqueViolation(err) {
			return fmt.Errorf("%w: approval %s", ErrExists, a.ID)
		}
		if err != nil {
			return err
		}
		b.st.approvals++
		return nil
	})
}

// Approvals returns the pending approvals, oldest first.
func (s *Store) Approvals(ctx context.Context) ([]Approval, error) {
	rows, err := s.query(ctx, `SELECT id, kind, grant_id, peer, device_id, os, via, addr, tailnet_user,
		tailnet_node, summary, detail, scopes, task_id, request_id, poll_hash, created, expires FROM approvals
		ORDER BY created, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Approval
	for rows.Next() {
		var a Approval
		var kind, scopes string
		var created, expires int64
		if err := rows.Scan(&a.ID, &kind, &a.GrantID, &a.Peer, &a.DeviceID, &a.OS, &a.Via, &a.Addr, &a.TailnetUser,
			&a.TailnetNode, &a.Summary, &a.Detail, &scopes, &a.TaskID, &a.RequestID, &a.PollHash, &created, &expires); err != nil {
			return nil, err
		}
		a.Kind = ApprovalKind(kind)
		if scopes != "" {
			a.Scopes = strings.Split(scopes, ",")
		}
		a.Created, a.Expires = fromNS(created), fromNS(expires)
		out = append(out, a)
	}
	return out, rows.Err()
}

// ResolveApproval removes pending approval id and appends e (its decision)
// to the audit trail in the same transaction, synced to the disk before it
// returns: a decision is acknowledged only once it is both gone from the
// queue and recorded. It returns the appended entry; ErrNotFound when no
// such approval is pending (nothing is appended then).
func (s *Store) ResolveApproval(ctx context.Context, id string, e Entry) (Entry, error) {
	e, err := s.prepareEntry(e)
	if err != nil {
		return Entry{}, err
	}
	var out Entry
	err = s.write(ctx, true, func(b *batch) error {
		res, err := b.exec("DELETE FROM approvals WHERE id = ?", id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: approval %s", ErrNotFound, id)
		}
		b.st.approvals--
		out, err = s.appendEntry(b, e)
		return err
	})
	return out, err
}

// DeleteApproval removes pending approval id without a decision (its
// request went away); ErrNotFound when there is none.
func (s *Store) DeleteApproval(ctx context.Context, id string) error {
	return s.write(ctx, false, func(b *batch) error {
		res, err := b.exec("DELETE FROM approvals WHERE id = ?", id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: approval %s", ErrNotFound, id)
		}
		b.st.approvals--
		return nil
	})
}

// Outbound is one delegated task (the outbound view's record). Artifacts is
// the view's artifacts JSON.
type Outbound struct {
	ID        string // meshtray's short id
	TaskID    string // the agent's task id
	ContextID string
	Agent     string // agent id
	AgentName string
	AgentKind string
	Request   string // first line of the request
	State     State
	Message   string // the status message's text
	Error     string // meshtray's trouble following the task
	Following bool   // a stream or poll loop watched it when written
	Streaming bool
	Artifacts []byte
	Truncated bool
	Created   time.Time
	Updated   time.Time
}

// PutOutbound stores o, inserting or replacing it by ID. A new one evicts,
// beyond MaxOutbound, the oldest terminal task nobody follows, else the
// oldest one nobody follows (as the in-memory view does), else it is
// refused (ErrFull). A stored terminal task takes no update (ErrTerminal).
// Artifacts over MaxOutboundBytes are ErrTooBig. A write reaching a
// terminal state is synced to the disk before PutOutbound returns.
func (s *Store) PutOutbound(ctx context.Context, o Outbound) error {
	st, err := ParseState(string(o.State))
	if err != nil {
		return err
	}
	o.State = st
	if o.ID == "" || o.Agent == "" {
		return fmt.Errorf("%w: an outbound task needs an id and an agent", ErrInvalid)
	}
	if err := checkText("outbound task", o.ID, o.TaskID, o.ContextID, o.Agent, o.AgentName, o.AgentKind,
		o.Request, o.Message, o.Error); err != nil {
		return err
	}
	if n := int64(len(o.Artifacts)); n > s.opts.MaxOutboundBytes {
		return fmt.Errorf("%w: outbound task %s artifacts are %d bytes, over %d", ErrTooBig, o.ID, n, s.opts.MaxOutboundBytes)
	}
	now := s.now()
	if o.Created.IsZero() {
		o.Created = now
	}
	if o.Updated.IsZero() {
		o.Updated = now
	}
	return s.write(ctx, o.State.Terminal(), func(b *batch) error {
		var old string
		err := b.queryRow("SELECT state FROM outbound WHERE id = ?", o.ID).Scan(&old)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			for b.st.outbound >= s.opts.MaxOutbound {
				var victim string
				err := b.queryRow(`SELECT id FROM outbound WHERE following = 0
					ORDER BY ended_seq IS NULL, created, id LIMIT 1`).Scan(&victim)
				if errors.Is(err, sql.ErrNoRows) {
					return fmt.Errorf("%w: %d delegations are in progress", ErrFull, b.st.outbound)
				}
				if err != nil {
					return err
				}
				if _, err := b.exec("DELETE FROM outbound WHERE id = ?", victim); err != nil {
					return err
				}
				b.st.outbound--
			}
			b.st.outbound++
		case err != nil:
			return err
		case State(old).Terminal():
			return fmt.Errorf("%w: outbound task %s is %s", ErrTerminal, o.ID, old)
		}
		var ended any
		if o.State.Terminal() {
			b.st.ended++
			ended = b.st.ended
		}
		_, err = b.exec(`INSERT INTO outbound (id, task_id, context_id, agent, agent_name, agent_kind, request, state,
			message, error, following, streaming, artifacts, truncated, created, updated, ended_seq)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET task_id = excluded.task_id, context_id = excluded.context_id,
			agent_name = excluded.agent_name, agent_kind = excluded.agent_kind, request = excluded.request,
			state = excluded.state, message = excluded.message, error = excluded.error, following = excluded.following,
			streaming = excluded.streaming, artifacts = excluded.artifacts, truncated = excluded.truncated,
			updated = excluded.updated, ended_seq = excluded.ended_seq`,
			o.ID, o.TaskID, o.ContextID, o.Agent, o.AgentName, o.AgentKind, o.Request, string(o.State), o.Message,
			o.Error, o.Following, o.Streaming, o.Artifacts, o.Truncated, ns(o.Created), ns(o.Updated), ended)
		return err
	})
}

// OutboundTasks returns the outbound tasks, oldest first.
func (s *Store) OutboundTasks(ctx context.Context) ([]Outbound, error) {
	rows, err := s.query(ctx, `SELECT id, task_id, context_id, agent, agent_name, agent_kind, request, state,
		message, error, following, streaming, artifacts, truncated, created, updated FROM outbound ORDER BY created, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Outbound
	for rows.Next() {
		var o Outbound
		var state string
		var created, updated int64
		if err := rows.Scan(&o.ID, &o.TaskID, &o.ContextID, &o.Agent, &o.AgentName, &o.AgentKind, &o.Request, &state,
			&o.Message, &o.Error, &o.Following, &o.Streaming, &o.Artifacts, &o.Truncated, &created, &updated); err != nil {
			return nil, err
		}
		o.State = State(state)
		o.Created, o.Updated = fromNS(created), fromNS(updated)
		out = append(out, o)
	}
	return out, rows.Err()
}

// ManualPeer is a peer the owner added by hand (mesh.Table.AddManual): its
// https URL and what its verified hello said.
type ManualPeer struct {
	URL         string
	DeviceID    string
	Fingerprint string // lowercase hex SHA-256 of its certificate (not secret)
	Name        string
	OS          string    // as its last verified hello said
	LastSeen    time.Time // when its hello last answered (zero: unknown)
	Added       time.Time
}

// PutPeer stores p by URL (insert or replace); ErrFull beyond MaxPeers.
func (s *Store) PutPeer(ctx context.Context, p ManualPeer) error {
	if !strings.HasPrefix(p.URL, "https://") {
		return fmt.Errorf("%w: a manual peer's URL is https://", ErrInvalid)
	}
	if err := checkText("peer", p.URL, p.DeviceID, p.Fingerprint, p.Name, p.OS); err != nil {
		return err
	}
	if p.Added.IsZero() {
		p.Added = s.now()
	}
	return s.write(ctx, false, func(b *batch) error {
		var n int
		if err := b.queryRow("SELECT count(*) FROM peers WHERE url = ?", p.URL).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			if b.st.peers >= s.opts.MaxPeers {
				return fmt.Errorf("%w: %d peers added by hand", ErrFull, b.st.peers)
			}
			b.st.peers++
		}
		var seen int64
		if !p.LastSeen.IsZero() {
			seen = ns(p.LastSeen)
		}
		_, err := b.exec(`INSERT INTO peers (url, device_id, fingerprint, name, os, last_seen, added) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (url) DO UPDATE SET device_id = excluded.device_id, fingerprint = excluded.fingerprint,
			name = excluded.name, os = excluded.os, last_seen = max(last_seen, excluded.last_seen)`,
			p.URL, p.DeviceID, p.Fingerprint, p.Name, p.OS, seen, ns(p.Added))
		return err
	})
}

// DeletePeer removes the peer added as url (ErrNotFound when none).
func (s *Store) DeletePeer(ctx context.Context, url string) error {
	return s.write(ctx, false, func(b *batch) error {
		res, err := b.exec("DELETE FROM peers WHERE url = ?", url)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: peer %s", ErrNotFound, url)
		}
		b.st.peers--
		return nil
	})
}

// Peers returns the peers added by hand, oldest first.
func (s *Store) Peers(ctx context.Context) ([]ManualPeer, error) {
	rows, err := s.query(ctx, "SELECT url, device_id, fingerprint, name, os, last_seen, added FROM peers ORDER BY added, url")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ManualPeer
	for rows.Next() {
		var p ManualPeer
		var added, seen int64
		if err := rows.Scan(&p.URL, &p.DeviceID, &p.Fingerprint, &p.Name, &p.OS, &seen, &added); err != nil {
			return nil, err
		}
		p.Added = fromNS(added)
		if seen != 0 {
			p.LastSeen = fromNS(seen)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// Sending is one file transfer this node is sending: the receiver's task,
// recorded from the moment its id is known until the send ends, so that a
// node killed mid-transfer cancels it at the receiver when it starts again.
type Sending struct {
	Device  string // the receiver's device ID
	TaskID  string // the receiver's task ID
	Name    string // the receiver's name, for the log
	Started time.Time
}

// PutSending stores sd by (Device, TaskID), insert or replace; ErrFull
// beyond MaxSendings, ErrInvalid without a device or task ID. It is synced
// to the disk (as a decision is, Options.Durability) before it returns:
// a send is recorded before its upload starts.
func (s *Store) PutSending(ctx context.Context, sd Sending) error {
	if sd.Device == "" || sd.TaskID == "" {
		return fmt.Errorf("%w: a send under way needs a device and a task id", ErrInvalid)
	}
	if err := checkText("send under way", sd.Device, sd.TaskID, sd.Name); err != nil {
		return err
	}
	if sd.Started.IsZero() {
		sd.Started = s.now()
	}
	return s.write(ctx, true, func(b *batch) error {
		var n int
		if err := b.queryRow("SELECT count(*) FROM sendings WHERE device_id = ? AND task_id = ?",
			sd.Device, sd.TaskID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			if b.st.sendings >= s.opts.MaxSendings {
				return fmt.Errorf("%w: %d sends under way", ErrFull, b.st.sendings)
			}
			b.st.sendings++
		}
		_, err := b.exec(`INSERT INTO sendings (device_id, task_id, name, started) VALUES (?, ?, ?, ?)
			ON CONFLICT (device_id, task_id) DO UPDATE SET name = excluded.name, started = excluded.started`,
			sd.Device, sd.TaskID, sd.Name, ns(sd.Started))
		return err
	})
}

// DeleteSending removes the send of task taskID at device (ErrNotFound
// when none). It is committed, not synced: a removal a power loss undoes
// only makes the next start cancel a task that has already ended.
func (s *Store) DeleteSending(ctx context.Context, device, taskID string) error {
	return s.write(ctx, false, func(b *batch) error {
		res, err := b.exec("DELETE FROM sendings WHERE device_id = ? AND task_id = ?", device, taskID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: send of task %s at %s", ErrNotFound, taskID, device)
		}
		b.st.sendings--
		return nil
	})
}

// Sendings returns the sends under way, oldest first.
func (s *Store) Sendings(ctx context.Context) ([]Sending, error) {
	rows, err := s.query(ctx, "SELECT device_id, task_id, name, started FROM sendings ORDER BY started, device_id, task_id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Sending
	for rows.Next() {
		var sd Sending
		var started int64
		if err := rows.Scan(&sd.Device, &sd.TaskID, &sd.Name, &started); err != nil {
			return nil, err
		}
		sd.Started = fromNS(started)
		out = append(out, sd)
	}
	return out, rows.Err()
}
