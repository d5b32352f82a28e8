// Package store is meshtray's durable state: one embedded SQLite database
// in the state dir (DefaultFile, through the pure-Go modernc.org/sqlite, so
// the headless build stays CGO_ENABLED=0) holding what a restart keeps:
//
//   - incoming A2A tasks (Task: owner grant, contextId, state, the status,
//     history and artifacts as the engine's JSON, the approval deadline),
//     bounded like the in-memory store (Options.MaxTasks, per-task and
//     total bytes; the oldest terminal task is evicted, never a live one);
//   - the (caller, contextId) -> upstream contextId map of the forward
//     executor (ContextLink, least recently used evicted);
//   - pending approvals and pairing requests (Approval);
//   - outbound (delegated) tasks (Outbound);
//   - peers added by hand (ManualPeer);
//   - the file transfers this node is sending (Sending), canceled at their
//     receivers when a node killed mid-transfer starts again;
//   - the audit trail: an append-only, hash-chained record of every
//     decision (Entry, Append, Query, Follow, Verify).
//
// # Secrets
//
// Secrets never enter the database: no table has a token, pairing code,
// SAS, key or password column (grants and their token hashes stay in the
// OS keychain, package keychain). Audit entries are additionally scrubbed
// (Redact): a grant token, a bearer credential or a long random-looking
// string in any field is replaced by "[redacted]" before it is hashed and
// written.
//
// # Durability
//
// A write method returns after the transaction holding it committed, so
// what it acknowledged survives a crash of the process (kill -9): SQLite's
// WAL in the OS page cache is not lost with the process, and with
// synchronous=NORMAL the file stays consistent through a power loss too
// (the last commits may be missing then, never half of one). Which commits
// are also synced to the disk (PRAGMA synchronous=FULL for that commit, so
// they survive a power loss) is Options.Durability: DurableNormal, the
// default, syncs decisions (ResolveApproval, audit entries of every kind
// but capability runs, Flush) and outbound tasks reaching their end, and
// leaves incoming tasks' terminal states committed only (they are the hot
// path: a millisecond of fsync per task on a typical disk); DurableSync
// syncs those too; DurableCommit syncs nothing. Commit waits until every
// write queued so far is committed (synced under DurableSync). The one
// exception to "committed before it returns": task writes in the
// submitted and working states acknowledge nothing a restart must keep (a
// task that was running ends failed after one), so they are written
// behind: admitted at once against the in-memory task index (bounds,
// duplicates, owner, terminal state, with the errors a caller needs),
// queued, and committed with the next batch; reads see them at once,
// Commit and Flush wait for them, and a failed commit is never silent
// (every later write and task read returns ErrFailed).
//
// Writes are group-committed on one connection: whoever holds the writer
// lock (a caller finding it free, else the writer goroutine) drains the
// queue in order and commits it as one transaction, so a lone caller pays
// no hand-off and 32 concurrent callers share one commit and one fsync.
// A write that may refuse itself after changing rows runs in its own
// SAVEPOINT, so a refused write does not undo the others. SQLite's
// automatic checkpoint is off; the writer checkpoints when it idles.
//
// # Files and errors
//
// The database file and its -wal and -shm files are mode 0600. Open applies
// the versioned schema migrations (table schema_migrations); a database
// whose version is newer than this binary is refused (ErrNewerSchema), never
// downgraded. A file that is not a readable database (corrupt, truncated,
// not SQLite) is refused with a *CorruptError naming the file and ResetFlag;
// MoveAside keeps such a file under a timestamped name so a fresh database
// can start. Nothing is ever reset silently.
package store
