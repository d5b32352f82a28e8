package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"meshtray/store"
)

// openDatabase opens the node's database, <state-dir>/meshtray.db. With
// cfg.ResetDatabase an unreadable file is moved aside first (never a
// readable one: the flag is for recovery, not a way to wipe the history).
// A corrupt file without the flag is an error naming the file and the flag
// (store.CorruptError); a database of a newer meshtray is refused
// (store.ErrNewerSchema).
func openDatabase(cfg Config, log *slog.Logger) (*store.Store, error) {
	path := filepath.Join(cfg.StateDir, store.DefaultFile)
	sync, err := store.ParseDurability(cfg.Database.Sync)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	opts := store.Options{
		Durability:      sync,
		MaxTasks:        cfg.A2A.MaxTasks,
		AuditMaxEntries: cfg.Audit.MaxEntries,
		AuditMaxAge:     cfg.Audit.MaxAge.Duration,
		Logger:          log.With("pkg", "store"),
	}
	db, err := store.Open(path, opts)
	var ce *store.CorruptError
	if errors.As(err, &ce) && cfg.ResetDatabase {
		kept, merr := store.MoveAside(path, time.Now())
		if merr != nil {
			return nil, fmt.Errorf("database: %w", merr)
		}
		log.Warn("the database was unreadable: moved aside, starting with an empty one", "kept_as", kept, "reason", ce.Reason)
		db, err = store.Open(path, opts)
		if err == nil {
			auditReset(db, kept, ce.Reason, log)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	if cfg.ResetDatabase && ce == nil {
		log.Info(store.ResetFlag + " given, but the database is readable: kept as it is")
	}
	return db, nil
}

// auditReset writes the first entry of a database that replaced an
// unreadable one (--reset-database): the trail says when it starts and
// where the old one went.
func auditReset(db *store.Store, kept, reason string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), auditTimeout)
	defer cancel()
	e := store.Entry{Kind: store.KindDatabase, Subject: "reset", Result: "new database", DecidedBy: "owner",
		Params: fmt.Sprintf("%s was unreadable (%s) and moved aside as %s with its tasks, approvals and audit trail (%s)",
			store.DefaultFile, reason, filepath.Base(kept), store.ResetFlag)}
	if _, err := db.Append(ctx, e); err != nil {
		log.Error("audit entry not written", "kind", e.Kind, "subject", e.Subject, "err", err)
	}
}

// auditTimeout bounds one audit append (a disk that stalls must not hold a
// decision forever).
const auditTimeout = 10 * time.Second

// audit appends e to the audit trail. An entry that cannot be written is
// logged at error level with what it recorded (the trail has a gap the
// owner can read about) and returned.
func (n *Node) audit(e store.Entry) error {
	if n.db == nil {
		return store.ErrClosed
	}
	ctx, cancel := context.WithTimeout(context.Background(), auditTimeout)
	defer cancel()
	if _, err := n.db.Append(ctx, e); err != nil {
		n.log.Error("audit entry not written", "kind", e.Kind, "subject", e.Subject, "result", e.Result, "err", err)
		return err
	}
	return nil
}

// Database is the node's open database (nil before Start).
func (n *Node) Database() *store.Store { return n.db }
