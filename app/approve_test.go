package app

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	agent "meshtray/a2a"
	"meshtray/keychain"
	"meshtray/nodes"
	"meshtray/pairing"
)

// approverNode is the part of a Node the approvers use: its grants and
// the approvals queue, with no grant watcher (so only the approvers' own
// checks stand between an approval and the work).
func approverNode(t *testing.T) (*Node, pairing.Grant) {
	t.Helper()
	g, err := pairing.NewGrants(keychain.NewMemory(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	gr, _, err := g.Issue(pairing.IssueRequest{Name: "phone", Scopes: pairing.Scopes{pairing.ScopeAgent, pairing.ScopeNode}})
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{log: slog.New(slog.DiscardHandler), grants: g, approvals: newApprovals(time.Minute, nil)}
	t.Cleanup(n.approvals.Close)
	return n, gr
}

// nextApproval waits for the one pending approval.
func nextApproval(t *testing.T, n *Node) Approval {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if l := n.approvals.List(); len(l) == 1 {
			return l[0]
		}
		if time.Now().After(deadline) {
			t.Fatal("no pending approval")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestApprovalOfAGoneGrantRunsNothing: the owner approves a request whose
// grant was paused or revoked while it waited; the approvers re-check the
// grant and refuse.
func TestApprovalOfAGoneGrantRunsNothing(t *testing.T) {
	t.Parallel()
	for _, change := range []string{"pause", "revoke"} {
		for _, kind := range []ApprovalKind{KindDelegation, KindCapability} {
			t.Run(change+"/"+string(kind), func(t *testing.T) {
				t.Parallel()
				n, gr := approverNode(t)
				p := &pairing.Principal{Grant: gr, Listener: pairing.ListenerLAN}
				type res struct {
					ok     bool
					reason string
				}
				done := make(chan res, 1)
				go func() {
					if kind == KindDelegation {
						d := taskApprover{n}.ApproveTask(context.Background(), agent.TaskApproval{Caller: p, Summary: "device.info", Queued: func() {}})
						done <- res{d.Approved, d.Reason}
						return
					}
					ok, reason := capabilityApprover{n}.ApproveCall(context.Background(), nodes.CallApproval{Call: nodes.Call{Capability: "device.info", Caller: p}, Summary: "device.info"})
					done <- res{ok, reason}
				}()
				a := nextApproval(t, n)
				var err error
				if change == "pause" {
					err = n.grants.Pause(gr.ID)
				} else {
					err = n.grants.Revoke(gr.ID)
				}
				if err != nil {
					t.Fatal(err)
				}
				if err := n.Decide(a.ID, ApprovalDecision{Decision: DecisionApprove}); err != nil {
					t.Fatal(err)
				}
				if r := <-done; r.ok || r.reason == "" {
					t.Fatalf("approval of a %sd grant: approved %v, reason %q; want a refusal saying why", change, r.ok, r.reason)
				}
			})
		}
	}
}

// TestAlwaysOnlyForDelegations: "always allow" sets the grant's policy to
// allow only from a delegation's approval; on a capability call it is an
// error (it would silently widen the grant), as are scopes on anything but
// a pairing.
func TestAlwaysOnlyForDelegations(t *testing.T) {
	t.Parallel()
	n, gr := approverNode(t)
	p := &pairing.Principal{Grant: gr, Listener: pairing.ListenerLAN}
	done := make(chan bool, 1)
	go func() {
		ok, _ := capabilityApprover{n}.ApproveCall(context.Background(), nodes.CallApproval{Call: nodes.Call{Capability: "system.notify", Caller: p}, Summary: "system.notify"})
		done <- ok
	}()
	a := nextApproval(t, n)
	var bad *badRequestError
	if err := n.Decide(a.ID, ApprovalDecision{Decision: DecisionApprove, Always: true}); !errors.As(err, &bad) {
		t.Fatalf("always on a capability call: %v, want a bad request", err)
	}
	if err := n.Decide(a.ID, ApprovalDecision{Decision: DecisionApprove, Scopes: pairing.Scopes{pairing.ScopeAgent}}); !errors.As(err, &bad) {
		t.Fatalf("scopes on a capability call: %v, want a bad request", err)
	}
	if err := n.Decide(a.ID, ApprovalDecision{Decision: DecisionApprove}); err != nil {
		t.Fatal(err)
	}
	if !<-done {
		t.Fatal("the plain approval was refused")
	}
	if g, _ := n.grants.Get(gr.ID); g.Policy != pairing.PolicyAsk {
		t.Fatalf("grant policy %q after a capability approval, want ask", g.Policy)
	}

	// A delegation's "always" does set it.
	dd := make(chan agent.Decision, 1)
	go func() {
		dd <- taskApprover{n}.ApproveTask(context.Background(), agent.TaskApproval{Caller: p, Summary: "device.info", Queued: func() {}})
	}()
	a = nextApproval(t, n)
	if err := n.Decide(a.ID, ApprovalDecision{Decision: DecisionApprove, Always: true}); err != nil {
		t.Fatal(err)
	}
	if d := <-dd; !d.Approved {
		t.Fatalf("delegation: %+v", d)
	}
	if g, _ := n.grants.Get(gr.ID); g.Policy != pairing.PolicyAllow {
		t.Fatalf("grant policy %q after always on a delegation, want allow", g.Policy)
	}
}

// TestWithdrawGrant: only the grant's approvals go, each with the reason.
func TestWithdrawGrant(t *testing.T) {
	t.Parallel()
	q := newApprovals(time.Minute, nil)
	got := make(chan ApprovalDecision, 4)
	for _, g := range []string{"g1", "g2", "g1", ""} {
		if _, err := q.Post(Approval{Kind: KindDelegation, GrantID: g, Peer: "x"}, func(d ApprovalDecision) { got <- d }); err != nil {
			t.Fatal(err)
		}
	}
	if n := q.WithdrawGrant("g1", "withdrawn: the grant was paused"); n != 2 {
		t.Fatalf("WithdrawGrant = %d, want 2", n)
	}
	for range 2 {
		if d := <-got; d.Approved() || d.ByOwner || d.Reason != "withdrawn: the grant was paused" {
			t.Fatalf("withdrawn decision %+v", d)
		}
	}
	if l := q.List(); len(l) != 2 || l[0].GrantID != "g2" || l[1].GrantID != "" {
		t.Fatalf("left %+v", l)
	}
	if n := q.WithdrawGrant("", "x"); n != 0 {
		t.Fatalf("WithdrawGrant(\"\") = %d", n)
	}
	q.Close()
}

// TestDelegationDetailAsSent: the detail an owner reads of a delegation is
// the message as sent: its text, its data as JSON and its files, with "<",
// ">" and "&" as they are (not \u003c...), and invisible characters left
// for the window and the CLI to escape.
func TestDelegationDetailAsSent(t *testing.T) {
	t.Parallel()
	n, gr := approverNode(t)
	p := &pairing.Principal{Grant: gr, Listener: pairing.ListenerLAN}
	msg := a2a.NewMessage(a2a.MessageRoleUser,
		a2a.TextPart{Text: "compare <b>this</b> & that\u202e"},
		a2a.DataPart{Data: map[string]any{"q": "<script>&amp;"}},
		a2a.FilePart{File: a2a.FileURI{FileMeta: a2a.FileMeta{Name: "report.pdf"}, URI: "https://h/r?a=1&b=2"}},
		a2a.TextPart{Text: "second"},
	)
	done := make(chan agent.Decision, 1)
	go func() {
		done <- taskApprover{n}.ApproveTask(context.Background(), agent.TaskApproval{Caller: p, Summary: "compare", Message: msg, Queued: func() {}})
	}()
	a := nextApproval(t, n)
	want := "compare <b>this</b> & that\u202e\nsecond\n" + `{"q":"<script>&amp;"}` + "\n[file report.pdf]"
	if a.Detail != want {
		t.Errorf("Detail = %q\nwant     %q", a.Detail, want)
	}
	if err := n.Decide(a.ID, ApprovalDecision{Decision: DecisionDeny}); err != nil {
		t.Fatal(err)
	}
	if d := <-done; d.Approved {
		t.Fatal("denied, yet approved")
	}
	if got := messageDetail(nil); got != "" {
		t.Errorf("messageDetail(nil) = %q", got)
	}
}
