package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	agent "meshtray/a2a"
	"meshtray/a2a/cardsig"
	"meshtray/keychain"
	"meshtray/pairing"
)

// The outbound client, the agent registry and the outbound view, against a
// real a2a-go v0.3.15 a2asrv agent (upstream_test.go) and, for paired
// peers, a real meshtray server behind the real pairing grants, auth
// middleware and certificate pinning.

func TestCheckAgentURL(t *testing.T) {
	t.Parallel()
	// The node's tailnet knows one peer; 100.64.0.0/10 alone is also
	// carrier-grade NAT (RFC 6598) and proves nothing.
	peer := netip.MustParseAddr("100.101.102.103")
	isTailnet := func(a netip.Addr) bool { return a == peer }
	for _, tc := range []struct {
		url     string
		ok      bool
		tailnet bool // ok only with the tailnet hook
	}{
		{"https://agent.example.com", true, false},
		{"https://agent.example.com:8443/a2a", true, false},
		{"http://127.0.0.1:9999", true, false},
		{"http://localhost:9999", true, false},
		{"http://[::1]:9999", true, false},
		{"http://100.101.102.103:9999", true, true},
		{"http://100.64.0.9:9999", false, false}, // CGNAT, not a peer
		{"http://[fd7a:115c:a1e0::1]:9999", false, false},
		{"http://192.168.1.20:9999", false, false}, // LAN in clear
		{"http://agent.example.com", false, false},
		{"ftp://agent.example.com", false, false},
		{"https://user:pw@agent.example.com", false, false},
		{"https://agent.example.com/?token=x", false, false},
		{"https://agent.example.com/#x", false, false},
		{"agent.example.com", false, false},
		{"", false, false},
	} {
		_, err := CheckAgentURL(tc.url, isTailnet)
		if (err == nil) != tc.ok {
			t.Errorf("CheckAgentURL(%q) = %v, want ok=%v", tc.url, err, tc.ok)
		}
		_, err = CheckAgentURL(tc.url, nil)
		if want := tc.ok && !tc.tailnet; (err == nil) != want {
			t.Errorf("CheckAgentURL(%q, nil) = %v, want ok=%v", tc.url, err, want)
		}
	}
}

func TestVerifyCard(t *testing.T) {
	t.Parallel()
	base, _ := url.Parse("https://agent.example.com")
	good := func() *a2a.AgentCard {
		return &a2a.AgentCard{
			Name: "Weather", ProtocolVersion: "0.3.0", URL: "https://agent.example.com/a2a",
			Skills: []a2a.AgentSkill{{ID: "forecast", Name: "Forecast"}}, Capabilities: a2a.AgentCapabilities{Streaming: true},
		}
	}
	for _, tc := range []struct {
		name   string
		mutate func(c *a2a.AgentCard)
		want   string // "" = verifies; else a substring of the error
	}{
		{"good", func(*a2a.AgentCard) {}, ""},
		{"0.3 minor", func(c *a2a.AgentCard) { c.ProtocolVersion = "0.3.5" }, ""},
		{"default port spelled out", func(c *a2a.AgentCard) { c.URL = "https://agent.example.com:443/a2a" }, ""},
		{"jsonrpc in additionalInterfaces", func(c *a2a.AgentCard) {
			c.PreferredTransport = a2a.TransportProtocolGRPC
			c.URL = "https://agent.example.com:50051"
			c.AdditionalInterfaces = []a2a.AgentInterface{{URL: "https://agent.example.com/rpc", Transport: a2a.TransportProtocolJSONRPC}}
		}, ""},
		{"no protocolVersion", func(c *a2a.AgentCard) { c.ProtocolVersion = "" }, ""},
		{"1.0 without supportedInterfaces", func(c *a2a.AgentCard) { c.ProtocolVersion = "1.0.0" }, "no supportedInterfaces"},
		{"no name", func(c *a2a.AgentCard) { c.Name = " " }, "name is empty"},
		{"no url", func(c *a2a.AgentCard) { c.URL = "" }, "url is missing"},
		{"grpc only", func(c *a2a.AgentCard) { c.PreferredTransport = a2a.TransportProtocolGRPC }, "no JSON-RPC interface"},
		{"other origin", func(c *a2a.AgentCard) { c.URL = "https://evil.example.net/a2a" }, "another origin"},
		{"other port", func(c *a2a.AgentCard) { c.URL = "https://agent.example.com:8443/a2a" }, "another origin"},
		{"downgrade to http", func(c *a2a.AgentCard) { c.URL = "http://agent.example.com/a2a" }, "another origin"},
		{"no skills", func(c *a2a.AgentCard) { c.Skills = nil }, "no skills"},
		{"skill without id", func(c *a2a.AgentCard) { c.Skills = []a2a.AgentSkill{{Name: "x"}} }, "no id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.mutate(c)
			raw, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			info, err := VerifyCard(raw, base)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("VerifyCard: %v", err)
				}
				if info.Name != "Weather" || !strings.HasPrefix(info.Endpoint, "https://agent.example.com") || len(info.Skills) != 1 {
					t.Fatalf("info = %+v", info)
				}
				return
			}
			if !errors.Is(err, ErrCardInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("VerifyCard = %v, want ErrCardInvalid with %q", err, tc.want)
			}
		})
	}
}

// newAgents is a registry over a memory keychain and a temp agents file.
func newAgents(t testing.TB, o AgentsOptions) (*Agents, keychain.Store) {
	t.Helper()
	if o.Secrets == nil {
		o.Secrets = keychain.NewMemory()
	}
	if o.Path == "" {
		o.Path = filepath.Join(t.TempDir(), "agents.json")
	}
	a, err := NewAgents(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a, o.Secrets
}

func newOutbound(t *testing.T, a *Agents, o OutboundOptions) *Outbound {
	t.Helper()
	o.Agents = a
	ob := NewOutbound(o)
	t.Cleanup(ob.Close)
	return ob
}

// watchAll collects a task's watch events until End.
func watchAll(t *testing.T, ob *Outbound, id string) ([]OutboundEvent, OutboundTask) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var evs []OutboundEvent
	err := ob.Watch(ctx, id, func(ev OutboundEvent) error {
		evs = append(evs, ev)
		return nil
	})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	last := evs[len(evs)-1]
	if !last.End || last.Task == nil {
		t.Fatalf("last event %+v is not the end", last)
	}
	return evs, *last.Task
}

func partsText(ps a2a.ContentParts) string {
	var b strings.Builder
	for _, p := range ps {
		if tp, ok := p.(a2a.TextPart); ok {
			b.WriteString(tp.Text)
		}
	}
	return b.String()
}

func TestAgentsAddStoresTokenInKeychainOnly(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, upstreamOpts{token: "secret-token-41", streaming: true})
	path := filepath.Join(t.TempDir(), "agents.json")
	ks := keychain.NewMemory()
	a, _ := newAgents(t, AgentsOptions{Path: path, Secrets: ks})
	ctx := context.Background()

	ag, err := a.Add(ctx, up.hs.URL, "Bearer secret-token-41")
	if err != nil {
		t.Fatal(err)
	}
	if ag.ID != "upstream-agent" || ag.Kind != AgentExternal || ag.Status != AgentReady || !ag.HasToken || ag.Card == nil || !ag.Card.Streaming {
		t.Fatalf("added %+v", ag)
	}
	if tok, err := ks.Get("agent/upstream-agent"); err != nil || string(tok) != "secret-token-41" {
		t.Fatalf("keychain agent/upstream-agent = %q, %v", tok, err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("agents file: %v %v", st, err)
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), "secret-token-41") || !strings.Contains(string(b), up.hs.URL) {
		t.Fatalf("agents file holds the token or lacks the URL:\n%s", b)
	}

	// Adding the same URL again (no token) updates, keeps the token.
	again, err := a.Add(ctx, up.hs.URL+"/", "")
	if err != nil || again.ID != ag.ID || !again.HasToken {
		t.Fatalf("re-add: %+v %v", again, err)
	}

	// A second registry on the same file sees it (restart).
	b2, _ := newAgents(t, AgentsOptions{Path: path, Secrets: ks})
	got, err := b2.Get("Upstream Agent")
	if err != nil || got.ID != ag.ID || got.Status != AgentReady {
		t.Fatalf("after reload: %+v %v", got, err)
	}

	if _, err := a.SetEnabled(ag.ID, false); err != nil {
		t.Fatal(err)
	}
	ob := newOutbound(t, a, OutboundOptions{})
	if _, err := ob.Delegate(ctx, DelegateRequest{Agent: ag.ID, MessageInput: MessageInput{Text: "echo x"}}); !errors.Is(err, ErrAgentDisabled) {
		t.Fatalf("delegate to a disabled agent: %v", err)
	}
	if _, err := a.SetEnabled(ag.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := a.Remove(ag.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Get("agent/upstream-agent"); !errors.Is(err, keychain.ErrNotFound) {
		t.Fatalf("token left in the keychain after remove: %v", err)
	}
	if _, err := a.Get(ag.ID); !errors.Is(err, ErrAgentUnknown) {
		t.Fatalf("removed agent still found: %v", err)
	}
}

func TestAgentsAddVerifiesBeforeStoring(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		mutate func(c *a2a.AgentCard)
		kind   error
	}{
		{"other origin", func(c *a2a.AgentCard) { c.URL = "https://elsewhere.example.com/rpc" }, ErrCardInvalid},
		{"no skills", func(c *a2a.AgentCard) { c.Skills = nil }, ErrCardInvalid},
		{"protocol 1.0", func(c *a2a.AgentCard) { c.ProtocolVersion = "1.0" }, ErrCardInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, upstreamOpts{})
			up.setCard(tc.mutate)
			path := filepath.Join(t.TempDir(), "agents.json")
			ks := keychain.NewMemory()
			a, _ := newAgents(t, AgentsOptions{Path: path, Secrets: ks})
			_, err := a.Add(context.Background(), up.hs.URL, "tok")
			if !errors.Is(err, tc.kind) {
				t.Fatalf("Add = %v, want %v", err, tc.kind)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Fatalf("agents file written for a card that does not verify: %v", err)
			}
			if keys, _ := ks.Keys("agent/"); len(keys) != 0 {
				t.Fatalf("keychain items stored: %v", keys)
			}
		})
	}
	t.Run("no card", func(t *testing.T) {
		t.Parallel()
		hs := httptest.NewServer(http.NotFoundHandler())
		t.Cleanup(hs.Close)
		a, _ := newAgents(t, AgentsOptions{})
		if _, err := a.Add(context.Background(), hs.URL, ""); !errors.Is(err, ErrCardUnpublished) {
			t.Fatalf("Add = %v, want ErrCardUnpublished", err)
		}
	})
	t.Run("LAN http", func(t *testing.T) {
		t.Parallel()
		a, _ := newAgents(t, AgentsOptions{})
		if _, err := a.Add(context.Background(), "http://192.168.1.50:8000", ""); !errors.Is(err, ErrInvalidInput) {
			t.Fatalf("Add = %v, want ErrInvalidInput", err)
		}
	})
}

func TestDelegateToExternalAgent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		streaming bool // the card says so
		stream    bool // the request wants it
	}{
		{"stream", true, true},
		{"card without streaming polls", false, true},
		{"poll by choice", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, upstreamOpts{token: "tok-1", streaming: tc.streaming})
			a, _ := newAgents(t, AgentsOptions{})
			ob := newOutbound(t, a, OutboundOptions{})
			ctx := context.Background()
			ag, err := a.Add(ctx, up.hs.URL, "tok-1")
			if err != nil {
				t.Fatal(err)
			}

			task, err := ob.Delegate(ctx, DelegateRequest{Agent: ag.ID, MessageInput: MessageInput{Text: "chunks 4"}, Stream: &tc.stream})
			if err != nil {
				t.Fatal(err)
			}
			if task.TaskID == "" || task.Agent != ag.ID || task.Request != "chunks 4" || task.Streaming != (tc.streaming && tc.stream) {
				t.Fatalf("delegated %+v", task)
			}
			evs, final := watchAll(t, ob, task.ID)
			if final.State != a2a.TaskStateCompleted || len(final.Artifacts) != 1 || partsText(final.Artifacts[0].Parts) != "0123" {
				t.Fatalf("final %+v", final)
			}
			// Whatever the events, they add up to the artifact once.
			var got strings.Builder
			for _, ev := range evs[:len(evs)-1] {
				if ev.Task != nil {
					for _, a := range ev.Task.Artifacts {
						got.WriteString(partsText(a.Parts))
					}
				}
				if ev.Artifact != nil {
					got.WriteString(partsText(ev.Artifact.Parts))
				}
			}
			if got.String() != "0123" {
				t.Fatalf("watch events add up to %q: %+v", got.String(), evs)
			}
			if ob.Live() != 0 {
				t.Fatalf("live = %d", ob.Live())
			}

			// A direct text round trip and the view.
			task2, err := ob.Delegate(ctx, DelegateRequest{Agent: "upstream agent", MessageInput: MessageInput{Text: "echo hello\nsecond line"}, Stream: &tc.stream})
			if err != nil {
				t.Fatal(err)
			}
			_, final2 := watchAll(t, ob, task2.ID)
			if final2.State != a2a.TaskStateCompleted || final2.Message != "done" || partsText(final2.Artifacts[0].Parts) != "hello\nsecond line" || final2.Request != "echo hello" {
				t.Fatalf("echo: %+v", final2)
			}
			list := ob.List()
			if len(list) != 2 || list[0].ID != task.ID || list[1].ID != task2.ID {
				t.Fatalf("list %+v", list)
			}
		})
	}
}

func TestDelegateInputRequiredAndAnswer(t *testing.T) {
	t.Parallel()
	for _, streaming := range []bool{true, false} {
		t.Run(map[bool]string{true: "stream", false: "poll"}[streaming], func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, upstreamOpts{streaming: streaming})
			a, _ := newAgents(t, AgentsOptions{})
			ob := newOutbound(t, a, OutboundOptions{})
			ctx := context.Background()
			ag, err := a.Add(ctx, up.hs.URL, "")
			if err != nil {
				t.Fatal(err)
			}
			task, err := ob.Delegate(ctx, DelegateRequest{Agent: ag.ID, MessageInput: MessageInput{Text: "ask"}})
			if err != nil {
				t.Fatal(err)
			}
			_, asked := watchAll(t, ob, task.ID)
			if asked.State != a2a.TaskStateInputRequired || asked.Message != "what is your name?" || asked.Following {
				t.Fatalf("asked %+v", asked)
			}
			// Only a task that asks takes an answer; cancel of it is fine later.
			if _, err := ob.Answer(ctx, "zzzz-none", MessageInput{Text: "x"}); !errors.Is(err, ErrOutboundNotFound) {
				t.Fatalf("answer to an unknown task: %v", err)
			}
			// The agent's own task id works as a reference too.
			if _, err := ob.Answer(ctx, asked.TaskID, MessageInput{Text: "Ada"}); err != nil {
				t.Fatal(err)
			}
			_, done := watchAll(t, ob, task.ID)
			if done.State != a2a.TaskStateCompleted || len(done.Artifacts) != 1 || partsText(done.Artifacts[0].Parts) != "hello Ada" {
				t.Fatalf("answered %+v", done)
			}
			calls := up.calls()
			if len(calls) != 2 || !calls[1].Resumed || calls[1].TaskID != calls[0].TaskID || string(calls[0].TaskID) != done.TaskID {
				t.Fatalf("upstream calls %+v", calls)
			}
			if _, err := ob.Answer(ctx, task.ID, MessageInput{Text: "again"}); !errors.Is(err, ErrOutboundState) {
				t.Fatalf("answer to a completed task: %v", err)
			}
			if _, err := ob.Cancel(ctx, task.ID); !errors.Is(err, ErrOutboundState) {
				t.Fatalf("cancel of a completed task: %v", err)
			}
		})
	}
}

func TestDelegateCancelReachesTheAgent(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, upstreamOpts{streaming: true})
	a, _ := newAgents(t, AgentsOptions{})
	ob := newOutbound(t, a, OutboundOptions{})
	ctx := context.Background()
	ag, err := a.Add(ctx, up.hs.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	task, err := ob.Delegate(ctx, DelegateRequest{Agent: ag.ID, MessageInput: MessageInput{Text: "sleep"}})
	if err != nil {
		t.Fatal(err)
	}
	var started a2a.TaskID
	select {
	case started = <-up.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not start")
	}
	got, err := ob.Cancel(ctx, task.ID[:5])
	if err != nil {
		t.Fatal(err)
	}
	if got.State != a2a.TaskStateCanceled || got.TaskID != string(started) {
		t.Fatalf("after cancel %+v", got)
	}
	select {
	case id := <-up.stopped:
		if id != started {
			t.Fatalf("stopped %s, want %s", id, started)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the agent's work did not stop")
	}
	if c := up.canceledIDs(); len(c) != 1 || c[0] != started {
		t.Fatalf("agent saw cancels %v", c)
	}
	_, final := watchAll(t, ob, task.ID)
	if final.State != a2a.TaskStateCanceled || final.Following {
		t.Fatalf("final %+v", final)
	}
}

func TestDelegateErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("token refused marks the agent", func(t *testing.T) {
		t.Parallel()
		up := newUpstream(t, upstreamOpts{token: "right"})
		a, _ := newAgents(t, AgentsOptions{})
		ob := newOutbound(t, a, OutboundOptions{})
		ag, err := a.Add(ctx, up.hs.URL, "wrong")
		if err != nil {
			t.Fatal(err)
		}
		_, err = ob.Delegate(ctx, DelegateRequest{Agent: ag.ID, MessageInput: MessageInput{Text: "echo x"}})
		if !errors.Is(err, ErrAgentUnauthorized) || !strings.Contains(err.Error(), "HTTP 401") || !strings.Contains(err.Error(), "revoked") {
			t.Fatalf("Delegate = %v", err)
		}
		if got, _ := a.Get(ag.ID); got.Status != AgentUnauthorized {
			t.Fatalf("agent after 401: %+v", got)
		}
		if len(ob.List()) != 0 {
			t.Fatalf("a refused delegation left a task: %+v", ob.List())
		}
		// A new token clears the mark at the next success.
		if _, err := a.Add(ctx, up.hs.URL, "right"); err != nil {
			t.Fatal(err)
		}
		task, err := ob.Delegate(ctx, DelegateRequest{Agent: ag.ID, MessageInput: MessageInput{Text: "echo x"}})
		if err != nil {
			t.Fatal(err)
		}
		watchAll(t, ob, task.ID)
		if got, _ := a.Get(ag.ID); got.Status != AgentReady {
			t.Fatalf("agent after a good call: %+v", got)
		}
	})

	t.Run("unreachable", func(t *testing.T) {
		t.Parallel()
		up := newUpstream(t, upstreamOpts{})
		a, _ := newAgents(t, AgentsOptions{})
		ob := newOutbound(t, a, OutboundOptions{})
		ag, err := a.Add(ctx, up.hs.URL, "")
		if err != nil {
			t.Fatal(err)
		}
		up.hs.CloseClientConnections()
		up.hs.Close()
		_, err = ob.Delegate(ctx, DelegateRequest{Agent: ag.ID, MessageInput: MessageInput{Text: "echo x"}})
		if !errors.Is(err, ErrAgentUnreachable) || !strings.Contains(err.Error(), "unreachable") {
			t.Fatalf("Delegate = %v", err)
		}
	})

	t.Run("malformed answer", func(t *testing.T) {
		t.Parallel()
		up := newUpstream(t, upstreamOpts{})
		a, _ := newAgents(t, AgentsOptions{})
		ob := newOutbound(t, a, OutboundOptions{})
		ag, err := a.Add(ctx, up.hs.URL, "")
		if err != nil {
			t.Fatal(err)
		}
		// The same card, but its url now points at an endpoint that
		// answers JSON-RPC with an unknown result kind.
		bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"jsonrpc":"2.0","id":"1","result":{"kind":"surprise"}}`))
		}))
		t.Cleanup(bad.Close)
		a.mu.Lock()
		a.ext[ag.ID].Card.Endpoint = bad.URL + "/rpc"
		a.mu.Unlock()
		_, err = ob.Delegate(ctx, DelegateRequest{Agent: ag.ID, MessageInput: MessageInput{Text: "echo x"}, Stream: new(false)})
		if !errors.Is(err, ErrAgentMalformed) || !strings.Contains(err.Error(), "malformed") {
			t.Fatalf("Delegate = %v", err)
		}
	})

	t.Run("card that no longer verifies is not used", func(t *testing.T) {
		t.Parallel()
		up := newUpstream(t, upstreamOpts{})
		a, _ := newAgents(t, AgentsOptions{CardTTL: time.Nanosecond})
		ob := newOutbound(t, a, OutboundOptions{})
		ag, err := a.Add(ctx, up.hs.URL, "")
		if err != nil {
			t.Fatal(err)
		}
		up.setCard(func(c *a2a.AgentCard) { c.URL = "https://collector.example.net/rpc" })
		before := up.requests()
		_, err = ob.Delegate(ctx, DelegateRequest{Agent: ag.ID, MessageInput: MessageInput{Text: "echo x"}})
		if !errors.Is(err, ErrCardInvalid) || !strings.Contains(err.Error(), "another origin") {
			t.Fatalf("Delegate = %v", err)
		}
		if up.requests() != before {
			t.Fatal("a call went out on a card that does not verify")
		}
		got, _ := a.Get(ag.ID)
		if got.Status != AgentInvalid || !strings.Contains(got.Problem, "another origin") {
			t.Fatalf("agent %+v", got)
		}
		up.setCard(func(c *a2a.AgentCard) { c.URL = up.hs.URL + "/rpc" })
		if _, err := a.Refresh(ctx, ag.ID); err != nil {
			t.Fatal(err)
		}
		if got, _ := a.Get(ag.ID); got.Status != AgentReady {
			t.Fatalf("after refresh %+v", got)
		}
	})

	t.Run("unknown agent and empty message", func(t *testing.T) {
		t.Parallel()
		a, _ := newAgents(t, AgentsOptions{})
		ob := newOutbound(t, a, OutboundOptions{})
		if _, err := ob.Delegate(ctx, DelegateRequest{Agent: "nobody", MessageInput: MessageInput{Text: "x"}}); !errors.Is(err, ErrAgentUnknown) {
			t.Fatalf("unknown agent: %v", err)
		}
		if _, err := ob.Delegate(ctx, DelegateRequest{Agent: "nobody"}); !errors.Is(err, ErrInvalidInput) {
			t.Fatalf("empty message: %v", err)
		}
	})
}

func TestOutboundViewIsBounded(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, upstreamOpts{streaming: true})
	a, _ := newAgents(t, AgentsOptions{})
	ob := newOutbound(t, a, OutboundOptions{Max: 3, MaxBytes: 8})
	ctx := context.Background()
	ag, err := a.Add(ctx, up.hs.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range []string{"echo 1", "echo 2", "echo 3", "echo 0123456789abcdef"} {
		task, err := ob.Delegate(ctx, DelegateRequest{Agent: ag.ID, MessageInput: MessageInput{Text: s}})
		if err != nil {
			t.Fatal(err)
		}
		watchAll(t, ob, task.ID)
		ids = append(ids, task.ID)
	}
	list := ob.List()
	if len(list) != 3 || list[0].ID != ids[1] || list[2].ID != ids[3] {
		t.Fatalf("view %+v, want the 3 newest of %v", list, ids)
	}
	last := list[2]
	if !last.Truncated || strings.Contains(partsText(last.Artifacts[0].Parts), "0123456789") {
		t.Fatalf("over-bound artifact kept: %+v", last)
	}
	if _, err := ob.Get(ids[0]); !errors.Is(err, ErrOutboundNotFound) {
		t.Fatalf("evicted task still there: %v", err)
	}
}

// peerSource is the PeerSource app builds, over the real pairing.Grants of
// the delegating device.
type peerSource struct{ g *pairing.Grants }

func (p peerSource) PeerAgents() []PeerAgent {
	var out []PeerAgent
	for _, h := range p.g.ListHeld() {
		if h.Scopes.Has(pairing.ScopeAgent) {
			out = append(out, PeerAgent{DeviceID: h.PeerID, Name: h.Name, OS: h.OS, URLs: []string{h.URL}})
		}
	}
	return out
}

func (p peerSource) PeerTransport(id string) (http.RoundTripper, error) { return p.g.PeerTransport(id) }
func (p peerSource) Subscribe() (<-chan struct{}, func())               { return p.g.Subscribe() }

// peerB is a meshtray device B: identity, grants, auth middleware and the
// A2A server on an HTTPS listener presenting cert (B's own, or another
// device's to test the pin).
type peerB struct {
	id     *pairing.Identity
	grants *pairing.Grants
	srv    *agent.Server
	hs     *httptest.Server
	grant  pairing.Grant
	token  string
}

func newPeerB(t *testing.T, serveAs *pairing.Identity) *peerB {
	t.Helper()
	return newPeerBSigned(t, serveAs, nil)
}

// newPeerBSigned is newPeerB whose card is signed by signAs (nil: by B,
// as app signs it).
func newPeerBSigned(t *testing.T, serveAs, signAs *pairing.Identity) *peerB {
	t.Helper()
	ks := keychain.NewMemory()
	id, err := pairing.LoadOrCreateIdentity(ks, "bee")
	if err != nil {
		t.Fatal(err)
	}
	g, err := pairing.NewGrants(ks, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	gr, tok, err := g.Issue(pairing.IssueRequest{Name: "ant", Scopes: pairing.Scopes{pairing.ScopeAgent}, Policy: pairing.PolicyAllow})
	if err != nil {
		t.Fatal(err)
	}
	if signAs == nil {
		signAs = id
	}
	srv := agent.NewServer(agent.Options{DeviceName: "bee", Executor: &scriptExecutor{}, Approver: approveAll{}, Manifest: testManifest,
		SignCard: func(card []byte) ([]byte, error) { return cardsig.SignAs(card, signAs) }})
	srv.SetPublished(true)
	auth := &pairing.Auth{Grants: g}
	mux := http.NewServeMux()
	mux.Handle("GET "+agent.CardPath, auth.Public(srv.CardHandler()))
	mux.Handle("POST "+agent.RPCPath, auth.Require(pairing.ScopeAgent, srv))
	hs := httptest.NewUnstartedServer(mux)
	hs.Config.ErrorLog = log.New(io.Discard, "", 0) // the pin test's refused handshakes
	if serveAs == nil {
		serveAs = id
	}
	hs.TLS = serveAs.ServerTLSConfig()
	hs.StartTLS()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		hs.CloseClientConnections()
		hs.Close()
	})
	return &peerB{id: id, grants: g, srv: srv, hs: hs, grant: gr, token: tok}
}

// holdFrom makes device A hold B's grant (what pairing leaves behind).
func holdFrom(t *testing.T, b *peerB) *pairing.Grants {
	t.Helper()
	g, err := pairing.NewGrants(keychain.NewMemory(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	if err := g.PutHeld(pairing.Held{PeerID: b.id.ID.String(), Name: "bee", OS: "Testix 1 (x86_64)", URL: b.hs.URL,
		Fingerprint: b.id.Fingerprint, Scopes: pairing.Scopes{pairing.ScopeAgent}, Token: b.token}); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestPeerAgentOverPinnedTLS(t *testing.T) {
	t.Parallel()
	b := newPeerB(t, nil)
	held := holdFrom(t, b)
	a, _ := newAgents(t, AgentsOptions{Peers: peerSource{held}})
	ob := newOutbound(t, a, OutboundOptions{})
	ctx := context.Background()

	list := a.List(ctx)
	if len(list) != 1 || list[0].Kind != AgentPeer || list[0].Status != AgentReady || list[0].Name != "bee" || list[0].Card == nil {
		t.Fatalf("peers %+v", list)
	}
	if c := list[0].Card; c.Signature != "signed" || c.SignedBy != b.id.ID.String() {
		t.Fatalf("the peer's card is %q by %q, want signed by %s", c.Signature, c.SignedBy, b.id.ID)
	}
	if !strings.HasPrefix(list[0].Card.Endpoint, b.hs.URL) {
		t.Fatalf("peer endpoint %s, want on %s", list[0].Card.Endpoint, b.hs.URL)
	}
	// By name, by device ID prefix, by full ID.
	for _, ref := range []string{"bee", "BEE", b.id.ID.String()[:7], strings.ToLower(b.id.ID.String())} {
		if got, err := a.Get(ref); err != nil || got.DeviceID != b.id.ID.String() {
			t.Fatalf("Get(%q) = %+v %v", ref, got, err)
		}
	}
	task, err := ob.Delegate(ctx, DelegateRequest{Agent: "bee", MessageInput: MessageInput{Text: "echo over tls"}})
	if err != nil {
		t.Fatal(err)
	}
	_, final := watchAll(t, ob, task.ID)
	if final.State != a2a.TaskStateCompleted || partsText(final.Artifacts[0].Parts) != "over tls" || final.AgentKind != AgentPeer {
		t.Fatalf("final %+v", final)
	}

	// Paused: 401 that keeps the held grant.
	if err := b.grants.Pause(b.grant.ID); err != nil {
		t.Fatal(err)
	}
	_, err = ob.Delegate(ctx, DelegateRequest{Agent: "bee", MessageInput: MessageInput{Text: "echo x"}})
	if !errors.Is(err, ErrAgentUnauthorized) || !strings.Contains(err.Error(), "paused") {
		t.Fatalf("paused grant: %v", err)
	}
	if _, err := held.Held(b.id.ID.String()); err != nil {
		t.Fatalf("a paused grant was dropped: %v", err)
	}
	b.grants.Resume(b.grant.ID)

	// A2A off there: the card is 404.
	b.srv.SetPublished(false)
	_, err = ob.Delegate(ctx, DelegateRequest{Agent: "bee", MessageInput: MessageInput{Text: "echo x"}})
	if !errors.Is(err, ErrCardUnpublished) || !strings.Contains(err.Error(), "meshtray a2a on") {
		t.Fatalf("unpublished: %v", err)
	}
	b.srv.SetPublished(true)

	// Revoked: the 401 drops the held grant, and the peer stays known as
	// revoked.
	if err := b.grants.Revoke(b.grant.ID); err != nil {
		t.Fatal(err)
	}
	_, err = ob.Delegate(ctx, DelegateRequest{Agent: "bee", MessageInput: MessageInput{Text: "echo x"}})
	if !errors.Is(err, ErrAgentUnauthorized) || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("revoked grant: %v", err)
	}
	if _, err := held.Held(b.id.ID.String()); !errors.Is(err, pairing.ErrNoHeld) {
		t.Fatalf("the revoked grant is still held: %v", err)
	}
	_, err = ob.Delegate(ctx, DelegateRequest{Agent: "bee", MessageInput: MessageInput{Text: "echo x"}})
	if !errors.Is(err, ErrAgentUnauthorized) || !strings.Contains(err.Error(), "revoked") || !strings.Contains(err.Error(), "pair again") {
		t.Fatalf("next call after revocation: %v", err)
	}
	waitFor(t, "the revoked peer listed as revoked", func() bool {
		l := a.List(ctx)
		return len(l) == 1 && l[0].Status == AgentRevoked
	})
}

func TestPeerAgentPinMismatch(t *testing.T) {
	t.Parallel()
	other, err := pairing.LoadOrCreateIdentity(keychain.NewMemory(), "mallory")
	if err != nil {
		t.Fatal(err)
	}
	b := newPeerB(t, other) // B's address, someone else's certificate
	held := holdFrom(t, b)
	a, _ := newAgents(t, AgentsOptions{Peers: peerSource{held}})
	ob := newOutbound(t, a, OutboundOptions{})
	_, err = ob.Delegate(context.Background(), DelegateRequest{Agent: "bee", MessageInput: MessageInput{Text: "echo x"}})
	if !errors.Is(err, pairing.ErrPinMismatch) || !strings.Contains(err.Error(), "another certificate") {
		t.Fatalf("Delegate = %v", err)
	}
	if got, _ := a.Get("bee"); got.Status != AgentInvalid {
		t.Fatalf("agent %+v", got)
	}
}

// TestPeerCardSignedByAnotherDevice: the paired certificate answers,
// but the card's signature is another device's: refused like a pin
// mismatch.
func TestPeerCardSignedByAnotherDevice(t *testing.T) {
	t.Parallel()
	other, err := pairing.LoadOrCreateIdentity(keychain.NewMemory(), "mallory")
	if err != nil {
		t.Fatal(err)
	}
	b := newPeerBSigned(t, nil, other)
	held := holdFrom(t, b)
	a, _ := newAgents(t, AgentsOptions{Peers: peerSource{held}})
	ob := newOutbound(t, a, OutboundOptions{})
	_, err = ob.Delegate(context.Background(), DelegateRequest{Agent: "bee", MessageInput: MessageInput{Text: "echo x"}})
	if !errors.Is(err, pairing.ErrPinMismatch) || !strings.Contains(err.Error(), "not signed by the certificate it paired with") {
		t.Fatalf("Delegate = %v", err)
	}
	if got, _ := a.Get("bee"); got.Status != AgentInvalid {
		t.Fatalf("agent %+v", got)
	}
}

func TestClassifyTransportErrors(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	hc := &http.Client{Transport: headerTimeout{rt: newExternalTransport(), d: time.Second}}
	_, err = hc.Get("http://" + addr + "/")
	if c := classify("x", false, err); !errors.Is(c, ErrAgentUnreachable) || !strings.Contains(c.Error(), "connection refused") {
		t.Fatalf("refused: %v", c)
	}
	// A server that accepts and never answers: the header timeout.
	stall := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer stall.Close()
	hc2 := &http.Client{Transport: headerTimeout{rt: &http.Transport{}, d: 200 * time.Millisecond}}
	start := time.Now()
	_, err = hc2.Get(stall.URL)
	if c := classify("x", false, err); !errors.Is(c, ErrAgentUnreachable) || !strings.Contains(c.Error(), "no answer in time") {
		t.Fatalf("stall: %v", c)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("header timeout took %v", d)
	}
	hc2.CloseIdleConnections()
	stall.CloseClientConnections()
}

// An agent that echoes our Authorization header in an error body must not
// get the token into an error (which reaches logs and the terminal); a
// JSON-RPC -31401 (a2a-go's unauthenticated) counts as a refused token.
func TestAgentErrorsNeverCarryTheToken(t *testing.T) {
	t.Parallel()
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "unauth") {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"jsonrpc":"2.0","id":"x","error":{"code":-31401,"message":"unauthenticated"}}`))
			return
		}
		http.Error(w, "forbidden for "+r.Header.Get("Authorization")+" and mt1_abc_DEF-123", http.StatusForbidden)
	}))
	t.Cleanup(echo.Close)
	ctx := context.Background()
	for _, tc := range []struct {
		path string
		kind error
	}{
		{"/rpc", ErrAgentRefused},
		{"/unauth", ErrAgentUnauthorized},
	} {
		card := CardInfo{Name: "echo", Endpoint: echo.URL + tc.path}
		rem, err := newRemote(ctx, "echo", false, card, &http.Transport{}, "sekrit-token-123", nil)
		if err != nil {
			t.Fatal(err)
		}
		err = rem.exchange(ctx, &a2a.MessageSendParams{Message: userMsg("hi")}, false, nil, func(a2a.Event) {})
		rem.Close()
		if !errors.Is(err, tc.kind) {
			t.Fatalf("%s: %v, want %v", tc.path, err, tc.kind)
		}
		if strings.Contains(err.Error(), "sekrit-token-123") || strings.Contains(err.Error(), "mt1_abc") {
			t.Fatalf("%s: the error carries a token: %v", tc.path, err)
		}
	}
}

func TestMessageInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		in    MessageInput
		kinds string // part kinds in order, or "" for an error
		req   string // requestLine
	}{
		{"text", MessageInput{Text: "hello\nworld"}, "text", "hello"},
		{"data", MessageInput{Data: map[string]any{"capability": "device.info"}}, "data", `{"capability":"device.info"}`},
		{"all three", MessageInput{Text: "see file", Data: map[string]any{"k": 1}, File: &FileInput{Name: "/home/me/notes.txt", Bytes: []byte("hi")}}, "text,data,file", "see file"},
		{"file only", MessageInput{File: &FileInput{Name: "photo.png", Bytes: []byte{0x89, 'P', 'N', 'G'}}}, "file", "[file photo.png]"},
		{"blank text", MessageInput{Text: "  \n "}, "", ""},
		{"nothing", MessageInput{}, "", ""},
		{"file too big", MessageInput{File: &FileInput{Name: "big.bin", Bytes: make([]byte, MaxFileBytes+1)}}, "", ""},
		{"text too long", MessageInput{Text: strings.Repeat("x", MaxMessageText+1)}, "", ""},
		{"not utf-8", MessageInput{Text: "\xff\xfe"}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := tc.in.message()
			if tc.kinds == "" {
				if !errors.Is(err, ErrInvalidInput) {
					t.Fatalf("message() = %v, want ErrInvalidInput", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, p := range m.Parts {
				switch v := p.(type) {
				case a2a.TextPart:
					kinds = append(kinds, "text")
				case a2a.DataPart:
					kinds = append(kinds, "data")
				case a2a.FilePart:
					kinds = append(kinds, "file")
					fb := v.File.(a2a.FileBytes)
					if strings.Contains(fb.Name, "/") || fb.MimeType == "" || fb.Bytes == "" {
						t.Fatalf("file part %+v", fb)
					}
					if tc.name == "file only" && fb.MimeType != "image/png" {
						t.Fatalf("mime %q", fb.MimeType)
					}
				}
			}
			if strings.Join(kinds, ",") != tc.kinds || m.Role != a2a.MessageRoleUser || m.ID == "" {
				t.Fatalf("parts %v, message %+v", kinds, m)
			}
			if got := requestLine(tc.in); got != tc.req {
				t.Fatalf("requestLine = %q, want %q", got, tc.req)
			}
		})
	}
}
