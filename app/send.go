package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	agent "meshtray/a2a"
	"meshtray/a2a/delegate"
	"meshtray/files"
	"meshtray/jsonout"
	"meshtray/pairing"
	"meshtray/store"
	"meshtray/textsafe"
)

// Sending files to a paired device: one A2A task on the receiver
// (files/doc.go), then the bytes over the same pinned origin.

// maxSendPaths bounds the paths of one POST /files/send (a folder counts
// as one; the receiver bounds its files).
const maxSendPaths = 1000

// ErrBrowserOnly: the device holds a grant of ours but offers no A2A
// endpoint (a phone's browser); its files are offered on its page instead.
var ErrBrowserOnly = errors.New("the device is reached only through its browser page")

// sendRoutes mounts POST /files/send (the local owner only: it reads this
// device's files), GET /files/received and the transfers being received.
//
//	POST /files/send                 SendRequest -> NDJSON SendEvent lines, the last a result
//	GET  /files/received             -> [ReceivedTransfer], newest first
//	GET  /files/incoming             -> [IncomingTransfer], oldest first
//	POST /files/incoming/{id}/cancel -> 204 (404: no such transfer under way)
func (n *Node) sendRoutes(mux *http.ServeMux) {
	local, owner := n.localRoutes(mux), n.ownerRoutes(mux)
	owner("POST /files/send", func(w http.ResponseWriter, r *http.Request) {
		var req SendRequest
		if !readJSON(w, r, &req) {
			return
		}
		// Refusals before anything is sent (no such device, a path that
		// cannot be read) are plain HTTP errors; from the first event on
		// the answer is the stream.
		var stream *jsonout.Stream
		var mu sync.Mutex
		done := false // the result line went out: nothing may follow it
		emit := func(ev SendEvent) {
			mu.Lock()
			defer mu.Unlock()
			if done {
				return
			}
			if stream == nil {
				stream = jsonout.NewStream(w)
			}
			_ = stream.Send(ev)
			done = ev.Type == SendEventResult
		}
		res, err := n.SendFiles(r.Context(), req, emit)
		var nothing *NothingToSendError
		if errors.As(err, &nothing) && stream == nil {
			body := map[string]any{"error": nothing.Msg}
			if nothing.Skipped != nil {
				body["skipped"] = nothing.Skipped
			}
			if nothing.Refused != nil {
				body["refused"] = nothing.Refused
			}
			jsonout.Write(w, http.StatusBadRequest, body)
			return
		}
		if err != nil && stream == nil {
			writeError(w, sendStatus(err), err)
			return
		}
		if err != nil && res.State == "" {
			res.State, res.Message = string(a2a.TaskStateFailed), err.Error()
		}
		emit(SendEvent{Type: SendEventResult, State: res.State, Message: res.Message, Result: &res})
	})
	local("GET /files/received", func(w http.ResponseWriter, r *http.Request) {
		jsonout.Write(w, http.StatusOK, n.ReceivedFiles())
	})
	local("GET /files/incoming", func(w http.ResponseWriter, r *http.Request) {
		jsonout.Write(w, http.StatusOK, n.IncomingFiles())
	})
	owner("POST /files/incoming/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		if err := n.CancelIncoming(r.PathValue("id")); err != nil {
			writeError(w, http.StatusNotFound, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// sendStatus maps the refusals of SendFiles to HTTP statuses.
func sendStatus(err error) int {
	switch {
	case errors.Is(err, ErrNoPeer):
		return http.StatusNotFound
	case errors.Is(err, ErrBrowserOnly):
		return http.StatusConflict
	}
	if s := agentStatus(err); s != http.StatusInternalServerError {
		return s
	}
	return statusFor(err)
}

// SendFiles sends the files and folders of req.Paths to the paired device
// req.Device and follows the transfer to its end: the announcement is one
// A2A message (message/send or message/stream to the device's endpoint,
// pinned to its certificate, with the grant it issued us), which the owner
// there approves; then the bytes go up with files.Client (streamed from
// disk, resumed after a cut), progress reported to emit. It returns the
// outcome; an error (with an empty State) when nothing was sent: an
// unknown device, a path that cannot be read, the device unreachable. A
// device that holds a grant of ours but offers no A2A endpoint (a browser)
// gets the files offered on its page (offerFiles). ctx ending cancels the
// task at the receiver.
func (n *Node) SendFiles(ctx context.Context, req SendRequest, emit func(SendEvent)) (SendResult, error) {
	if emit == nil {
		emit = func(SendEvent) {}
	}
	if len(req.Paths) == 0 {
		return SendResult{}, badRequest("no paths to send")
	}
	if len(req.Paths) > maxSendPaths {
		return SendResult{}, badRequest("%d paths; at most %d (send a folder instead)", len(req.Paths), maxSendPaths)
	}
	for _, p := range req.Paths {
		if !filepath.IsAbs(p) {
			return SendResult{}, badRequest("path %q is not absolute (the node reads it, not the client)", clipID(p))
		}
	}
	h, issued, err := n.sendTarget(req.Device)
	if err != nil {
		return SendResult{}, err
	}
	if h == nil {
		if err := offerable(issued); err != nil {
			return SendResult{}, err
		}
	}
	srcs, skipped, err := files.Collect(req.Paths...)
	if err != nil {
		return SendResult{}, badRequest("%v", err)
	}
	if len(srcs) == 0 {
		return SendResult{}, nothingToSend("the folders hold no regular files", skipped, files.NotSent{})
	}
	var refused files.NotSent
	if h != nil {
		// A name the device would refuse holds back only its file.
		if srcs, refused = refuseNames(srcs); refused.Count > 0 && len(srcs) == 0 {
			return SendResult{}, nothingToSend("the device would refuse every name: "+refusedList(refused), skipped, refused)
		}
		if refused.Count > 0 {
			emit(SendEvent{Type: SendEventRefused, Refused: &refused})
		}
	}
	if skipped.Count > 0 {
		emit(SendEvent{Type: SendEventSkipped, Skipped: &skipped})
	}
	res, err := n.sendSources(ctx, h, issued, srcs, emit)
	if skipped.Count > 0 {
		res.Skipped = &skipped
	}
	if refused.Count > 0 {
		res.Refused = &refused
	}
	return res, err
}

// NothingToSendError is SendFiles' refusal when no file is left to send:
// Msg says why; Skipped (links, special files of the folders) and Refused
// (names the device would refuse) are what was left out, nil when empty,
// as a SendResult has them. POST /files/send answers it 400 with both
// beside "error": {"error":"...","skipped":{...},"refused":{...}}.
type NothingToSendError struct {
	Msg              string
	Skipped, Refused *files.NotSent
}

func (e *NothingToSendError) Error() string { return e.Msg }

// Unwrap makes it a bad request (statusFor: 400).
func (e *NothingToSendError) Unwrap() error { return &badRequestError{errors.New(e.Msg)} }

// nothingToSend is the NothingToSendError for why, naming the skipped
// entries too (they are why a folder of links sends nothing).
func nothingToSend(why string, skipped, refused files.NotSent) *NothingToSendError {
	e := &NothingToSendError{Msg: "nothing to send: " + why}
	if skipped.Count > 0 {
		e.Skipped = &skipped
		e.Msg += fmt.Sprintf("; %d %s of the folders skipped (links and special files are not sent)", skipped.Count, plural(skipped.Count, "entry", "entries"))
	}
	if refused.Count > 0 {
		e.Refused = &refused
	}
	return e
}

// plural is one or many by n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// refusedList is the refused files as one line: "a\b.txt (backslash), …",
// each path as it is (invisible runes escaped by textsafe, nothing else:
// the JSON or terminal that shows it escapes what it must).
func refusedList(r files.NotSent) string {
	var b strings.Builder
	for i, e := range r.Entries {
		if i == 5 {
			fmt.Fprintf(&b, ", and %d more", r.Count-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (%s)", textsafe.EscapeInvisible(e.Path), e.Why)
	}
	return b.String()
}

// sendSources sends srcs to the device held as h, or offers them to the
// device of the issued grant when h is nil (SendFiles).
func (n *Node) sendSources(ctx context.Context, h *pairing.Held, issued *pairing.Grant, srcs []files.Source, emit func(SendEvent)) (SendResult, error) {
	if h == nil {
		return n.offerFiles(ctx, issued, srcs, emit)
	}
	// The announcement must fit the receiver's A2A request body limit
	// (a2a.DefaultMaxBodyBytes, 1 MiB; a few hundred bytes a file).
	if b, err := json.Marshal(a2a.NewMessage(a2a.MessageRoleUser, announceParts(files.ManifestOf(srcs))...)); err == nil && len(b) > agent.DefaultMaxBodyBytes-4<<10 {
		return SendResult{}, badRequest("%d files are too many for one transfer (its announcement is %d KiB, over the 1 MiB an A2A request may have); send them in parts", len(srcs), len(b)>>10)
	}
	sess, err := n.deleg.agents.Open(ctx, h.PeerID)
	if err != nil {
		return SendResult{}, err
	}
	defer sess.Close()
	s := &sendRun{n: n, h: *h, sess: sess, srcs: srcs, emit: emit}
	return s.run(ctx)
}

// sendTarget finds the device ref names among the grants held (a device
// we can call) or, failing that, issued (a device that only calls us, such
// as a phone's page: issued is its grant, h nil).
func (n *Node) sendTarget(ref string) (h *pairing.Held, issued *pairing.Grant, err error) {
	ref = strings.TrimSpace(ref)
	if ref == "" {
		return nil, nil, badRequest("no device named")
	}
	held := matchDevices(ref, n.grants.ListHeld(), func(x pairing.Held) string { return x.Name }, func(x pairing.Held) string { return x.PeerID })
	switch len(held) {
	case 1:
		return &held[0], nil, nil
	case 0:
	default:
		return nil, nil, badRequest("%q names %d paired devices: give more of the device ID (meshtray devices)", clipID(ref), len(held))
	}
	// A phone paired through its page holds an issued grant with no device
	// ID: it is found by its name.
	var active []pairing.Grant
	for _, g := range n.grants.List() {
		if g.Status == pairing.StatusActive {
			active = append(active, g)
		}
	}
	gs := matchDevices(ref, active, func(g pairing.Grant) string { return g.Name }, func(g pairing.Grant) string { return g.PeerID })
	switch len(gs) {
	case 1:
		return nil, &gs[0], nil
	case 0:
		return nil, nil, fmt.Errorf("%w named %q among the paired devices (meshtray devices lists them)", ErrNoPeer, clipID(ref))
	}
	return nil, nil, badRequest("%q names %d paired devices: give more of the device ID (meshtray devices)", clipID(ref), len(gs))
}

// sendRun is one transfer being sent.
type sendRun struct {
	n    *Node
	h    pairing.Held
	sess *delegate.Session
	srcs []files.Source
	emit func(SendEvent)

	recOnce sync.Once // record, once; a second caller waits for the first

	mu      sync.Mutex
	taskID  a2a.TaskID
	task    *a2a.Task // last snapshot seen
	state   a2a.TaskState
	status  string // text of the last status message
	ready   chan struct{}
	readyOK bool
	final   chan struct{}
	ended   bool
	result  *files.Result
	logged  bool // the task is in the node's record of sends under way (store.Sending)
}

// record puts the receiver's task id in the node's record of sends under
// way (store.PutSending, synced), once: a node killed before the send ends
// cancels it at its next start (cancelStaleSends). onEvent calls it before
// it applies the event that names the task, so the row is on disk before
// anything that event starts (the upload).
func (s *sendRun) record(id a2a.TaskID) {
	s.recOnce.Do(func() {
		if s.n.db == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), sendingTimeout)
		defer cancel()
		e := store.Sending{Device: s.h.PeerID, TaskID: string(id), Name: s.h.Name, Started: time.Now()}
		if err := s.n.db.PutSending(ctx, e); err != nil {
			s.n.log.Warn("cannot record a send under way (a kill now leaves it to the receiver's idle bound)", "task", id, "err", err)
		}
		s.mu.Lock()
		s.logged = true
		s.mu.Unlock()
	})
}

// unrecord drops the send from the record once it is over.
func (s *sendRun) unrecord() {
	s.mu.Lock()
	id, logged := s.taskID, s.logged
	s.mu.Unlock()
	if logged {
		s.n.unrecordSend(s.h.PeerID, string(id))
	}
}

// sendRetries is files.Client.Retries for a send.
const sendRetries = 32

// sendFollowPause is the first pause between tasks/get polls once the
// exchange lost contact; it doubles up to sendFollowMax.
const (
	sendFollowPause = 500 * time.Millisecond
	sendFollowMax   = 5 * time.Second
)

func (s *sendRun) run(ctx context.Context) (SendResult, error) {
	s.ready = make(chan struct{})
	s.final = make(chan struct{})
	m := files.ManifestOf(s.srcs)
	msg := a2a.NewMessage(a2a.MessageRoleUser, announceParts(m)...)

	exchangeDone := make(chan error, 1)
	exchanged := make(chan struct{})
	xctx, stopExchange := context.WithCancel(ctx)
	// The exchange reports through s.onEvent to the caller's emit: it must
	// have returned before run does, or it writes to a stream whose
	// handler is gone.
	defer func() { stopExchange(); <-exchanged; s.unrecord() }()
	go func() {
		defer close(exchanged)
		err := s.sess.Exchange(xctx, msg, s.onEvent)
		if delegate.AgentRestarting(err) {
			s.receiverStopping()
		}
		exchangeDone <- err
	}()

	// Wait for the receiver to take the bytes, or for the task to end.
	var xerr error
	select {
	case <-s.ready:
	case <-s.final:
	case xerr = <-exchangeDone:
		exchangeDone = nil
	case <-ctx.Done():
		return s.abandon(ctx.Err())
	}
	s.mu.Lock()
	id, ready := s.taskID, s.readyOK
	s.mu.Unlock()
	if id == "" {
		if xerr == nil {
			xerr = errors.New("the device answered without a task")
		}
		return SendResult{}, xerr
	}
	if !ready && !s.isEnded() {
		// The exchange ended (contact lost) before the task settled:
		// follow it with tasks/get.
		if err := s.follow(ctx, id, func() bool { return s.isReady() || s.isEnded() }); err != nil {
			return s.abandon(err)
		}
	}
	var upErr error
	if s.isReady() && !s.isEnded() {
		upErr = s.upload(ctx, string(id))
		if ctx.Err() != nil {
			return s.abandon(ctx.Err())
		}
		if upErr != nil && !s.isEnded() {
			// The upload gave up for good: the receiver's task would
			// wait for bytes that never come.
			s.n.log.Info("files: upload failed; canceling the transfer", "task", id, "err", upErr)
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			if t, err := s.sess.Cancel(cctx, id); err == nil && t != nil {
				s.onEvent(t)
			}
			cancel()
		}
	}
	// Wait for the final state: the exchange brings it, or tasks/get.
	if !s.isEnded() {
		if exchangeDone != nil {
			select {
			case <-s.final:
			case <-exchangeDone:
			case <-ctx.Done():
				return s.abandon(ctx.Err())
			}
		}
		if !s.isEnded() {
			if err := s.follow(ctx, id, s.isEnded); err != nil {
				return s.abandon(err)
			}
		}
	}
	res := s.outcome()
	if upErr != nil && res.State == string(a2a.TaskStateCanceled) {
		// The upload gave up and canceled the task: its error is why. A
		// task the receiver ended itself (failed: it restarted; rejected)
		// says why in its own message, and the upload's error (a 404
		// from a receiver that no longer knows the transfer) adds noise.
		res.Message = strings.TrimSpace(res.Message + " (sending: " + upErr.Error() + ")")
	}
	return res, nil
}

// abandon ends a send the caller stopped waiting for (or that lost its
// device): the receiver's task is canceled so it keeps no partial files.
func (s *sendRun) abandon(cause error) (SendResult, error) {
	s.mu.Lock()
	id := s.taskID
	s.mu.Unlock()
	// This node stops (a clean stop: SendFiles' request context is the
	// node's): the transfer failed here, as when the node is killed (the
	// CLI's ErrNodeLost), not "canceled by the caller" as the receiver
	// answers the cancel.
	nodeStops := s.n.ctx != nil && s.n.ctx.Err() != nil
	if id != "" && !s.isEnded() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if t, err := s.sess.Cancel(ctx, id); err == nil && t != nil && !nodeStops {
			s.onEvent(t)
		} else if err != nil {
			s.n.log.Info("files: cannot cancel the transfer at the receiver (unless it ended there, the receiver ends it after its idle bound)", "task", id, "err", err)
		}
		cancel()
	}
	res := s.outcome()
	switch {
	case nodeStops:
		res.State, res.Message = string(a2a.TaskStateFailed), SenderStoppedText
	case res.State == "" || !a2a.TaskState(res.State).Terminal():
		res.State = string(a2a.TaskStateCanceled)
		res.Message = "stopped: " + cause.Error()
	}
	return res, cause
}

// SenderStoppedText is the outcome of a send whose own node stopped
// cleanly during the transfer (it cancels the transfer at the receiving
// device as it stops).
const SenderStoppedText = "the local meshtray node stopped during the transfer and canceled it at the receiving device, which removes what it had received: start the node and run meshtray send again (it starts over)"

// follow polls the task until done() or it ends, through short losses of
// contact (a cut connection resumes); ctx bounds it.
func (s *sendRun) follow(ctx context.Context, id a2a.TaskID, done func() bool) error {
	pause := sendFollowPause
	for !done() {
		t, err := s.sess.Task(ctx, id)
		if err == nil {
			s.onEvent(t)
			pause = sendFollowPause
			if done() {
				return nil
			}
		} else if ctx.Err() != nil {
			return ctx.Err()
		} else if errors.Is(err, delegate.ErrAgentUnauthorized) || errors.Is(err, delegate.ErrAgentRefused) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(pause*2, sendFollowMax)
	}
	return nil
}

func (s *sendRun) isReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readyOK
}

func (s *sendRun) isEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// onEvent applies one event of the receiver's task: a state line per
// change; working with a status message means the receiver began the
// transfer (files/doc.go); a terminal state carries the result artifact.
func (s *sendRun) onEvent(ev a2a.Event) {
	// The first event naming the task records it before it is applied:
	// the event may be the one that lets the upload start (s.ready).
	var first a2a.TaskID
	switch v := ev.(type) {
	case *a2a.Task:
		first = v.ID
	case *a2a.TaskStatusUpdateEvent:
		first = v.TaskID
	}
	s.mu.Lock()
	if first != "" && (s.taskID == "" || s.taskID == first) {
		s.taskID = first
		s.mu.Unlock()
		s.record(first)
		s.mu.Lock()
	}
	var st *a2a.TaskStatus
	switch v := ev.(type) {
	case *a2a.Task:
		if s.taskID == "" {
			s.taskID = v.ID
		}
		s.task = v
		st = &v.Status
		for _, art := range v.Artifacts {
			s.takeArtifactLocked(art)
		}
	case *a2a.TaskStatusUpdateEvent:
		if s.taskID == "" {
			s.taskID = v.TaskID
		}
		st = &v.Status
	case *a2a.TaskArtifactUpdateEvent:
		s.takeArtifactLocked(v.Artifact)
	case *a2a.Message:
		// An agent answering with a message is not a receiving meshtray.
		st = &a2a.TaskStatus{State: a2a.TaskStateFailed, Message: v}
	}
	if st == nil || s.ended {
		s.mu.Unlock()
		return
	}
	text := statusText(st.State, st.Message)
	changed := st.State != s.state || text != s.status
	s.state, s.status = st.State, text
	if st.State == a2a.TaskStateWorking && st.Message != nil && !s.readyOK {
		s.readyOK = true
		close(s.ready)
	}
	if st.State.Terminal() || st.State == a2a.TaskStateInputRequired || st.State == a2a.TaskStateAuthRequired {
		s.ended = true
		close(s.final)
	}
	s.mu.Unlock()
	if changed {
		s.emit(SendEvent{Type: SendEventState, State: string(st.State), Message: text})
	}
}

// receiverStopping says that the receiver stops with its tasks kept
// (delegate.AgentRestarting: a clean stop, for an update or a reboot; its
// stream ends with that error, not a final state). The send goes on as
// after a crash of the receiver: run follows the task (tasks/get, retried
// with backoff) until the receiver is back, where a transfer waiting for
// its owner's approval is asked again and one that was uploading ends
// failed (its partial files removed: ReceiverRestartedText).
func (s *sendRun) receiverStopping() {
	s.mu.Lock()
	if s.ended || s.taskID == "" {
		s.mu.Unlock()
		return
	}
	state := s.state
	// The next snapshot (once the receiver is back) differs from this
	// line, so it is said again.
	s.status = ReceiverRestartingText
	s.mu.Unlock()
	s.emit(SendEvent{Type: SendEventState, State: string(state), Message: ReceiverRestartingText})
}

// takeArtifactLocked reads the result artifact (a DataPart holding a
// files.Result).
func (s *sendRun) takeArtifactLocked(art *a2a.Artifact) {
	if art == nil || art.Name != resultArtifact {
		return
	}
	for _, p := range art.Parts {
		dp, ok := p.(a2a.DataPart)
		if !ok {
			continue
		}
		b, err := json.Marshal(dp.Data)
		if err != nil {
			continue
		}
		var r files.Result
		if json.Unmarshal(b, &r) == nil {
			s.result = &r
		}
	}
}

// statusText is the text of the receiver's status message said for the
// sender, on one line, bounded: without the state word the receiver's
// engine puts in front ("rejected: denied by the owner" is shown after
// the state already), and the receiver's restart (agent.RestartedText,
// the receiver's own words) said as what it means to the sender.
func statusText(state a2a.TaskState, m *a2a.Message) string {
	text := strings.ReplaceAll(agent.MessageText(m), "\n", " ")
	text = strings.TrimPrefix(text, string(state)+": ")
	switch {
	case state == a2a.TaskStateFailed && strings.HasPrefix(text, agent.RestartedText):
		text = ReceiverRestartedText + strings.TrimPrefix(text, agent.RestartedText)
	case state == a2a.TaskStateCanceled && text == agent.ShutdownText:
		text = ReceiverShutDownText
	}
	return truncate(text, 1024)
}

// ReceiverRestartingText is what a sender reads while the receiving
// device restarts (a clean stop: it keeps the transfer): the send waits
// for it to be back.
const ReceiverRestartingText = "the receiving device is restarting: waiting for it to be back"

// ReceiverRestartedText is what a sender reads when the receiving node
// restarted during the transfer (a crash, a kill): the receiver's task
// ended failed and its partial files are removed, so a new send starts
// over. ReceiverShutDownText is the same for a clean stop (an update, a
// reboot), which the sender hears as it happens.
const (
	ReceiverRestartedText = "the receiving device restarted during the transfer and removed what it had received: send again (it starts over)"
	ReceiverShutDownText  = "the receiving device shut down during the transfer and removes what it had received: send again once it is back (it starts over)"
)

// outcome is the SendResult of what was seen.
func (s *sendRun) outcome() SendResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	res := SendResult{TaskID: string(s.taskID), State: string(s.state), Message: s.status, Files: []files.Saved{}}
	if s.result != nil {
		res.Dir = s.result.Dir
		if s.result.Files != nil {
			res.Files = s.result.Files
		}
	}
	return res
}

// upload sends the bytes of transfer id to the device's origin with the
// grant it issued us, pinned to its certificate.
func (s *sendRun) upload(ctx context.Context, id string) error {
	base := s.sess.Origin()
	if base == "" {
		return errors.New("the device's endpoint has no origin")
	}
	tr := files.NewTransport(pairing.PinnedTLSConfig(s.h.Fingerprint))
	defer tr.CloseIdleConnections()
	hdr := http.Header{}
	hdr.Set("Authorization", "Bearer "+s.h.Token)
	c := &files.Client{
		HTTP:    &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		BaseURL: base,
		Header:  hdr,
		// A cut resumes for about 2.5 minutes of trouble per file (backoff
		// 0.2 s doubling to 5 s): a laptop's Wi-Fi roaming, a router
		// restarting; the receiver's task waits 10 minutes for bytes.
		Retries: sendRetries,
		Logger:  s.n.log.With("pkg", "files"),
		Progress: func(p files.Progress) {
			s.emit(SendEvent{Type: SendEventProgress, File: p.Index, Path: s.srcs[p.Index].Entry.Path,
				Done: p.FileDone, Size: p.FileTotal, TotalDone: p.Done, Total: p.Total})
		},
	}
	// Stop uploading as soon as the receiver's task ends (denied meanwhile,
	// canceled there): its files would get 410 anyway.
	uctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.final:
			cancel()
		case <-uctx.Done():
		}
	}()
	_, err := c.Upload(uctx, id, s.srcs)
	if err != nil && ctx.Err() == nil && s.isEnded() {
		return nil // the task's own end says why
	}
	return err
}
