package delegate

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"

	agent "meshtray/a2a"
)

// upstream is a real a2a-go v0.3.15 a2asrv agent on loopback: the agent
// meshtray's outbound client delegates to and the forward executor relays
// to. Its executor interprets the first word of a message's text:
//
//	echo X     artifact "echo" with X, completed "done"
//	chunks N   artifact "chunks" in N appended chunks ("0", "1", ...), completed
//	ask        input-required "what is your name?"; the answer X completes
//	           with artifact "greeting" "hello X"
//	sleep      working "sleeping", then waits for cancel
//	slow       working "step 1", pauses 300 ms, working "step 2", completed
//	reject     rejected "not today"
//	hold       working "holding", then waits for release (closed by the
//	           test): artifact "held", completed "released"
type upstream struct {
	hs    *httptest.Server
	token string // required bearer token; "" for none

	mu       sync.Mutex
	seen     []upstreamCall // every Execute, in order
	canceled []a2a.TaskID
	stopped  chan a2a.TaskID // sleep reports its stop
	started  chan a2a.TaskID // sleep reports its start
	card     *a2a.AgentCard
	hits     int           // JSON-RPC requests
	rpc      http.Handler  // the a2asrv handler; restart replaces it
	release  chan struct{} // hold waits for it
}

type upstreamCall struct {
	TaskID    a2a.TaskID
	ContextID string
	Text      string
	Resumed   bool
	Auth      string
}

type upstreamExec struct{ u *upstream }

func (x upstreamExec) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	u := x.u
	txt := text(rc.Message)
	u.mu.Lock()
	u.seen = append(u.seen, upstreamCall{TaskID: rc.TaskID, ContextID: rc.ContextID, Text: txt, Resumed: rc.StoredTask != nil})
	u.mu.Unlock()
	if rc.StoredTask == nil {
		if err := q.Write(ctx, a2a.NewSubmittedTask(rc, rc.Message)); err != nil {
			return err
		}
	}
	say := func(s string) *a2a.Message {
		return a2a.NewMessageForTask(a2a.MessageRoleAgent, rc, a2a.TextPart{Text: s})
	}
	status := func(st a2a.TaskState, msg *a2a.Message, final bool) error {
		ev := a2a.NewStatusUpdateEvent(rc, st, msg)
		ev.Final = final
		return q.Write(ctx, ev)
	}
	if rc.StoredTask != nil && rc.StoredTask.Status.State == a2a.TaskStateInputRequired {
		if err := status(a2a.TaskStateWorking, nil, false); err != nil {
			return err
		}
		if err := q.Write(ctx, a2a.NewArtifactEvent(rc, a2a.TextPart{Text: "hello " + txt})); err != nil {
			return err
		}
		return status(a2a.TaskStateCompleted, say("greeted"), true)
	}
	cmd, arg, _ := strings.Cut(txt, " ")
	switch cmd {
	case "echo":
		if err := status(a2a.TaskStateWorking, nil, false); err != nil {
			return err
		}
		art := a2a.NewArtifactEvent(rc, a2a.TextPart{Text: arg})
		art.Artifact.Name = "echo"
		if err := q.Write(ctx, art); err != nil {
			return err
		}
		return status(a2a.TaskStateCompleted, say("done"), true)
	case "chunks":
		var n int
		fmt.Sscan(arg, &n)
		first := a2a.NewArtifactEvent(rc, a2a.TextPart{Text: "0"})
		first.Artifact.Name = "chunks"
		if err := q.Write(ctx, first); err != nil {
			return err
		}
		for i := 1; i < n; i++ {
			ev := a2a.NewArtifactUpdateEvent(rc, first.Artifact.ID, a2a.TextPart{Text: fmt.Sprint(i)})
			ev.LastChunk = i == n-1
			if err := q.Write(ctx, ev); err != nil {
				return err
			}
		}
		return status(a2a.TaskStateCompleted, nil, true)
	case "ask":
		return status(a2a.TaskStateInputRequired, say("what is your name?"), true)
	case "sleep":
		if err := status(a2a.TaskStateWorking, say("sleeping"), false); err != nil {
			return err
		}
		if u.started != nil {
			u.started <- rc.TaskID
		}
		<-ctx.Done()
		if u.stopped != nil {
			u.stopped <- rc.TaskID
		}
		return nil
	case "slow":
		if err := status(a2a.TaskStateWorking, say("step 1"), false); err != nil {
			return err
		}
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			return nil
		}
		if err := status(a2a.TaskStateWorking, say("step 2"), false); err != nil {
			return err
		}
		return status(a2a.TaskStateCompleted, say("slow done"), true)
	case "reject":
		return status(a2a.TaskStateRejected, say("not today"), true)
	case "hold":
		if err := status(a2a.TaskStateWorking, say("holding"), false); err != nil {
			return err
		}
		select {
		case <-u.release:
		case <-ctx.Done():
			return nil
		}
		if err := q.Write(ctx, a2a.NewArtifactEvent(rc, a2a.TextPart{Text: "held"})); err != nil {
			return err
		}
		return status(a2a.TaskStateCompleted, say("released"), true)
	}
	return status(a2a.TaskStateFailed, say("unknown command "+cmd), true)
}

func (x upstreamExec) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	x.u.mu.Lock()
	x.u.canceled = append(x.u.canceled, rc.TaskID)
	x.u.mu.Unlock()
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCanceled, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

// upstreamOpts shape the upstream's card and auth.
type upstreamOpts struct {
	token     string
	streaming bool
}

func newUpstream(t testing.TB, o upstreamOpts) *upstream {
	t.Helper()
	u := &upstream{token: o.token, stopped: make(chan a2a.TaskID, 8), started: make(chan a2a.TaskID, 8), release: make(chan struct{})}
	u.rpc = a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(upstreamExec{u}))
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+agent.CardPath, func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		card := *u.card
		u.mu.Unlock()
		a2asrv.NewStaticAgentCardHandler(&card).ServeHTTP(w, r)
	})
	mux.HandleFunc("POST /rpc", func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.hits++
		rpc := u.rpc
		u.mu.Unlock()
		if u.token != "" && r.Header.Get("Authorization") != "Bearer "+u.token {
			w.Header().Set("WWW-Authenticate", `Bearer realm="upstream"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		rpc.ServeHTTP(w, r)
	})
	u.hs = httptest.NewServer(mux)
	u.card = &a2a.AgentCard{
		Name: "Upstream Agent", Description: "a2asrv test agent", Version: "1.0",
		ProtocolVersion: "0.3.0", URL: u.hs.URL + "/rpc", PreferredTransport: a2a.TransportProtocolJSONRPC,
		Capabilities:      a2a.AgentCapabilities{Streaming: o.streaming},
		DefaultInputModes: []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
		Skills: []a2a.AgentSkill{{ID: "echo", Name: "Echo", Description: "echoes", Tags: []string{"test"}}},
	}
	t.Cleanup(func() {
		u.hs.CloseClientConnections()
		u.hs.Close()
	})
	return u
}

// restart stands for the agent restarting: a fresh a2asrv handler with an
// empty task store answers from now on (tasks the old one runs finish
// there, unseen).
func (u *upstream) restart() {
	h := a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(upstreamExec{u}))
	u.mu.Lock()
	u.rpc = h
	u.mu.Unlock()
}

func (u *upstream) setCard(f func(c *a2a.AgentCard)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	c := *u.card
	f(&c)
	u.card = &c
}

func (u *upstream) calls() []upstreamCall {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]upstreamCall(nil), u.seen...)
}

func (u *upstream) canceledIDs() []a2a.TaskID {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]a2a.TaskID(nil), u.canceled...)
}

func (u *upstream) requests() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.hits
}
