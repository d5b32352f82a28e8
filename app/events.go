package app

import (
	"context"
	"slices"
	"sync"
)

// EventType names what changed; a subscriber re-reads that part of the state.
type EventType string

const (
	EventStatus    EventType = "status"    // A2A toggle, LAN toggle, tailnet state, listeners
	EventApprovals EventType = "approvals" // the approvals queue
	EventPeers     EventType = "peers"     // the peer table
	EventGrants    EventType = "grants"    // issued or held grants
	EventTasks     EventType = "tasks"     // incoming or outbound tasks
	EventPairing   EventType = "pairing"   // pairing sessions and requests
)

// everything is the notice a new /events stream starts with: whatever the
// subscriber saw before it connected may have changed, so it re-reads all.
var everything = []EventType{EventStatus, EventApprovals, EventPeers, EventGrants, EventTasks, EventPairing, EventAgents, EventUI, EventFiles}

// hub fans change notices out to subscribers. Notices coalesce: a slow
// subscriber sees each changed type once, never a backlog, and a publisher
// never blocks.
type hub struct {
	mu   sync.Mutex
	subs map[*Subscription]struct{} // guarded by mu
}

// Subscription receives change notices; see Next.
type Subscription struct {
	h    *hub
	wake chan struct{} // capacity 1

	mu      sync.Mutex
	pending []EventType // guarded by mu; no duplicates
}

func (h *hub) Subscribe() *Subscription {
	s := &Subscription{h: h, wake: make(chan struct{}, 1)}
	h.mu.Lock()
	if h.subs == nil {
		h.subs = make(map[*Subscription]struct{})
	}
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	return s
}

// Publish tells every subscriber that t changed.
func (h *hub) Publish(t EventType) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		s.mu.Lock()
		if !slices.Contains(s.pending, t) {
			s.pending = append(s.pending, t)
		}
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// Next blocks until something changed and returns what, or ctx's error.
func (s *Subscription) Next(ctx context.Context) ([]EventType, error) {
	for {
		s.mu.Lock()
		if len(s.pending) > 0 {
			out := s.pending
			s.pending = nil
			s.mu.Unlock()
			return out, nil
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.wake:
		}
	}
}

// Close unsubscribes.
func (s *Subscription) Close() {
	s.h.mu.Lock()
	delete(s.h.subs, s)
	s.h.mu.Unlock()
}
