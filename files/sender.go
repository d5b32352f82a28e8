package files

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Source is one local file to send: its manifest entry and where it is.
type Source struct {
	Entry Entry
	Path  string // local path
}

// Sources is Collect without the skipped entries.
func Sources(paths ...string) ([]Source, error) {
	srcs, _, err := Collect(paths...)
	return srcs, err
}

// NotSent is a list of paths a send leaves out, each with why: the links
// and special files Collect skips in the folders it walks, or the files
// whose names the receiver would refuse. Count counts them all; Entries
// holds the first MaxNotSentListed, in order. JSON:
//
//	{"count":N,"entries":[{"path":"Trip/link","why":"symbolic link"},...]}
type NotSent struct {
	Count   int            `json:"count"`
	Entries []NotSentEntry `json:"entries"`
}

// NotSentEntry is one path left out: as it would have been sent
// ("folder/relative/path"), and why ("symbolic link", "named pipe",
// "socket", "device", "irregular file"; or the name rule it breaks).
type NotSentEntry struct {
	Path string `json:"path"`
	Why  string `json:"why"`
}

// MaxNotSentListed bounds NotSent.Entries.
const MaxNotSentListed = 100

// Add counts path, and lists it while fewer than MaxNotSentListed are.
func (n *NotSent) Add(path, why string) {
	n.Count++
	if len(n.Entries) < MaxNotSentListed {
		n.Entries = append(n.Entries, NotSentEntry{Path: path, Why: why})
	}
}

// skippedType names the type of a folder entry that is not sent.
func skippedType(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "irregular file"
}

// Collect builds the sources for paths, hashing every file (one read of
// each; up to hashWorkers files at once, each read ahead of its hash). A
// file is sent under its base name; a folder as its regular files, each
// under "folder/relative/path": its symbolic links (to a file or a folder,
// inside it or not) and special files are not followed or read, and are
// returned as skipped. Media types come from the extension
// (mime.TypeByExtension).
func Collect(paths ...string) ([]Source, NotSent, error) {
	type job struct{ local, rel string }
	var jobs []job
	skipped := NotSent{Entries: []NotSentEntry{}}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, skipped, err
		}
		base := filepath.Base(filepath.Clean(p))
		if !fi.IsDir() {
			// A FIFO would block the open, a device (/dev/zero) never
			// ends: only regular files are read.
			if !fi.Mode().IsRegular() {
				return nil, skipped, fmt.Errorf("%s: not a regular file or folder (%s)", p, fi.Mode().Type())
			}
			jobs = append(jobs, job{p, base})
			continue
		}
		// A folder named through a symlink is walked at its target
		// (WalkDir does not follow a symlink root); links inside it are
		// still skipped.
		root, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, skipped, err
		}
		err = filepath.WalkDir(root, func(local string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, err := filepath.Rel(root, local)
			if err != nil {
				return err
			}
			rel = base + "/" + filepath.ToSlash(rel)
			if !d.Type().IsRegular() {
				skipped.Add(rel, skippedType(d.Type()))
				return nil
			}
			jobs = append(jobs, job{local, rel})
			return nil
		})
		if err != nil {
			return nil, skipped, err
		}
	}
	out := make([]Source, len(jobs))
	errs := make([]error, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(hashWorkers, len(jobs)) {
		wg.Go(func() {
			for i := range next {
				e, err := entryOf(jobs[i].local, jobs[i].rel)
				out[i], errs[i] = Source{Entry: e, Path: jobs[i].local}, err
			}
		})
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, skipped, err
		}
	}
	return out, skipped, nil
}

// hashWorkers is how many files Sources hashes at once: SHA-256 is
// CPU-bound, so one per core of a laptop's usual two or more.
const hashWorkers = 2

func entryOf(local, rel string) (Entry, error) {
	f, err := os.Open(local)
	if err != nil {
		return Entry{}, err
	}
	defer f.Close()
	// Swapped for something else since it was listed: never hash a
	// device or a pipe.
	if fi, err := f.Stat(); err != nil {
		return Entry{}, err
	} else if !fi.Mode().IsRegular() {
		return Entry{}, fmt.Errorf("%s: not a regular file (%s)", local, fi.Mode().Type())
	}
	h := sha256.New()
	n, err := hashReader(h, f)
	if err != nil {
		return Entry{}, err
	}
	mt := mime.TypeByExtension(path.Ext(rel))
	if mt != "" {
		if t, _, err := mime.ParseMediaType(mt); err == nil {
			mt = t
		}
	}
	return Entry{Name: path.Base(rel), Path: rel, Size: n, MediaType: mt,
		SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// ManifestOf is the manifest announcing srcs.
func ManifestOf(srcs []Source) Manifest {
	m := Manifest{Files: make([]Entry, len(srcs))}
	for i, s := range srcs {
		m.Files[i] = s.Entry
	}
	return m
}

// Progress is reported while sending. Done and Total count every file of
// the upload; FileDone and FileTotal the file Index. After a resume FileDone
// restarts at the receiver's offset, so Done may step back.
type Progress struct {
	Index               int
	FileDone, FileTotal int64
	Done, Total         int64
}

// NewTransport returns an HTTP transport for uploads over tlsConf (for a
// paired peer: pairing.PinnedTLSConfig(fp)): large write buffers (a TLS
// record per write, not one per 4 KiB), HTTP/1.1 with one connection per
// concurrent upload, and timeouts on dialling, the handshake and the
// response header.
func NewTransport(tlsConf *tls.Config) *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 15 * time.Second}).DialContext,
		TLSClientConfig:       tlsConf,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second, // the receiver fsyncs and hashes before answering
		IdleConnTimeout:       30 * time.Second,
		MaxIdleConnsPerHost:   DefaultMaxUploads,
		WriteBufferSize:       bufSize,
		ReadBufferSize:        16 << 10,
	}
}

// Client sends files to one receiver.
type Client struct {
	// HTTP carries the requests; build it on NewTransport with the peer's
	// pinned TLS config. The app's grant (Authorization) is its business: a
	// RoundTripper wrapper, or Header below.
	HTTP *http.Client
	// BaseURL is the receiver's origin ("https://host:port"); requests go to
	// BaseURL + Prefix + transfer + "/" + index.
	BaseURL string
	// Header is added to every request (e.g. Authorization).
	Header http.Header
	// Concurrency is how many files upload at once (default 2, at most
	// DefaultMaxUploads).
	Concurrency int
	// Retries is how many times one file is resumed after a failed attempt
	// (cut connection, timeout, 5xx, 409, 429) before Upload gives up
	// (default 8). Backoff doubles from 200 ms up to 5 s.
	Retries int
	// IdleTimeout aborts an attempt whose body has not moved for that long
	// (default DefaultIdleTimeout); the next attempt resumes.
	IdleTimeout time.Duration
	// Progress, when set, is called (serialised) at most once per MiB per
	// file and progressGap apart, and at the start and end of every file.
	Progress func(Progress)
	Logger   *slog.Logger
}

// StatusError is a refusal by the receiver: the HTTP status and its message.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("the receiving device answered %d: %s", e.Code, e.Message)
}

// Is maps the statuses of the package doc back to the sentinels.
func (e *StatusError) Is(target error) bool {
	switch e.Code {
	case http.StatusNotFound:
		return target == ErrNotFound
	case http.StatusUnprocessableEntity:
		return target == ErrSizeMismatch && strings.Contains(e.Message, ErrSizeMismatch.Error()) ||
			target == ErrHashMismatch && strings.Contains(e.Message, ErrHashMismatch.Error())
	case http.StatusRequestEntityTooLarge:
		return target == ErrSizeMismatch
	case http.StatusInsufficientStorage:
		return target == ErrNoSpace
	case http.StatusGone:
		return target == ErrTransferEnded
	}
	return false
}

// retryable: cut, overloaded, busy or behind; everything else is final.
func retryable(err error) bool {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Code == http.StatusConflict || se.Code == http.StatusTooManyRequests || se.Code >= 500 && se.Code != http.StatusInsufficientStorage
	}
	return !errors.Is(err, context.Canceled)
}

// Upload sends srcs as the transfer id the receiver announced with
// ManifestOf(srcs) (Receiver.Begin), file by file, each resumed from the
// receiver's offset after a failure, and returns what the receiver saved,
// in srcs order. The first file that fails for good cancels the rest.
func (c *Client) Upload(ctx context.Context, id string, srcs []Source) ([]Saved, error) {
	conc := c.Concurrency
	if conc <= 0 {
		conc = 2
	}
	conc = min(conc, DefaultMaxUploads, max(len(srcs), 1))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	p := &progress{fn: c.Progress, done: make([]int64, len(srcs))}
	for _, s := range srcs {
		p.total += s.Entry.Size
	}
	saved := make([]Saved, len(srcs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for i := range next {
				s, err := c.uploadFile(ctx, id, i, srcs[i], p)
				if err != nil {
					cancel(fmt.Errorf("file %d (%s): %w", i, srcs[i].Entry.Path, err))
					continue
				}
				saved[i] = *s
			}
		})
	}
feed:
	for i := range srcs {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return saved, nil
}

func (c *Client) fileURL(id string, i int) string {
	return strings.TrimSuffix(c.BaseURL, "/") + Prefix + id + "/" + strconv.Itoa(i)
}

func (c *Client) uploadFile(ctx context.Context, id string, i int, s Source, p *progress) (*Saved, error) {
	f, err := os.Open(s.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	retries := c.Retries
	if retries <= 0 {
		retries = 8
	}
	wait := 200 * time.Millisecond
	for attempt := 0; ; attempt++ {
		saved, err := c.attempt(ctx, c.fileURL(id, i), i, f, s.Entry.Size, p)
		if err == nil {
			return saved, nil
		}
		if !retryable(err) || attempt >= retries || ctx.Err() != nil {
			return nil, err
		}
		if c.Logger != nil {
			c.Logger.Info("files: upload interrupted, resuming", "file", i, "attempt", attempt+1, "err", err)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func (c *Client) do(req *http.Request) (*http.Response, error) {
	for k, v := range c.Header {
		req.Header[k] = v
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	return hc.Do(req)
}

// attempt asks the receiver's offset and sends the rest of the file from it.
func (c *Client) attempt(ctx context.Context, url string, i int, f *os.File, size int64, p *progress) (*Saved, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, &StatusError{Code: resp.StatusCode, Message: resp.Status}
	}
	off, err := strconv.ParseInt(resp.Header.Get("Upload-Offset"), 10, 64)
	if err != nil || off < 0 || off > size {
		return nil, fmt.Errorf("files: bad Upload-Offset %q", resp.Header.Get("Upload-Offset"))
	}
	p.set(i, off, size)

	idle := c.IdleTimeout
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	actx, stop := context.WithCancel(ctx)
	defer stop()
	watchdog := time.AfterFunc(idle, stop)
	defer watchdog.Stop()
	body := &countingReader{r: io.NewSectionReader(f, off, size-off), on: func(n int64) {
		watchdog.Reset(idle)
		p.add(i, n, size)
	}}
	var rd io.Reader = body
	if size == off {
		rd = http.NoBody
	}
	req, err = http.NewRequestWithContext(actx, http.MethodPut, url, rd)
	if err != nil {
		return nil, err
	}
	req.ContentLength = size - off
	if size > off {
		req.Header.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, size-1, size))
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err = c.do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch resp.StatusCode {
	case http.StatusCreated:
		var s Saved
		if err := json.Unmarshal(msg, &s); err != nil {
			return nil, fmt.Errorf("files: bad answer: %w", err)
		}
		p.set(i, size, size)
		return &s, nil
	case http.StatusNoContent:
		return nil, &StatusError{Code: http.StatusConflict, Message: "receiver kept a prefix only"}
	}
	var eb errorBody
	if json.Unmarshal(msg, &eb) == nil && eb.Error != "" {
		return nil, &StatusError{Code: resp.StatusCode, Message: eb.Error}
	}
	return nil, &StatusError{Code: resp.StatusCode, Message: resp.Status}
}

type countingReader struct {
	r  io.Reader
	on func(int64)
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	if n > 0 {
		c.on(int64(n))
	}
	return n, err
}

// progressGap is the least time between two Progress calls within a file
// (a progress bar redraws 20 times a second at most; a 1 GiB file at
// 1 MiB steps was 1024 NDJSON lines to the CLI): the start and the end of
// a file are always reported.
const progressGap = 50 * time.Millisecond

// progress serialises Progress calls and keeps the per-file counts.
type progress struct {
	fn    func(Progress)
	total int64

	mu       sync.Mutex
	done     []int64   // guarded by mu
	sum      int64     // guarded by mu
	reported []int64   // guarded by mu: done[i] at the last report
	last     time.Time // guarded by mu: the last report
}

func (p *progress) set(i int, v, size int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sum += v - p.done[i]
	p.done[i] = v
	p.reportLocked(i, size, true)
}

func (p *progress) add(i int, n, size int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done[i] += n
	p.sum += n
	p.reportLocked(i, size, false)
}

func (p *progress) reportLocked(i int, size int64, force bool) {
	if p.fn == nil {
		return
	}
	if p.reported == nil {
		p.reported = make([]int64, len(p.done))
	}
	if !force && p.done[i] != size {
		if p.done[i]-p.reported[i] < 1<<20 {
			return
		}
		if time.Since(p.last) < progressGap {
			return
		}
	}
	p.reported[i] = p.done[i]
	p.last = time.Now()
	p.fn(Progress{Index: i, FileDone: p.done[i], FileTotal: size, Done: p.sum, Total: p.total})
}
