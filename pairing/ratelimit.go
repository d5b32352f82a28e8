package pairing

import (
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// sourceLimiter is a token bucket per source network (SourceKey) plus one
// global bucket,
// in a table of at most maxSources entries: a stranger can make us remember
// only so much.
type sourceLimiter struct {
	every      rate.Limit
	burst      int
	maxSources int
	global     *rate.Limiter

	mu      sync.Mutex
	sources map[netip.Prefix]*sourceEntry // guarded by mu
}

type sourceEntry struct {
	lim  *rate.Limiter
	seen time.Time
}

func newSourceLimiter(perSource rate.Limit, burst int, global rate.Limit, globalBurst, maxSources int) *sourceLimiter {
	return &sourceLimiter{
		every:      perSource,
		burst:      burst,
		maxSources: maxSources,
		global:     rate.NewLimiter(global, globalBurst),
		sources:    make(map[netip.Prefix]*sourceEntry),
	}
}

// loopbackKey is the one source every loopback address counts as: any
// local user can send from all of 127/8 and ::1.
var loopbackKey = netip.MustParsePrefix("127.0.0.0/8")

// SourceKey is the network a source address is counted under by every
// per-source limit (pairing calls, listener connections): an IPv4
// address; an IPv6 /64, since one host usually owns a whole /64
// (RFC 4291 §2.5.4, SLAAC); all of loopback as one source. The zero Addr
// gives the zero Prefix.
func SourceKey(a netip.Addr) netip.Prefix {
	a = a.Unmap()
	if a.IsLoopback() {
		return loopbackKey
	}
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}

func sourceKey(a netip.Addr) netip.Prefix { return SourceKey(a) }

// allow spends one token of src's bucket and one of the global bucket at
// time now, and reports whether both had one. It spends nothing when
// either is empty: a call the global bucket refuses does not cost the
// source (both buckets change only under mu, so the check holds).
func (l *sourceLimiter) allow(src netip.Addr, now time.Time) bool {
	key := sourceKey(src)
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.sources[key]
	if e == nil {
		if len(l.sources) >= l.maxSources {
			l.evictLocked(now)
		}
		e = &sourceEntry{lim: rate.NewLimiter(l.every, l.burst)}
		l.sources[key] = e
	}
	e.seen = now
	if e.lim.TokensAt(now) < 1 || l.global.TokensAt(now) < 1 {
		return false
	}
	return e.lim.AllowN(now, 1) && l.global.AllowN(now, 1)
}

// evictLocked drops sources whose bucket has refilled (forgetting them
// changes nothing) and, if none has, the least recently seen one.
func (l *sourceLimiter) evictLocked(now time.Time) {
	var oldest netip.Prefix
	var oldestSeen time.Time
	for k, e := range l.sources {
		if e.lim.TokensAt(now) >= float64(l.burst) {
			delete(l.sources, k)
			continue
		}
		if oldestSeen.IsZero() || e.seen.Before(oldestSeen) {
			oldest, oldestSeen = k, e.seen
		}
	}
	if len(l.sources) >= l.maxSources {
		delete(l.sources, oldest)
	}
}

// size is the number of remembered sources.
func (l *sourceLimiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sources)
}
