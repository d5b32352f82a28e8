package store

import (
	"context"
	"database/sql"
	"fmt"
)

// migration is one schema step; migrations[i] brings the schema to version
// i+1. Released steps never change: a new schema is a new step.
type migration struct {
	desc string
	sql  string
}

var migrations = []migration{
	{"tasks, contexts, approvals, outbound, peers, audit", `
CREATE TABLE tasks (
	id                TEXT PRIMARY KEY,
	owner             TEXT NOT NULL,      -- grant id of the creator ("local" for the owner)
	context_id        TEXT NOT NULL,      -- the caller's contextId (wire form)
	state             TEXT NOT NULL,      -- State
	caller            TEXT NOT NULL DEFAULT '',
	via               TEXT NOT NULL DEFAULT '',
	summary           TEXT NOT NULL DEFAULT '',
	approved_summary  TEXT NOT NULL DEFAULT '',
	status            BLOB,               -- the engine's TaskStatus JSON
	history           BLOB,               -- JSON array of messages
	artifacts         BLOB,               -- JSON array of artifacts
	exec_state        BLOB,               -- the executor's state across turns
	turns             INTEGER NOT NULL DEFAULT 0,
	bytes             INTEGER NOT NULL,   -- len(history) + len(artifacts)
	created           INTEGER NOT NULL,   -- Unix ns
	updated           INTEGER NOT NULL,
	approval_deadline INTEGER NOT NULL DEFAULT 0,
	ended_seq         INTEGER             -- order of becoming terminal; NULL while live
) STRICT;
CREATE INDEX tasks_ended ON tasks(ended_seq) WHERE ended_seq IS NOT NULL;
CREATE INDEX tasks_owner ON tasks(owner, context_id);

CREATE TABLE contexts (
	owner      TEXT NOT NULL,
	context_id TEXT NOT NULL,
	upstream   TEXT NOT NULL,
	used       INTEGER NOT NULL,
	PRIMARY KEY (owner, context_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX contexts_used ON contexts(used);

CREATE TABLE approvals (
	id           TEXT PRIMARY KEY,
	kind         TEXT NOT NULL,
	grant_id     TEXT NOT NULL DEFAULT '',
	peer         TEXT NOT NULL DEFAULT '',
	device_id    TEXT NOT NULL DEFAULT '',
	os           TEXT NOT NULL DEFAULT '',
	via          TEXT NOT NULL DEFAULT '',
	addr         TEXT NOT NULL DEFAULT '',
	tailnet_user TEXT NOT NULL DEFAULT '',
	tailnet_node TEXT NOT NULL DEFAULT '',
	summary      TEXT NOT NULL DEFAULT '',
	detail       TEXT NOT NULL DEFAULT '',
	scopes       TEXT NOT NULL DEFAULT '',  -- comma-separated
	task_id      TEXT NOT NULL DEFAULT '',
	created      INTEGER NOT NULL,
	expires      INTEGER NOT NULL
) STRICT;

CREATE TABLE outbound (
	id         TEXT PRIMARY KEY,
	task_id    TEXT NOT NULL DEFAULT '',
	context_id TEXT NOT NULL DEFAULT '',
	agent      TEXT NOT NULL,
	agent_name TEXT NOT NULL DEFAULT '',
	agent_kind TEXT NOT NULL DEFAULT '',
	request    TEXT NOT NULL DEFAULT '',
	state      TEXT NOT NULL,
	message    TEXT NOT NULL DEFAULT '',
	error      TEXT NOT NULL DEFAULT '',
	following  INTEGER NOT NULL DEFAULT 0,
	streaming  INTEGER NOT NULL DEFAULT 0,
	artifacts  BLOB,
	truncated  INTEGER NOT NULL DEFAULT 0,
	created    INTEGER NOT NULL,
	updated    INTEGER NOT NULL,
	ended_seq  INTEGER
) STRICT;
CREATE INDEX outbound_created ON outbound(created);

CREATE TABLE peers (
	url         TEXT PRIMARY KEY,
	device_id   TEXT NOT NULL DEFAULT '',
	fingerprint TEXT NOT NULL DEFAULT '',
	name        TEXT NOT NULL DEFAULT '',
	added       INTEGER NOT NULL
) STRICT;

CREATE TABLE audit (
	seq         INTEGER PRIMARY KEY,
	time        INTEGER NOT NULL,
	kind        TEXT NOT NULL,
	grant_id    TEXT NOT NULL DEFAULT '',
	peer        TEXT NOT NULL DEFAULT '',
	via         TEXT NOT NULL DEFAULT '',
	subject     TEXT NOT NULL DEFAULT '',
	result      TEXT NOT NULL DEFAULT '',
	decided_by  TEXT NOT NULL DEFAULT '',
	decided_via TEXT NOT NULL DEFAULT '',
	params      TEXT NOT NULL DEFAULT '',
	task_id     TEXT NOT NULL DEFAULT '',
	duration_us INTEGER NOT NULL DEFAULT 0,
	prev_hash   BLOB NOT NULL,
	hash        BLOB NOT NULL
) STRICT;
CREATE INDEX audit_time ON audit(time);
CREATE INDEX audit_grant ON audit(grant_id, seq);
CREATE INDEX audit_kind ON audit(kind, seq);

-- One row: the entry before the oldest kept one (what pruning removed,
-- zero before any pruning) and the newest entry, so a removed tail is
-- found as well as a removed or edited middle.
CREATE TABLE audit_chain (
	id          INTEGER PRIMARY KEY CHECK (id = 1),
	anchor_seq  INTEGER NOT NULL,
	anchor_hash BLOB NOT NULL,
	head_seq    INTEGER NOT NULL,
	head_hash   BLOB NOT NULL
) STRICT;
INSERT INTO audit_chain VALUES (1, 0, zeroblob(32), 0, zeroblob(32));
`},
	{"pairing approvals: the request id and the poll token's hash", `
ALTER TABLE approvals ADD COLUMN request_id TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN poll_hash BLOB;
`},
	// The tasks table holds at most MaxTasks rows (plus a few, see
	// evictChunk): its reads at start scan it at once, and every other
	// read is by id. The two indexes only cost each task write two more
	// b-tree pages in the WAL.
	{"tasks: no index beyond the id (a bounded table, read whole at start)", `
DROP INDEX tasks_ended;
DROP INDEX tasks_owner;
`},
	{"peers added by hand: their last known OS and when they were last seen", `
ALTER TABLE peers ADD COLUMN os TEXT NOT NULL DEFAULT '';
ALTER TABLE peers ADD COLUMN last_seen INTEGER NOT NULL DEFAULT 0;
`},
	// A row per file transfer this node is sending, from the moment the
	// receiver's task id is known until the send ends: a node killed
	// meanwhile cancels them at its next start.
	{"file transfers being sent (sendings)", `
CREATE TABLE sendings (
	device_id TEXT NOT NULL,            -- the receiver's device ID
	task_id   TEXT NOT NULL,            -- the receiver's task
	name      TEXT NOT NULL DEFAULT '', -- the receiver's name, for the log
	started   INTEGER NOT NULL,         -- Unix ns
	PRIMARY KEY (device_id, task_id)
) STRICT, WITHOUT ROWID;
`},
}

// SchemaVersion is the newest schema this binary knows.
var SchemaVersion = len(migrations)

// migrate brings the database to SchemaVersion; a newer database is
// refused with ErrNewerSchema.
func (s *Store) migrate(ctx context.Context) error {
	if _, err := s.wc.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version     INTEGER PRIMARY KEY,
		description TEXT NOT NULL,
		applied     INTEGER NOT NULL
	) STRICT`); err != nil {
		return err
	}
	var have int
	if err := s.wc.QueryRowContext(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&have); err != nil {
		return err
	}
	if have > SchemaVersion {
		return fmt.Errorf("%w: %s has schema version %d and this meshtray knows versions up to %d; "+
			"run the newer meshtray that wrote it (the database is left as it is, never downgraded)",
			ErrNewerSchema, s.path, have, SchemaVersion)
	}
	for v := have + 1; v <= SchemaVersion; v++ {
		m := migrations[v-1]
		err := func() error {
			tx, err := s.wc.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, m.sql); err != nil {
				return fmt.Errorf("migration %d (%s): %w", v, m.desc, err)
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations VALUES (?, ?, ?)", v, m.desc, ns(s.now())); err != nil {
				return err
			}
			return tx.Commit()
		}()
		if err != nil {
			return err
		}
		s.log.Info("database schema migrated", "version", v, "what", m.desc)
	}
	return nil
}

// loadState reads the writer's counters.
func (s *Store) loadState(ctx context.Context) error {
	q := func(dst any, query string) error {
		return s.wc.QueryRowContext(ctx, query).Scan(dst)
	}
	var head []byte
	var first sql.NullInt64
	for _, c := range []struct {
		dst   any
		query string
	}{
		{&s.st.ended, "SELECT coalesce(max(ended_seq), 0) FROM outbound"},
		{&s.st.outbound, "SELECT count(*) FROM outbound"},
		{&s.st.approvals, "SELECT count(*) FROM approvals"},
		{&s.st.peers, "SELECT count(*) FROM peers"},
		{&s.st.sendings, "SELECT count(*) FROM sendings"},
		{&s.st.contexts, "SELECT count(*) FROM contexts"},
		{&s.st.auditSeq, "SELECT head_seq FROM audit_chain"},
		{&head, "SELECT head_hash FROM audit_chain"},
		{&s.st.auditCount, "SELECT count(*) FROM audit"},
		{&first, "SELECT min(time) FROM audit"},
		{&s.st.auditLast, "SELECT coalesce(max(time), 0) FROM audit"},
	} {
		if err := q(c.dst, c.query); err != nil {
			return err
		}
	}
	if len(head) != 32 {
		return &CorruptError{Path: s.path, Reason: "the audit chain's head hash is not 32 bytes", Err: ErrCorrupt}
	}
	copy(s.st.auditHash[:], head)
	s.st.auditFirst = first.Int64
	return s.loadIndex(ctx)
}
