package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// Kind is what an audit entry records.
type Kind string

// Audit entry kinds.
const (
	// KindApproval: an approval decision. Subject is what was asked (the
	// summary), GrantID and Peer who asked, Via the listener the request
	// came on, Result "approved", "denied" or "withdrawn" (nobody
	// decided: the request went away first), DecidedBy who decided
	// ("owner", a device id, "policy", "node" for a timeout, a withdrawal
	// or a restart), DecidedVia where (a Where value; "" when the request
	// went away), Params why a request was refused or what an approval
	// granted ("no answer within 2m0s", "the node restarted", "scopes
	// agent,node"), TaskID the task it was about.
	KindApproval Kind = "approval"
	// KindCapability: a capability run. Subject is the capability, Params
	// a parameter summary, GrantID and Peer the caller, Result the result
	// state, Duration how long it ran.
	KindCapability Kind = "capability"
	// KindGrant: a grant change. Subject is the change ("issue", "pause",
	// "resume", "revoke", "rotate", "policy"), GrantID and Peer the grant,
	// Result the new status or policy, DecidedVia where.
	KindGrant Kind = "grant"
	// KindPairing: a pairing change (a session opened or ended, a claim
	// approved or denied, a held grant dropped). Subject is the change.
	KindPairing Kind = "pairing"
	// KindA2A and KindLAN: the A2A publish switch and the LAN switch;
	// Result is "on" or "off", DecidedVia where.
	KindA2A Kind = "a2a"
	KindLAN Kind = "lan"
	// KindDatabase: the database itself changed under the trail: Subject
	// "reset" when an unreadable database was moved aside at start (the
	// first entry of the new one), Params what was moved where and why.
	KindDatabase Kind = "database"
)

func (k Kind) valid() bool {
	switch k {
	case KindApproval, KindCapability, KindGrant, KindPairing, KindA2A, KindLAN, KindDatabase:
		return true
	}
	return false
}

// durable reports kinds that record a decision or a change of trust: they
// are synced to the disk before Append returns. Capability runs are
// committed only (their task's terminal state is synced).
func (k Kind) durable() bool { return k != KindCapability }

// Where an approval or a change was decided (Entry.DecidedVia).
const (
	WhereTray  = "tray"
	WhereCLI   = "cli"
	WherePhone = "phone" // the phone page of a grant with the approve scope
	// WhereDevice: another meshtray holding a grant with the approve
	// scope on this one (its CLI: meshtray approve --on DEVICE ID).
	WhereDevice  = "device"
	WherePolicy  = "policy"
	WhereTimeout = "timeout"
)

// maxField bounds each text field of an entry (bytes, after redaction);
// longer text is cut with "…".
const maxField = 1024

// Entry is one audit record. Seq, Time, PrevHash and Hash are set by the
// store; every text field is scrubbed by Redact before it is hashed and
// written.
//
// The hash chain: Hash = SHA-256(PrevHash || C), where PrevHash is the
// previous entry's Hash (32 zero bytes for the first entry ever; after
// pruning, the anchor: the Hash of the newest pruned entry) and C is the
// RFC 8785 (JCS) canonical JSON of the object
//
//	{"v":1, "seq":Seq, "time":T, "kind":Kind, "grant_id":..., "peer":...,
//	 "via":..., "subject":..., "result":..., "decided_by":...,
//	 "decided_via":..., "params":..., "task_id":..., "duration_us":...}
//
// with T = Time in UTC as "2006-01-02T15:04:05.000000000Z" (always nine
// fraction digits), duration_us = Duration in whole microseconds, and every
// member whose value is "" or 0 left out. An entry changed, removed or
// reordered breaks the chain at it (Verify).
type Entry struct {
	Seq        int64         `json:"seq"`
	Time       time.Time     `json:"time"`
	Kind       Kind          `json:"kind"`
	GrantID    string        `json:"grant_id,omitempty"`
	Peer       string        `json:"peer,omitempty"`
	Via        string        `json:"via,omitempty"`
	Subject    string        `json:"subject,omitempty"`
	Result     string        `json:"result,omitempty"`
	DecidedBy  string        `json:"decided_by,omitempty"`
	DecidedVia string        `json:"decided_via,omitempty"`
	Params     string        `json:"params,omitempty"`
	TaskID     string        `json:"task_id,omitempty"`
	Duration   time.Duration `json:"duration,omitempty"`
	PrevHash   [32]byte      `json:"-"`
	Hash       [32]byte      `json:"-"`
}

// HashHex is the entry's hash in lowercase hex.
func (e Entry) HashHex() string { return hex.EncodeToString(e.Hash[:]) }

// canonicalEntry is the hashed content (see Entry).
type canonicalEntry struct {
	V          int    `json:"v"`
	Seq        int64  `json:"seq"`
	Time       string `json:"time"`
	Kind       Kind   `json:"kind"`
	GrantID    string `json:"grant_id,omitempty"`
	Peer       string `json:"peer,omitempty"`
	Via        string `json:"via,omitempty"`
	Subject    string `json:"subject,omitempty"`
	Result     string `json:"result,omitempty"`
	DecidedBy  string `json:"decided_by,omitempty"`
	DecidedVia string `json:"decided_via,omitempty"`
	Params     string `json:"params,omitempty"`
	TaskID     string `json:"task_id,omitempty"`
	DurationUS int64  `json:"duration_us,omitempty"`
}

const canonicalTime = "2006-01-02T15:04:05.000000000Z"

// Canonical returns C, the RFC 8785 bytes the entry's hash covers.
func (e Entry) Canonical() ([]byte, error) {
	raw, err := json.Marshal(canonicalEntry{
		V: 1, Seq: e.Seq, Time: e.Time.UTC().Format(canonicalTime), Kind: e.Kind,
		GrantID: e.GrantID, Peer: e.Peer, Via: e.Via, Subject: e.Subject, Result: e.Result,
		DecidedBy: e.DecidedBy, DecidedVia: e.DecidedVia, Params: e.Params, TaskID: e.TaskID,
		DurationUS: e.Duration.Microseconds(),
	})
	if err != nil {
		return nil, err
	}
	return jcs.Transform(raw)
}

// computeHash returns SHA-256(prev || Canonical()).
func (e Entry) computeHash(prev [32]byte) ([32]byte, error) {
	c, err := e.Canonical()
	if err != nil {
		return [32]byte{}, err
	}
	h := sha256.New()
	h.Write(prev[:])
	h.Write(c)
	var out [32]byte
	h.Sum(out[:0])
	return out, nil
}

// prepareEntry checks e's kind and scrubs its text fields.
func (s *Store) prepareEntry(e Entry) (Entry, error) {
	if !e.Kind.valid() {
		return Entry{}, fmt.Errorf("%w: audit kind %q", ErrInvalid, e.Kind)
	}
	for _, f := range []*string{&e.GrantID, &e.Peer, &e.Via, &e.Subject, &e.Result, &e.DecidedBy,
		&e.DecidedVia, &e.Params, &e.TaskID} {
		*f = clip(Redact(strings.ToValidUTF8(*f, "\uFFFD")), maxField)
	}
	if e.Duration < 0 {
		e.Duration = 0
	}
	e.Duration = e.Duration.Truncate(time.Microsecond)
	return e, nil
}

// clip cuts s to at most n bytes on a rune boundary, ending it with "…".
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Append adds e to the audit trail and returns it with Seq, Time and the
// hashes set. Decisions and changes of trust (every kind but
// KindCapability) are synced to the disk before Append returns; capability
// runs are committed. Errors: ErrInvalid (unknown kind), ErrClosed.
func (s *Store) Append(ctx context.Context, e Entry) (Entry, error) {
	e, err := s.prepareEntry(e)
	if err != nil {
		return Entry{}, err
	}
	var out Entry
	err = s.write(ctx, e.Kind.durable(), func(b *batch) error {
		var err error
		out, err = s.appendEntry(b, e)
		return err
	})
	return out, err
}

// appendEntry chains e after the batch's head and inserts it; e was
// prepared. The writer's clock gives Time, so times follow Seq.
func (s *Store) appendEntry(b *batch, e Entry) (Entry, error) {
	e.Seq = b.st.auditSeq + 1
	e.Time = time.Unix(0, max(ns(s.now()), b.st.auditLast)).UTC()
	e.PrevHash = b.st.auditHash
	h, err := e.computeHash(e.PrevHash)
	if err != nil {
		return Entry{}, err
	}
	e.Hash = h
	if _, err := b.exec(`INSERT INTO audit (seq, time, kind, grant_id, peer, via, subject, result, decided_by,
		decided_via, params, task_id, duration_us, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		e.Seq, ns(e.Time), string(e.Kind), e.GrantID, e.Peer, e.Via, e.Subject, e.Result, e.DecidedBy,
		e.DecidedVia, e.Params, e.TaskID, e.Duration.Microseconds(), e.PrevHash[:], e.Hash[:]); err != nil {
		return Entry{}, err
	}
	if _, err := b.exec("UPDATE audit_chain SET head_seq = ?, head_hash = ?", e.Seq, e.Hash[:]); err != nil {
		return Entry{}, err
	}
	b.st.auditSeq, b.st.auditHash, b.st.auditLast = e.Seq, e.Hash, ns(e.Time)
	b.st.auditCount++
	if b.st.auditFirst == 0 {
		b.st.auditFirst = ns(e.Time)
	}
	b.st.appended = true
	return e, nil
}

const entryColumns = `seq, time, kind, grant_id, peer, via, subject, result, decided_by, decided_via, params,
	task_id, duration_us, prev_hash, hash`

func scanEntry(sc interface{ Scan(...any) error }) (Entry, error) {
	var e Entry
	var t, dur int64
	var kind string
	var prev, hash []byte
	if err := sc.Scan(&e.Seq, &t, &kind, &e.GrantID, &e.Peer, &e.Via, &e.Subject, &e.Result, &e.DecidedBy,
		&e.DecidedVia, &e.Params, &e.TaskID, &dur, &prev, &hash); err != nil {
		return Entry{}, err
	}
	e.Time = fromNS(t)
	e.Kind = Kind(kind)
	e.Duration = time.Duration(dur) * time.Microsecond
	copy(e.PrevHash[:], prev)
	copy(e.Hash[:], hash)
	return e, nil
}

// Filter selects audit entries; zero fields select everything.
type Filter struct {
	Since    time.Time // entries at or after
	GrantID  string
	Kind     Kind
	AfterSeq int64 // entries with a larger Seq
	// Limit bounds the answer (default 1000, at most 10000); the oldest
	// matching entries come first, or with Latest the newest Limit ones
	// (still oldest first).
	Limit  int
	Latest bool
}

// Query returns the entries matching f in Seq order.
func (s *Store) Query(ctx context.Context, f Filter) ([]Entry, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 1000
	}
	limit = min(limit, 10000)
	q := "SELECT " + entryColumns + " FROM audit WHERE seq > ?"
	args := []any{f.AfterSeq}
	if !f.Since.IsZero() {
		q += " AND time >= ?"
		args = append(args, ns(f.Since))
	}
	if f.GrantID != "" {
		q += " AND grant_id = ?"
		args = append(args, f.GrantID)
	}
	if f.Kind != "" {
		q += " AND kind = ?"
		args = append(args, string(f.Kind))
	}
	if f.Latest {
		q += " ORDER BY seq DESC LIMIT ?"
	} else {
		q += " ORDER BY seq LIMIT ?"
	}
	args = append(args, limit)
	rows, err := s.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if f.Latest {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out, nil
}

// Follow calls fn with every entry matching f (Limit is the page size,
// Latest applies to the first page only), then with each new matching
// entry as it is appended, until ctx ends (it returns ctx's error), the
// store closes (ErrClosed) or fn returns an error (returned).
func (s *Store) Follow(ctx context.Context, f Filter, fn func(Entry) error) error {
	wake, cancel := s.Subscribe()
	defer cancel()
	for {
		page, err := s.Query(ctx, f)
		if err != nil {
			if s.isClosed() {
				return ErrClosed
			}
			return err
		}
		for _, e := range page {
			if err := fn(e); err != nil {
				return err
			}
			f.AfterSeq = e.Seq
		}
		pageSize := f.Limit
		if pageSize <= 0 {
			pageSize = 1000
		}
		full := len(page) >= min(pageSize, 10000)
		if f.Latest {
			f.Latest = false
			full = false
			if f.AfterSeq == 0 {
				// Nothing matched yet: start after the newest entry.
				f.AfterSeq = s.headSeq(ctx)
			}
		}
		if full {
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case _, ok := <-wake:
			if !ok {
				return ErrClosed
			}
		}
	}
}

// headSeq is the newest entry's Seq (0 when none).
func (s *Store) headSeq(ctx context.Context) int64 {
	var v int64
	s.queryRow(ctx, "SELECT coalesce(max(seq), 0) FROM audit").Scan(&v)
	return v
}

// ErrChainBroken: the audit trail was changed (see ChainError).
var ErrChainBroken = errors.New("store: audit chain broken")

// ChainError names the first broken entry of the audit trail.
type ChainError struct {
	Seq    int64
	Reason string
}

func (e *ChainError) Error() string {
	return fmt.Sprintf("audit entry %d: %s", e.Seq, e.Reason)
}

func (e *ChainError) Unwrap() error { return ErrChainBroken }

// Verified is what Verify checked.
type Verified struct {
	Entries   int64 // entries checked
	First     int64 // Seq of the oldest kept entry (0 when none)
	Last      int64 // Seq of the newest
	AnchorSeq int64 // Seq of the newest pruned entry (0 before any pruning)
}

// Verify walks the audit trail from its anchor and recomputes every hash.
// The first entry that is missing, reordered or changed (or a removed
// tail: the chain head names a newer entry than the newest kept) is
// returned as a *ChainError (wrapping ErrChainBroken); a nil error means
// the chain is whole. Verify reads in pages, so it can run beside writes.
func (s *Store) Verify(ctx context.Context) (Verified, error) {
	var v Verified
	var anchorHash, headHash []byte
	var headSeq int64
	if err := s.queryRow(ctx, "SELECT anchor_seq, anchor_hash, head_seq, head_hash FROM audit_chain").
		Scan(&v.AnchorSeq, &anchorHash, &headSeq, &headHash); err != nil {
		return v, err
	}
	var prev [32]byte
	copy(prev[:], anchorHash)
	want := v.AnchorSeq + 1
	after := v.AnchorSeq // entries at or below the anchor are outside the chain
	for {
		rows, err := s.query(ctx, "SELECT "+entryColumns+" FROM audit WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT 2000", after, headSeq)
		if err != nil {
			return v, err
		}
		n := 0
		for rows.Next() {
			e, err := scanEntry(rows)
			if err != nil {
				rows.Close()
				return v, err
			}
			n++
			after = e.Seq
			if e.Seq != want {
				rows.Close()
				if want == e.Seq-1 {
					return v, &ChainError{Seq: want, Reason: fmt.Sprintf("the entry is missing (the next kept entry is %d)", e.Seq)}
				}
				return v, &ChainError{Seq: want, Reason: fmt.Sprintf("entries %d to %d are missing", want, e.Seq-1)}
			}
			if e.PrevHash != prev {
				rows.Close()
				return v, &ChainError{Seq: e.Seq, Reason: fmt.Sprintf("its link to entry %d does not match: entry %d was changed or replaced", e.Seq-1, e.Seq-1)}
			}
			h, err := e.computeHash(prev)
			if err != nil {
				rows.Close()
				return v, err
			}
			if h != e.Hash {
				rows.Close()
				return v, &ChainError{Seq: e.Seq, Reason: "its content does not match its hash: the entry was changed"}
			}
			if v.First == 0 {
				v.First = e.Seq
			}
			v.Last = e.Seq
			v.Entries++
			prev = h
			want++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return v, err
		}
		if n == 0 {
			break
		}
	}
	if want <= headSeq && v.Entries == 0 {
		n := headSeq - v.AnchorSeq
		return v, &ChainError{Seq: want, Reason: fmt.Sprintf("all entries were removed: the table is empty, and the chain head says %d %s (%d to %d) should be there", n, plural(n, "entry", "entries"), want, headSeq)}
	}
	if want <= headSeq {
		if want == headSeq {
			return v, &ChainError{Seq: want, Reason: "the entry is missing (it was the newest)"}
		}
		return v, &ChainError{Seq: want, Reason: fmt.Sprintf("entries %d to %d are missing (the newest entries were removed)", want, headSeq)}
	}
	if !bytes.Equal(prev[:], headHash) {
		return v, &ChainError{Seq: headSeq, Reason: "the newest entry does not match the chain head"}
	}
	// An entry past the head was not appended by the store (one statement,
	// so an Append running beside Verify moves the head with its entry).
	var extra sql.NullInt64
	if err := s.queryRow(ctx, "SELECT min(seq) FROM audit WHERE seq > (SELECT head_seq FROM audit_chain)").Scan(&extra); err != nil {
		return v, err
	}
	if extra.Valid {
		return v, &ChainError{Seq: extra.Int64, Reason: "the entry is past the chain head: it was added outside the store"}
	}
	return v, nil
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// PruneAudit applies the retention bounds now (the writer also applies
// them after appends). It returns the number of entries removed.
func (s *Store) PruneAudit(ctx context.Context) (int64, error) {
	var removed int64
	err := s.write(ctx, false, func(b *batch) error {
		before := b.st.auditCount
		err := s.pruneLocked(b, true)
		removed = before - b.st.auditCount
		return err
	})
	return removed, err
}

// pruneAudit runs pruneLocked in its own savepoint, when due.
func (s *Store) pruneAudit(b *batch) error {
	if !s.pruneDue(b.st) {
		return nil // the common case: no statement at all
	}
	if _, err := b.exec("SAVEPOINT prune"); err != nil {
		return err
	}
	saved := b.st
	err := s.pruneLocked(b, false)
	if err != nil {
		b.st = saved
		if _, rerr := b.exec("ROLLBACK TO prune"); rerr != nil {
			return errors.Join(err, rerr)
		}
	}
	if _, rerr := b.exec("RELEASE prune"); rerr != nil {
		return errors.Join(err, rerr)
	}
	return err
}

// pruneDue reports whether pruneLocked (not now) has anything to remove,
// from the writer's counters alone.
func (s *Store) pruneDue(st writerState) bool {
	if st.auditCount > int64(s.opts.AuditMaxEntries) {
		return true
	}
	return s.opts.AuditMaxAge > 0 && st.auditFirst != 0 && st.auditFirst < ns(s.now().Add(-s.opts.AuditMaxAge))
}

// pruneLocked removes the entries beyond AuditMaxEntries and those older
// than AuditMaxAge, and records the newest removed entry as
// the anchor, so Verify starts from it. AuditMaxEntries is a maximum: an
// append that passes it removes the oldest entries down to 1 % below it
// (unless now: down to it), so pruning is a batch every so often, not a
// delete per append, and the trail never holds more than the bound.
func (s *Store) pruneLocked(b *batch, now bool) error {
	maxN := int64(s.opts.AuditMaxEntries)
	keep := maxN - maxN/100
	if now {
		keep = maxN
	}
	var cut int64
	if b.st.auditCount > maxN {
		if err := b.queryRow("SELECT seq FROM audit ORDER BY seq LIMIT 1 OFFSET ?", b.st.auditCount-keep-1).Scan(&cut); err != nil {
			return err
		}
	}
	if s.opts.AuditMaxAge > 0 && b.st.auditFirst != 0 {
		cutoff := ns(s.now().Add(-s.opts.AuditMaxAge))
		if b.st.auditFirst < cutoff {
			var old sql.NullInt64
			if err := b.queryRow("SELECT max(seq) FROM audit WHERE time < ?", cutoff).Scan(&old); err != nil {
				return err
			}
			cut = max(cut, old.Int64)
		}
	}
	if cut == 0 {
		return nil
	}
	var hash []byte
	if err := b.queryRow("SELECT hash FROM audit WHERE seq = ?", cut).Scan(&hash); err != nil {
		return err
	}
	res, err := b.exec("DELETE FROM audit WHERE seq <= ?", cut)
	if err != nil {
		return err
	}
	n, _ := res.RowsAffected()
	if _, err := b.exec("UPDATE audit_chain SET anchor_seq = ?, anchor_hash = ?", cut, hash); err != nil {
		return err
	}
	var first sql.NullInt64
	if err := b.queryRow("SELECT min(time) FROM audit").Scan(&first); err != nil {
		return err
	}
	b.st.auditCount -= n
	b.st.auditFirst = first.Int64
	s.log.Info("audit trail pruned", "entries", n, "anchor", cut)
	return nil
}
