package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// maxBatch bounds the writes one transaction carries.
const maxBatch = 256

// op is one write: fn runs inside the batch's transaction, in its own
// SAVEPOINT; durable asks for the commit to be synced to the disk.
type op struct {
	fn      func(b *batch) error
	durable bool
	done    chan error
}

// batch is the transaction a group of writes shares, and the copy of the
// writer's state it works on.
type batch struct {
	ctx context.Context
	tx  *sql.Tx
	st  writerState
}

func (b *batch) exec(query string, args ...any) (sql.Result, error) {
	return b.tx.ExecContext(b.ctx, query, args...)
}

func (b *batch) queryRow(query string, args ...any) *sql.Row {
	return b.tx.QueryRowContext(b.ctx, query, args...)
}

// write queues fn and waits until the transaction holding it committed (or
// failed). Once queued, the write is carried out even if ctx ends; ctx only
// bounds the wait for room in the queue.
func (s *Store) write(ctx context.Context, durable bool, fn func(b *batch) error) error {
	o := &op{fn: fn, durable: durable, done: make(chan error, 1)}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	select {
	case s.ops <- o:
	case <-ctx.Done():
		s.mu.RUnlock()
		return ctx.Err()
	}
	s.mu.RUnlock()
	return <-o.done
}

// writer is the one goroutine that writes: it takes every write waiting
// (up to maxBatch) and commits them together.
func (s *Store) writer() {
	defer close(s.done)
	batch := make([]*op, 0, maxBatch)
	for {
		o, ok := <-s.ops
		if !ok {
			return
		}
		batch = append(batch[:0], o)
	drain:
		for len(batch) < maxBatch {
			select {
			case o, ok := <-s.ops:
				if !ok {
					break drain
				}
				batch = append(batch, o)
			default:
				break drain
			}
		}
		s.runBatch(batch)
	}
}

// runBatch commits ops in one transaction and answers each.
func (s *Store) runBatch(ops []*op) {
	ctx := context.Background()
	durable := false
	for _, o := range ops {
		durable = durable || o.durable
	}
	durable = durable && s.opts.Durability == DurableSync
	errs := make([]error, len(ops))
	fail := func(err error) {
		for _, o := range ops {
			o.done <- err
		}
	}
	if durable {
		if _, err := s.wc.ExecContext(ctx, "PRAGMA synchronous=FULL"); err != nil {
			fail(fmt.Errorf("store: %w", err))
			return
		}
		defer s.wc.ExecContext(ctx, "PRAGMA synchronous=NORMAL")
	}
	tx, err := s.wc.BeginTx(ctx, nil)
	if err != nil {
		fail(fmt.Errorf("store: begin: %w", err))
		return
	}
	b := &batch{ctx: ctx, tx: tx, st: s.st}
	b.st.appended = false
	for i, o := range ops {
		saved := b.st
		if _, err := tx.ExecContext(ctx, "SAVEPOINT w"); err != nil {
			tx.Rollback()
			fail(fmt.Errorf("store: savepoint: %w", err))
			return
		}
		if err := o.fn(b); err != nil {
			errs[i] = err
			b.st = saved
			if _, err := tx.ExecContext(ctx, "ROLLBACK TO w"); err != nil {
				tx.Rollback()
				fail(fmt.Errorf("store: rollback to savepoint: %w", err))
				return
			}
		}
		if _, err := tx.ExecContext(ctx, "RELEASE w"); err != nil {
			tx.Rollback()
			fail(fmt.Errorf("store: release savepoint: %w", err))
			return
		}
	}
	if err := s.pruneAudit(b); err != nil {
		// Pruning is housekeeping: it must never cost a write.
		s.log.Warn("pruning the audit trail failed", "err", err)
	}
	if err := tx.Commit(); err != nil {
		fail(fmt.Errorf("store: commit: %w", err))
		return
	}
	s.st = b.st
	for i, o := range ops {
		o.done <- errs[i]
	}
	if b.st.appended {
		s.notify()
	}
}

// notify wakes every subscriber (coalesced: capacity-1 channels).
func (s *Store) notify() {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	for c := range s.subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// Subscribe returns a channel that receives (coalesced) after every commit
// that appended audit entries, and a cancel func. The channel is closed by
// cancel or Close.
func (s *Store) Subscribe() (<-chan struct{}, func()) {
	c := make(chan struct{}, 1)
	s.subMu.Lock()
	s.subs[c] = struct{}{}
	s.subMu.Unlock()
	return c, func() {
		s.subMu.Lock()
		defer s.subMu.Unlock()
		if _, ok := s.subs[c]; ok {
			delete(s.subs, c)
			close(c)
		}
	}
}

// isUniqueViolation reports a PRIMARY KEY / UNIQUE conflict.
func isUniqueViolation(err error) bool {
	var se interface{ Code() int }
	if errors.As(err, &se) {
		// SQLITE_CONSTRAINT_PRIMARYKEY (1555), SQLITE_CONSTRAINT_UNIQUE (2067)
		return se.Code() == 1555 || se.Code() == 2067
	}
	return false
}
