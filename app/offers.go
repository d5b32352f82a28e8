package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/files"
	"meshtray/jsonout"
	"meshtray/pairing"
)

// Offers: files this device offers to a browser-only device (a phone
// paired through its page, whose grant has no A2A URL to send to). The
// phone page lists the offers of its own grant and downloads each file
// with GET; the sender (meshtray send, the tray) waits until every file
// was downloaded whole, the phone declines, the offer expires, or the
// sender stops waiting.
//
// An offer is a row of a small in-memory table, not an A2A task: A2A
// tasks are work an agent does for its caller, and here the caller (the
// phone) runs no agent and the work is the computer's own. Nothing of an
// offer needs to survive a restart: its sender waits in a process that a
// restart ends too.
//
// Routes (pairing's grant middleware, scope agent; each answers only the
// offers of the requesting grant — another grant's offer is 404 like an
// unknown one):
//
//	GET    /files/offers                 -> [OfferView]
//	GET    /files/offers/{id}/{index}    -> the file (Range, If-Range: RFC 9110 §14,
//	                                        http.ServeContent); 410 once it changed on disk
//	DELETE /files/offers/{id}            -> 204; the phone declines it
const (
	// OfferTTL is how long an offer waits for its downloads.
	OfferTTL = time.Hour
	// maxOffersPerGrant and maxOffers bound the table; a new offer past
	// either ends the grant's (then anyone's) oldest.
	maxOffersPerGrant = 8
	maxOffers         = 64
	// maxOfferFiles and maxOfferBytes bound one offer, like a received
	// transfer (files.DefaultMaxFiles, files.DefaultMaxTransferSize).
	maxOfferFiles = files.DefaultMaxFiles
	maxOfferBytes = files.DefaultMaxTransferSize
)

// Errors of offers.
var (
	ErrNoOffer       = errors.New("no such offer")
	ErrOfferTooBig   = errors.New("offer too large")
	ErrOfferExpired  = errors.New("the offer expired before every file was downloaded")
	ErrOfferDeclined = errors.New("the device declined the offer")
)

// OfferView is one offer as the phone page lists it.
type OfferView struct {
	ID      string          `json:"id"`
	From    string          `json:"from"` // this device's name
	Created time.Time       `json:"created"`
	Expires time.Time       `json:"expires"`
	Files   []OfferFileView `json:"files"`
}

// OfferFileView is one offered file: its manifest entry (name, path,
// size, media type, SHA-256, for the page to check what it got), its
// index on the wire, and how many bytes from its start were downloaded.
type OfferFileView struct {
	Index int `json:"index"`
	files.Entry
	Downloaded int64 `json:"downloaded"`
}

// OfferProgress is one step of an offer's downloads: file Index has
// Done of its Size bytes downloaded from its start; TotalDone of Total
// over every file.
type OfferProgress struct {
	Index            int
	Path             string
	Done, Size       int64
	TotalDone, Total int64
}

type offerFile struct {
	src   files.Source
	mod   time.Time // the file's modification time when offered
	done  int64     // guarded by offer.mu: bytes from the start served whole
	whole bool      // guarded by offer.mu: served up to its end (an empty file too)
}

type offer struct {
	id, grantID, from string
	created, expires  time.Time
	total             int64

	mu    sync.Mutex
	files []offerFile // done guarded by mu
	ended error       // guarded by mu: why it ended (nil while open)

	wake chan struct{} // capacity 1: progress or end
	end  chan struct{} // closed when it ends
}

func (o *offer) poke() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// finish ends the offer with why (first call wins).
func (o *offer) finish(why error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ended != nil {
		return
	}
	o.ended = why
	close(o.end)
	o.poke()
}

func (o *offer) view() OfferView {
	o.mu.Lock()
	defer o.mu.Unlock()
	v := OfferView{ID: o.id, From: o.from, Created: o.created, Expires: o.expires, Files: make([]OfferFileView, len(o.files))}
	for i, f := range o.files {
		v.Files[i] = OfferFileView{Index: i, Entry: f.src.Entry, Downloaded: f.done}
	}
	return v
}

// served records that bytes [start, start+n) of file i reached the phone;
// the downloaded prefix grows when they continue it.
func (o *offer) served(i int, start, n int64) {
	o.mu.Lock()
	f := &o.files[i]
	grew := start <= f.done && (start+n > f.done || !f.whole && start+n >= f.src.Entry.Size)
	if grew {
		f.done = min(start+n, f.src.Entry.Size)
		f.whole = f.whole || f.done == f.src.Entry.Size
	}
	o.mu.Unlock()
	if grew {
		o.poke()
	}
}

// complete reports whether every file was downloaded whole.
func (o *offer) complete() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, f := range o.files {
		if !f.whole {
			return false
		}
	}
	return true
}

// offerTable is the node's offers. now is the clock (tests).
type offerTable struct {
	now func() time.Time

	mu     sync.Mutex
	offers []*offer // guarded by mu; oldest first
}

// add registers an offer of srcs to grant g. It fails with ErrOfferTooBig
// past the bounds of one offer.
func (t *offerTable) add(g pairing.Grant, from string, srcs []files.Source) (*offer, error) {
	if len(srcs) == 0 {
		return nil, badRequest("nothing to offer: no files")
	}
	if len(srcs) > maxOfferFiles {
		return nil, fmt.Errorf("%w: %d files, at most %d", ErrOfferTooBig, len(srcs), maxOfferFiles)
	}
	now := t.clock()
	o := &offer{id: newOfferID(), grantID: g.ID, from: from, created: now, expires: now.Add(OfferTTL),
		wake: make(chan struct{}, 1), end: make(chan struct{})}
	for _, s := range srcs {
		fi, err := os.Stat(s.Path)
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() || fi.Size() != s.Entry.Size {
			return nil, fmt.Errorf("%s changed while it was read", s.Path)
		}
		o.total += s.Entry.Size
		o.files = append(o.files, offerFile{src: s, mod: fi.ModTime()})
	}
	if o.total > maxOfferBytes {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrOfferTooBig, o.total, int64(maxOfferBytes))
	}
	var evicted []*offer
	t.mu.Lock()
	t.expireLocked(now)
	mine := 0
	for _, x := range t.offers {
		if x.grantID == g.ID {
			mine++
		}
	}
	for i := 0; i < len(t.offers) && (mine >= maxOffersPerGrant || len(t.offers) >= maxOffers); {
		x := t.offers[i]
		if mine >= maxOffersPerGrant && x.grantID != g.ID {
			i++
			continue
		}
		if x.grantID == g.ID {
			mine--
		}
		evicted = append(evicted, x)
		t.offers = slices.Delete(t.offers, i, i+1)
	}
	t.offers = append(t.offers, o)
	t.mu.Unlock()
	for _, x := range evicted {
		x.finish(errors.New("a newer offer replaced it (too many offers waiting)"))
	}
	return o, nil
}

func (t *offerTable) clock() time.Time {
	if t.now != nil {
		return t.now()
	}
	return time.Now()
}

// expireLocked ends and drops the offers past their expiry.
func (t *offerTable) expireLocked(now time.Time) {
	t.offers = slices.DeleteFunc(t.offers, func(o *offer) bool {
		if now.Before(o.expires) {
			return false
		}
		o.finish(ErrOfferExpired) // lock order: t.mu, then o.mu
		return true
	})
}

// remove drops o from the table (it ended).
func (t *offerTable) remove(o *offer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.offers = slices.DeleteFunc(t.offers, func(x *offer) bool { return x == o })
}

// of returns grantID's open offers, oldest first.
func (t *offerTable) of(grantID string) []*offer {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked(t.clock())
	var out []*offer
	for _, o := range t.offers {
		if o.grantID == grantID {
			out = append(out, o)
		}
	}
	return out
}

// get returns grantID's offer id (ErrNoOffer for an unknown one or
// another grant's).
func (t *offerTable) get(grantID, id string) (*offer, error) {
	for _, o := range t.of(grantID) {
		if o.id == id {
			return o, nil
		}
	}
	return nil, ErrNoOffer
}

// endGrant ends every offer to grantID (the grant was revoked).
func (t *offerTable) endGrant(grantID string, why error) {
	t.mu.Lock()
	var gone []*offer
	t.offers = slices.DeleteFunc(t.offers, func(o *offer) bool {
		if o.grantID == grantID {
			gone = append(gone, o)
			return true
		}
		return false
	})
	t.mu.Unlock()
	for _, o := range gone {
		o.finish(why)
	}
}

func newOfferID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// waitOffer waits until o's files were all downloaded whole (nil), or
// the phone declined (ErrOfferDeclined), the offer expired
// (ErrOfferExpired), or ctx ended (the offer is withdrawn; ctx's error).
// progress is called on its goroutine for every step, at most every
// 200 ms, and once at the end of each file.
func (t *offerTable) wait(ctx context.Context, o *offer, progress func(OfferProgress)) error {
	defer t.remove(o)
	timer := time.NewTimer(time.Until(o.expires))
	defer timer.Stop()
	last := make([]int64, len(o.files))
	report := func() {
		o.mu.Lock()
		var total int64
		for _, f := range o.files {
			total += f.done
		}
		var steps []OfferProgress
		for i, f := range o.files {
			if f.done != last[i] {
				last[i] = f.done
				steps = append(steps, OfferProgress{Index: i, Path: f.src.Entry.Path, Done: f.done, Size: f.src.Entry.Size, TotalDone: total, Total: o.total})
			}
		}
		o.mu.Unlock()
		if progress != nil {
			for _, p := range steps {
				progress(p)
			}
		}
	}
	for {
		select {
		case <-ctx.Done():
			o.finish(ctx.Err())
			return ctx.Err()
		case <-timer.C:
			o.finish(ErrOfferExpired)
		case <-o.wake:
		}
		report()
		if o.complete() {
			o.finish(errOfferDone)
			return nil
		}
		o.mu.Lock()
		why := o.ended
		o.mu.Unlock()
		if why != nil {
			return why
		}
		// Pace the reports: a download's many small writes make one step.
		select {
		case <-ctx.Done():
		case <-o.end:
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// errOfferDone ends an offer whose files were all downloaded.
var errOfferDone = errors.New("downloaded")

// offerable refuses offering files to g when its grant lacks the agent
// scope (files are A2A work).
func offerable(g *pairing.Grant) error {
	if !g.Scopes.Has(pairing.ScopeAgent) {
		return fmt.Errorf("%w: %s may not use files (its grant lacks the agent scope)", ErrBrowserOnly, g.Name)
	}
	return nil
}

// offerFiles offers the files srcs (SendFiles read them) to g, a device that
// reaches this one only through its browser page (a phone), and follows
// the offer like a transfer (Node.SendFiles): a state line "working"
// once it is listed on the phone's page, progress lines as the phone
// downloads, and the result: completed when every file was downloaded
// whole, rejected when the phone declined, failed when it expired,
// canceled when ctx ended first (the offer is withdrawn) or the grant
// was paused or revoked. An error is a refusal before anything was
// offered.
func (n *Node) offerFiles(ctx context.Context, g *pairing.Grant, srcs []files.Source, emit func(SendEvent)) (SendResult, error) {
	if err := offerable(g); err != nil {
		return SendResult{}, err
	}
	o, err := n.offers.add(*g, n.cfg.Name, srcs)
	if errors.Is(err, ErrOfferTooBig) {
		return SendResult{}, badRequest("%v", err)
	}
	if err != nil {
		return SendResult{}, err
	}
	res := SendResult{TaskID: o.id}
	emit(SendEvent{Type: SendEventState, State: string(a2a.TaskStateWorking),
		Message: fmt.Sprintf("offered to %s: open meshtray's page on it to download (until %s)", g.Name, o.expires.Local().Format("15:04"))})
	n.log.Info("files offered", "offer", o.id, "grant_id", g.ID, "files", len(srcs), "bytes", o.total)
	err = n.offers.wait(ctx, o, func(p OfferProgress) {
		emit(SendEvent{Type: SendEventProgress, File: p.Index, Path: p.Path, Done: p.Done, Size: p.Size, TotalDone: p.TotalDone, Total: p.Total})
	})
	switch {
	case err == nil:
		res.State, res.Message = string(a2a.TaskStateCompleted), "downloaded by "+g.Name
		for _, s := range srcs {
			e := s.Entry
			res.Files = append(res.Files, files.Saved{Path: e.Path, Size: e.Size, MediaType: e.MediaType, SHA256: e.SHA256})
		}
	case errors.Is(err, ErrOfferDeclined):
		res.State, res.Message = string(a2a.TaskStateRejected), g.Name+" declined the files"
	case errors.Is(err, ErrOfferExpired):
		res.State, res.Message = string(a2a.TaskStateFailed), err.Error()
	default:
		res.State, res.Message = string(a2a.TaskStateCanceled), "the offer was withdrawn: "+err.Error()
	}
	return res, nil
}

// offerRoutes mounts the phone's side of offers (see the Offers comment).
func (n *Node) offerRoutes(mux *http.ServeMux) {
	a := n.auth
	grantOf := func(r *http.Request) string {
		p, ok := pairing.PrincipalFrom(r.Context())
		if !ok || p.Local {
			return ""
		}
		return p.Grant.ID
	}
	mux.Handle("GET /files/offers", a.Require(pairing.ScopeAgent, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out := []OfferView{}
		for _, o := range n.offers.of(grantOf(r)) {
			out = append(out, o.view())
		}
		jsonout.Write(w, http.StatusOK, out)
	})))
	mux.Handle("DELETE /files/offers/{id}", a.Require(pairing.ScopeAgent, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o, err := n.offers.get(grantOf(r), r.PathValue("id"))
		if err != nil {
			writeError(w, http.StatusNotFound, err)
			return
		}
		n.offers.remove(o)
		o.finish(ErrOfferDeclined)
		w.WriteHeader(http.StatusNoContent)
	})))
	mux.Handle("GET /files/offers/{id}/{index}", a.Require(pairing.ScopeAgent, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o, err := n.offers.get(grantOf(r), r.PathValue("id"))
		i, ierr := strconv.Atoi(r.PathValue("index"))
		if err == nil && (ierr != nil || i < 0 || i >= len(o.files) || r.PathValue("index") != strconv.Itoa(i)) {
			err = ErrNoOffer
		}
		if err != nil {
			writeError(w, http.StatusNotFound, err)
			return
		}
		serveOffered(w, r, o, i)
	})))
}

// serveOffered answers GET of offered file i: the bytes from disk through
// http.ServeContent (Range, If-Range, HEAD), as an attachment with a safe
// file name, counting what reached the phone.
func serveOffered(w http.ResponseWriter, r *http.Request, o *offer, i int) {
	f := o.files[i] // src and mod never change
	e := f.src.Entry
	fh, err := os.Open(f.src.Path)
	if err != nil {
		writeError(w, http.StatusGone, errors.New("the file is no longer there"))
		return
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != e.Size || !fi.ModTime().Equal(f.mod) {
		writeError(w, http.StatusGone, errors.New("the file changed since it was offered"))
		return
	}
	h := w.Header()
	ct := e.MediaType
	if ct == "" {
		ct = "application/octet-stream"
	}
	h.Set("Content-Type", ct)
	h.Set("Content-Disposition", contentDisposition(e.Name))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	// Opened as a page by mistake, it runs nothing and loads nothing.
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	// The digest the page checks the bytes against (also in the listing).
	h.Set("X-Meshtray-SHA256", e.SHA256)
	cw := &countingWriter{ResponseWriter: w}
	rs := &seekTracker{ReadSeeker: fh}
	http.ServeContent(cw, r, "", f.mod, rs)
	if r.Method == http.MethodGet && (cw.status == http.StatusOK || cw.status == http.StatusPartialContent) &&
		!strings.HasPrefix(cw.Header().Get("Content-Type"), "multipart/") {
		o.served(i, rs.start, cw.n)
	}
}

// contentDisposition is an attachment header for name (RFC 6266): path
// separators, control characters and quotes replaced, non-ASCII names in
// RFC 8187's filename* form (mime.FormatMediaType).
func contentDisposition(name string) string {
	name = strings.Map(func(r rune) rune {
		switch {
		case r < 0x20, r == 0x7f, r == '/', r == '\\', r == '"':
			return '_'
		}
		return r
	}, path.Base(name))
	if name == "" || name == "." || name == ".." {
		name = "file"
	}
	if v := mime.FormatMediaType("attachment", map[string]string{"filename": name}); v != "" {
		return v
	}
	return "attachment"
}

// countingWriter counts the body bytes written and the status.
type countingWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (c *countingWriter) WriteHeader(s int) {
	if c.status == 0 {
		c.status = s
	}
	c.ResponseWriter.WriteHeader(s)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// seekTracker remembers where http.ServeContent seeked to before copying
// a single range.
type seekTracker struct {
	io.ReadSeeker
	start int64
}

func (s *seekTracker) Seek(off int64, whence int) (int64, error) {
	p, err := s.ReadSeeker.Seek(off, whence)
	if err == nil && whence == io.SeekStart {
		s.start = p
	}
	return p, err
}
