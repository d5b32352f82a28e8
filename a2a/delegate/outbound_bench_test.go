package delegate

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"

	agent "meshtray/a2a"
	"meshtray/store"
)

// What meshtray's outbound side costs on top of a bare a2a-go client, side
// by side on loopback against the same a2asrv agent (echo, streaming card):
//
//	go test -run '^$' -bench 'Outbound|Forward' -benchmem ./a2a/delegate
//
// BenchmarkOutbound/direct       a2a-go client, message/stream, drain to final
// BenchmarkOutbound/delegate     Outbound.Delegate + Watch to End (card TTL, tracker, view)
// BenchmarkOutbound/delegate-db  the same, the view written through to a SQLite file (package store)
// BenchmarkForward/direct        a2a-go client -> a2asrv, message/send (blocking)
// BenchmarkForward/via-meshtray  a2a-go client -> meshtray (auth, policy allow, forward executor) -> a2asrv
//
// Figures are printed, not asserted.

func BenchmarkOutbound(b *testing.B) {
	up := newUpstream(b, upstreamOpts{streaming: true})
	ctx := context.Background()
	b.Run("direct", func(b *testing.B) {
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		c, err := a2aclient.NewFromEndpoints(ctx, []a2a.AgentInterface{{URL: up.hs.URL + "/rpc", Transport: a2a.TransportProtocolJSONRPC}},
			a2aclient.WithJSONRPCTransport(&http.Client{Transport: tr}))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			for _, err := range c.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: userMsg("echo x")}) {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	delegate := func(b *testing.B, db OutboundStore) {
		a, _ := newAgents(b, AgentsOptions{})
		ob := NewOutbound(OutboundOptions{Agents: a, Store: db})
		defer ob.Close()
		ag, err := a.Add(ctx, up.hs.URL, "")
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			task, err := ob.Delegate(ctx, DelegateRequest{Agent: ag.ID, MessageInput: MessageInput{Text: "echo x"}})
			if err != nil {
				b.Fatal(err)
			}
			if err := ob.Watch(ctx, task.ID, func(OutboundEvent) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("delegate", func(b *testing.B) { delegate(b, nil) })
	b.Run("delegate-db", func(b *testing.B) {
		db, err := store.Open(filepath.Join(b.TempDir(), store.DefaultFile), store.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		delegate(b, db)
	})
}

func BenchmarkForward(b *testing.B) {
	up := newUpstream(b, upstreamOpts{streaming: true})
	ctx := context.Background()
	send := func(b *testing.B, c *a2aclient.Client) {
		b.ReportAllocs()
		for b.Loop() {
			res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: userMsg("echo x")})
			if err != nil {
				b.Fatal(err)
			}
			if tk, ok := res.(*a2a.Task); !ok || tk.Status.State != a2a.TaskStateCompleted {
				b.Fatalf("result %+v", res)
			}
		}
	}
	b.Run("direct", func(b *testing.B) {
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		c, err := a2aclient.NewFromEndpoints(ctx, []a2a.AgentInterface{{URL: up.hs.URL + "/rpc", Transport: a2a.TransportProtocolJSONRPC}},
			a2aclient.WithJSONRPCTransport(&http.Client{Transport: tr}))
		if err != nil {
			b.Fatal(err)
		}
		send(b, c)
	})
	b.Run("via-meshtray", func(b *testing.B) {
		fw, err := NewForwardExecutor(ForwardOptions{URL: up.hs.URL})
		if err != nil {
			b.Fatal(err)
		}
		defer fw.Close()
		srv := agent.NewServer(agent.Options{DeviceName: "bench", Executor: fw, Approver: approveAll{}})
		srv.SetPublished(true)
		defer srv.Shutdown(ctx)
		auth := &testAuth{}
		auth.Add(tokA, "grantA", "laptop")
		mux := http.NewServeMux()
		mux.Handle("POST "+agent.RPCPath, auth.Wrap(srv))
		hs := httptest.NewServer(mux)
		defer hs.Close()
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		c, err := a2aclient.NewFromEndpoints(ctx, []a2a.AgentInterface{{URL: hs.URL + agent.RPCPath, Transport: a2a.TransportProtocolJSONRPC}},
			a2aclient.WithJSONRPCTransport(&http.Client{Transport: tr}), a2aclient.WithInterceptors(bearer{token: tokA}))
		if err != nil {
			b.Fatal(err)
		}
		send(b, c)
	})
}
