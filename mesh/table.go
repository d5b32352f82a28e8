package mesh

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"meshtray/egress"
)

// Bounds on the peer table (everything a stranger can make us hold).
const (
	maxRows       = 256 // device IDs in the table
	maxManualRows = 64  // rows added by hand
	maxAddrs      = 8   // addresses kept per peer and source
	// maxStrangerRows bounds the rows a LAN stranger can fill: unpaired
	// rows seen only over mDNS (anyone on the link can announce and
	// answer for any number of identities). The other maxRows-
	// maxStrangerRows stay for the user's own devices: paired, tailnet
	// (the user's tailnet admits them) and manual rows, which also evict
	// stranger rows when the table is full.
	maxStrangerRows = 128
)

// sourceOrder is the order of Peer.Sources.
var sourceOrder = []Source{SourceMDNS, SourceTailscale, SourceManual}

// sighting is one source's view of a peer.
type sighting struct {
	addrs   []string  // "host:port", at most maxAddrs
	seen    time.Time // last confirmed
	expires time.Time // zero: no expiry (tailscale follows Status, manual stays)
	online  bool
	node    string // tailnet node name
	// fromNetwork: a manual sighting added by a request from the network;
	// its re-probes follow the egress policy as its first probe did.
	fromNetwork bool
}

type row struct {
	hello Hello // the latest verified hello
	by    map[Source]*sighting
}

// Table is the merged peer table: one row per device ID, with each source's
// addresses and liveness (DESIGN.md "Discovery"). Rows come only from verified hellos
// (the hello's fp is the presented certificate's, its id the device ID of
// that fp), so a row's ID and FP never change. Safe for concurrent use.
type Table struct {
	now    func() time.Time
	paired func(id string) bool
	selfID func() string
	probe  func(ctx context.Context, hostport, wantFP string) (Hello, error)
	port   int

	// mu guards rows and subs.
	mu   sync.Mutex
	rows map[string]*row
	subs map[chan struct{}]struct{}
}

func newTable(now func() time.Time, paired func(string) bool, selfID func() string, port int) *Table {
	if now == nil {
		now = time.Now
	}
	if paired == nil {
		paired = func(string) bool { return false }
	}
	if selfID == nil {
		selfID = func() string { return "" }
	}
	return &Table{
		now: now, paired: paired, selfID: selfID, port: port,
		rows: make(map[string]*row),
		subs: make(map[chan struct{}]struct{}),
	}
}

// Snapshot returns a copy of every row, sorted by name then ID.
func (t *Table) Snapshot() []Peer {
	t.mu.Lock()
	out := make([]Peer, 0, len(t.rows))
	for _, r := range t.rows {
		out = append(out, r.peer())
	}
	t.mu.Unlock()
	for i := range out {
		out[i].Paired = t.paired(out[i].ID)
	}
	slices.SortFunc(out, func(a, b Peer) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// Get returns a copy of the row for device ID id.
func (t *Table) Get(id string) (Peer, bool) {
	t.mu.Lock()
	r, ok := t.rows[id]
	var p Peer
	if ok {
		p = r.peer()
	}
	t.mu.Unlock()
	if ok {
		p.Paired = t.paired(id)
	}
	return p, ok
}

// Subscribe returns a channel that receives a value after the table changed
// (rows added or removed, addresses, online, name, OS or A2A changed; a mere
// refresh of last-seen does not notify). Notifications coalesce: the channel
// has capacity 1 and a send never blocks. cancel stops the subscription.
func (t *Table) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	t.mu.Lock()
	t.subs[ch] = struct{}{}
	t.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			t.mu.Lock()
			delete(t.subs, ch)
			t.mu.Unlock()
		})
	}
}

// notifyLocked wakes every subscriber. t.mu must be held.
func (t *Table) notifyLocked() {
	for ch := range t.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// AddManual probes rawURL's GET /mesh/hello and adds the peer with source
// manual. rawURL is https://host[:port][/] (port defaults to the table's
// port), loopback hosts included (a second node on this machine serves TLS
// on its loopback listener too). Plain http:// is refused: without a
// certificate nothing proves the answer's id and fp, so any local process
// could claim a paired peer's identity and have its held token sent to it.
// Errors: ErrBadURL, ErrSelf, ErrTableFull, ErrConflict, and the probe's
// (ErrNotMeshtray, ErrFingerprint, ErrDeviceID, transport errors).
func (t *Table) AddManual(ctx context.Context, rawURL string) (Peer, error) {
	if t.probe == nil {
		return Peer{}, fmt.Errorf("%w: no prober", ErrBadURL)
	}
	hostport, err := parsePeerURL(rawURL, t.port)
	if err != nil {
		return Peer{}, err
	}
	h, err := t.probe(ctx, hostport, "")
	if err != nil {
		return Peer{}, err
	}
	if h.ID == t.selfID() {
		return Peer{}, ErrSelf
	}
	if err := t.upsert(h, SourceManual, []string{hostport}, 0, ""); err != nil {
		return Peer{}, err
	}
	t.mu.Lock()
	if r := t.rows[h.ID]; r != nil && r.by[SourceManual] != nil {
		// A later add by the owner vouches for the address.
		r.by[SourceManual].fromNetwork = egress.IsFromNetwork(ctx)
	}
	t.mu.Unlock()
	p, _ := t.Get(h.ID)
	return p, nil
}

// Remove forgets a peer added by hand (its manual source); other sources
// stay. It reports whether there was one.
func (t *Table) Remove(id string) bool {
	return t.drop(id, SourceManual)
}

// parsePeerURL checks a manual peer's URL (https://host[:port][/]) and
// returns its "host:port".
func parsePeerURL(raw string, defPort int) (hostport string, err error) {
	if !strings.Contains(raw, "://") {
		return "", fmt.Errorf("%w: %q has no scheme; want https://host[:port], e.g. https://192.168.1.20:%d", ErrBadURL, clipURL(raw), defPort)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadURL, err)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/") {
		return "", fmt.Errorf("%w: want https://host[:port]", ErrBadURL)
	}
	switch u.Scheme {
	case "https":
	case "http":
		return "", fmt.Errorf("%w: plain http proves no identity; use https:// (loopback too)", ErrBadURL)
	default:
		return "", fmt.Errorf("%w: scheme must be https", ErrBadURL)
	}
	host := u.Hostname()
	if host == "" {
		return "", fmt.Errorf("%w: no host", ErrBadURL)
	}
	port := defPort
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("%w: bad port", ErrBadURL)
		}
		port = n
	}
	return net.JoinHostPort(host, strconv.Itoa(port)), nil
}

// upsert records a verified hello seen through src at addrs. ttl > 0 makes
// the sighting expire unless refreshed within ttl.
func (t *Table) upsert(h Hello, src Source, addrs []string, ttl time.Duration, node string) error {
	now := t.now()
	if len(addrs) > maxAddrs {
		addrs = addrs[:maxAddrs]
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.rows[h.ID]
	if ok && r.hello.FP != h.FP {
		return ErrConflict
	}
	changed := false
	if !ok {
		if err := t.makeRoomLocked(h.ID, src); err != nil {
			return err
		}
		r = &row{by: make(map[Source]*sighting)}
		t.rows[h.ID] = r
		changed = true
	}
	if r.hello != h {
		r.hello = h
		changed = true
	}
	s := r.by[src]
	if s == nil && src == SourceManual && t.countLocked(SourceManual) >= maxManualRows {
		if len(r.by) == 0 {
			delete(t.rows, h.ID)
		}
		return ErrTableFull
	}
	if s == nil {
		s = &sighting{}
		r.by[src] = s
		changed = true
	}
	if !slices.Equal(s.addrs, addrs) {
		s.addrs = slices.Clone(addrs)
		changed = true
	}
	if !s.online {
		s.online = true
		changed = true
	}
	if node != "" && node != s.node {
		s.node = node
		changed = true
	}
	s.seen = now
	s.expires = time.Time{}
	if ttl > 0 {
		s.expires = now.Add(ttl)
	}
	if changed {
		t.notifyLocked()
	}
	return nil
}

// makeRoomLocked checks that a new row for id seen through src fits, and
// evicts one to make room when it must (ErrTableFull when nothing may go).
// A stranger row (unpaired, mDNS only) fits while fewer than
// maxStrangerRows exist, else by evicting an offline stranger row. Any
// other row fits while the table has fewer than maxRows, else by evicting
// an offline unpaired row, else the stranger row seen least recently even
// if online: the user's own devices always find room. t.mu must be held.
func (t *Table) makeRoomLocked(id string, src Source) error {
	if src == SourceMDNS && !t.paired(id) {
		strangers := 0
		for rid, r := range t.rows {
			if t.strangerLocked(rid, r) {
				strangers++
			}
		}
		if strangers >= maxStrangerRows || len(t.rows) >= maxRows {
			if !t.evictLocked(func(rid string, r *row) bool { return t.strangerLocked(rid, r) && !r.online() }) {
				return ErrTableFull
			}
		}
		return nil
	}
	if len(t.rows) < maxRows {
		return nil
	}
	if t.evictLocked(func(rid string, r *row) bool { return !r.online() && !t.paired(rid) }) ||
		t.evictLocked(t.strangerLocked) {
		return nil
	}
	return ErrTableFull
}

// strangerLocked reports whether a row is one a LAN stranger can make:
// not paired and seen over mDNS alone. t.mu must be held.
func (t *Table) strangerLocked(id string, r *row) bool {
	return len(r.by) == 1 && r.by[SourceMDNS] != nil && !t.paired(id)
}

// countLocked counts the rows with a src sighting. t.mu must be held.
func (t *Table) countLocked(src Source) int {
	n := 0
	for _, r := range t.rows {
		if r.by[src] != nil {
			n++
		}
	}
	return n
}

// evictLocked drops the least recently seen row that may go, and reports
// whether there was one. t.mu must be held.
func (t *Table) evictLocked(mayGo func(id string, r *row) bool) bool {
	var victim string
	var oldest time.Time
	for id, r := range t.rows {
		if !mayGo(id, r) {
			continue
		}
		if ls := r.lastSeen(); victim == "" || ls.Before(oldest) {
			victim, oldest = id, ls
		}
	}
	if victim == "" {
		return false
	}
	delete(t.rows, victim)
	return true
}

// refresh extends src's sighting of id (its addresses unchanged) and reports
// whether there was one.
func (t *Table) refresh(id string, src Source, ttl time.Duration) bool {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.rows[id]
	if !ok || r.by[src] == nil {
		return false
	}
	s := r.by[src]
	s.seen = now
	if ttl > 0 {
		s.expires = now.Add(ttl)
	}
	if !s.online {
		s.online = true
		t.notifyLocked()
	}
	return true
}

// setOnline marks src's sighting of id online or offline.
func (t *Table) setOnline(id string, src Source, online bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.rows[id]
	if !ok || r.by[src] == nil || r.by[src].online == online {
		return
	}
	r.by[src].online = online
	if online {
		r.by[src].seen = t.now()
	}
	t.notifyLocked()
}

// drop removes src's sighting of id, and the row when no source is left.
func (t *Table) drop(id string, src Source) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.rows[id]
	if !ok || r.by[src] == nil {
		return false
	}
	delete(r.by, src)
	if len(r.by) == 0 {
		delete(t.rows, id)
	}
	t.notifyLocked()
	return true
}

// dropSource removes every src sighting, and rows left without a source.
func (t *Table) dropSource(src Source) {
	t.dropWhere(func(s Source, _ *sighting) bool { return s == src })
}

// expire drops every sighting whose expiry has passed.
func (t *Table) expire() {
	now := t.now()
	t.dropWhere(func(_ Source, s *sighting) bool { return !s.expires.IsZero() && now.After(s.expires) })
}

// dropWhere removes every sighting gone reports, and the rows left without
// a source (a row always has one); subscribers hear of it once.
func (t *Table) dropWhere(gone func(Source, *sighting) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	changed := false
	for id, r := range t.rows {
		for src, s := range r.by {
			if gone(src, s) {
				delete(r.by, src)
				changed = true
			}
		}
		if len(r.by) == 0 {
			delete(t.rows, id)
		}
	}
	if changed {
		t.notifyLocked()
	}
}

// sightingOf returns a copy of src's sighting of id.
func (t *Table) sightingOf(id string, src Source) (sighting, Hello, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.rows[id]
	if !ok || r.by[src] == nil {
		return sighting{}, Hello{}, false
	}
	s := *r.by[src]
	s.addrs = slices.Clone(s.addrs)
	return s, r.hello, true
}

// target is one liveness check: probe addrs of id's src sighting.
type target struct {
	id          string
	fp          string
	src         Source
	addrs       []string
	fromNetwork bool // sighting.fromNetwork
}

// targets lists the sightings to re-check, for sources in srcs.
func (t *Table) targets(srcs ...Source) []target {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []target
	for id, r := range t.rows {
		for _, src := range srcs {
			s := r.by[src]
			if s == nil || len(s.addrs) == 0 {
				continue
			}
			out = append(out, target{id: id, fp: r.hello.FP, src: src, addrs: slices.Clone(s.addrs), fromNetwork: s.fromNetwork})
		}
	}
	return out
}

func (r *row) online() bool {
	for _, s := range r.by {
		if s.online {
			return true
		}
	}
	return false
}

func (r *row) lastSeen() time.Time {
	var t time.Time
	for _, s := range r.by {
		if s.seen.After(t) {
			t = s.seen
		}
	}
	return t
}

func (r *row) peer() Peer {
	p := Peer{
		ID: r.hello.ID, Name: r.hello.Name, OS: r.hello.OS, FP: r.hello.FP, A2A: r.hello.A2A,
		Addrs:    make(map[Source][]string, len(r.by)),
		LastSeen: r.lastSeen(),
		Online:   r.online(),
	}
	for _, src := range sourceOrder {
		s := r.by[src]
		if s == nil {
			continue
		}
		p.Sources = append(p.Sources, src)
		p.Addrs[src] = slices.Clone(s.addrs)
		if s.node != "" {
			p.TailnetNode = s.node
		}
	}
	return p
}

// updateHello replaces a row's hello (name, OS, A2A) with a newer verified
// one of the same fingerprint; sightings are untouched.
func (t *Table) updateHello(h Hello) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.rows[h.ID]
	if !ok || r.hello.FP != h.FP || r.hello == h {
		return
	}
	r.hello = h
	t.notifyLocked()
}

// clipURL cuts a URL from a request to a length fit for an error message.
func clipURL(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
