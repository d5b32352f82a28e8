package files

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
)

// Defaults of Limits (zero fields take them).
const (
	DefaultMaxFileSize     = 16 << 30  // 16 GiB: a long video
	DefaultMaxTransferSize = 64 << 30  // 64 GiB: a phone's camera roll
	DefaultMaxFiles        = 1000      // a photo folder; more is refused up front
	DefaultKeepFree        = 256 << 20 // 256 MiB left free after the transfer
	DefaultMaxUploads      = 4         // concurrent PUTs per transfer
	DefaultIdleTimeout     = 30 * time.Second
)

// Limits bound what one sender can make the receiver store or hold. Zero
// fields take the defaults above; KeepFree < 0 means 0.
type Limits struct {
	MaxFileSize     int64 // bytes of one file
	MaxTransferSize int64 // bytes of all files of a transfer
	MaxFiles        int   // files of a transfer
	// KeepFree is the free space (bytes) that must remain on the receive
	// folder's file system once every active transfer is complete; Begin
	// refuses a transfer that would leave less (ErrNoSpace).
	KeepFree int64
	// MaxUploads is how many PUTs of one transfer may run at once (429
	// beyond).
	MaxUploads int
	// IdleTimeout ends a PUT whose body brings no byte for that long; what
	// arrived is kept and the sender resumes.
	IdleTimeout time.Duration
}

func (l Limits) withDefaults() Limits {
	if l.MaxFileSize <= 0 {
		l.MaxFileSize = DefaultMaxFileSize
	}
	if l.MaxTransferSize <= 0 {
		l.MaxTransferSize = DefaultMaxTransferSize
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = DefaultMaxFiles
	}
	if l.KeepFree == 0 {
		l.KeepFree = DefaultKeepFree
	} else if l.KeepFree < 0 {
		l.KeepFree = 0
	}
	if l.MaxUploads <= 0 {
		l.MaxUploads = DefaultMaxUploads
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	return l
}

// Receiver owns a receive folder and the transfers announced into it. Every
// path it touches goes through an os.Root opened on the folder, so neither a
// name nor a symlink planted in the folder can lead a write outside it.
type Receiver struct {
	dir    string
	root   *os.Root
	limits Limits
	log    *slog.Logger

	mu        sync.Mutex
	transfers map[string]*Transfer // guarded by mu
	// reserved is the free space held for transfers admitted but not
	// begun (Reserve: waiting for the owner), bytes by transfer ID.
	reserved map[string]int64 // guarded by mu
	closed   bool             // guarded by mu
	puts     sync.WaitGroup   // running PUTs; Close waits for them
}

// NewReceiver creates dir (0700, with parents) when missing and returns a
// receiver for it. A nil logger discards.
func NewReceiver(dir string, limits Limits, logger *slog.Logger) (*Receiver, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("files: receive folder: %w", err)
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, fmt.Errorf("files: receive folder: %w", err)
	}
	r := &Receiver{dir: abs, root: root, limits: limits.withDefaults(), log: logger,
		transfers: make(map[string]*Transfer), reserved: make(map[string]int64)}
	if n, err := r.sweep(); n > 0 || err != nil {
		logger.Info("files: removed partial files of transfers that did not finish", "files", n, "err", err)
	}
	return r, nil
}

// maxSweepDepth bounds how deep sweep looks (CleanPath allows 16 levels).
const maxSweepDepth = 17

// sweep removes the partial files a previous process left behind: a
// transfer lives only as long as the process that began it, so at start
// every ".*.meshtray-partial" in the folder is stale. It returns how many
// it removed.
func (r *Receiver) sweep() (int, error) {
	n := 0
	err := fs.WalkDir(r.root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable: skip, as a sender cannot put a partial there either
		}
		if d.IsDir() {
			if strings.Count(p, "/") >= maxSweepDepth {
				return fs.SkipDir
			}
			return nil
		}
		if name := d.Name(); strings.HasPrefix(name, ".") && strings.HasSuffix(name, partialSuffix) && d.Type().IsRegular() {
			if err := r.root.Remove(p); err == nil {
				n++
			}
		}
		return nil
	})
	return n, err
}

// Dir is the absolute receive folder.
func (r *Receiver) Dir() string { return r.dir }

// Limits are the limits in force (defaults filled in).
func (r *Receiver) Limits() Limits { return r.limits }

// Close cancels every unfinished transfer (removing its partial files) and
// releases the folder. A second Close returns ErrClosed.
func (r *Receiver) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrClosed
	}
	r.closed = true
	ts := make([]*Transfer, 0, len(r.transfers))
	for _, t := range r.transfers {
		ts = append(ts, t)
	}
	r.mu.Unlock()
	for _, t := range ts {
		t.fail(ErrClosed)
	}
	r.puts.Wait() // each removes its partial; they end with their body
	return r.root.Close()
}

// validID reports whether a transfer ID is safe inside a file name: 1–64 of
// [A-Za-z0-9_-] (a UUID, an A2A task ID).
func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Begin announces a transfer: it checks every entry (names through
// CleanPath, sizes and count against the limits, the SHA-256 form) and the
// free space, and registers the transfer under id for the handler. Nothing is
// written yet. sender is who may upload (matched against the handler's
// senderOf; "" when the handler does not check). Errors: ErrBadManifest (id
// or an entry malformed), ErrBadName, ErrTooMany, ErrTooLarge, ErrNoSpace,
// ErrExists, ErrClosed.
func (r *Receiver) Begin(id, sender string, m Manifest) (*Transfer, error) {
	if !validID(id) {
		return nil, fmt.Errorf("%w: transfer id must be 1-64 of [A-Za-z0-9_-]", ErrBadManifest)
	}
	t, total, err := r.prepare(id, sender, m)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	if _, ok := r.transfers[id]; ok {
		return nil, ErrExists
	}
	if err := r.spaceLocked(id, total); err != nil {
		return nil, err
	}
	delete(r.reserved, id) // the transfer's own pending bytes count now
	r.transfers[id] = t
	return t, nil
}

// Reserve runs Begin's checks of m (names, sizes, count, free space now,
// less what other transfers hold) without beginning a transfer: one
// Reserve refuses, Begin refuses. When they pass it holds its total
// size of the free space for transfer id until Begin(id) takes it over
// (its pending bytes count from then on), or Release or Forget drops it:
// a transfer admitted while its owner decides is counted against every
// transfer admitted after it, so two that cannot both fit are not both
// admitted. Reserving an id again replaces its reservation. Same errors as
// Begin.
func (r *Receiver) Reserve(id string, m Manifest) error {
	if !validID(id) {
		return fmt.Errorf("%w: transfer id must be 1-64 of [A-Za-z0-9_-]", ErrBadManifest)
	}
	t, total, err := r.prepare(id, "", m)
	if err != nil {
		return err
	}
	t.end()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if _, ok := r.transfers[id]; ok {
		return ErrExists
	}
	if err := r.spaceLocked(id, total); err != nil {
		return err
	}
	r.reserved[id] = total
	return nil
}

// Release drops the reservation of transfer id (Reserve), if any.
func (r *Receiver) Release(id string) {
	r.mu.Lock()
	delete(r.reserved, id)
	r.mu.Unlock()
}

// Reserved is the free space held now (bytes): the reservations of
// transfers not begun and the bytes still to come of those under way.
func (r *Receiver) Reserved() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.heldLocked("")
}

// heldLocked is the free space held for every transfer but self; r.mu
// held. A transfer under way holds only the bytes still to come: those in
// its partial files are on the disk already, so the free space the file
// system reports has counted them.
func (r *Receiver) heldLocked(self string) int64 {
	var held int64
	for id, o := range r.transfers {
		if id != self {
			held += o.pendingBytes()
		}
	}
	for id, n := range r.reserved {
		if id != self {
			held += n
		}
	}
	return held
}

// SpaceError is ErrNoSpace with its figures (bytes): what the transfer
// needs, what is kept free (Limits.KeepFree), what other transfers hold
// (Reserve, and the bytes still to come of those under way) and what the
// file system has free.
type SpaceError struct {
	Need, KeepFree, Held int64
	Free                 uint64
}

func (e *SpaceError) Error() string {
	s := fmt.Sprintf("%s: the files need %s and %s is kept free", ErrNoSpace, humanize.IBytes(uint64(e.Need)), humanize.IBytes(uint64(e.KeepFree)))
	if e.Held > 0 {
		s += fmt.Sprintf(", other transfers under way hold %s", humanize.IBytes(uint64(e.Held)))
	}
	return s + fmt.Sprintf("; %s is free", humanize.IBytes(e.Free))
}

func (e *SpaceError) Unwrap() error { return ErrNoSpace }

// spaceLocked refuses a transfer of total bytes that would leave less than
// KeepFree once every other transfer (all but self: under way or reserved)
// completes; r.mu held.
func (r *Receiver) spaceLocked(self string, total int64) error {
	l := r.limits
	held := r.heldLocked(self)
	free, err := freeSpace(r.dir)
	if err != nil {
		return fmt.Errorf("reading the free space: %w", err)
	}
	if free < uint64(total)+uint64(l.KeepFree)+uint64(held) {
		return &SpaceError{Need: total, KeepFree: l.KeepFree, Held: held, Free: free}
	}
	return nil
}

// prepare checks m and builds its transfer (not registered); it returns
// the transfer and its total size.
func (r *Receiver) prepare(id, sender string, m Manifest) (*Transfer, int64, error) {
	l := r.limits
	if len(m.Files) == 0 {
		return nil, 0, fmt.Errorf("%w: no files", ErrBadManifest)
	}
	if len(m.Files) > l.MaxFiles {
		return nil, 0, fmt.Errorf("%w: %d, at most %d in one transfer", ErrTooMany, len(m.Files), l.MaxFiles)
	}
	if err := refusedNames(m); err != nil {
		return nil, 0, err
	}
	t := &Transfer{ID: id, Sender: sender, r: r, sem: make(chan struct{}, l.MaxUploads),
		done: make(chan struct{}), files: make([]*recvFile, len(m.Files))}
	t.wake, t.end = context.WithCancel(context.Background())
	var total int64
	for i, e := range m.Files {
		clean, err := CleanPath(e.Path)
		if err != nil {
			return nil, 0, err // names the path
		}
		if path.Base(e.Path) != e.Name {
			return nil, 0, &FileError{i, e.Path, fmt.Errorf("%w: the path does not end in the name", ErrBadManifest)}
		}
		if e.Size < 0 {
			return nil, 0, &FileError{i, e.Path, fmt.Errorf("%w: negative size", ErrBadManifest)}
		}
		if e.Size > l.MaxFileSize {
			return nil, 0, &FileError{i, e.Path, fmt.Errorf("%w: %s, at most %s a file", ErrTooLarge,
				humanize.IBytes(uint64(e.Size)), humanize.IBytes(uint64(l.MaxFileSize)))}
		}
		if err := checkSHA256(e.SHA256); err != nil {
			return nil, 0, &FileError{i, e.Path, err}
		}
		total += e.Size
		if total > l.MaxTransferSize {
			return nil, 0, fmt.Errorf("%w: more than %s in one transfer", ErrTooLarge, humanize.IBytes(uint64(l.MaxTransferSize)))
		}
		t.files[i] = &recvFile{index: i, entry: e, clean: clean,
			partial: path.Join(path.Dir(clean), "."+id+"."+strconv.Itoa(i)+partialSuffix)}
	}
	t.remaining = len(t.files)
	return t, total, nil
}

// refusedNames is ErrBadName naming every refused path of m (the first
// five, then how many more), nil when CleanPath takes them all.
func refusedNames(m Manifest) error {
	var names []string
	n := 0
	for _, e := range m.Files {
		if _, err := CleanPath(e.Path); err != nil {
			n++
			if len(names) < 5 {
				names = append(names, strings.TrimPrefix(err.Error(), ErrBadName.Error()+": "))
			}
		}
	}
	switch {
	case n == 0:
		return nil
	case n > len(names):
		return fmt.Errorf("%w: %s and %d more", ErrBadName, strings.Join(names, ", "), n-len(names))
	}
	return fmt.Errorf("%w: %s", ErrBadName, strings.Join(names, ", "))
}

// Transfer returns the registered transfer id (ErrNotFound).
func (r *Receiver) Transfer(id string) (*Transfer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.transfers[id]
	if !ok {
		return nil, ErrNotFound
	}
	return t, nil
}

// Forget drops a finished transfer from the table (the handler then answers
// 404 for it). An unfinished one is cancelled first.
func (r *Receiver) Forget(id string) {
	r.mu.Lock()
	t := r.transfers[id]
	delete(r.transfers, id)
	delete(r.reserved, id)
	r.mu.Unlock()
	if t != nil {
		t.Cancel()
	}
}

// Transfer is one announced transfer. Its files arrive through the handler.
type Transfer struct {
	ID     string
	Sender string

	r    *Receiver
	sem  chan struct{} // one slot per running PUT
	done chan struct{} // closed when every file is saved or the transfer failed
	// wake is cancelled right after done closes; running PUTs wake on it.
	wake context.Context
	end  context.CancelFunc

	mu        sync.Mutex
	files     []*recvFile // fixed at Begin; their mutable fields guarded by mu
	remaining int         // files not saved yet; guarded by mu
	err       error       // why it failed; guarded by mu

	lastByte atomic.Int64 // unix nanoseconds of the last byte written, 0 before any
}

// recvFile is one file of a transfer. At most one PUT works on it at a
// time: the one that set busy (under Transfer.mu). f, h and the writes of
// offset and saved belong to that PUT; offset and saved are also guarded by
// Transfer.mu for readers.
type recvFile struct {
	index   int
	entry   Entry
	clean   string // CleanPath(entry.Path)
	partial string // temporary name, root-relative

	busy bool // guarded by Transfer.mu

	f      *os.File
	h      hash.Hash // SHA-256 of exactly the first offset bytes
	offset int64     // bytes written and fsynced
	saved  *Saved

	// arrived is the bytes of the file written so far: offset, and what
	// the PUT under way has written since (not fsynced yet). Progress only;
	// read without Transfer.mu.
	arrived atomic.Int64
}

// FileStatus is the receiving state of one file.
type FileStatus struct {
	Index  int    `json:"index"`
	Path   string `json:"path"`   // as sent
	Size   int64  `json:"size"`   // as announced
	Offset int64  `json:"offset"` // bytes safely on disk (fsynced)
	// Arrived is the bytes received so far: Offset and what the upload
	// under way has written since (its progress).
	Arrived int64  `json:"arrived"`
	Saved   *Saved `json:"saved,omitempty"`
}

// Status is a transfer's state: every file, and the error if it failed.
type Status struct {
	ID    string       `json:"id"`
	Files []FileStatus `json:"files"`
	Done  bool         `json:"done"`
	Error string       `json:"error,omitempty"`
	// LastByte is when the last byte was written; zero (left out) before
	// the first.
	LastByte time.Time `json:"last_byte,omitzero"`
}

// Status returns a snapshot.
func (t *Transfer) Status() Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Status{ID: t.ID, Files: make([]FileStatus, len(t.files))}
	if ns := t.lastByte.Load(); ns != 0 {
		s.LastByte = time.Unix(0, ns).UTC()
	}
	for i, f := range t.files {
		s.Files[i] = FileStatus{Index: i, Path: f.entry.Path, Size: f.entry.Size, Offset: f.offset, Arrived: max(f.arrived.Load(), f.offset)}
		if f.saved != nil {
			c := *f.saved
			s.Files[i].Saved = &c
		}
	}
	select {
	case <-t.done:
		s.Done = true
	default:
	}
	if t.err != nil {
		s.Error = t.err.Error()
	}
	return s
}

// pendingBytes is what the transfer may still write; called with r.mu held.
func (t *Transfer) pendingBytes() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return 0
	}
	var n int64
	for _, f := range t.files {
		if f.saved == nil {
			n += f.entry.Size - f.offset
		}
	}
	return n
}

// Done is closed when every file is saved or the transfer failed.
func (t *Transfer) Done() <-chan struct{} { return t.done }

// Wait blocks until Done or ctx ends, and returns the result: every file
// saved, or the transfer's error (files saved before a failure stay, listed
// in the result).
func (t *Transfer) Wait(ctx context.Context) (Result, error) {
	select {
	case <-t.done:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	res := Result{Dir: t.r.dir}
	for _, f := range t.files {
		if f.saved != nil {
			res.Files = append(res.Files, *f.saved)
		}
	}
	return res, t.err
}

// Cancel ends an unfinished transfer: partial files are removed, further
// uploads get 410. Files already saved stay.
func (t *Transfer) Cancel() { t.fail(ErrTransferEnded) }

// fail ends the transfer with err unless it already ended, removing every
// partial file no PUT is working on; a running PUT removes its own when it
// ends (release).
func (t *Transfer) fail(err error) {
	t.mu.Lock()
	select {
	case <-t.done:
		t.mu.Unlock()
		return
	default:
	}
	t.err = err
	close(t.done)
	t.end()
	var idle []*recvFile
	for _, f := range t.files {
		if !f.busy {
			f.busy = true // for good: no PUT starts on a failed transfer
			idle = append(idle, f)
		}
	}
	t.mu.Unlock()
	for _, f := range idle {
		t.dropPartial(f)
	}
	t.r.log.Info("files: transfer failed", "transfer", t.ID, "err", err)
}

// acquire makes the calling PUT the one working on f: ErrBusy when another
// is, the transfer's error when it failed.
func (t *Transfer) acquire(f *recvFile) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.endedLocked(); err != nil {
		return err
	}
	if f.busy {
		return ErrBusy
	}
	f.busy = true
	return nil
}

// release ends the calling PUT's work on f, removing the partial when the
// transfer failed meanwhile.
func (t *Transfer) release(f *recvFile) {
	t.mu.Lock()
	f.busy = false
	failed := t.err != nil
	if failed {
		f.busy = true
	}
	t.mu.Unlock()
	if failed {
		t.dropPartial(f)
	}
}

// dropPartial closes and removes a file's partial; the caller owns f (busy).
func (t *Transfer) dropPartial(f *recvFile) {
	if f.f != nil {
		f.f.Close()
		f.f = nil
	}
	if f.saved == nil {
		if err := t.r.root.Remove(f.partial); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.r.log.Warn("files: removing partial", "transfer", t.ID, "err", err)
		}
	}
}

// ended returns the transfer's error, nil while it runs or once complete.
// A failure the sender caused (a lie: ErrSizeMismatch, ErrHashMismatch) or
// a full disk keeps its sentinel; every other failure also wraps
// ErrTransferEnded (410), so a sender stops instead of retrying it.
func (t *Transfer) ended() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.endedLocked()
}

func (t *Transfer) endedLocked() error {
	switch err := t.err; {
	case err == nil:
		return nil
	case errors.Is(err, ErrTransferEnded), errors.Is(err, ErrSizeMismatch),
		errors.Is(err, ErrHashMismatch), errors.Is(err, ErrNoSpace):
		return err
	default:
		return fmt.Errorf("%w: %w", ErrTransferEnded, err)
	}
}

// open opens (creating) the partial of f; the caller owns f.
func (t *Transfer) open(f *recvFile) error {
	if f.f != nil {
		return nil
	}
	if d := path.Dir(f.clean); d != "." {
		if err := t.r.root.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	fl, err := t.r.root.OpenFile(f.partial, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	f.f = fl
	f.h = sha256.New()
	return nil
}

// finish verifies a fully received file and gives it its final name; the
// caller owns f.
func (t *Transfer) finish(f *recvFile) (*Saved, error) {
	sum := hex.EncodeToString(f.h.Sum(nil))
	if sum != f.entry.SHA256 {
		return nil, ErrHashMismatch
	}
	if err := f.f.Close(); err != nil {
		return nil, err
	}
	f.f = nil
	final, err := t.place(f.partial, f.clean)
	if err != nil {
		return nil, err
	}
	// The new name (and the partial's removal) is durable only once the
	// directory holding it is synced (fsync(2): a file's fsync does not
	// sync its directory entry).
	if err := t.r.syncDir(path.Dir(final)); err != nil {
		return nil, err
	}
	s := &Saved{Path: final, Size: f.entry.Size, MediaType: f.entry.MediaType, SHA256: sum}
	t.mu.Lock()
	f.saved = s
	t.remaining--
	last := t.remaining == 0 && t.err == nil
	if last {
		close(t.done)
		t.end()
	}
	t.mu.Unlock()
	if last {
		t.r.log.Info("files: transfer complete", "transfer", t.ID, "files", len(t.files))
	}
	return s, nil
}

// syncDir fsyncs the root-relative directory dir. A file system that
// cannot sync a directory (EINVAL, as some FUSE and network ones) is not
// an error, nor is one where a directory cannot be opened for it (Windows).
func (r *Receiver) syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil // NTFS journals directory entries; FlushFileBuffers on a directory is refused
	}
	d, err := r.root.Open(dir)
	if err != nil {
		return nil
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("files: syncing the folder: %w", err)
	}
	return nil
}

// maxNumbered bounds the "name (k).ext" search.
const maxNumbered = 10000

// place gives partial the name want, or the first free "name (k).ext",
// never replacing an existing file: a hard link fails when the name exists
// (EEXIST, atomic on every local file system), then the partial name is
// removed. On a file system without hard links (FAT, some network shares)
// it reserves the name with O_CREATE|O_EXCL and renames onto that
// reservation.
func (t *Transfer) place(partial, want string) (string, error) {
	root := t.r.root
	dir, base := path.Split(want)
	for k := 0; k <= maxNumbered; k++ {
		name := want
		if k > 0 {
			name = dir + numbered(base, k)
		}
		err := root.Link(partial, name)
		if err == nil {
			if err := root.Remove(partial); err != nil {
				t.r.log.Warn("files: removing partial name", "transfer", t.ID, "err", err)
			}
			return name, nil
		}
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		// No hard links here: reserve the name, then rename onto it.
		rf, err2 := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err2, fs.ErrExist) {
			continue
		}
		if err2 != nil {
			return "", fmt.Errorf("files: naming %q: %w (link: %v)", name, err2, err)
		}
		rf.Close()
		if err := root.Rename(partial, name); err != nil {
			root.Remove(name)
			return "", fmt.Errorf("files: naming %q: %w", name, err)
		}
		return name, nil
	}
	return "", fmt.Errorf("files: %q: %d numbered names taken", want, maxNumbered)
}

// isNoSpace reports a full disk or quota.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, errDiskQuota)
}
