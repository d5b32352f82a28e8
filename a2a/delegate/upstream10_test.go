package delegate

import (
	"context"
	"iter"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	v1 "github.com/a2aproject/a2a-go/v2/a2a"
	v1srv "github.com/a2aproject/a2a-go/v2/a2asrv"
)

// upstream10 is a real a2a-go v2.3.1 a2asrv agent on loopback: A2A 1.0
// only (a 1.0 card, the 1.0 JSON-RPC binding, no 0.3 compat handler).
// Its executor reads the first word of a message's text:
//
//	echo X   artifact with X, completed
//	ask      input-required "what is your name?"; the answer X completes
//	         with artifact "hello X"
//	sleep    working, then waits for cancel
type upstream10 struct {
	hs *httptest.Server

	mu       sync.Mutex
	versions []string // the A2A-Version header of each JSON-RPC request
	canceled []v1.TaskID
	started  chan v1.TaskID
}

type upstream10Exec struct{ u *upstream10 }

func text10(m *v1.Message) string {
	if m == nil {
		return ""
	}
	var b strings.Builder
	for _, p := range m.Parts {
		b.WriteString(p.Text())
	}
	return b.String()
}

func (x upstream10Exec) Execute(ctx context.Context, ec *v1srv.ExecutorContext) iter.Seq2[v1.Event, error] {
	return func(yield func(v1.Event, error) bool) {
		txt := text10(ec.Message)
		if ec.StoredTask == nil {
			if !yield(v1.NewSubmittedTask(ec, ec.Message), nil) {
				return
			}
		} else if ec.StoredTask.Status.State == v1.TaskStateInputRequired {
			if yield(v1.NewArtifactEvent(ec, v1.NewTextPart("hello "+txt)), nil) {
				yield(v1.NewStatusUpdateEvent(ec, v1.TaskStateCompleted, nil), nil)
			}
			return
		}
		cmd, arg, _ := strings.Cut(txt, " ")
		switch cmd {
		case "echo":
			if yield(v1.NewArtifactEvent(ec, v1.NewTextPart(arg)), nil) {
				yield(v1.NewStatusUpdateEvent(ec, v1.TaskStateCompleted, v1.NewMessageForTask(v1.MessageRoleAgent, ec, v1.NewTextPart("done"))), nil)
			}
		case "ask":
			yield(v1.NewStatusUpdateEvent(ec, v1.TaskStateInputRequired, v1.NewMessageForTask(v1.MessageRoleAgent, ec, v1.NewTextPart("what is your name?"))), nil)
		case "sleep":
			if !yield(v1.NewStatusUpdateEvent(ec, v1.TaskStateWorking, v1.NewMessageForTask(v1.MessageRoleAgent, ec, v1.NewTextPart("sleeping"))), nil) {
				return
			}
			x.u.started <- ec.TaskID
			<-ctx.Done()
		default:
			yield(v1.NewStatusUpdateEvent(ec, v1.TaskStateFailed, v1.NewMessageForTask(v1.MessageRoleAgent, ec, v1.NewTextPart("unknown command "+cmd))), nil)
		}
	}
}

func (x upstream10Exec) Cancel(ctx context.Context, ec *v1srv.ExecutorContext) iter.Seq2[v1.Event, error] {
	return func(yield func(v1.Event, error) bool) {
		x.u.mu.Lock()
		x.u.canceled = append(x.u.canceled, ec.TaskID)
		x.u.mu.Unlock()
		yield(v1.NewStatusUpdateEvent(ec, v1.TaskStateCanceled, nil), nil)
	}
}

func newUpstream10(t testing.TB, streaming bool) *upstream10 {
	t.Helper()
	u := &upstream10{started: make(chan v1.TaskID, 8)}
	rpc := v1srv.NewJSONRPCHandler(v1srv.NewHandler(upstream10Exec{u}))
	mux := http.NewServeMux()
	mux.HandleFunc("POST /rpc", func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.versions = append(u.versions, r.Header.Get("A2A-Version"))
		u.mu.Unlock()
		rpc.ServeHTTP(w, r)
	})
	u.hs = httptest.NewServer(mux)
	card := &v1.AgentCard{
		Name: "V2 Agent", Description: "a2a-go v2 a2asrv test agent", Version: "2.3.1",
		SupportedInterfaces: []*v1.AgentInterface{v1.NewAgentInterface(u.hs.URL+"/rpc", v1.TransportProtocolJSONRPC)},
		Capabilities:        v1.AgentCapabilities{Streaming: streaming},
		DefaultInputModes:   []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
		Skills: []v1.AgentSkill{{ID: "echo", Name: "Echo", Description: "echoes", Tags: []string{"test"}}},
	}
	mux.Handle("GET "+v1srv.WellKnownAgentCardPath, v1srv.NewStaticAgentCardHandler(card))
	t.Cleanup(func() {
		u.hs.CloseClientConnections()
		u.hs.Close()
	})
	return u
}

func (u *upstream10) seenVersions() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.versions...)
}
