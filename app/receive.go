package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/dustin/go-humanize"

	agent "meshtray/a2a"
	"meshtray/files"
	"meshtray/nodes"
	"meshtray/pairing"
	"meshtray/textsafe"
)

// Receiving files: a message with FileParts (files/doc.go) is one A2A task
// through the normal approval; once approved the task begins the transfer
// (files.Receiver.Begin, transfer ID = task ID), stays working while the
// bytes arrive over the files handler, and ends with the files.Result as
// its artifact.

// maxApprovalFiles bounds the files an approval lists (the rest counted).
const maxApprovalFiles = 50

// maxApprovalPath bounds one listed path (runes, after escaping).
const maxApprovalPath = 200

// DefaultTransferIdle ends a transfer that received no byte for that long
// (the sender is gone; its partial files are removed).
const DefaultTransferIdle = 10 * time.Minute

// receiving is the node's receive side; set by Start.
type receiving struct {
	dir    string // "" when there is none (dirErr says why)
	dirErr error
	limits files.Limits
	idle   time.Duration
	log    *slog.Logger

	mu       sync.Mutex
	recv     *files.Receiver          // opened on first use, or at start when the folder exists; guarded by mu
	closed   bool                     // guarded by mu
	received []ReceivedTransfer       // newest first, at most maxReceivedKept; guarded by mu
	live     map[string]*liveTransfer // transfers under way by task ID; guarded by mu
}

// liveTransfer is one transfer under way, for the owner's listing.
type liveTransfer struct {
	peer    string
	tr      *files.Transfer
	started time.Time
}

// keepFree is files.Limits.KeepFree for the configured keep_free: the
// config's 0 is a real 0 (keep nothing free; its default is set by
// Defaults), which files.Limits spells as a negative value (its 0 is "the
// default").
func keepFree(b ByteSize) int64 {
	if b == 0 {
		return -1
	}
	return int64(b)
}

// startFiles sets up the receive folder (files.dir, default
// files.DefaultDir) with the configured caps. A folder that exists is
// opened now, which removes the partial files a previous run left; one
// that does not is created when the first transfer is asked for, so a
// device that never receives gets no folder.
func (n *Node) startFiles() {
	fc := n.cfg.Files
	rv := &receiving{idle: DefaultTransferIdle, log: n.log.With("pkg", "files"), limits: files.Limits{
		MaxFileSize:     int64(fc.MaxFileSize),
		MaxTransferSize: int64(fc.MaxTransferSize),
		MaxFiles:        fc.MaxFiles,
		KeepFree:        keepFree(fc.KeepFree),
	}}
	n.recv = rv
	rv.dir = fc.Dir
	if rv.dir == "" {
		d, err := files.DefaultDir()
		if err != nil {
			rv.dirErr = fmt.Errorf("no receive folder: %w (set files.dir in config.toml)", err)
			n.log.Warn("files cannot be received", "err", rv.dirErr)
			return
		}
		rv.dir = d
	}
	if _, err := os.Stat(rv.dir); err == nil {
		if _, err := rv.receiver(); err != nil {
			n.log.Warn("files cannot be received", "err", err)
		}
	}
}

// receiver returns the open receiver, opening (and creating) the folder
// the first time.
func (rv *receiving) receiver() (*files.Receiver, error) {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	if rv.recv != nil {
		return rv.recv, nil
	}
	if rv.dirErr != nil {
		return nil, rv.dirErr
	}
	if rv.closed {
		return nil, files.ErrClosed
	}
	r, err := files.NewReceiver(rv.dir, rv.limits, rv.log)
	if err != nil {
		return nil, fmt.Errorf("the receive folder %s cannot be used: %w", rv.dir, err)
	}
	rv.recv = r
	return r, nil
}

// opened is the receiver if it was opened (nil otherwise).
func (rv *receiving) opened() *files.Receiver {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return rv.recv
}

// closeFiles cancels unfinished transfers (their partial files removed).
func (n *Node) closeFiles() {
	if n.recv == nil {
		return
	}
	n.recv.mu.Lock()
	r := n.recv.recv
	n.recv.closed = true
	n.recv.mu.Unlock()
	if r != nil {
		r.Close()
	}
}

// filesHandler serves the files wire protocol to the grant a transfer was
// approved for (its sender is the grant ID), over TLS only: the pinned
// HTTPS listeners and the loopback port's TLS side.
func (n *Node) filesHandler() http.Handler {
	senderOf := func(r *http.Request) string {
		if p, ok := pairing.PrincipalFrom(r.Context()); ok && p != nil && !p.Local {
			return p.Grant.ID
		}
		return "\x00" // matches no transfer
	}
	var once sync.Once
	var h http.Handler
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			writeError(w, http.StatusForbidden, errors.New("files are received over https only"))
			return
		}
		recv := n.recv.opened()
		if recv == nil {
			http.NotFound(w, r) // no transfer was ever begun
			return
		}
		once.Do(func() { h = recv.Handler(senderOf) })
		h.ServeHTTP(w, r)
	})
}

// ReceivedFiles lists the transfers received recently, newest first.
func (n *Node) ReceivedFiles() []ReceivedTransfer {
	out := []ReceivedTransfer{}
	if n.recv == nil {
		return out
	}
	n.recv.mu.Lock()
	defer n.recv.mu.Unlock()
	return append(out, n.recv.received...)
}

// transferExecutor runs file transfers itself and hands every other task
// to the node's executor (the capability executor or the forward one).
type transferExecutor struct {
	n    *Node
	next agent.Executor
}

var (
	_ agent.Executor        = transferExecutor{}
	_ agent.Summarizer      = transferExecutor{}
	_ agent.Reattacher      = transferExecutor{}
	_ agent.WaitingRestorer = transferExecutor{}
)

// isTransfer says whether msg goes to the files side: an announcement
// always; inline files only when no forward agent takes approved work
// (it keeps getting what it got before).
func (x transferExecutor) isTransfer(msg *a2a.Message) (*incoming, error, bool) {
	in, err := parseTransfer(msg)
	if errors.Is(err, errNotTransfer) {
		return nil, nil, false
	}
	if x.n.deleg != nil && x.n.deleg.forward != nil && !announces(msg) {
		return nil, nil, false
	}
	return in, err, true
}

// announces reports whether msg has a FilePart naming its bytes by hash.
func announces(msg *a2a.Message) bool {
	for _, p := range msg.Parts {
		if fp, ok := p.(a2a.FilePart); ok {
			if u, ok := fp.File.(a2a.FileURI); ok && files.IsNamedInfoURI(u.URI) {
				return true
			}
		}
	}
	return false
}

// Summarize implements agent.Summarizer: "send N files (size): names" for
// a transfer, else the node executor's summary.
func (x transferExecutor) Summarize(p *pairing.Principal, msg *a2a.Message) string {
	if in, err, ok := x.isTransfer(msg); ok {
		if err != nil {
			return "send files (refused: " + err.Error() + ")"
		}
		return transferSummary(in.manifest)
	}
	if sm, ok := x.next.(agent.Summarizer); ok {
		return sm.Summarize(p, msg)
	}
	return agent.TextSummary(msg, "(a message without text)")
}

// transferSummary is the one line of a transfer: count, size, names.
func transferSummary(m files.Manifest) string {
	var b strings.Builder
	if len(m.Files) == 1 {
		fmt.Fprintf(&b, "send 1 file (%s): ", humanize.IBytes(uint64(m.Total())))
	} else {
		fmt.Fprintf(&b, "send %d files (%s): ", len(m.Files), humanize.IBytes(uint64(m.Total())))
	}
	for i, e := range m.Files {
		if i > 0 {
			b.WriteString(", ")
		}
		if b.Len() > 4*nodes.MaxSummaryRunes {
			b.WriteString("…")
			break
		}
		b.WriteString(e.Path)
	}
	return nodes.BoundSummary(b.String())
}

// Execute implements agent.Executor.
func (x transferExecutor) Execute(ctx context.Context, ex *agent.Execution) error {
	in, err, ok := x.isTransfer(ex.Message())
	if !ok {
		return x.next.Execute(ctx, ex)
	}
	if err != nil {
		ex.Reject(err.Error())
		return nil
	}
	x.n.receiveFiles(ctx, ex, in)
	return nil
}

// RestoredWaiting implements agent.WaitingRestorer: the next executor's.
func (x transferExecutor) RestoredWaiting(ex *agent.Execution) {
	if wr, ok := x.next.(agent.WaitingRestorer); ok {
		wr.RestoredWaiting(ex)
	}
}

// Reattach implements agent.Reattacher for a task restored running: the
// next executor's (the forward executor follows its upstream task again);
// a transfer, or a task of an executor without Reattach, ends failed.
func (x transferExecutor) Reattach(ctx context.Context, ex *agent.Execution) error {
	if _, _, transfer := x.isTransfer(ex.Message()); !transfer {
		if ra, ok := x.next.(agent.Reattacher); ok {
			return ra.Reattach(ctx, ex)
		}
	}
	ex.Fail(agent.RestartedText)
	return nil
}

// approveFiles is the approval of a transfer: refused at once when the
// receiver cannot take it (names, sizes, count, free space: no popup for
// what would fail anyway), then the grant's files policy, then the owner
// (KindFiles: sender, each path escaped, total size, the folder).
func (n *Node) approveFiles(ctx context.Context, t agent.TaskApproval, g pairing.Grant, in *incoming, err error) agent.Decision {
	if err != nil {
		return agent.Decision{Reason: err.Error()}
	}
	recv, err := n.recv.receiver()
	if err != nil {
		return agent.Decision{Reason: "this device cannot receive files: " + err.Error()}
	}
	// The free space is held from now on, while the owner decides, so a
	// transfer admitted later counts it (Reserve); it is released when the
	// turn ends, unless Begin took it over by then.
	id := string(t.TaskID)
	if err := recv.Reserve(id, in.manifest); err != nil {
		return agent.Decision{Reason: refusalText(err)}
	}
	context.AfterFunc(ctx, func() { recv.Release(id) })
	a := approvalFrom(t.Caller, g)
	a.Kind = KindFiles
	a.Summary = t.Summary
	a.TaskID = string(t.TaskID)
	a.Expires = t.Deadline // the engine's, kept across a restart
	if dec, ok := n.decideByPolicy(a, g.FilesPolicy, fmt.Sprintf("files from %q are refused by policy", g.Name)); ok {
		dec.Caller = withGrant(t.Caller, g) // a transfer restored from the database runs under the grant as it is now
		return dec
	}
	a.Detail = truncate(agent.MessageText(t.Message), maxDetail)
	a.TotalSize = in.manifest.Total()
	a.Dir = recv.Dir()
	for i, e := range in.manifest.Files {
		if i == maxApprovalFiles {
			a.FilesMore = len(in.manifest.Files) - i
			break
		}
		a.Files = append(a.Files, ApprovalFile{Path: boundRunes(textsafe.EscapeInvisible(e.Path), maxApprovalPath), Size: e.Size, MediaType: e.MediaType})
	}
	d, qerr := n.approvals.askQueued(ctx, a, t.Queued)
	if qerr != nil {
		return agent.Decision{Reason: d.Reason}
	}
	if d.Approved() {
		if reason := n.grantGone(g.ID); reason != "" {
			return agent.Decision{Reason: reason}
		}
		if d.Always {
			err := n.asActor(changeKey(pairing.ChangeFilesPolicy, g.ID), actor{by: d.By, where: d.Where}, func() error {
				return n.grants.SetFilesPolicy(g.ID, pairing.PolicyAllow)
			})
			if err != nil {
				n.log.Warn("cannot set the grant's files policy to allow", "grant_id", g.ID, "err", err)
			} else {
				n.log.Info("files from this grant allowed by the owner", "grant_id", g.ID)
			}
		}
	}
	return agent.Decision{Approved: d.Approved(), ByOwner: d.ByOwner, Reason: d.Reason, Caller: withGrant(t.Caller, g)}
}

// boundRunes cuts s to n runes with "…".
func boundRunes(s string, n int) string {
	rs := []rune(s)
	if len(rs) <= n {
		return s
	}
	return string(rs[:n-1]) + "…"
}

// refusalText says a receiver refusal or failure for the sender, in words
// that name the file (files.FileError) and never the receive folder's
// absolute path.
func refusalText(err error) string {
	var fe *files.FileError
	named := errors.As(err, &fe)
	var se *files.SpaceError
	switch {
	case errors.Is(err, files.ErrHashMismatch) && named:
		return fmt.Sprintf("%q changed on the sending computer while it was being sent (its SHA-256 is no longer the one announced), so it was not kept: send it again", fe.Path)
	case errors.As(err, &se):
		return "this device has " + err.Error()
	case errors.Is(err, files.ErrNoSpace) && named:
		return fmt.Sprintf("this device ran out of space while receiving %q (something else filled its disk); the partial file is removed", fe.Path)
	case errors.Is(err, files.ErrTooMany), errors.Is(err, files.ErrTooLarge):
		return "over this device's limits: " + err.Error()
	case errors.Is(err, files.ErrBadName):
		return "a file name is refused: " + strings.TrimPrefix(err.Error(), files.ErrBadName.Error()+": ")
	}
	return err.Error()
}

// receiveFiles is the approved transfer task: Begin, the inline bytes
// saved in process, the rest awaited from the handler; completed with the
// result artifact, failed with the reason, or (ctx canceled) canceled with
// the partial files removed. The transfer is forgotten when the task ends.
func (n *Node) receiveFiles(ctx context.Context, ex *agent.Execution, in *incoming) {
	recv, err := n.recv.receiver()
	if err != nil {
		ex.Fail("this device cannot receive files: " + err.Error())
		return
	}
	id := string(ex.TaskID())
	caller := ex.Caller()
	sender := ""
	if caller != nil {
		sender = caller.Grant.ID
	}
	tr, err := recv.Begin(id, sender, in.manifest)
	if err != nil {
		recv.Release(id)
		ex.Fail(refusalText(err))
		return
	}
	defer recv.Forget(id)
	lt := &liveTransfer{tr: tr, started: time.Now().UTC()}
	if caller != nil {
		lt.peer = caller.Grant.Name
	}
	n.recv.mu.Lock()
	if n.recv.live == nil {
		n.recv.live = make(map[string]*liveTransfer)
	}
	n.recv.live[id] = lt
	n.recv.mu.Unlock()
	defer func() {
		n.recv.mu.Lock()
		delete(n.recv.live, id)
		n.recv.mu.Unlock()
	}()
	for i, data := range in.inline {
		if data == nil {
			continue
		}
		if err := putInline(ctx, recv, id, i, data); err != nil {
			tr.Cancel()
			ex.Fail(fmt.Sprintf("%q: %v", in.manifest.Files[i].Path, err))
			return
		}
	}
	m := in.manifest
	// The sender reads the status and the result: one of the owner's
	// meshtray devices the folder's path, a phone or an agent not its
	// absolute path (dirFor).
	dir := dirFor(caller, recv.Dir())
	ex.Working(fmt.Sprintf("receiving %s (%s) into %s", fileCount(len(m.Files)), humanize.IBytes(uint64(m.Total())), dir))
	res, err := n.waitTransfer(ctx, tr)
	if ctx.Err() != nil {
		tr.Cancel()
		return // the engine ends the task canceled
	}
	if len(res.Files) > 0 || err == nil {
		shown := res
		shown.Dir = dir
		if data, jerr := resultData(shown); jerr == nil {
			ex.Artifact(resultArtifact, a2a.DataPart{Data: data})
		}
	}
	if err != nil {
		ex.Fail(refusalText(err))
		return
	}
	n.noteReceived(caller, id, res)
	ex.Complete(fmt.Sprintf("saved %s in %s", fileCount(len(res.Files)), dir))
}

// dirFor is the receive folder dir as the sender p reads it: the absolute
// path for one of the owner's meshtray devices (a grant with a device ID,
// as the popup and the tray show it), else shownDir: a phone's page or an
// agent is not the owner's own screen.
func dirFor(p *pairing.Principal, dir string) string {
	if p != nil && p.Grant.PeerID != "" {
		return dir
	}
	return shownDir(dir)
}

// shownDir is dir without the absolute path: relative to the home folder
// ("~/Downloads/meshtray"), else its name alone ("meshtray").
func shownDir(dir string) string {
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		if rel, err := filepath.Rel(home, dir); err == nil && rel != "." && rel != ".." &&
			!strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel) {
			return "~" + string(filepath.Separator) + rel
		}
	}
	return filepath.Base(dir)
}

// IncomingTransfer is one transfer this device is receiving now (GET
// /files/incoming): its task, the sender, how much arrived and when the
// last byte did. `meshtray cancel TASK` (POST
// /files/incoming/{task}/cancel) ends it.
type IncomingTransfer struct {
	TaskID   string    `json:"task_id"`
	Peer     string    `json:"peer"`
	Files    int       `json:"files"`
	Size     int64     `json:"size"`     // bytes announced
	Received int64     `json:"received"` // bytes arrived so far (files.FileStatus.Arrived: written, not all fsynced yet)
	Started  time.Time `json:"started"`
	LastByte time.Time `json:"last_byte,omitzero"` // the last progress; zero (left out) before the first byte
}

// IncomingFiles lists the transfers under way, oldest first.
func (n *Node) IncomingFiles() []IncomingTransfer {
	out := []IncomingTransfer{}
	if n.recv == nil {
		return out
	}
	n.recv.mu.Lock()
	defer n.recv.mu.Unlock()
	for id, lt := range n.recv.live {
		st := lt.tr.Status()
		it := IncomingTransfer{TaskID: id, Peer: lt.peer, Files: len(st.Files), Started: lt.started, LastByte: st.LastByte}
		for _, f := range st.Files {
			it.Size += f.Size
			if f.Saved != nil {
				it.Received += f.Size
			} else {
				it.Received += f.Arrived
			}
		}
		out = append(out, it)
	}
	slices.SortFunc(out, func(a, b IncomingTransfer) int { return a.Started.Compare(b.Started) })
	return out
}

// errNoIncoming: no transfer under way has that task ID.
var errNoIncoming = errors.New("no transfer is being received under that task")

// CancelIncoming ends the incoming transfer of task id as the owner: the
// task ends canceled (its state on disk first), the partial files are
// removed and the free space it held is free again. The sender reads
// that the owner canceled it.
func (n *Node) CancelIncoming(id string) error {
	n.recv.mu.Lock()
	_, ok := n.recv.live[id]
	n.recv.mu.Unlock()
	if !ok || n.agent == nil {
		return fmt.Errorf("%w: %q (meshtray status lists them)", errNoIncoming, clipID(id))
	}
	if !n.agent.CancelTask(a2a.TaskID(id), "canceled by the owner of the receiving device; what had arrived is removed") {
		return fmt.Errorf("%w: %q (it just ended)", errNoIncoming, clipID(id))
	}
	n.log.Info("incoming transfer canceled by the owner", "task", id)
	return nil
}

// waitTransfer waits for tr to end, failing it when no byte arrived for
// the idle bound.
func (n *Node) waitTransfer(ctx context.Context, tr *files.Transfer) (files.Result, error) {
	idle := n.recv.idle
	tick := time.NewTicker(min(idle/4, 15*time.Second))
	defer tick.Stop()
	last, moved := progressOf(tr.Status()), time.Now()
	for {
		select {
		case <-tr.Done():
			return tr.Wait(ctx)
		case <-ctx.Done():
			return files.Result{}, ctx.Err()
		case <-tick.C:
			if p := progressOf(tr.Status()); p != last {
				last, moved = p, time.Now()
			} else if time.Since(moved) > idle {
				tr.Cancel()
				res, _ := tr.Wait(ctx)
				return res, fmt.Errorf("the sender sent nothing for %s", idle)
			}
		}
	}
}

// progressOf is the bytes of a transfer arrived so far (a long upload
// moves it before its PUT ends).
func progressOf(s files.Status) int64 {
	var n int64
	for _, f := range s.Files {
		n += f.Arrived
		if f.Saved != nil {
			n += f.Size + 1
		}
	}
	return n
}

// putInline saves file i's inline bytes through the handler's own checks
// (one whole-file PUT, in process).
func putInline(ctx context.Context, recv *files.Receiver, id string, i int, data []byte) error {
	req := httptest.NewRequestWithContext(ctx, http.MethodPut, files.Prefix+id+"/"+strconv.Itoa(i), bytes.NewReader(data))
	req.ContentLength = int64(len(data))
	rec := httptest.NewRecorder()
	recv.Handler(nil).ServeHTTP(rec, req)
	if rec.Code == http.StatusCreated {
		return nil
	}
	var body struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	return &files.StatusError{Code: rec.Code, Message: body.Error}
}

// fileCount is "1 file" or "N files".
func fileCount(n int) string {
	if n == 1 {
		return "1 file"
	}
	return fmt.Sprintf("%d files", n)
}

// resultData is res as the DataPart object of the result artifact (its
// Dir as the sender reads it: dirFor).
func resultData(res files.Result) (map[string]any, error) {
	if res.Files == nil {
		res.Files = []files.Saved{}
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

// noteReceived keeps a completed transfer for GET /files/received and
// tells subscribers (EventFiles: the tray's notification).
func (n *Node) noteReceived(caller *pairing.Principal, id string, res files.Result) {
	rt := ReceivedTransfer{TaskID: id, Result: res, Finished: time.Now().UTC().Format(time.RFC3339)}
	if caller != nil {
		rt.Peer, rt.DeviceID = caller.Grant.Name, caller.Grant.PeerID
	}
	n.recv.mu.Lock()
	n.recv.received = append([]ReceivedTransfer{rt}, n.recv.received...)
	if len(n.recv.received) > maxReceivedKept {
		n.recv.received = n.recv.received[:maxReceivedKept]
	}
	n.recv.mu.Unlock()
	n.log.Info("files received", "task", id, "peer", rt.Peer, "files", len(res.Files), "dir", res.Dir)
	n.events.Publish(EventFiles)
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
