package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"meshtray/jsonout"
)

// Prefix is where Handler serves: /files/{transfer}[/{index}].
const Prefix = "/files/"

// bufSize is the size of one copy buffer; a running PUT holds pipeBufs of
// them (hashPipe): what a receiver holds per upload beyond the kernel's
// buffers.
const bufSize = 256 << 10

// writebackEvery is the batch of a PUT's bytes streamOut hands to the disk
// at once: the disk works during the upload, and the fsync ending it
// waits for at most two batches.
const writebackEvery = 8 << 20

var bufPool = sync.Pool{New: func() any { b := make([]byte, bufSize); return &b }}

// Handler serves the wire protocol of the package doc under Prefix.
// senderOf names the requester (the paired device ID the app's grant
// middleware put in the request context); a transfer whose Sender differs
// answers 404, as an unknown one does. A nil senderOf checks nothing: the
// caller must then authorise requests itself.
func (r *Receiver) Handler(senderOf func(*http.Request) string) http.Handler {
	mux := http.NewServeMux()
	h := &handler{r: r, senderOf: senderOf}
	mux.HandleFunc("GET "+Prefix+"{transfer}", h.status)
	mux.HandleFunc("HEAD "+Prefix+"{transfer}/{index}", h.head)
	mux.HandleFunc("PUT "+Prefix+"{transfer}/{index}", h.put)
	return mux
}

type handler struct {
	r        *Receiver
	senderOf func(*http.Request) string
}

func (h *handler) transfer(req *http.Request) (*Transfer, error) {
	t, err := h.r.Transfer(req.PathValue("transfer"))
	if err != nil {
		return nil, err
	}
	if h.senderOf != nil && h.senderOf(req) != t.Sender {
		return nil, ErrNotFound
	}
	return t, nil
}

func (h *handler) file(req *http.Request) (*Transfer, *recvFile, int, error) {
	t, err := h.transfer(req)
	if err != nil {
		return nil, nil, 0, err
	}
	i, err := strconv.Atoi(req.PathValue("index"))
	if err != nil || i < 0 || i >= len(t.files) {
		return nil, nil, 0, ErrNotFound
	}
	return t, t.files[i], i, nil
}

func (h *handler) status(w http.ResponseWriter, req *http.Request) {
	t, err := h.transfer(req)
	if err != nil {
		writeError(w, err, -1)
		return
	}
	writeJSON(w, http.StatusOK, t.Status())
}

func (h *handler) head(w http.ResponseWriter, req *http.Request) {
	t, f, _, err := h.file(req)
	if err != nil {
		writeError(w, err, -1)
		return
	}
	t.mu.Lock()
	off, saved := f.offset, f.saved != nil
	t.mu.Unlock()
	if !saved {
		if err := t.ended(); err != nil {
			writeError(w, err, -1)
			return
		}
	}
	w.Header().Set("Upload-Offset", strconv.FormatInt(off, 10))
	w.Header().Set("Upload-Length", strconv.FormatInt(f.entry.Size, 10))
	w.Header().Set("Upload-Complete", map[bool]string{true: "?1", false: "?0"}[saved])
	w.WriteHeader(http.StatusOK)
}

// parseContentRange parses "bytes START-END/SIZE" (RFC 9110 §14.4).
func parseContentRange(s string) (start, end, size int64, ok bool) {
	rest, found := strings.CutPrefix(s, "bytes ")
	if !found {
		return 0, 0, 0, false
	}
	rng, sz, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, 0, false
	}
	a, b, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, 0, false
	}
	var e1, e2, e3 error
	start, e1 = strconv.ParseInt(a, 10, 64)
	end, e2 = strconv.ParseInt(b, 10, 64)
	size, e3 = strconv.ParseInt(sz, 10, 64)
	if e1 != nil || e2 != nil || e3 != nil || start < 0 || end < start || size <= end {
		return 0, 0, 0, false
	}
	return start, end, size, true
}

// errTooLong is a body with more bytes than its range or the file.
var errTooLong = errors.New("files: body longer than announced")

func (h *handler) put(w http.ResponseWriter, req *http.Request) {
	t, f, _, err := h.file(req)
	if err != nil {
		writeError(w, err, -1)
		return
	}
	select {
	case t.sem <- struct{}{}:
		defer func() { <-t.sem }()
	default:
		w.Header().Set("Retry-After", "1")
		writeError(w, fmt.Errorf("%w: at most %d uploads at once", ErrBusy, cap(t.sem)), -1)
		return
	}
	t.mu.Lock()
	saved := f.saved
	t.mu.Unlock()
	if saved != nil {
		writeJSON(w, http.StatusCreated, saved) // a retried final PUT
		return
	}
	h.r.mu.Lock()
	closed := h.r.closed
	if !closed {
		h.r.puts.Add(1)
	}
	h.r.mu.Unlock()
	if closed {
		writeError(w, ErrClosed, -1)
		return
	}
	defer h.r.puts.Done()
	if err := t.acquire(f); err != nil {
		writeError(w, err, -1)
		return
	}
	s, err := h.receive(w, req, t, f)
	off := f.offset
	t.release(f)
	switch {
	case err == nil && s != nil:
		writeJSON(w, http.StatusCreated, s)
	case err == nil:
		w.Header().Set("Upload-Offset", strconv.FormatInt(off, 10))
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, ErrOffset):
		writeError(w, err, off)
	default:
		writeError(w, err, -1)
	}
}

// receive runs one PUT of f (the caller owns f): a saved file, nil with no
// error when more is to come, or an error. A lie (size, hash, extra bytes)
// or a failed write fails the transfer, and release removes the partial; a
// cut body keeps the fsynced prefix for a resume.
func (h *handler) receive(w http.ResponseWriter, req *http.Request, t *Transfer, f *recvFile) (*Saved, error) {
	size := f.entry.Size
	start, end := int64(0), size-1
	if cr := req.Header.Get("Content-Range"); cr != "" {
		var total int64
		var ok bool
		start, end, total, ok = parseContentRange(cr)
		if !ok {
			return nil, fmt.Errorf("%w: Content-Range %q", ErrBadManifest, cr)
		}
		if total != size {
			return nil, h.lie(t, f, fmt.Errorf("%w: range says %d bytes, manifest %d", ErrSizeMismatch, total, size))
		}
	}
	if start != f.offset {
		return nil, fmt.Errorf("%w: range starts at %d", ErrOffset, start)
	}
	want := end - start + 1
	if req.ContentLength >= 0 && req.ContentLength != want {
		if req.ContentLength > want {
			return nil, h.lie(t, f, fmt.Errorf("%w: %d bytes sent for %d", ErrSizeMismatch, req.ContentLength, want))
		}
		return nil, fmt.Errorf("%w: Content-Length %d for a range of %d", ErrBadManifest, req.ContentLength, want)
	}
	if err := t.open(f); err != nil {
		return nil, h.writeFailed(t, f, err)
	}
	if f.offset > 0 {
		// A cut PUT may have written past its last fsync before failing;
		// drop anything beyond the kept offset.
		if err := f.f.Truncate(f.offset); err != nil {
			return nil, h.writeFailed(t, f, err)
		}
	}
	if _, err := f.f.Seek(f.offset, io.SeekStart); err != nil {
		return nil, h.writeFailed(t, f, err)
	}
	f.arrived.Store(f.offset) // what a cut PUT wrote past it is gone

	rc := http.NewResponseController(w)
	idle := h.r.limits.IdleTimeout
	// Reading and writing here, hashing in the pipe's goroutine: SHA-256
	// is the slowest stage and gets a core of its own.
	pipe := newHashPipe(f.h)
	waited := false
	defer func() {
		if !waited {
			pipe.wait()
		}
	}()
	var got int64
	var rerr error
	out := newStreamOut(f.f, f.offset)
	// A cancel or a failure elsewhere wakes a Read blocked on a stalled
	// body; the deadline set in the loop below is always followed by a
	// look at t.done, so the wake-up is never overwritten unseen.
	stopWake := context.AfterFunc(t.wake, func() { rc.SetReadDeadline(time.Now()) })
	defer stopWake()
	var lastDeadline time.Time
	for got < want && rerr == nil {
		select {
		case <-t.done:
			return nil, t.ended() // cancelled meanwhile; release removes the partial
		default:
		}
		// Fill the buffer (a TLS read yields one record, at most 16 KiB)
		// so each write and hash call takes 256 KiB; the idle deadline is
		// pushed at most once a second.
		bp := pipe.next()
		buf := *bp
		n := len(buf)
		if rem := want - got; rem < int64(n) {
			n = int(rem)
		}
		m := 0
		for m < n {
			if now := time.Now(); now.Sub(lastDeadline) > time.Second {
				rc.SetReadDeadline(now.Add(idle))
				lastDeadline = now
				select {
				case <-t.done:
					pipe.submit(bp, 0)
					return nil, t.ended()
				default:
				}
			}
			k, err := req.Body.Read(buf[m:n])
			m += k
			if err != nil {
				if err != io.EOF || got+int64(m) < want {
					rerr = err
				}
				break
			}
		}
		if m > 0 {
			if _, werr := f.f.Write(buf[:m]); werr != nil {
				pipe.submit(bp, 0)
				return nil, h.writeFailed(t, f, werr)
			}
			got += int64(m)
			f.arrived.Store(f.offset + got)
			t.lastByte.Store(time.Now().UnixNano())
			out.wrote(f.offset + got)
		}
		pipe.submit(bp, m)
	}
	pipe.wait() // f.h now holds every byte written
	waited = true
	if rerr == nil {
		// Anything beyond the range is a lie about the size.
		var one [1]byte
		if n, _ := req.Body.Read(one[:]); n > 0 {
			return nil, h.lie(t, f, fmt.Errorf("%w: %w", ErrSizeMismatch, errTooLong))
		}
	}
	rc.SetReadDeadline(time.Time{})
	if err := f.f.Sync(); err != nil {
		return nil, h.writeFailed(t, f, err)
	}
	t.mu.Lock()
	f.offset += got
	t.mu.Unlock()
	if err := t.ended(); err != nil {
		return nil, err // cancelled meanwhile; release removes the partial
	}
	if rerr != nil {
		return nil, fmt.Errorf("files: body cut at %d: %w", f.offset, rerr)
	}
	if f.offset < size {
		return nil, nil
	}
	s, err := t.finish(f)
	if errors.Is(err, ErrHashMismatch) {
		return nil, h.lie(t, f, &FileError{Index: f.index, Path: f.entry.Path, Err: err})
	}
	if err != nil {
		return nil, h.writeFailed(t, f, err)
	}
	return s, nil
}

// lie fails the transfer for a sender's false claim.
func (h *handler) lie(t *Transfer, _ *recvFile, err error) error {
	t.fail(err)
	return err
}

// writeFailed fails the transfer for a local write error (ErrNoSpace when
// the disk or quota is full).
func (h *handler) writeFailed(t *Transfer, f *recvFile, err error) error {
	if isNoSpace(err) {
		err = &FileError{Index: f.index, Path: f.entry.Path, Err: fmt.Errorf("%w: %w", ErrNoSpace, err)}
	}
	t.fail(err)
	return err
}

// errorBody is the JSON of every refusal.
type errorBody struct {
	Error  string `json:"error"`
	Offset *int64 `json:"offset,omitempty"`
}

// writeError maps a sentinel to its status (code >= 0 forces one) and,
// for offset >= 0, sends it as Upload-Offset.
func writeError(w http.ResponseWriter, err error, offset int64) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, ErrOffset), errors.Is(err, ErrBusy):
		code = http.StatusConflict
	case errors.Is(err, errTooLong):
		code = http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrSizeMismatch), errors.Is(err, ErrHashMismatch):
		code = http.StatusUnprocessableEntity
	case errors.Is(err, ErrNoSpace):
		code = http.StatusInsufficientStorage
	case errors.Is(err, ErrTransferEnded), errors.Is(err, ErrClosed):
		code = http.StatusGone
	case errors.Is(err, ErrBadManifest):
		code = http.StatusBadRequest
	}
	body := errorBody{Error: err.Error()}
	if offset >= 0 {
		w.Header().Set("Upload-Offset", strconv.FormatInt(offset, 10))
		body.Offset = &offset
	}
	if ts := w.Header().Get("Retry-After"); ts != "" && code == http.StatusConflict {
		code = http.StatusTooManyRequests
	}
	writeJSON(w, code, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) { jsonout.Write(w, code, v) }
