package pairing

import "sync"

// notifier fans coalesced change notices out to subscribers (STYLE.md,
// "Coalesce wake-ups"). The zero value is ready.
type notifier struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{} // guarded by mu
}

func (n *notifier) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	if n.subs == nil {
		n.subs = make(map[chan struct{}]struct{})
	}
	n.subs[ch] = struct{}{}
	n.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			n.mu.Lock()
			delete(n.subs, ch)
			close(ch)
			n.mu.Unlock()
		})
	}
}

func (n *notifier) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch := range n.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
