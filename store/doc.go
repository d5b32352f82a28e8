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
// Every write method returns after the transaction holding it committed, so
// what a method acknowledged survives a crash of the process (kill -9):
// SQLite's WAL in the OS page cache is not lost with the process. Writes
// that acknowledge a decision or a terminal state (a task, an outbound task
// or an approval reaching its end; audit entries of decisions and grant,
// pairing and switch changes) are also synced to the disk before the method
// returns (PRAGMA synchronous=FULL for that commit), so they survive a power
// loss too; Options.Durability = DurableCommit skips that fsync. Writes are
// group-committed: one writer goroutine runs every write waiting when it
// becomes free in one transaction (each write in its own SAVEPOINT, so one
// refused write does not undo the others), so 32 concurrent callers share
// one commit and one fsync instead of queueing for 32.
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
