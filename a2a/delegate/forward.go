package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	agent "meshtray/a2a"
	"meshtray/pairing"
	"meshtray/store"
)

// The forward executor: meshtray as the consent layer in front
// of an A2A agent that has none (the person's own agent on localhost, for
// instance). The task engine asks the owner first, exactly as for the node
// executor; an approved task is relayed to the upstream agent, and what
// the upstream reports travels back to the original caller.

// Defaults of ForwardOptions.
const (
	DefaultForwardCardTTL    = time.Minute
	DefaultForwardContexts   = 1024
	DefaultForwardCancelWait = 3 * time.Second
	DefaultForwardSweep      = 10 * time.Second
	maxParked                = 1024
	// forwardLearnWait is how long a cancel waits for the upstream's task
	// id still in flight (with CancelWait it stays within the engine's
	// DefaultCancelWait).
	forwardLearnWait = time.Second
)

// ForwardOptions configure a ForwardExecutor.
type ForwardOptions struct {
	// URL is the upstream agent: its base URL (the card is at agent.CardPath
	// below it) or its card's URL. CheckAgentURL's rules apply (https, or
	// http to loopback or, with IsTailnetAddr, a tailnet peer's address).
	URL string
	// IsTailnetAddr: see AgentsOptions.IsTailnetAddr; nil means plain
	// http to loopback only.
	IsTailnetAddr func(netip.Addr) bool
	// Token returns the bearer token for the upstream, read at each turn;
	// nil, or "", sends none.
	Token func() string
	// Transport for the upstream; nil is a bounded transport (dial, TLS,
	// headers), never a client-wide timeout.
	Transport http.RoundTripper
	// CardTTL: how long a verified upstream card is used before it is
	// fetched again (default 1 min).
	CardTTL time.Duration
	// MaxContexts bounds the remembered (caller, contextId) -> upstream
	// contextId pairs (default 1024; least recently used go first).
	MaxContexts int
	// CancelWait bounds a cancel forwarded upstream (default 3 s; the
	// engine waits DefaultCancelWait for the executor).
	CancelWait time.Duration
	// SweepInterval: how often upstream tasks parked in input-required are
	// checked against their local tasks (a local task canceled while it
	// waited for the caller has no running turn to forward the cancel;
	// default 10 s).
	SweepInterval time.Duration
	// Store keeps the (caller, contextId) -> upstream contextId map across
	// restarts (a *store.Store); nil keeps it in memory. With a Store the
	// engine's tasks are durable too, so Close leaves the upstream tasks
	// of local tasks waiting for their callers as they are: those local
	// tasks wait again after the restart, and an answer goes to the same
	// upstream task.
	Store  ContextStore
	Logger *slog.Logger
	Now    func() time.Time
}

// ContextStore is where a ForwardExecutor keeps its context map
// (ForwardOptions.Store); *store.Store is one. PutContext stores or
// refreshes one link (the store bounds them, least recently used
// evicted); Contexts returns them, least recently used first.
type ContextStore interface {
	PutContext(ctx context.Context, l store.ContextLink) error
	Contexts(ctx context.Context) ([]store.ContextLink, error)
}

var _ ContextStore = (*store.Store)(nil)

// ForwardStatus is the forward executor as the owner sees it.
type ForwardStatus struct {
	URL      string    `json:"url"`
	Agent    string    `json:"agent,omitempty"`     // the upstream card's name
	Version  string    `json:"version,omitempty"`   // the A2A version calls use (CardInfo.ProtocolVersion)
	Signed   string    `json:"signature,omitempty"` // the card's signature: signed or unsigned
	Ready    bool      `json:"ready"`               // the last check verified the card
	Problem  string    `json:"problem,omitempty"`
	Checked  time.Time `json:"checked,omitzero"`
	Parked   int       `json:"parked"`   // upstream tasks waiting for their callers
	Contexts int       `json:"contexts"` // caller contexts mapped
}

// ForwardExecutor relays approved tasks to an upstream A2A agent: each turn
// becomes a message to the upstream (message/stream when its card
// advertises streaming, else message/send and tasks/get polling), and the
// upstream's status messages (working), artifacts (appended chunks too)
// and final state come back through the Execution: completed, failed,
// input-required (the caller's answer goes to the same upstream task);
// auth-required upstream is relayed as input-required; rejected or
// canceled upstream fail the local task with the reason.
//
// Contexts: a caller's contextId is never sent upstream. Each (caller
// grant, contextId) maps to the one upstream context the upstream minted
// for its first task, so a caller's follow-up tasks share an upstream
// context and two callers never do (DESIGN.md, "A2A").
//
// Cancel: when the engine cancels a running turn (tasks/cancel, shutdown)
// the executor sends tasks/cancel upstream before returning. An upstream
// task parked in input-required when its local task is canceled is
// canceled by the next sweep (SweepInterval) or by Close.
type ForwardExecutor struct {
	o       ForwardOptions
	u       *url.URL
	log     *slog.Logger
	rt      http.RoundTripper
	closeRT func()

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// mu guards the fields below.
	mu       sync.Mutex
	card     *CardInfo
	checked  time.Time
	problem  string
	contexts map[fwdCtxKey]*fwdCtx
	parked   map[a2a.TaskID]a2a.TaskID // local task -> upstream task, waiting for the caller
	srv      *agent.Server
	attached bool
}

type fwdCtxKey struct{ owner, ctx string }

type fwdCtx struct {
	up   string
	used time.Time
}

var (
	_ agent.Executor        = (*ForwardExecutor)(nil)
	_ agent.Summarizer      = (*ForwardExecutor)(nil)
	_ agent.Reattacher      = (*ForwardExecutor)(nil)
	_ agent.WaitingRestorer = (*ForwardExecutor)(nil)
)

// NewForwardExecutor returns a forward executor for o.URL; the upstream
// need not be up yet (its card is fetched at the first task).
func NewForwardExecutor(o ForwardOptions) (*ForwardExecutor, error) {
	u, err := CheckAgentURL(o.URL, o.IsTailnetAddr)
	if err != nil {
		return nil, fmt.Errorf("a2a.forward.url: %w", err)
	}
	if o.CardTTL <= 0 {
		o.CardTTL = DefaultForwardCardTTL
	}
	if o.MaxContexts <= 0 {
		o.MaxContexts = DefaultForwardContexts
	}
	if o.CancelWait <= 0 {
		o.CancelWait = DefaultForwardCancelWait
	}
	if o.SweepInterval <= 0 {
		o.SweepInterval = DefaultForwardSweep
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Token == nil {
		o.Token = func() string { return "" }
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &ForwardExecutor{o: o, u: u, log: log, contexts: make(map[fwdCtxKey]*fwdCtx), parked: make(map[a2a.TaskID]a2a.TaskID)}
	if o.Transport != nil {
		f.rt = o.Transport
	} else {
		tr := newExternalTransport()
		f.rt, f.closeRT = tr, tr.CloseIdleConnections
	}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	if o.Store != nil {
		links, err := o.Store.Contexts(context.Background())
		if err != nil {
			return nil, fmt.Errorf("a2a.forward: reading the context map: %w", err)
		}
		// Least recently used first: the newest MaxContexts are kept.
		for _, l := range links[max(0, len(links)-o.MaxContexts):] {
			f.contexts[fwdCtxKey{owner: l.Owner, ctx: l.ContextID}] = &fwdCtx{up: l.Upstream, used: l.Used}
		}
	}
	return f, nil
}

// Attach lets the executor see the engine's tasks, to forward the cancel
// of a task canceled while it waited for its caller; it starts the sweep.
func (f *ForwardExecutor) Attach(s *agent.Server) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.attached || f.ctx.Err() != nil {
		return
	}
	f.srv, f.attached = s, true
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		t := time.NewTicker(f.o.SweepInterval)
		defer t.Stop()
		for {
			select {
			case <-f.ctx.Done():
				return
			case <-t.C:
				f.sweep()
			}
		}
	}()
}

// Close stops the sweep and cancels every upstream task still parked
// (their local tasks end with the node), within CancelWait. With
// ForwardOptions.Store the local tasks outlive the node, and their upstream
// tasks are left waiting.
func (f *ForwardExecutor) Close() {
	f.cancel()
	f.wg.Wait()
	f.mu.Lock()
	ups := make([]a2a.TaskID, 0, len(f.parked))
	if f.o.Store == nil {
		for _, up := range f.parked {
			ups = append(ups, up)
		}
	}
	clear(f.parked)
	f.mu.Unlock()
	if len(ups) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), f.o.CancelWait)
		if rem, err := f.open(ctx); err == nil {
			var wg sync.WaitGroup
			for _, up := range ups {
				wg.Go(func() { f.cancelUpstream(ctx, rem, up) })
			}
			wg.Wait()
			rem.Close()
		}
		cancel()
	}
	if f.closeRT != nil {
		f.closeRT()
	}
}

// sweep cancels upstream tasks whose local task ended while parked.
func (f *ForwardExecutor) sweep() {
	f.mu.Lock()
	srv := f.srv
	if srv == nil || len(f.parked) == 0 {
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	states := make(map[a2a.TaskID]a2a.TaskState)
	for _, t := range srv.Tasks() {
		states[a2a.TaskID(t.ID)] = t.State
	}
	var ups []a2a.TaskID
	f.mu.Lock()
	for local, up := range f.parked {
		if st, ok := states[local]; !ok || st.Terminal() {
			delete(f.parked, local)
			ups = append(ups, up)
		}
	}
	f.mu.Unlock()
	if len(ups) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(f.ctx, f.o.CancelWait*time.Duration(min(len(ups), 10)))
	defer cancel()
	rem, err := f.open(ctx)
	if err != nil {
		f.log.Warn("cannot forward cancels of tasks that ended while waiting for their callers", "tasks", len(ups), "err", err)
		return
	}
	defer rem.Close()
	for _, up := range ups {
		f.cancelUpstream(ctx, rem, up)
	}
}

func (f *ForwardExecutor) cancelUpstream(ctx context.Context, rem *remote, up a2a.TaskID) {
	ctx, cancel := context.WithTimeout(ctx, f.o.CancelWait)
	defer cancel()
	t, err := rem.cancel(ctx, up)
	if err != nil {
		f.log.Info("forwarded cancel failed", "upstream_task", up, "err", err)
		return
	}
	f.log.Debug("cancel forwarded upstream", "upstream_task", up, "state", t.Status.State)
}

func (f *ForwardExecutor) park(local, up a2a.TaskID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.parked) >= maxParked {
		for k := range f.parked { // drop one; the sweep is best effort
			delete(f.parked, k)
			break
		}
	}
	f.parked[local] = up
}

func (f *ForwardExecutor) unpark(local a2a.TaskID) {
	f.mu.Lock()
	delete(f.parked, local)
	f.mu.Unlock()
}

// Status reports the upstream as last checked.
func (f *ForwardExecutor) Status() ForwardStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := ForwardStatus{URL: f.u.String(), Checked: f.checked, Problem: f.problem, Parked: len(f.parked), Contexts: len(f.contexts)}
	if f.card != nil {
		st.Agent, st.Version, st.Signed = f.card.Name, f.card.ProtocolVersion, f.card.Signature
		st.Ready = f.problem == ""
	}
	return st
}

// Check fetches and verifies the upstream card now.
func (f *ForwardExecutor) Check(ctx context.Context) (ForwardStatus, error) {
	rem, err := f.openFresh(ctx, true)
	if rem != nil {
		rem.Close()
	}
	return f.Status(), err
}

// label names the upstream in errors. Callers see these errors in their
// failed tasks, so they never carry its address (the owner's log does).
func (f *ForwardExecutor) label() string { return "the agent this device forwards to" }

// callerError is what the caller reads of an upstream failure; the owner's
// log gets the whole error and the upstream URL.
func (f *ForwardExecutor) callerError(task a2a.TaskID, err error) string {
	f.log.Warn("forwarded task failed", "task", task, "upstream", f.u.Redacted(), "err", err)
	switch {
	case errors.Is(err, ErrAgentUnauthorized):
		return "the agent this device forwards to refused its token; the owner of this device sets one with `meshtray forward token`"
	case errors.Is(err, ErrCardInvalid), errors.Is(err, ErrCardUnpublished):
		// Their details name the card's URL.
		return "the agent this device forwards to has no usable agent card; the owner of this device sees why with `meshtray forward check`"
	}
	// Causes are already free of *url.Error URLs (causeText); an address
	// the upstream's own text may repeat is masked too.
	msg := err.Error()
	for _, h := range []string{f.u.Host, f.u.Hostname()} {
		if h != "" {
			msg = strings.ReplaceAll(msg, h, "[upstream]")
		}
	}
	return msg
}

// open returns a remote for the upstream, its card verified within CardTTL.
func (f *ForwardExecutor) open(ctx context.Context) (*remote, error) {
	return f.openFresh(ctx, false)
}

func (f *ForwardExecutor) openFresh(ctx context.Context, force bool) (*remote, error) {
	f.mu.Lock()
	card := f.card
	stale := force || card == nil || f.problem != "" || f.o.Now().Sub(f.checked) > f.o.CardTTL
	f.mu.Unlock()
	rt := headerTimeout{rt: f.rt, d: HeaderTimeout}
	if stale {
		hc := &http.Client{Transport: rt, CheckRedirect: noRedirects}
		raw, err := fetchCard(ctx, hc, cardURL(f.u))
		var info CardInfo
		if err == nil {
			info, err = VerifyCard(raw, f.u)
		}
		err = classify(f.label(), false, err)
		if errors.Is(err, context.Canceled) {
			return nil, err
		}
		f.mu.Lock()
		f.checked = f.o.Now()
		if err != nil {
			f.problem = err.Error()
		} else {
			f.card, f.problem = &info, ""
			card = &info
		}
		f.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	return newRemote(ctx, f.label(), false, *card, rt, f.o.Token(), nil)
}

// Summarize implements Summarizer: the first line of the text, else the
// data parts as JSON, then the names of the files (textSummary).
func (f *ForwardExecutor) Summarize(_ *pairing.Principal, msg *a2a.Message) string {
	return agent.TextSummary(msg, "(an empty message)")
}

// fwdState is kept on the local task across turns (agent.Execution.Value),
// and so in the database as JSON (fwdStateJSON).
type fwdState struct {
	upTask    a2a.TaskID
	upCtx     string
	arts      artifactTracker
	local     map[a2a.ArtifactID]a2a.ArtifactID // upstream artifact -> local artifact
	lastChunk bool
	lastMsg   string // id of the last relayed working message
}

// fwdStateJSON is fwdState's JSON form.
type fwdStateJSON struct {
	UpTask    a2a.TaskID                        `json:"upstream_task,omitempty"`
	UpCtx     string                            `json:"upstream_context,omitempty"`
	Parts     map[a2a.ArtifactID]int            `json:"parts,omitempty"` // parts relayed per upstream artifact
	Local     map[a2a.ArtifactID]a2a.ArtifactID `json:"local,omitempty"`
	LastChunk bool                              `json:"last_chunk,omitempty"`
	LastMsg   string                            `json:"last_message,omitempty"`
}

func (st *fwdState) MarshalJSON() ([]byte, error) {
	return json.Marshal(fwdStateJSON{UpTask: st.upTask, UpCtx: st.upCtx, Parts: st.arts.parts, Local: st.local, LastChunk: st.lastChunk, LastMsg: st.lastMsg})
}

func (st *fwdState) UnmarshalJSON(b []byte) error {
	var v fwdStateJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*st = fwdState{upTask: v.UpTask, upCtx: v.UpCtx, arts: artifactTracker{parts: v.Parts}, local: v.Local, lastChunk: v.LastChunk, lastMsg: v.LastMsg}
	if st.local == nil {
		st.local = make(map[a2a.ArtifactID]a2a.ArtifactID)
	}
	return nil
}

// state is the task's fwdState: the Value set this run, else the one
// restored from the database, else a new one.
func (f *ForwardExecutor) state(ex *agent.Execution) *fwdState {
	if st, _ := ex.Value().(*fwdState); st != nil {
		return st
	}
	st := &fwdState{}
	if !ex.DecodeValue(st) {
		st = &fwdState{}
	}
	if st.local == nil {
		st.local = make(map[a2a.ArtifactID]a2a.ArtifactID)
	}
	return st
}

// fwdOutcome is the upstream's state when the exchange ended.
type fwdOutcome struct {
	state a2a.TaskState
	msg   *a2a.Message
}

// Execute implements agent.Executor.
func (f *ForwardExecutor) Execute(ctx context.Context, ex *agent.Execution) error {
	st := f.state(ex)
	defer ex.SetValue(st)
	f.unpark(ex.TaskID())

	rem, err := f.open(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		ex.Fail(f.callerError(ex.TaskID(), err))
		return nil
	}
	defer rem.Close()

	in := ex.Message()
	msg := &a2a.Message{ID: a2a.NewMessageID(), Role: a2a.MessageRoleUser, Parts: append(a2a.ContentParts(nil), in.Parts...)}
	key := fwdCtxKey{owner: ex.Caller().Owner(), ctx: ex.ContextID()}
	if st.upTask != "" {
		msg.TaskID, msg.ContextID = st.upTask, st.upCtx
	} else {
		msg.ContextID = f.upstreamContext(key)
	}

	// The exchange runs on its own context, so that a cancel arriving
	// before the upstream named its task (its first event is in flight)
	// can still wait a moment for that id and forward the cancel.
	xctx, xcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer xcancel()
	known := make(chan a2a.TaskID, 1)
	done := make(chan error, 1)
	var out fwdOutcome
	go func() {
		done <- rem.exchange(xctx, &a2a.MessageSendParams{Message: msg}, rem.card.Streaming, f.log, func(ev a2a.Event) {
			had := st.upTask
			f.relay(ex, st, key, ev, &out)
			if had == "" && st.upTask != "" {
				known <- st.upTask
			}
		})
	}()
	if msg.TaskID != "" {
		known <- msg.TaskID
	}
	select {
	case err = <-done:
	case <-ctx.Done():
		var up a2a.TaskID
		timer := time.NewTimer(forwardLearnWait)
		select {
		case up = <-known:
		case <-timer.C:
		case <-done: // ended on its own meanwhile; st is final
			up = st.upTask
			done <- nil
		}
		timer.Stop()
		if up != "" && f.keepsUpstream(ctx) {
			f.log.Debug("node shutting down: the upstream task is left running for the restart", "upstream_task", up)
		} else if up != "" {
			f.cancelUpstream(context.WithoutCancel(ctx), rem, up)
		} else {
			f.log.Warn("task canceled before the upstream named it; its cancel cannot be forwarded")
		}
		xcancel()
		<-done
		return ctx.Err()
	}
	if err != nil {
		ex.Fail(f.callerError(ex.TaskID(), err))
		return nil
	}
	f.finish(ex, st, out)
	return nil
}

// RestoredWaiting implements agent.WaitingRestorer: the upstream task of a
// local task restored waiting for its caller is parked again, so the sweep
// cancels it if the local task ends unanswered.
func (f *ForwardExecutor) RestoredWaiting(ex *agent.Execution) {
	if st := f.state(ex); st.upTask != "" {
		f.park(ex.TaskID(), st.upTask)
	}
}

// keepsUpstream reports a turn stopped by the node's shutdown while the
// engine's tasks are durable (Store): its local task is restored at the
// next start and reattaches to the upstream task, which must go on.
func (f *ForwardExecutor) keepsUpstream(ctx context.Context) bool {
	return f.o.Store != nil && errors.Is(context.Cause(ctx), agent.ErrShutdown)
}

// finish reports the upstream's final state (or question) on the local
// task.
func (f *ForwardExecutor) finish(ex *agent.Execution, st *fwdState, out fwdOutcome) {
	text, parts := splitMessage(out.msg)
	switch out.state {
	case a2a.TaskStateCompleted:
		ex.Complete(text, parts...)
	case a2a.TaskStateInputRequired:
		f.park(ex.TaskID(), st.upTask)
		ex.InputRequired(text, parts...)
	case a2a.TaskStateAuthRequired:
		f.park(ex.TaskID(), st.upTask)
		ex.InputRequired(strings.TrimSpace("The agent this device forwards to asks for authentication. "+text), parts...)
	case a2a.TaskStateRejected:
		ex.Fail(strings.TrimSpace("rejected by the agent this device forwards to. "+text), parts...)
	case a2a.TaskStateCanceled:
		ex.Fail(strings.TrimSpace("canceled by the agent this device forwards to. "+text), parts...)
	default: // failed, or an unknown final state
		ex.Fail(strings.TrimSpace(text+" ("+string(out.state)+" upstream)"), parts...)
	}
}

// Reattach implements agent.Reattacher: a task that was running when the
// node stopped follows its upstream task again, found by the upstream task
// id stored with it (tasks/get, then polling until it settles, the
// upstream's progress and artifacts relayed as during Execute). When the
// upstream had not named its task yet, or no longer knows it, the task
// ends failed saying so.
func (f *ForwardExecutor) Reattach(ctx context.Context, ex *agent.Execution) error {
	st := f.state(ex)
	defer ex.SetValue(st)
	if st.upTask == "" {
		ex.Fail(agent.RestartedText + ", before the agent this device forwards to had taken the task")
		return nil
	}
	rem, err := f.open(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		ex.Fail(agent.RestartedText + ", and the agent this device forwards to cannot be reached to pick it up: " + f.callerError(ex.TaskID(), err))
		return nil
	}
	defer rem.Close()
	key := fwdCtxKey{owner: ex.Caller().Owner(), ctx: ex.ContextID()}
	var out fwdOutcome
	on := func(ev a2a.Event) { f.relay(ex, st, key, ev, &out) }
	t, err := rem.client.GetTask(ctx, &a2a.TaskQueryParams{ID: st.upTask})
	if err == nil && t != nil {
		if t.ID == "" {
			t.ID = st.upTask
		}
		on(t)
		if !settled(t.Status.State) {
			err = rem.poll(ctx, st.upTask, nil, on)
		}
	} else if err == nil {
		err = errors.New("an empty answer to tasks/get")
	} else {
		err = rem.classify(err)
	}
	if ctx.Err() != nil {
		if !f.keepsUpstream(ctx) {
			f.cancelUpstream(context.WithoutCancel(ctx), rem, st.upTask)
		}
		return ctx.Err()
	}
	if err != nil {
		if errors.Is(err, a2a.ErrTaskNotFound) {
			ex.Fail(agent.RestartedText + ", and the agent this device forwards to no longer knows its task")
			return nil
		}
		ex.Fail(agent.RestartedText + "; following it again at the agent this device forwards to failed: " + f.callerError(ex.TaskID(), err))
		return nil
	}
	f.log.Info("forwarded task picked up again after a restart", "task", ex.TaskID(), "upstream_task", st.upTask, "state", out.state)
	f.finish(ex, st, out)
	return nil
}

// relay passes one upstream event to the local task.
func (f *ForwardExecutor) relay(ex *agent.Execution, st *fwdState, key fwdCtxKey, ev a2a.Event, out *fwdOutcome) {
	if id := ev.TaskInfo().TaskID; id != "" && st.upTask != "" && id != st.upTask {
		return // not ours
	}
	newArt := func(a *a2a.Artifact) {
		if id := ex.Artifact(a.Name, a.Parts...); id != "" {
			st.local[a.ID] = id
		}
	}
	appendArt := func(a *a2a.Artifact, parts a2a.ContentParts) {
		local, ok := st.local[a.ID]
		if !ok {
			newArt(&a2a.Artifact{ID: a.ID, Name: a.Name, Parts: parts})
			return
		}
		_ = ex.AppendArtifact(local, st.lastChunk, parts...)
	}
	status := func(s a2a.TaskStatus) {
		if s.State == "" {
			return
		}
		out.state, out.msg = s.State, s.Message
		if s.State == a2a.TaskStateWorking && s.Message != nil && s.Message.ID != st.lastMsg {
			st.lastMsg = s.Message.ID
			if t := agent.MessageText(s.Message); t != "" {
				ex.Working(t)
			}
		}
	}
	learn := func(id a2a.TaskID, ctxID string) {
		named := false
		if st.upTask == "" && id != "" {
			st.upTask, named = id, true
		}
		if st.upCtx == "" && ctxID != "" {
			st.upCtx = ctxID
			f.rememberContext(key, ctxID)
		}
		if named {
			// Kept on the task now: a restart while the upstream works
			// reattaches to this id (Reattach).
			ex.SetValue(st)
		}
	}
	switch v := ev.(type) {
	case *a2a.Task:
		learn(v.ID, v.ContextID)
		st.lastChunk = false
		st.arts.snapshot(v, newArt, appendArt)
		status(v.Status)
	case *a2a.TaskStatusUpdateEvent:
		learn(v.TaskID, v.ContextID)
		status(v.Status)
	case *a2a.TaskArtifactUpdateEvent:
		learn(v.TaskID, v.ContextID)
		st.lastChunk = v.LastChunk
		st.arts.update(v, newArt, appendArt)
	case *a2a.Message:
		if v.ContextID != "" {
			learn("", v.ContextID)
		}
		out.state, out.msg = a2a.TaskStateCompleted, v
	}
}

// upstreamContext returns the upstream context of a caller's context, ""
// for one not seen yet (the upstream mints it).
func (f *ForwardExecutor) upstreamContext(k fwdCtxKey) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.contexts[k]
	if c == nil {
		return ""
	}
	c.used = f.o.Now()
	return c.up
}

// rememberContext maps a caller's context to the upstream one, once; the
// least recently used pair goes when MaxContexts is reached.
func (f *ForwardExecutor) rememberContext(k fwdCtxKey, up string) {
	f.mu.Lock()
	if _, ok := f.contexts[k]; ok {
		f.mu.Unlock()
		return
	}
	if len(f.contexts) >= f.o.MaxContexts {
		var oldest fwdCtxKey
		var when time.Time
		first := true
		for kk, c := range f.contexts {
			if first || c.used.Before(when) {
				oldest, when, first = kk, c.used, false
			}
		}
		delete(f.contexts, oldest)
	}
	now := f.o.Now()
	f.contexts[k] = &fwdCtx{up: up, used: now}
	f.mu.Unlock()
	if f.o.Store != nil {
		// Committed before the upstream's answer is relayed on: a restart
		// keeps the caller's follow-ups in the same upstream context.
		if err := f.o.Store.PutContext(context.Background(), store.ContextLink{Owner: k.owner, ContextID: k.ctx, Upstream: up, Used: now}); err != nil {
			f.log.Warn("context link not written to the database", "err", err)
		}
	}
}

// splitMessage is a status message's text and its other parts.
func splitMessage(m *a2a.Message) (string, []a2a.Part) {
	if m == nil {
		return "", nil
	}
	var parts []a2a.Part
	for _, p := range m.Parts {
		if _, ok := p.(a2a.TextPart); !ok {
			parts = append(parts, p)
		}
	}
	return agent.MessageText(m), parts
}
