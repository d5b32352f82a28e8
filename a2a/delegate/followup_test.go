package delegate

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	agent "meshtray/a2a"
	"meshtray/store"
)

// outage is a TCP relay in front of an agent, the agent's address as the
// node knows it: down drops every connection and refuses new ones (the
// agent's machine gone, as after a kill -9); up listens on the same
// address again, relaying to target.
type outage struct {
	addr string

	mu     sync.Mutex
	ln     net.Listener
	target string
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newOutage(t *testing.T, target string) *outage {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &outage{addr: ln.Addr().String(), conns: make(map[net.Conn]struct{})}
	o.serve(ln, target)
	t.Cleanup(o.down)
	return o
}

func (o *outage) url() string { return "http://" + o.addr }

func (o *outage) serve(ln net.Listener, target string) {
	o.mu.Lock()
	o.ln, o.target = ln, target
	o.mu.Unlock()
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			o.mu.Lock()
			if o.ln != ln {
				o.mu.Unlock()
				c.Close()
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				o.mu.Unlock()
				c.Close()
				continue
			}
			o.conns[c], o.conns[up] = struct{}{}, struct{}{}
			o.wg.Add(2)
			o.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				defer o.wg.Done()
				io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			go pipe(up, c)
			go pipe(c, up)
		}
	}()
}

// down refuses connections and drops the open ones.
func (o *outage) down() {
	o.mu.Lock()
	if o.ln != nil {
		o.ln.Close()
		o.ln = nil
	}
	for c := range o.conns {
		c.Close()
	}
	clear(o.conns)
	o.mu.Unlock()
	o.wg.Wait()
}

// up listens on the same address again, relaying to target.
func (o *outage) up(t *testing.T, target string) {
	t.Helper()
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		t.Fatal(err)
	}
	o.serve(ln, target)
}

// watchUntilEnd collects a task's watch events in the background.
func watchUntilEnd(t *testing.T, ob *Outbound, id string) <-chan []OutboundEvent {
	t.Helper()
	out := make(chan []OutboundEvent, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	go func() {
		var evs []OutboundEvent
		err := ob.Watch(ctx, id, func(ev OutboundEvent) error {
			evs = append(evs, ev)
			return nil
		})
		if err != nil {
			evs = append(evs, OutboundEvent{Error: err.Error()})
		}
		out <- evs
	}()
	return out
}

// An agent that goes away while it works on a delegated task, for longer
// than the node used to follow it (polling gave up after pollFailures,
// ~13 s and more), and comes back with the task: the node keeps the task live, says it cannot reach the agent and
// when it tries again, keeps a watch open, and follows the task to the
// agent's final state, without a restart of the node. Over a stream and
// over polling.
func TestLostAgentIsFollowedUpAtRunTime(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{true, false} {
		t.Run(map[bool]string{true: "stream", false: "poll"}[stream], func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			up := newUpstream(t, upstreamOpts{streaming: true})
			relay := newOutage(t, up.hs.Listener.Addr().String())
			up.setCard(func(c *a2a.AgentCard) { c.URL = relay.url() + "/rpc" })
			a, _ := newAgents(t, AgentsOptions{})
			ob := newOutbound(t, a, OutboundOptions{FollowUpFirst: 100 * time.Millisecond, FollowUpMax: 400 * time.Millisecond})
			ag, err := a.Add(ctx, relay.url(), "")
			if err != nil {
				t.Fatal(err)
			}
			task, err := ob.Delegate(ctx, DelegateRequest{Agent: ag.ID, MessageInput: MessageInput{Text: "hold"}, Stream: &stream})
			if err != nil {
				t.Fatal(err)
			}
			waitTask(t, ob, task.ID, "working", func(x OutboundTask) bool { return x.State == a2a.TaskStateWorking })
			watch := watchUntilEnd(t, ob, task.ID)

			relay.down()
			// Past the ~13 s after which the node used to give up.
			time.Sleep(16 * time.Second)
			got, err := ob.Get(task.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != a2a.TaskStateWorking || !strings.HasPrefix(got.Error, unreachablePrefix) || !strings.Contains(got.Error, "trying again at ") ||
				got.RetryAt.IsZero() && !got.Following {
				t.Fatalf("while the agent is away: %+v", got)
			}
			select {
			case evs := <-watch:
				t.Fatalf("the watch ended while the agent was away: %+v", evs)
			default:
			}

			close(up.release) // the agent finishes while it cannot be reached
			relay.up(t, up.hs.Listener.Addr().String())
			done := waitTask(t, ob, task.ID, "completed", func(x OutboundTask) bool { return x.State.Terminal() })
			if done.State != a2a.TaskStateCompleted || done.Message != "released" || done.Error != "" || done.Following || !done.RetryAt.IsZero() ||
				len(done.Artifacts) != 1 || partText(done.Artifacts[0].Parts) != "held" {
				t.Fatalf("after the agent came back: %+v", done)
			}
			evs := <-watch
			if last := evs[len(evs)-1]; !last.End || last.Task == nil || last.Task.State != a2a.TaskStateCompleted {
				t.Fatalf("the watch ended with %+v", last)
			}
			if !slices.ContainsFunc(evs, func(ev OutboundEvent) bool {
				return strings.HasPrefix(ev.Waiting, unreachablePrefix) && strings.Contains(ev.Waiting, "trying again at ")
			}) {
				t.Fatalf("the watch never said it waits for the agent: %+v", evs)
			}
		})
	}
}

func partText(ps a2a.ContentParts) string {
	var b strings.Builder
	for _, p := range ps {
		if tp, ok := p.(a2a.TextPart); ok {
			b.WriteString(tp.Text)
		}
	}
	return b.String()
}

// A meshtray agent stopped gracefully (it keeps its tasks) while a
// delegated task waits for approval there: the stream ends with its
// "restarting" error, never a final state; the node follows the task up
// until the agent is back, the owner approves there, and the task
// completes. The watch sees no final state but the real one.
func TestAgentRestartIsFollowedUp(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{true, false} {
		t.Run(map[bool]string{true: "stream", false: "poll"}[stream], func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), store.DefaultFile)
			db := outboundDB(t, path)
			appr := newManualApprover()
			env := newEnv(t, agent.Options{Store: db, Approver: appr, Manifest: testManifest})
			relay := newOutage(t, env.hs.Listener.Addr().String())
			a, _ := newAgents(t, AgentsOptions{})
			ob := newOutbound(t, a, OutboundOptions{FollowUpFirst: 100 * time.Millisecond, FollowUpMax: 400 * time.Millisecond})
			ag, err := a.Add(ctx, relay.url(), tokA)
			if err != nil {
				t.Fatal(err)
			}
			task, err := ob.Delegate(ctx, DelegateRequest{Agent: ag.ID, MessageInput: MessageInput{Text: "echo kept"}, Stream: &stream})
			if err != nil {
				t.Fatal(err)
			}
			appr.next(t)
			watch := watchUntilEnd(t, ob, task.ID)

			// The graceful stop, then the restart on the same database.
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := env.srv.Shutdown(sctx); err != nil {
				t.Fatal(err)
			}
			if stream {
				waitTask(t, ob, task.ID, "told the agent restarts", func(x OutboundTask) bool {
					return strings.Contains(x.Error, "is restarting") || strings.HasPrefix(x.Error, unreachablePrefix)
				})
			}
			relay.down()
			env.hs.Close()
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			got, _ := ob.Get(task.ID)
			if got.State.Terminal() {
				t.Fatalf("after the agent's stop: %+v", got)
			}
			db2 := outboundDB(t, path)
			appr2 := newManualApprover()
			env2 := newEnv(t, agent.Options{Store: db2, Approver: appr2, Manifest: testManifest})
			if res, err := env2.srv.Restore(ctx); err != nil || res.Approvals != 1 {
				t.Fatalf("Restore: %+v %v", res, err)
			}
			relay.up(t, env2.hs.Listener.Addr().String())
			appr2.next(t).answer <- agent.Decision{Approved: true, ByOwner: true}

			done := waitTask(t, ob, task.ID, "completed", func(x OutboundTask) bool { return x.State.Terminal() })
			if done.State != a2a.TaskStateCompleted || done.Error != "" || len(done.Artifacts) != 1 || partText(done.Artifacts[0].Parts) != "kept" {
				t.Fatalf("after the agent's restart: %+v", done)
			}
			for _, ev := range <-watch {
				if ev.Error != "" || ev.State.Terminal() && ev.State != a2a.TaskStateCompleted || ev.Task != nil && ev.End && ev.Task.State != a2a.TaskStateCompleted {
					t.Fatalf("the watch saw %+v", ev)
				}
			}
		})
	}
}

// The "restarting" error of a meshtray agent reads as contact lost for now
// (tried again), not as a refusal.
func TestRestartingErrorIsTransient(t *testing.T) {
	t.Parallel()
	// As meshtray writes it over 0.3 (data an object) and 1.0 (an
	// ErrorInfo in the data array), read by the tolerant layer.
	for v1, doc := range map[bool]string{
		false: `{"jsonrpc":"2.0","id":1,"error":{"code":-32013,"message":"the node is restarting","data":{"reason":"NODE_RESTARTING","taskId":"t1"}}}`,
		true: `{"jsonrpc":"2.0","id":1,"error":{"code":-32013,"message":"the node is restarting","data":[` +
			`{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"NODE_RESTARTING","domain":"meshtray"},` +
			`{"@type":"type.googleapis.com/google.protobuf.Struct","value":{"taskId":"t1"}}]}}`,
	} {
		_, re := normalizeResponse([]byte(doc), v1)
		err := classify("node-a", true, re)
		if !transient(err) || !AgentRestarting(err) || !strings.Contains(err.Error(), `device "node-a" is restarting`) {
			t.Errorf("1.0 %v: %v (transient %v)", v1, err, transient(err))
		}
	}
	// The same code without meshtray's reason is another agent's own.
	if err := classify("x", false, &RPCError{Code: agent.CodeRestarting, Message: "other"}); transient(err) || !errors.Is(err, ErrAgentRefused) {
		t.Errorf("a foreign -32013: %v", err)
	}
}
