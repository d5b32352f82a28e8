package app_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"

	"meshtray/a2a/delegate"
	"meshtray/app/apptest"
	"meshtray/mesh"
)

// What a delegating node keeps across a restart (kill -9 and a graceful
// stop): its outbound tasks, followed up at their agent, and the peers
// added by hand. The agent is a real a2a-go v0.3.15 a2asrv in the test
// process that can restart on its address (and then forgets its tasks, as
// a2asrv's in-memory task store does).

// heldAgent's executor holds a task "hold NAME" working until the test
// lets NAME go, then completes it with artifact "result" "NAME done";
// "ask" asks a name (input-required), and the answer X completes it with
// artifact "result" "X done".
type heldAgent struct {
	URL     string
	addr    string
	started chan string // NAME, when its task works

	mu    sync.Mutex
	hs    *httptest.Server
	gates map[string]chan struct{}
}

func (x *heldAgent) gate(name string) chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	g := x.gates[name]
	if g == nil {
		g = make(chan struct{})
		x.gates[name] = g
	}
	return g
}

// let lets the task held as name complete.
func (x *heldAgent) let(name string) { close(x.gate(name)) }

func (x *heldAgent) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	var txt string
	for _, p := range rc.Message.Parts {
		if tp, ok := p.(a2a.TextPart); ok {
			txt += tp.Text
		}
	}
	if rc.StoredTask != nil && rc.StoredTask.Status.State == a2a.TaskStateInputRequired {
		art := a2a.NewArtifactEvent(rc, a2a.TextPart{Text: txt + " done"})
		art.Artifact.Name = "result"
		if err := q.Write(ctx, art); err != nil {
			return err
		}
		done := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCompleted, nil)
		done.Final = true
		return q.Write(ctx, done)
	}
	if txt == "ask" {
		if err := q.Write(ctx, a2a.NewSubmittedTask(rc, rc.Message)); err != nil {
			return err
		}
		ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateInputRequired, a2a.NewMessageForTask(a2a.MessageRoleAgent, rc, a2a.TextPart{Text: "what is your name?"}))
		ev.Final = true
		return q.Write(ctx, ev)
	}
	name, ok := strings.CutPrefix(txt, "hold ")
	if !ok {
		ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateRejected, nil)
		ev.Final = true
		return q.Write(ctx, ev)
	}
	if err := q.Write(ctx, a2a.NewSubmittedTask(rc, rc.Message)); err != nil {
		return err
	}
	working := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateWorking, a2a.NewMessageForTask(a2a.MessageRoleAgent, rc, a2a.TextPart{Text: "holding " + name}))
	if err := q.Write(ctx, working); err != nil {
		return err
	}
	x.started <- name
	select {
	case <-x.gate(name):
	case <-ctx.Done():
		return nil
	}
	art := a2a.NewArtifactEvent(rc, a2a.TextPart{Text: name + " done"})
	art.Artifact.Name = "result"
	if err := q.Write(ctx, art); err != nil {
		return err
	}
	done := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCompleted, a2a.NewMessageForTask(a2a.MessageRoleAgent, rc, a2a.TextPart{Text: "done"}))
	done.Final = true
	return q.Write(ctx, done)
}

func (x *heldAgent) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCanceled, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

func startHeldAgent(t *testing.T) *heldAgent {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	x := &heldAgent{addr: ln.Addr().String(), started: make(chan string, 8), gates: make(map[string]chan struct{})}
	x.URL = "http://" + x.addr
	x.serve(ln)
	t.Cleanup(func() {
		x.mu.Lock()
		hs := x.hs
		for name, g := range x.gates { // tasks still held end now
			select {
			case <-g:
			default:
				close(g)
			}
			delete(x.gates, name)
		}
		x.mu.Unlock()
		hs.CloseClientConnections()
		hs.Close()
	})
	return x
}

// serve answers on ln with a fresh a2asrv handler (an empty task store).
func (x *heldAgent) serve(ln net.Listener) {
	rpc := a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(x))
	card := a2a.AgentCard{
		Name: "Held Agent", Description: "holds tasks until told", Version: "1", ProtocolVersion: "0.3.0",
		URL: x.URL + "/rpc", PreferredTransport: a2a.TransportProtocolJSONRPC,
		Capabilities:      a2a.AgentCapabilities{Streaming: true},
		DefaultInputModes: []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
		Skills: []a2a.AgentSkill{{ID: "hold", Name: "Hold", Description: "holds", Tags: []string{"test"}}},
	}
	mux := http.NewServeMux()
	mux.Handle("GET /.well-known/agent-card.json", a2asrv.NewStaticAgentCardHandler(&card))
	mux.Handle("POST /rpc", rpc)
	hs := httptest.NewUnstartedServer(mux)
	hs.Listener.Close()
	hs.Listener = ln
	hs.Start()
	x.mu.Lock()
	x.hs = hs
	x.mu.Unlock()
}

// restart stops the agent and serves again on its address, forgetting
// every task (the old handler's executions go on, unseen).
func (x *heldAgent) restart(t *testing.T) {
	t.Helper()
	x.mu.Lock()
	hs := x.hs
	x.mu.Unlock()
	hs.CloseClientConnections()
	hs.Close()
	ln, err := net.Listen("tcp", x.addr)
	if err != nil {
		t.Fatal(err)
	}
	x.serve(ln)
}

func (x *heldAgent) waitStarted(t *testing.T, name string) {
	t.Helper()
	select {
	case got := <-x.started:
		if got != name {
			t.Fatalf("the agent started %q, want %q", got, name)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the agent never started %q", name)
	}
}

// delegateDetached delegates text to agent and returns the task once the
// agent took it.
func delegateDetached(t *testing.T, n *apptest.Node, agent, text string) delegate.OutboundTask {
	t.Helper()
	var task delegate.OutboundTask
	if err := json.Unmarshal([]byte(mustCLI(t, n, "delegate", agent, text, "--detach", "--json").Stdout), &task); err != nil || task.ID == "" {
		t.Fatalf("delegate --detach: %+v %v", task, err)
	}
	return task
}

// waitOutbound waits until `meshtray outbound --json` of n shows task id
// satisfying cond, and returns it.
func waitOutbound(t *testing.T, n *apptest.Node, id, what string, cond func(delegate.OutboundTask) bool) delegate.OutboundTask {
	t.Helper()
	var got delegate.OutboundTask
	apptest.WaitFor(t, 30*time.Second, "outbound task "+id+" "+what, func() bool {
		for _, x := range outboundList(t, n) {
			if x.ID == id {
				got = x
				return cond(x)
			}
		}
		return false
	})
	return got
}

func TestOutboundAcrossNodeRestarts(t *testing.T) {
	ag := startHeldAgent(t)
	opts := apptest.Options{Name: "sender", Config: "tailscale = false\n"}
	n := apptest.StartNode(t, opts)
	opts.StateDir = n.StateDir
	mustCLI(t, n, "agents", "add", ag.URL)
	completed := func(name string) func(delegate.OutboundTask) bool {
		return func(x delegate.OutboundTask) bool {
			return x.State == a2a.TaskStateCompleted && !x.Following && x.Error == "" &&
				len(x.Artifacts) == 1 && x.Artifacts[0].Name == "result" && partsText(x.Artifacts[0].Parts) == name+" done"
		}
	}

	// kill -9 while the agent works; it finishes while the node is down.
	// A question asked before the kill is answered after it; a task
	// working then is canceled after it.
	one := delegateDetached(t, n, ag.URL, "hold one")
	ag.waitStarted(t, "one")
	ask := delegateDetached(t, n, ag.URL, "ask")
	waitOutbound(t, n, ask.ID, "asking", func(x delegate.OutboundTask) bool { return x.State == a2a.TaskStateInputRequired && !x.Following })
	stop := delegateDetached(t, n, ag.URL, "hold stop")
	ag.waitStarted(t, "stop")
	kill9(t, n)
	ag.let("one")
	n = apptest.StartNode(t, opts)
	waitOutbound(t, n, one.ID, "completed after the restart", completed("one"))
	waitOutbound(t, n, ask.ID, "still asking, checked at the agent", func(x delegate.OutboundTask) bool {
		return x.State == a2a.TaskStateInputRequired && !x.Following && x.Message == "what is your name?"
	})
	mustCLI(t, n, "answer", ask.ID, "Ada", "--detach")
	waitOutbound(t, n, ask.ID, "completed by the answer", completed("Ada"))
	waitOutbound(t, n, stop.ID, "followed up", func(x delegate.OutboundTask) bool { return x.State == a2a.TaskStateWorking && x.Following })
	var canceled delegate.OutboundTask
	if err := json.Unmarshal([]byte(mustCLI(t, n, "cancel", stop.ID, "--json").Stdout), &canceled); err != nil || canceled.State != a2a.TaskStateCanceled {
		t.Fatalf("cancel of a restored task: %+v %v", canceled, err)
	}

	// kill -9, and the agent finishes after the node is back.
	two := delegateDetached(t, n, ag.URL, "hold two")
	ag.waitStarted(t, "two")
	kill9(t, n)
	n = apptest.StartNode(t, opts)
	restored := waitOutbound(t, n, two.ID, "followed up, still working", func(x delegate.OutboundTask) bool {
		return x.State == a2a.TaskStateWorking && x.Following && x.Message == "holding two"
	})
	if restored.TaskID != two.TaskID || restored.Request != "hold two" || restored.AgentName != "Held Agent" {
		t.Fatalf("restored %+v, was %+v", restored, two)
	}
	ag.let("two")
	waitOutbound(t, n, two.ID, "completed", completed("two"))

	// A graceful stop keeps them as well.
	three := delegateDetached(t, n, ag.URL, "hold three")
	ag.waitStarted(t, "three")
	if err := n.Stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	n = apptest.StartNode(t, opts)
	waitOutbound(t, n, three.ID, "followed up", func(x delegate.OutboundTask) bool { return x.State == a2a.TaskStateWorking && x.Following })
	ag.let("three")
	waitOutbound(t, n, three.ID, "completed", completed("three"))

	// The agent restarts (forgetting its tasks) while the node is down:
	// the task ends failed, saying so.
	four := delegateDetached(t, n, ag.URL, "hold four")
	ag.waitStarted(t, "four")
	kill9(t, n)
	ag.restart(t)
	n = apptest.StartNode(t, opts)
	gone := waitOutbound(t, n, four.ID, "failed", func(x delegate.OutboundTask) bool { return x.State.Terminal() })
	if gone.State != a2a.TaskStateFailed || !strings.Contains(gone.Message, "no longer knows this task") || gone.Following || gone.Error != "" {
		t.Fatalf("a task the agent forgot: %+v", gone)
	}
	// Every earlier task is still listed as it ended, and a cancel of a
	// finished one is refused as before.
	ts := outboundList(t, n)
	for _, id := range []string{one.ID, two.ID, three.ID} {
		if i := slices.IndexFunc(ts, func(x delegate.OutboundTask) bool { return x.ID == id }); i < 0 || ts[i].State != a2a.TaskStateCompleted {
			t.Errorf("task %s after the last restart: %+v", id, ts)
		}
	}
	if r := n.CLI("cancel", one.ID); r.Code == 0 || !strings.Contains(r.Stderr, "already completed") {
		t.Errorf("cancel of a restored finished task: exit %d %q", r.Code, r.Stderr)
	}
}

// peersOf is `meshtray peers --json` of n.
func peersOf(t *testing.T, n *apptest.Node) []mesh.Peer {
	t.Helper()
	var ps []mesh.Peer
	if err := json.Unmarshal([]byte(mustCLI(t, n, "peers", "--json").Stdout), &ps); err != nil {
		t.Fatal(err)
	}
	return ps
}

// TestManualPeerAcrossNodeRestarts: a peer added by hand is back after a
// kill -9 and a clean stop, offline with its last known name, OS and
// sighting while it is down, and gone for good once removed.
func TestManualPeerAcrossNodeRestarts(t *testing.T) {
	buddy := ptStart(t, "buddy")
	idB := ptIdentity(t, buddy)
	opts := apptest.Options{Name: "host", Config: "tailscale = false\n"}
	n := apptest.StartNode(t, opts)
	opts.StateDir = n.StateDir
	url := "https://127.0.0.1:" + strconv.Itoa(buddy.Port)
	mustCLI(t, n, "peers", "add", url)
	manualOnline := func(what string) mesh.Peer {
		t.Helper()
		var got mesh.Peer
		apptest.WaitFor(t, 30*time.Second, "buddy added by hand, online: "+what, func() bool {
			for _, p := range peersOf(t, n) {
				if p.ID == idB.ID {
					got = p
					return p.Online && slices.Contains(p.Sources, mesh.SourceManual)
				}
			}
			return false
		})
		if got.FP != idB.Fingerprint || got.Name != "buddy" || !slices.Equal(got.Addrs[mesh.SourceManual], []string{"127.0.0.1:" + strconv.Itoa(buddy.Port)}) {
			t.Fatalf("%s: %+v", what, got)
		}
		return got
	}
	manualOnline("added")

	kill9(t, n)
	n = apptest.StartNode(t, opts)
	manualOnline("after kill -9")

	if err := n.Stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	n = apptest.StartNode(t, opts)
	online := manualOnline("after a graceful stop")

	// Buddy down across a restart: listed offline, with the name, OS and
	// last sighting it had, not blank and "never".
	if err := n.Stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	if err := buddy.Stop(); err != nil {
		t.Fatal(err)
	}
	n = apptest.StartNode(t, opts)
	var off mesh.Peer
	for _, p := range peersOf(t, n) {
		if p.ID == idB.ID {
			off = p
		}
	}
	if off.ID == "" || off.Online || off.Name != "buddy" || off.OS == "" || off.OS != online.OS || off.LastSeen.IsZero() || off.LastSeen.Before(online.LastSeen.Add(-time.Second)) {
		t.Fatalf("buddy offline after a restart: %+v (online it was %+v)", off, online)
	}
	if out := mustCLI(t, n, "peers").Stdout; !strings.Contains(out, "buddy") || !strings.Contains(out, online.OS) || strings.Contains(out, "never") {
		t.Errorf("peers with buddy offline after a restart:\n%s", out)
	}

	// Removed, it stays removed.
	mustCLI(t, n, "peers", "rm", idB.ID[:7])
	kill9(t, n)
	n = apptest.StartNode(t, opts)
	for _, p := range peersOf(t, n) {
		if p.ID == idB.ID {
			t.Fatalf("a removed peer came back after a restart: %+v", p)
		}
	}
}

// partsText is the text of the text parts of ps.
func partsText(ps a2a.ContentParts) string {
	var b strings.Builder
	for _, p := range ps {
		if tp, ok := p.(a2a.TextPart); ok {
			b.WriteString(tp.Text)
		}
	}
	return b.String()
}
