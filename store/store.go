package store

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// DefaultFile is the database's name in the state dir.
const DefaultFile = "meshtray.db"

// ResetFlag is the command-line flag that moves a corrupt database aside
// (MoveAside) and starts with an empty one; CorruptError names it.
const ResetFlag = "--reset-database"

// Defaults of Options. The task bounds mirror the in-memory A2A store
// (a2a.DefaultMaxTasks and its byte bounds); the byte bounds are a quarter
// above the engine's, since the store counts the JSON the engine hands it
// (base64 file bytes, JSON framing) while the engine counts parts as sent.
const (
	DefaultMaxTasks             = 512
	DefaultMaxTaskHistoryBytes  = 40 << 20 // 32 turns of 1 MiB requests, +25 %
	DefaultMaxTaskArtifactBytes = 10 << 20 // 8 MiB of artifact parts, +25 %
	DefaultMaxStoredBytes       = 80 << 20 // 64 MiB of messages and artifacts, +25 %
	DefaultMaxContexts          = 1024
	DefaultMaxApprovals         = 256
	DefaultMaxOutbound          = 128
	DefaultMaxOutboundBytes     = 5 << 18 // 1 MiB of parts, +25 %
	DefaultMaxPeers             = 256
	DefaultMaxSendings          = 256
	DefaultAuditMaxEntries      = 100_000
	DefaultAuditMaxAge          = 365 * 24 * time.Hour
	DefaultBusyTimeout          = 5 * time.Second
)

// Durability says what a write acknowledging a decision or a terminal state
// waits for. Every mode commits such a write before it returns, and SQLite's
// WAL (synchronous=NORMAL between syncs) keeps the database consistent
// whatever happens; the modes differ in which commits are also synced to
// the disk (fsync), that is, what survives a power loss or an OS crash and
// not just a crash of the process (kill -9).
type Durability int

const (
	// DurableNormal (the default, `[database] sync = "normal"`): decisions
	// (approvals resolved, audit entries of decisions, Flush) and outbound
	// tasks reaching their end are synced; incoming task states (a task
	// ending, waiting for its caller) are committed only: they survive a
	// crash of the process, and a power loss may lose the last ones (those
	// of the last second or so, as the OS writes its page cache back).
	DurableNormal Durability = iota
	// DurableSync (`sync = "full"`): every decision and terminal state,
	// incoming tasks' included, is synced before its write returns: it
	// survives a power loss.
	DurableSync
	// DurableCommit syncs nothing (tests, benchmarks): every write survives
	// a crash of the process, not of the machine.
	DurableCommit
)

// ParseDurability reads the config file's names: "normal" (DurableNormal),
// "full" (DurableSync) and "off" (DurableCommit); "" is DurableNormal.
func ParseDurability(v string) (Durability, error) {
	switch v {
	case "", "normal":
		return DurableNormal, nil
	case "full":
		return DurableSync, nil
	case "off":
		return DurableCommit, nil
	}
	return 0, fmt.Errorf("store: sync %q: want \"normal\", \"full\" or \"off\"", v)
}

// String is the config file's name of d.
func (d Durability) String() string {
	switch d {
	case DurableSync:
		return "full"
	case DurableCommit:
		return "off"
	}
	return "normal"
}

// Options configure Open. Zero values take the defaults above.
type Options struct {
	// MaxTasks bounds the stored A2A tasks; a new task evicts the oldest
	// terminal one, and with every stored task live it is refused
	// (ErrFull). A live task is never evicted.
	MaxTasks int
	// MaxTaskHistoryBytes and MaxTaskArtifactBytes bound one task's
	// History and Artifacts JSON; a larger task is refused (ErrTooBig).
	MaxTaskHistoryBytes  int64
	MaxTaskArtifactBytes int64
	// MaxStoredBytes bounds the history and artifact bytes of all tasks;
	// terminal tasks are evicted to stay under it, and when live tasks
	// alone would exceed it the write is refused (ErrFull).
	MaxStoredBytes int64
	// MaxContexts bounds the contextId map (least recently used evicted).
	MaxContexts int
	// MaxApprovals bounds the pending approvals (ErrFull beyond).
	MaxApprovals int
	// MaxOutbound bounds the outbound tasks: a new one evicts the oldest
	// terminal one nobody follows, else the oldest one nobody follows,
	// else it is refused (ErrFull). MaxOutboundBytes bounds one task's
	// artifacts JSON (ErrTooBig).
	MaxOutbound      int
	MaxOutboundBytes int64
	// MaxPeers bounds the peers added by hand (ErrFull beyond).
	MaxPeers int
	// MaxSendings bounds the file transfers recorded as being sent
	// (ErrFull beyond).
	MaxSendings int
	// AuditMaxEntries and AuditMaxAge bound the audit trail: older entries
	// are pruned (the chain stays verifiable from an anchor, see Prune).
	// A negative AuditMaxAge keeps entries of any age.
	AuditMaxEntries int
	AuditMaxAge     time.Duration
	// Durability of decisions and terminal states (default DurableNormal).
	Durability Durability
	// BusyTimeout is how long a statement waits for a lock another
	// connection holds (default 5 s).
	BusyTimeout time.Duration
	// Logger receives the store's logs; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Errors of the store.
var (
	// ErrNotFound: no record by that key.
	ErrNotFound = errors.New("store: not found")
	// ErrExists: a record by that key exists already.
	ErrExists = errors.New("store: already exists")
	// ErrFull: a bound is reached and nothing may be evicted.
	ErrFull = errors.New("store: full")
	// ErrTooBig: one record is over its byte bound.
	ErrTooBig = errors.New("store: record too big")
	// ErrTerminal: a write would move a record out of a terminal state.
	ErrTerminal = errors.New("store: record is in a terminal state")
	// ErrInvalid: a record misses a required field or has a bad value.
	ErrInvalid = errors.New("store: invalid record")
	// ErrNewerSchema: the database was written by a newer meshtray.
	ErrNewerSchema = errors.New("store: database schema is newer than this meshtray")
	// ErrCorrupt: the file is not a readable database (see CorruptError).
	ErrCorrupt = errors.New("store: database is corrupt")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("store: closed")
	// ErrFailed: a commit failed (disk full, I/O error); the store takes
	// no more writes until it is reopened. It wraps the cause.
	ErrFailed = errors.New("store: a database write failed")
)

// CorruptError is Open's error for a file that is not a readable meshtray
// database. It wraps ErrCorrupt and the driver's error.
type CorruptError struct {
	Path   string // the database file
	Reason string // what SQLite said
	Err    error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("store: %s is not a readable database (%s); nothing was changed. "+
		"Start meshtray with %s to keep it as %s.corrupt-<time> and start with an empty database",
		e.Path, e.Reason, ResetFlag, filepath.Base(e.Path))
}

func (e *CorruptError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

// Store is the open database. Its methods are safe for concurrent use.
type Store struct {
	path string
	opts Options
	log  *slog.Logger
	db   *sql.DB // readers; the writer has its own connection
	wc   *sql.Conn

	wstmts map[string]*sql.Stmt // prepared on wc; the writer's
	rstmts sync.Map             // query -> *sql.Stmt on db

	// mu guards closed and sending on ops (Close waits for senders).
	mu     sync.RWMutex
	closed bool
	ops    chan *op
	done   chan struct{} // closed when the writer has stopped
	behind atomic.Int64  // write-behind ops queued, not yet committed
	failed atomic.Pointer[error]

	idx taskIndex

	// wmu is held by whoever runs a batch on wc: the writer goroutine or a
	// leading caller (await).
	wmu           sync.Mutex
	pendingFrames int // writes since the last checkpoint; guarded by wmu
	// The checkpointer goroutine (afterBatch) and its connection: ckpt
	// asks it for a checkpoint, catchUp asks the writer for its own after
	// one, ckptDone is closed when it has stopped.
	cc       *sql.Conn
	ckpt     chan struct{}
	catchUp  atomic.Bool
	ckptDone chan struct{}
	kick     chan struct{} // wakes the writer goroutine to drain the queue

	// st is the writer's state; only the writer goroutine touches it
	// after Open.
	st writerState

	subMu sync.Mutex
	subs  map[chan struct{}]struct{}
}

// writerState is what the writer keeps in memory across batches; a batch
// works on a copy and keeps it only when it commits.
type writerState struct {
	ended      int64 // last ended_seq given to a terminal outbound task
	outbound   int
	approvals  int
	peers      int
	sendings   int
	contexts   int
	auditSeq   int64
	auditHash  [32]byte
	auditCount int64
	auditFirst int64 // time (unix ns) of the oldest entry, 0 when none
	auditLast  int64 // time (unix ns) of the newest entry
	appended   bool  // the batch appended audit entries (subscribers to wake)
}

// Open opens (creating it if needed) the database at path, applies the
// schema migrations and checks the file. Errors: ErrNewerSchema, a
// *CorruptError, or the file system's error.
func Open(path string, opts Options) (*Store, error) {
	setDefaults(&opts)
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("store: database path %q has a '?' or '#'", path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if err := checkHeader(abs); err != nil {
		return nil, err
	}
	if _, err := os.Stat(abs); errors.Is(err, os.ErrNotExist) {
		if err := createFile(abs); err != nil {
			return nil, err
		}
	}
	if err := os.Chmod(abs, 0o600); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	dsn := fmt.Sprintf("%s?_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)",
		abs, opts.BusyTimeout.Milliseconds())
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	db.SetMaxOpenConns(6) // the writer, the checkpointer and 4 readers
	db.SetMaxIdleConns(6)
	db.SetConnMaxIdleTime(0)
	s := &Store{
		path: abs,
		opts: opts,
		log:  opts.Logger,
		db:   db,
		ops:  make(chan *op, 1024),
		done: make(chan struct{}),
		ckpt: make(chan struct{}, 1),

		ckptDone: make(chan struct{}),
		kick:     make(chan struct{}, 1),
		subs:     make(map[chan struct{}]struct{}),

		wstmts: make(map[string]*sql.Stmt),
	}
	ctx := context.Background()
	if err := s.open(ctx); err != nil {
		if s.wc != nil {
			s.wc.Close()
		}
		db.Close()
		return nil, err
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := os.Chmod(abs+suffix, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.wc.Close()
			db.Close()
			return nil, fmt.Errorf("store: %w", err)
		}
	}
	if s.cc, err = db.Conn(ctx); err != nil {
		s.wc.Close()
		db.Close()
		return nil, fmt.Errorf("store: %w", err)
	}
	go s.writer()
	go s.checkpointer()
	return s, nil
}

// createFile makes the new, empty database at path (mode 0600, which
// SQLite gives its -wal and -shm files too) so that the file at path is
// never empty: SQLite writes its header under the temporary name
// path+".new" (a schema change it undoes), which is synced and renamed
// into place. An empty file at path is therefore never one Open just
// made, even after a crash, and checkHeader refuses it.
func createFile(path string) error {
	tmp := path + ".new"
	for _, f := range []string{tmp, tmp + "-journal"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("store: %w", err)
		}
	}
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	f.Close()
	db, err := sql.Open("sqlite", tmp)
	if err == nil {
		for _, q := range []string{"CREATE TABLE meshtray_new (x)", "DROP TABLE meshtray_new"} {
			if _, err = db.Exec(q); err != nil {
				break
			}
		}
		if cerr := db.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = syncFile(tmp)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("store: creating %s: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// checkHeader refuses, before SQLite touches it or its WAL, a file that is
// not an SQLite database or is shorter than its header says (truncated).
// The layout is SQLite's file format §1.3: the 16-byte magic string, the
// page size at offset 16 (big-endian, 1 meaning 65536) and the database
// size in pages at offset 28, valid when the "version-valid-for" number at
// offset 92 equals the change counter at offset 24.
func checkHeader(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if fi.Size() == 0 {
		// Open never leaves the file empty (createFile): it was truncated
		// or replaced, and its tasks and audit trail are gone.
		return &CorruptError{Path: path, Reason: "the file is empty, so it was truncated or replaced", Err: ErrCorrupt}
	}
	var h [100]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return &CorruptError{Path: path, Reason: fmt.Sprintf("the file is %d bytes, shorter than a database header", fi.Size()), Err: err}
	}
	if string(h[:16]) != "SQLite format 3\x00" {
		return &CorruptError{Path: path, Reason: "the file is not an SQLite database", Err: ErrCorrupt}
	}
	pageSize := int64(binary.BigEndian.Uint16(h[16:18]))
	if pageSize == 1 {
		pageSize = 65536
	}
	if pageSize < 512 || pageSize&(pageSize-1) != 0 {
		return &CorruptError{Path: path, Reason: fmt.Sprintf("the header's page size %d is not valid", pageSize), Err: ErrCorrupt}
	}
	pages := int64(binary.BigEndian.Uint32(h[28:32]))
	// With frames in the WAL (more than its 32-byte header), a checkpoint
	// that a crash cut short may have written page 1 before the pages
	// that extend the file: the WAL still holds them, so leave the size
	// to SQLite's own checks then.
	walFrames := false
	if wi, err := os.Stat(path + "-wal"); err == nil && wi.Size() > 32 {
		walFrames = true
	}
	if !walFrames && binary.BigEndian.Uint32(h[92:96]) == binary.BigEndian.Uint32(h[24:28]) && pages*pageSize > fi.Size() {
		return &CorruptError{Path: path, Reason: fmt.Sprintf("the file is truncated: %d bytes of the %d its header says", fi.Size(), pages*pageSize), Err: ErrCorrupt}
	}
	return nil
}

func setDefaults(o *Options) {
	defInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def64 := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	defInt(&o.MaxTasks, DefaultMaxTasks)
	def64(&o.MaxTaskHistoryBytes, DefaultMaxTaskHistoryBytes)
	def64(&o.MaxTaskArtifactBytes, DefaultMaxTaskArtifactBytes)
	def64(&o.MaxStoredBytes, DefaultMaxStoredBytes)
	defInt(&o.MaxContexts, DefaultMaxContexts)
	defInt(&o.MaxApprovals, DefaultMaxApprovals)
	defInt(&o.MaxOutbound, DefaultMaxOutbound)
	def64(&o.MaxOutboundBytes, DefaultMaxOutboundBytes)
	defInt(&o.MaxPeers, DefaultMaxPeers)
	defInt(&o.MaxSendings, DefaultMaxSendings)
	defInt(&o.AuditMaxEntries, DefaultAuditMaxEntries)
	if o.AuditMaxAge == 0 {
		o.AuditMaxAge = DefaultAuditMaxAge
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = DefaultBusyTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// open checks the file, sets WAL, migrates and loads the writer's state.
func (s *Store) open(ctx context.Context) error {
	wc, err := s.db.Conn(ctx)
	if err != nil {
		return s.classify(err)
	}
	s.wc = wc
	var mode string
	if err := wc.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode); err != nil {
		return s.classify(err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("store: %s: journal mode is %q, not wal", s.path, mode)
	}
	// The store checkpoints (afterBatch); after one, the WAL file is cut
	// back to 4 MiB instead of keeping its largest size.
	for _, p := range []string{"PRAGMA wal_autocheckpoint=0", "PRAGMA journal_size_limit=4194304"} {
		if _, err := wc.ExecContext(ctx, p); err != nil {
			return s.classify(err)
		}
	}
	var check string
	if err := wc.QueryRowContext(ctx, "PRAGMA quick_check(1)").Scan(&check); err != nil {
		return s.classify(err)
	}
	if check != "ok" {
		return &CorruptError{Path: s.path, Reason: check, Err: errors.New(check)}
	}
	if err := s.migrate(ctx); err != nil {
		return s.classify(err)
	}
	if err := s.loadState(ctx); err != nil {
		return s.classify(err)
	}
	return nil
}

// classify turns SQLite's corruption codes into a *CorruptError.
func (s *Store) classify(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
			return &CorruptError{Path: s.path, Reason: se.Error(), Err: err}
		}
	}
	if errors.Is(err, ErrNewerSchema) {
		return err
	}
	var ce *CorruptError
	if errors.As(err, &ce) {
		return err
	}
	return fmt.Errorf("store: %s: %w", s.path, err)
}

// isClosed reports whether Close was called.
func (s *Store) isClosed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.closed
}

// Path is the database file.
func (s *Store) Path() string { return s.path }

// Close stops the writer after the queued writes, checkpoints the WAL into
// the database file and closes it. A second Close returns ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.closed = true
	close(s.ops)
	s.mu.Unlock()
	s.kickWriter()
	<-s.done
	s.wmu.Lock() // a leading caller may still be committing
	defer s.wmu.Unlock()
	close(s.ckpt) // afterBatch sends on it only under wmu
	<-s.ckptDone
	ctx := context.Background()
	for _, st := range s.wstmts {
		st.Close()
	}
	s.rstmts.Range(func(_, v any) bool {
		v.(*sql.Stmt).Close()
		return true
	})
	_, cerr := s.wc.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
	err := errors.Join(s.cc.Close(), s.wc.Close(), s.db.Close())
	if err == nil && cerr != nil {
		s.log.Warn("checkpoint at close failed", "err", cerr)
	}
	s.subMu.Lock()
	for c := range s.subs {
		close(c)
		delete(s.subs, c)
	}
	s.subMu.Unlock()
	return err
}

// MoveAside renames the database at path and its -wal and -shm files to
// <path>.corrupt-<UTC time>[-wal|-shm], so the next Open starts an empty
// database while the bad file is kept for inspection. It returns the new
// name of the database file; a path with no file is ErrNotFound. The caller
// must have closed the database (Open refused it, so nothing holds it).
func MoveAside(path string, now time.Time) (string, error) {
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("%w: %s", ErrNotFound, path)
		}
		return "", err
	}
	base := path + ".corrupt-" + now.UTC().Format("20060102T150405Z")
	dst := base
	for i := 2; ; i++ {
		if _, err := os.Lstat(dst); errors.Is(err, os.ErrNotExist) {
			break
		}
		dst = fmt.Sprintf("%s.%d", base, i)
	}
	// The side files first: a crash between renames leaves the main file
	// in place, where the next start reports it again.
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := os.Rename(path+suffix, dst+suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("store: moving %s aside: %w", path+suffix, err)
		}
	}
	if err := os.Rename(path, dst); err != nil {
		return "", fmt.Errorf("store: moving %s aside: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return dst, nil
}

// IntegrityCheck runs PRAGMA integrity_check and returns nil when SQLite
// answers "ok", else an error wrapping ErrCorrupt with its first findings.
func (s *Store) IntegrityCheck(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, "PRAGMA integrity_check(10)")
	if err != nil {
		return s.classify(err)
	}
	defer rows.Close()
	var msgs []string
	for rows.Next() {
		var m string
		if err := rows.Scan(&m); err != nil {
			return err
		}
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return s.classify(err)
	}
	if len(msgs) == 1 && msgs[0] == "ok" {
		return nil
	}
	return fmt.Errorf("%w: %s: %s", ErrCorrupt, s.path, strings.Join(msgs, "; "))
}

// now is the clock in UTC.
func (s *Store) now() time.Time { return s.opts.Now().UTC() }

// ns is t in Unix nanoseconds, 0 for the zero time.
func ns(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// fromNS is the inverse of ns, in UTC.
func fromNS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(0, v).UTC()
}
