package delegate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	agent "meshtray/a2a"
)

// meshtray delegating to real servers of each version: a2a-go v2.3.1's
// own a2asrv (A2A 1.0 only), a2a-go v0.3.15's (0.3 only), and another
// meshtray. Each is added by URL (the card decides the version), then
// takes a task that completes, one that asks and is answered, and one
// that is canceled while it runs, streamed and polled.

type realServer struct {
	name string
	// start returns the base URL, the token, the version the card must be
	// matched to, and a channel that reports a sleeping task's start (nil:
	// poll the view for working).
	start func(t *testing.T, streaming bool) (base, token, version string, started <-chan struct{})
	// answered is the artifact text an answer "Ada" completes with.
	answered string
}

func realServers() []realServer {
	return []realServer{
		{name: "a2a-go v2 a2asrv", answered: "hello Ada",
			start: func(t *testing.T, streaming bool) (string, string, string, <-chan struct{}) {
				u := newUpstream10(t, streaming)
				t.Cleanup(func() {
					for _, v := range u.seenVersions() {
						if v != "1.0" {
							t.Errorf("a request to the 1.0 agent said A2A-Version %q", v)
						}
					}
				})
				ch := make(chan struct{}, 8)
				go func() {
					for range u.started {
						ch <- struct{}{}
					}
				}()
				t.Cleanup(func() { close(u.started) })
				return u.hs.URL, "", Version10, ch
			}},
		{name: "a2a-go v0.3 a2asrv", answered: "hello Ada",
			start: func(t *testing.T, streaming bool) (string, string, string, <-chan struct{}) {
				u := newUpstream(t, upstreamOpts{streaming: streaming})
				ch := make(chan struct{}, 8)
				go func() {
					for range u.started {
						ch <- struct{}{}
					}
				}()
				t.Cleanup(func() { close(u.started) })
				return u.hs.URL, "", Version03, ch
			}},
		// meshtray as its card offers it: 1.0 when the card lists a 1.0
		// JSON-RPC interface (the union card), else 0.3.
		{name: "meshtray", answered: "Ada",
			start: func(t *testing.T, streaming bool) (string, string, string, <-chan struct{}) {
				env := newEnv(t, agent.Options{Manifest: testManifest})
				return cardProxy(t, env.hs.URL, false, streaming), tokA, offeredVersion(t, env.hs.URL), nil
			}},
		// meshtray seen through a card that keeps only its 0.3 interface:
		// the 0.3 binding of a server that also speaks 1.0.
		{name: "meshtray over 0.3", answered: "Ada",
			start: func(t *testing.T, streaming bool) (string, string, string, <-chan struct{}) {
				env := newEnv(t, agent.Options{Manifest: testManifest})
				return cardProxy(t, env.hs.URL, true, streaming), tokA, Version03, nil
			}},
	}
}

// offeredVersion is the version meshtray's client picks for the card at
// base (1.0 when supportedInterfaces offers JSONRPC 1.0).
func offeredVersion(t *testing.T, base string) string {
	t.Helper()
	var card struct {
		SupportedInterfaces []struct{ ProtocolBinding, ProtocolVersion string }
	}
	resp, err := http.Get(base + agent.CardPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&card); err != nil {
		t.Fatal(err)
	}
	for _, in := range card.SupportedInterfaces {
		if in.ProtocolBinding == "JSONRPC" && strings.HasPrefix(in.ProtocolVersion, "1.") {
			return Version10
		}
	}
	return Version03
}

// cardProxy is a proxy in front of the meshtray at base whose card says
// streaming as given and, with only03, lists no 1.0 interface (the Host
// header passes through, so the card names the proxy).
func cardProxy(t *testing.T, base string, only03, streaming bool) string {
	t.Helper()
	target, _ := url.Parse(base)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.URL.Path != agent.CardPath || resp.StatusCode != http.StatusOK {
			return nil
		}
		var card map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&card); err != nil {
			return err
		}
		resp.Body.Close()
		if caps, ok := card["capabilities"].(map[string]any); ok {
			caps["streaming"] = streaming
		}
		if ifaces, ok := card["supportedInterfaces"].([]any); ok && only03 {
			var keep []any
			for _, in := range ifaces {
				if m, ok := in.(map[string]any); ok && !strings.HasPrefix(fmt.Sprint(m["protocolVersion"]), "1.") {
					keep = append(keep, in)
				}
			}
			card["supportedInterfaces"] = keep
			if len(keep) == 0 {
				delete(card, "supportedInterfaces")
			}
		}
		b, err := json.Marshal(card)
		if err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
		resp.ContentLength = int64(len(b))
		resp.Header.Set("Content-Length", fmt.Sprint(len(b)))
		return nil
	}
	hs := httptest.NewServer(rp)
	t.Cleanup(hs.Close)
	return hs.URL
}

func TestDelegateToRealServers(t *testing.T) {
	t.Parallel()
	for _, srv := range realServers() {
		for _, streaming := range []bool{true, false} {
			t.Run(srv.name+map[bool]string{true: "/stream", false: "/poll"}[streaming], func(t *testing.T) {
				t.Parallel()
				base, token, version, started := srv.start(t, streaming)
				a, _ := newAgents(t, AgentsOptions{})
				ob := newOutbound(t, a, OutboundOptions{})
				ctx := context.Background()
				ag, err := a.Add(ctx, base, token)
				if err != nil {
					t.Fatal(err)
				}
				if ag.Card == nil || ag.Card.ProtocolVersion != version {
					t.Fatalf("card %+v: want version %s", ag.Card, version)
				}
				t.Logf("%s: A2A %s", srv.name, version)
				if list := a.List(ctx); len(list) != 1 || list[0].Card.ProtocolVersion != version {
					t.Fatalf("list %+v", list)
				}

				task, err := ob.Delegate(ctx, DelegateRequest{Agent: ag.ID, MessageInput: MessageInput{Text: "echo over the wire"}})
				if err != nil {
					t.Fatal(err)
				}
				_, done := watchAll(t, ob, task.ID)
				if done.State != a2a.TaskStateCompleted || len(done.Artifacts) != 1 || partsText(done.Artifacts[0].Parts) != "over the wire" {
					t.Fatalf("echo: %+v", done)
				}

				task, err = ob.Delegate(ctx, DelegateRequest{Agent: ag.ID, MessageInput: MessageInput{Text: "ask"}})
				if err != nil {
					t.Fatal(err)
				}
				if _, asked := watchAll(t, ob, task.ID); asked.State != a2a.TaskStateInputRequired {
					t.Fatalf("ask: %+v", asked)
				}
				if _, err := ob.Answer(ctx, task.ID, MessageInput{Text: "Ada"}); err != nil {
					t.Fatal(err)
				}
				_, answered := watchAll(t, ob, task.ID)
				if answered.State != a2a.TaskStateCompleted || len(answered.Artifacts) == 0 || partsText(answered.Artifacts[len(answered.Artifacts)-1].Parts) != srv.answered {
					t.Fatalf("answered: %+v", answered)
				}

				task, err = ob.Delegate(ctx, DelegateRequest{Agent: ag.ID, MessageInput: MessageInput{Text: "sleep"}})
				if err != nil {
					t.Fatal(err)
				}
				if started != nil {
					select {
					case <-started:
					case <-time.After(10 * time.Second):
						t.Fatal("the agent did not start")
					}
				}
				waitFor(t, "the task working", func() bool {
					got, err := ob.Get(task.ID)
					return err == nil && got.State == a2a.TaskStateWorking && got.TaskID != ""
				})
				got, err := ob.Cancel(ctx, task.ID)
				if err != nil {
					t.Fatal(err)
				}
				if got.State != a2a.TaskStateCanceled {
					t.Fatalf("cancel: %+v", got)
				}
				if _, final := watchAll(t, ob, task.ID); final.State != a2a.TaskStateCanceled || strings.Contains(final.Error, "malformed") {
					t.Fatalf("canceled: %+v", final)
				}
			})
		}
	}
}

// restartable is a meshtray server whose process can restart: a fresh
// Server (empty task store) answers from then on.
type restartable struct {
	hs   *httptest.Server
	auth *testAuth
	opts agent.Options
	mu   sync.Mutex
	srv  *agent.Server
}

func newRestartable(t *testing.T, opts agent.Options) *restartable {
	t.Helper()
	opts.DeviceName, opts.Approver, opts.Executor, opts.Manifest = "testbox", approveAll{}, &scriptExecutor{}, testManifest
	r := &restartable{auth: &testAuth{}, opts: opts}
	r.auth.Add(tokA, "grantA", "laptop")
	r.restart(t)
	mux := http.NewServeMux()
	mux.Handle("POST "+agent.RPCPath, r.auth.Wrap(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.current().ServeHTTP(w, req)
	})))
	mux.Handle("GET "+agent.CardPath, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.current().CardHandler().ServeHTTP(w, req)
	}))
	r.hs = httptest.NewServer(mux)
	t.Cleanup(func() {
		r.hs.CloseClientConnections()
		r.hs.Close()
	})
	return r
}

func (r *restartable) current() *agent.Server {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.srv
}

func (r *restartable) restart(t *testing.T) {
	srv := agent.NewServer(r.opts)
	srv.SetPublished(true)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
}

// TestMeshtrayErrorsReachTheCaller: what a meshtray answers a streaming
// call with (an SSE error event, or plain JSON from one that answers that
// way) reaches the person delegating with its real code and message.
func TestMeshtrayErrorsReachTheCaller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("a busy grant", func(t *testing.T) {
		t.Parallel()
		m := newRestartable(t, agent.Options{MaxLiveTasksPerOwner: 1})
		a, _ := newAgents(t, AgentsOptions{})
		ob := newOutbound(t, a, OutboundOptions{})
		ag, err := a.Add(ctx, m.hs.URL, tokA)
		if err != nil {
			t.Fatal(err)
		}
		sleeping, err := ob.Delegate(ctx, DelegateRequest{Agent: ag.ID, MessageInput: MessageInput{Text: "sleep"}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = ob.Delegate(ctx, DelegateRequest{Agent: ag.ID, MessageInput: MessageInput{Text: "echo x"}})
		var re *RPCError
		if !errors.As(err, &re) || re.Code != agent.CodeLiveTaskLimit || re.Message == "" || strings.Contains(err.Error(), "ended before any event") {
			t.Fatalf("a second task on a busy grant: %v", err)
		}
		if _, err := ob.Cancel(ctx, sleeping.ID); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("answer after the agent restarted", func(t *testing.T) {
		t.Parallel()
		m := newRestartable(t, agent.Options{})
		a, _ := newAgents(t, AgentsOptions{})
		ob := newOutbound(t, a, OutboundOptions{})
		ag, err := a.Add(ctx, m.hs.URL, tokA)
		if err != nil {
			t.Fatal(err)
		}
		task, err := ob.Delegate(ctx, DelegateRequest{Agent: ag.ID, MessageInput: MessageInput{Text: "ask"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, asked := watchAll(t, ob, task.ID); asked.State != a2a.TaskStateInputRequired {
			t.Fatalf("asked %+v", asked)
		}
		m.restart(t)
		_, err = ob.Answer(ctx, task.ID, MessageInput{Text: "Ada"})
		var re *RPCError
		if !errors.Is(err, a2a.ErrTaskNotFound) || !errors.As(err, &re) || re.Code != -32001 || strings.Contains(err.Error(), "ended before any event") {
			t.Fatalf("answer after a restart: %v", err)
		}
		got, err := ob.Get(task.ID)
		if err != nil || got.State != a2a.TaskStateFailed || got.Message != forgotten || got.Following {
			t.Fatalf("the forgotten task: %+v, %v", got, err)
		}
	})
}

// TestForwardToA1_0Agent: the forward executor relays a caller's task to
// an A2A 1.0 agent (a2a-go v2's a2asrv), including the input-required
// round trip, while the caller speaks 0.3 to meshtray.
func TestForwardToA1_0Agent(t *testing.T) {
	t.Parallel()
	for _, streaming := range []bool{true, false} {
		t.Run(map[bool]string{true: "stream", false: "poll"}[streaming], func(t *testing.T) {
			t.Parallel()
			up := newUpstream10(t, streaming)
			t.Cleanup(func() { close(up.started) })
			fw, err := NewForwardExecutor(ForwardOptions{URL: up.hs.URL})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(fw.Close)
			env := newEnv(t, agent.Options{Executor: fw})
			fw.Attach(env.srv)
			ctx := context.Background()
			st, err := fw.Check(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !st.Ready || st.Version != Version10 || st.Signed != "unsigned" {
				t.Fatalf("forward status %+v", st)
			}
			c := env.client(t, tokA)
			task := sendTask(t, ctx, c, userMsg("echo relayed"))
			if task.Status.State != a2a.TaskStateCompleted || len(task.Artifacts) != 1 || partsText(task.Artifacts[0].Parts) != "relayed" {
				t.Fatalf("echo through the forward: %+v", task)
			}
			asked := sendTask(t, ctx, c, userMsg("ask"))
			if asked.Status.State != a2a.TaskStateInputRequired {
				t.Fatalf("ask through the forward: %+v", asked.Status)
			}
			done := sendTask(t, ctx, c, answerTo(asked, a2a.TextPart{Text: "Ada"}))
			if done.Status.State != a2a.TaskStateCompleted || len(done.Artifacts) == 0 || partsText(done.Artifacts[len(done.Artifacts)-1].Parts) != "hello Ada" {
				t.Fatalf("answer through the forward: %+v", done)
			}
		})
	}
}
