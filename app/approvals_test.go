package app

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestApprovalsDecide(t *testing.T) {
	t.Parallel()
	var notices atomic.Int32
	q := newApprovals(time.Minute, func() { notices.Add(1) })
	got := make(chan ApprovalDecision, 1)
	id, err := q.Post(Approval{Kind: KindDelegation, GrantID: "g1", Peer: "phone", Summary: "device.info"},
		func(d ApprovalDecision) { got <- d })
	if err != nil {
		t.Fatal(err)
	}
	if l := q.List(); len(l) != 1 || l[0].ID != id || l[0].Expires.Sub(l[0].Created) != time.Minute {
		t.Fatalf("List = %+v", l)
	}
	if err := q.Decide(id, ApprovalDecision{Decision: "maybe"}); !errors.Is(err, ErrBadDecision) {
		t.Fatalf("bad decision: %v", err)
	}
	if err := q.Decide(id, ApprovalDecision{Decision: DecisionApprove, Always: true}); err != nil {
		t.Fatal(err)
	}
	d := <-got
	if !d.Approved() || !d.ByOwner || !d.Always {
		t.Fatalf("decision = %+v", d)
	}
	if err := q.Decide(id, ApprovalDecision{Decision: DecisionDeny}); !errors.Is(err, ErrNoApproval) {
		t.Fatalf("second decision: %v, want ErrNoApproval", err)
	}
	if len(q.List()) != 0 {
		t.Fatal("decided approval still listed")
	}
	if notices.Load() != 2 {
		t.Fatalf("%d change notices, want 2 (post, decide)", notices.Load())
	}
}

func TestApprovalsTimeout(t *testing.T) {
	t.Parallel()
	q := newApprovals(20*time.Millisecond, nil)
	d, err := q.Ask(context.Background(), Approval{Kind: KindDelegation, Peer: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Approved() || d.ByOwner || d.Reason == "" {
		t.Fatalf("timeout decision = %+v, want a denial with a reason, not by the owner", d)
	}
	if len(q.List()) != 0 {
		t.Fatal("expired approval still listed")
	}
}

func TestApprovalsAskWithdrawnOnCancel(t *testing.T) {
	t.Parallel()
	q := newApprovals(time.Minute, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := q.Ask(ctx, Approval{Kind: KindDelegation, Peer: "x"})
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for len(q.List()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("approval never queued")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Ask after cancel: %v", err)
	}
	if len(q.List()) != 0 {
		t.Fatal("withdrawn approval still listed")
	}
}

func TestApprovalsBounded(t *testing.T) {
	t.Parallel()
	q := newApprovals(time.Minute, nil)
	defer q.Close()
	for i := range maxPendingPerGrant {
		if _, err := q.Post(Approval{GrantID: "g", Peer: "p"}, func(ApprovalDecision) {}); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
	}
	if _, err := q.Post(Approval{GrantID: "g", Peer: "p"}, func(ApprovalDecision) {}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("post over the per-grant bound: %v, want ErrQueueFull", err)
	}
	for i := maxPendingPerGrant; i < maxPendingApprovals; i++ {
		if _, err := q.Post(Approval{Peer: "p"}, func(ApprovalDecision) {}); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
	}
	if _, err := q.Post(Approval{Peer: "p"}, func(ApprovalDecision) {}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("post over the total bound: %v, want ErrQueueFull", err)
	}
}

func TestApprovalsCloseDeniesAll(t *testing.T) {
	t.Parallel()
	q := newApprovals(time.Minute, nil)
	got := make(chan ApprovalDecision, 3)
	for range 3 {
		if _, err := q.Post(Approval{Peer: "p"}, func(d ApprovalDecision) { got <- d }); err != nil {
			t.Fatal(err)
		}
	}
	q.Close()
	for range 3 {
		if d := <-got; d.Approved() || d.Reason != "node shutting down" {
			t.Fatalf("decision at close = %+v", d)
		}
	}
}

func TestHubCoalesces(t *testing.T) {
	t.Parallel()
	var h hub
	s := h.Subscribe()
	defer s.Close()
	for range 100 {
		h.Publish(EventApprovals)
	}
	h.Publish(EventStatus)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := s.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != EventApprovals || got[1] != EventStatus {
		t.Fatalf("Next = %v, want [approvals status] once each", got)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if got, err := s.Next(short); err == nil {
		t.Fatalf("Next after drain = %v, want a timeout", got)
	}
}
