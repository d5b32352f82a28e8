package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	agent "meshtray/a2a"
	"meshtray/keychain"
	"meshtray/pairing"
)

// The agents this device can delegate to: external A2A agents
// the owner added by URL, and paired meshtray peers that publish A2A, which
// are agents with no extra step.

// Defaults of AgentsOptions.
const (
	DefaultMaxAgents = 64
	// DefaultCardTTL is how old a verified external card may be before a
	// delegation fetches and verifies it again.
	DefaultCardTTL = 5 * time.Minute
	// DefaultPeerCardTTL is the same for paired peers (their card says
	// whether A2A is on, which changes often).
	DefaultPeerCardTTL = time.Minute
	// maxTombstones bounds the remembered peers that withdrew our grant.
	maxTombstones = 64
	// MaxTokenLen bounds an agent token (a keychain item is at most
	// keychain.MaxItemSize bytes).
	MaxTokenLen = 1024
	// agentKeyPrefix is the keychain key prefix of agent tokens
	// (ARCHITECTURE.md key table: agent/<id>, owned by a2a).
	agentKeyPrefix    = "agent/"
	agentsFileVersion = 1
)

// ErrInvalidInput wraps a description of a bad argument (URL, token, name);
// app answers it 400.
var ErrInvalidInput = errors.New("a2a: invalid input")

// AgentKind says where an agent comes from.
type AgentKind string

const (
	AgentExternal AgentKind = "external" // added by URL
	AgentPeer     AgentKind = "peer"     // a paired meshtray that publishes A2A
)

// AgentStatus says whether an agent can take work now, and if not why.
type AgentStatus string

const (
	AgentReady        AgentStatus = "ready"        // card verified; delegations go out
	AgentUnchecked    AgentStatus = "unchecked"    // card not fetched yet
	AgentDisabled     AgentStatus = "disabled"     // the owner switched it off
	AgentInvalid      AgentStatus = "invalid"      // the card no longer verifies (Problem says why); not used
	AgentUnpublished  AgentStatus = "unpublished"  // a peer with A2A off (card 404)
	AgentUnreachable  AgentStatus = "unreachable"  // the last attempt could not connect
	AgentUnauthorized AgentStatus = "unauthorized" // the token was refused (external), or the grant is paused (peer)
	AgentRevoked      AgentStatus = "revoked"      // a peer that revoked the grant it gave this device
)

// Agent is one agent as the owner sees it (GET /a2a/agents). JSON names
// are meshtray's snake_case.
type Agent struct {
	// ID names the agent in commands: a slug of its card name for an
	// external agent, the device ID for a peer.
	ID      string      `json:"id"`
	Kind    AgentKind   `json:"kind"`
	Name    string      `json:"name"`
	URL     string      `json:"url,omitempty"` // as added (external), or the peer address in use
	Enabled bool        `json:"enabled"`
	Status  AgentStatus `json:"status"`
	Problem string      `json:"problem,omitempty"` // why it is not ready
	Card    *CardInfo   `json:"card,omitempty"`    // the last verified card
	// HasToken: a token is kept in the keychain (external), or a grant is
	// held (peer).
	HasToken bool      `json:"has_token"`
	DeviceID string    `json:"device_id,omitempty"` // peers
	OS       string    `json:"os,omitempty"`        // peers
	Added    time.Time `json:"added,omitzero"`
	Checked  time.Time `json:"checked,omitzero"` // last card fetch
}

// Ready reports whether delegations may go to the agent.
func (a Agent) Ready() bool { return a.Status == AgentReady }

// PeerAgent is a paired meshtray as the PeerSource reports it.
type PeerAgent struct {
	DeviceID string   // canonical device ID
	Name     string   // device name
	OS       string   // OS environment string
	URLs     []string // base URLs to try, best first (mesh table addresses, then the held grant's)
}

// PeerSource gives the registry the paired peers it may delegate to; app
// implements it over pairing.Grants and the mesh table.
type PeerSource interface {
	// PeerAgents lists the peers this device holds a grant with scope
	// agent (or full) from.
	PeerAgents() []PeerAgent
	// PeerTransport returns a transport pinned to the peer's certificate
	// that adds the held grant (pairing.Grants.PeerTransport).
	PeerTransport(deviceID string) (http.RoundTripper, error)
	// Subscribe returns coalesced notices of held-grant changes.
	Subscribe() (<-chan struct{}, func())
}

// AgentsOptions configure the registry.
type AgentsOptions struct {
	// Path is the JSON file keeping the external agents' records (no
	// secrets), written 0600 and atomically. Required.
	Path string
	// Secrets keeps agent tokens under agent/<id>. Required.
	Secrets keychain.Store
	// Peers lists paired peers; nil means none.
	Peers PeerSource
	// Transport for external agents; nil is a fresh transport with bounded
	// dial, TLS and header waits, and the environment's proxy for https
	// agents only.
	Transport http.RoundTripper
	// IsTailnetAddr reports whether an address is a tailnet peer's, as
	// this node's tailnet sees it (app: the mesh's Tailscale state); plain
	// http to an external agent is accepted only there and on loopback
	// (CheckAgentURL). nil: loopback only.
	IsTailnetAddr func(netip.Addr) bool
	// MaxAgents bounds external agents (default 64).
	MaxAgents int
	// CardTTL, PeerCardTTL: see DefaultCardTTL, DefaultPeerCardTTL.
	CardTTL, PeerCardTTL time.Duration
	// OnChange is called (without locks held) when the list changes.
	OnChange func()
	Logger   *slog.Logger
	Now      func() time.Time
}

// agentRecord is one external agent; it is what the file keeps.
type agentRecord struct {
	ID       string    `json:"id"`
	URL      string    `json:"url"`
	Enabled  bool      `json:"enabled"`
	Added    time.Time `json:"added"`
	Checked  time.Time `json:"checked,omitzero"`
	Card     *CardInfo `json:"card,omitempty"`
	HasToken bool      `json:"has_token"`
	// Problem and ProblemStatus describe the last failed check (card or
	// network); empty when the last check verified the card.
	Problem       string      `json:"problem,omitempty"`
	ProblemStatus AgentStatus `json:"problem_status,omitempty"`
	// Unauthorized: the last call got HTTP 401; cleared by a successful
	// call or a new token.
	Unauthorized bool `json:"unauthorized,omitempty"`
}

type agentsFile struct {
	Version       int            `json:"version"`
	Agents        []*agentRecord `json:"agents"`
	DisabledPeers []string       `json:"disabled_peers,omitempty"`
}

// peerState is what the registry learned of a peer's card.
type peerState struct {
	card    *CardInfo
	base    string
	checked time.Time
	status  AgentStatus
	problem string
}

type tombstone struct {
	name   string
	reason string
	at     time.Time
}

// Agents is the registry of agents this device delegates to. Safe for
// concurrent use; Close stops its peer watcher.
type Agents struct {
	o       AgentsOptions
	log     *slog.Logger
	extRT   http.RoundTripper
	closeRT func()

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	addMu sync.Mutex // serialises Add and Remove of external agents

	// mu guards the fields below.
	mu            sync.Mutex
	ext           map[string]*agentRecord
	disabledPeers map[string]bool
	peers         map[string]*peerState
	known         map[string]string // peers present at the last look: device ID -> name
	tombs         map[string]tombstone
}

// NewAgents loads the registry from o.Path (a missing file is an empty
// registry; an unreadable one is moved aside to <path>.bad and reported in
// the log) and starts watching o.Peers.
func NewAgents(o AgentsOptions) (*Agents, error) {
	if o.Path == "" || o.Secrets == nil {
		return nil, errors.New("a2a.NewAgents: Path and Secrets are required")
	}
	if o.MaxAgents <= 0 {
		o.MaxAgents = DefaultMaxAgents
	}
	if o.CardTTL <= 0 {
		o.CardTTL = DefaultCardTTL
	}
	if o.PeerCardTTL <= 0 {
		o.PeerCardTTL = DefaultPeerCardTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Agents{
		o: o, log: log,
		ext:           make(map[string]*agentRecord),
		disabledPeers: make(map[string]bool),
		peers:         make(map[string]*peerState),
		known:         make(map[string]string),
		tombs:         make(map[string]tombstone),
	}
	if o.Transport != nil {
		a.extRT = o.Transport
	} else {
		tr := newExternalTransport()
		a.extRT, a.closeRT = tr, tr.CloseIdleConnections
	}
	if err := a.load(); err != nil {
		return nil, err
	}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	if o.Peers != nil {
		for _, p := range o.Peers.PeerAgents() {
			a.known[p.DeviceID] = p.Name
		}
		ch, stop := o.Peers.Subscribe()
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			defer stop()
			for {
				select {
				case <-a.ctx.Done():
					return
				case <-ch:
					a.syncPeers()
				}
			}
		}()
	}
	return a, nil
}

// Close stops the peer watcher and releases idle connections.
func (a *Agents) Close() error {
	a.cancel()
	a.wg.Wait()
	if a.closeRT != nil {
		a.closeRT()
	}
	return nil
}

func (a *Agents) changed() {
	if a.o.OnChange != nil {
		a.o.OnChange()
	}
}

func (a *Agents) load() error {
	b, err := os.ReadFile(a.o.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agents: %w", err)
	}
	var f agentsFile
	if err := json.Unmarshal(b, &f); err != nil || f.Version != agentsFileVersion {
		if err == nil {
			err = fmt.Errorf("version %d", f.Version)
		}
		bad := a.o.Path + ".bad"
		if rerr := os.Rename(a.o.Path, bad); rerr != nil {
			return fmt.Errorf("agents: %s is unreadable (%v) and cannot be moved aside: %w", a.o.Path, err, rerr)
		}
		a.log.Warn("external agents file unreadable; moved aside, starting with none", "path", a.o.Path, "moved_to", bad, "err", err)
		return nil
	}
	for _, r := range f.Agents {
		if r == nil || !validAgentID(r.ID) || r.URL == "" || len(a.ext) >= a.o.MaxAgents {
			continue
		}
		a.ext[r.ID] = r
	}
	for _, id := range f.DisabledPeers {
		a.disabledPeers[id] = true
	}
	return nil
}

// saveLocked writes the file atomically (temp file, fsync, rename), 0600.
func (a *Agents) saveLocked() error {
	f := agentsFile{Version: agentsFileVersion, Agents: make([]*agentRecord, 0, len(a.ext))}
	for _, r := range a.ext {
		f.Agents = append(f.Agents, r)
	}
	slices.SortFunc(f.Agents, func(x, y *agentRecord) int { return strings.Compare(x.ID, y.ID) })
	for id := range a.disabledPeers {
		f.DisabledPeers = append(f.DisabledPeers, id)
	}
	slices.Sort(f.DisabledPeers)
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return keychain.WriteFile(a.o.Path, append(b, '\n'))
}

// syncPeers notices peers whose held grant disappeared (revoked by their
// owner: pairing drops a held grant on a 401 for a revoked token) and
// peers that came back (paired again).
func (a *Agents) syncPeers() {
	now := a.o.Now()
	cur := make(map[string]string)
	for _, p := range a.o.Peers.PeerAgents() {
		cur[p.DeviceID] = p.Name
	}
	a.mu.Lock()
	for id, name := range a.known {
		if _, ok := cur[id]; !ok {
			a.tombLocked(id, name, "the grant it gave this device was revoked", now)
			delete(a.peers, id)
		}
	}
	for id, name := range cur {
		delete(a.tombs, id)
		if old, ok := a.known[id]; ok && old != name {
			delete(a.peers, id)
		}
	}
	a.known = cur
	a.mu.Unlock()
	a.changed()
}

// tombLocked remembers that peer id withdrew our grant; an earlier, more
// specific reason stays.
func (a *Agents) tombLocked(id, name, reason string, now time.Time) {
	if _, ok := a.tombs[id]; ok {
		return
	}
	if len(a.tombs) >= maxTombstones {
		var oldest string
		for k, t := range a.tombs {
			if oldest == "" || t.at.Before(a.tombs[oldest].at) {
				oldest = k
			}
		}
		delete(a.tombs, oldest)
	}
	a.tombs[id] = tombstone{name: name, reason: reason, at: now}
}

// extView renders an external record.
func (a *Agents) extViewLocked(r *agentRecord) Agent {
	v := Agent{
		ID: r.ID, Kind: AgentExternal, URL: r.URL, Enabled: r.Enabled,
		HasToken: r.HasToken, Added: r.Added, Checked: r.Checked, Card: cloneCard(r.Card),
	}
	if r.Card != nil {
		v.Name = r.Card.Name
	}
	switch {
	case !r.Enabled:
		v.Status = AgentDisabled
	case r.Problem != "":
		v.Status, v.Problem = r.ProblemStatus, r.Problem
	case r.Card == nil:
		v.Status = AgentUnchecked
	case r.Unauthorized:
		v.Status, v.Problem = AgentUnauthorized, "the agent refused our token (HTTP 401) at the last call"
	default:
		v.Status = AgentReady
	}
	if v.Status == "" {
		v.Status = AgentInvalid
	}
	return v
}

func cloneCard(c *CardInfo) *CardInfo {
	if c == nil {
		return nil
	}
	cc := *c
	cc.Skills = slices.Clone(c.Skills)
	return &cc
}

// peerViewLocked renders a peer.
func (a *Agents) peerViewLocked(p PeerAgent) Agent {
	v := Agent{ID: p.DeviceID, Kind: AgentPeer, Name: p.Name, DeviceID: p.DeviceID, OS: p.OS,
		Enabled: !a.disabledPeers[p.DeviceID], HasToken: true, Status: AgentUnchecked}
	if len(p.URLs) > 0 {
		v.URL = p.URLs[0]
	}
	if st := a.peers[p.DeviceID]; st != nil {
		v.Card, v.Checked, v.Status, v.Problem = cloneCard(st.card), st.checked, st.status, st.problem
		if st.base != "" {
			v.URL = st.base
		}
	}
	if !v.Enabled {
		v.Status = AgentDisabled
	}
	return v
}

func (a *Agents) peerList() []PeerAgent {
	if a.o.Peers == nil {
		return nil
	}
	return a.o.Peers.PeerAgents()
}

// List returns every agent: paired peers (their cards fetched again when
// older than PeerCardTTL, in parallel, each bounded by a few seconds),
// external agents as last checked, and peers that revoked our grant.
func (a *Agents) List(ctx context.Context) []Agent {
	peers := a.peerList()
	var stale []PeerAgent
	a.mu.Lock()
	for _, p := range peers {
		st := a.peers[p.DeviceID]
		if !a.disabledPeers[p.DeviceID] && (st == nil || a.o.Now().Sub(st.checked) > a.o.PeerCardTTL) {
			stale = append(stale, p)
		}
	}
	a.mu.Unlock()
	if len(stale) > 0 {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var wg sync.WaitGroup
		sem := make(chan struct{}, 4)
		for _, p := range stale {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				a.refreshPeer(lctx, p)
			})
		}
		wg.Wait()
		cancel()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Agent, 0, len(peers)+len(a.ext)+len(a.tombs))
	for _, p := range peers {
		out = append(out, a.peerViewLocked(p))
	}
	for _, r := range a.ext {
		out = append(out, a.extViewLocked(r))
	}
	for id, t := range a.tombs {
		out = append(out, Agent{ID: id, Kind: AgentPeer, Name: t.name, DeviceID: id, Status: AgentRevoked,
			Problem: fmt.Sprintf("%s (%s); pair again to delegate to it", t.reason, t.at.UTC().Format(time.RFC3339)), Checked: t.at})
	}
	slices.SortFunc(out, func(x, y Agent) int {
		if x.Kind != y.Kind {
			return strings.Compare(string(y.Kind), string(x.Kind)) // peers first
		}
		if c := strings.Compare(strings.ToLower(x.Name), strings.ToLower(y.Name)); c != 0 {
			return c
		}
		return strings.Compare(x.ID, y.ID)
	})
	return out
}

// target is a resolved agent reference.
type target struct {
	ext  *agentRecord // external
	peer *PeerAgent   // live peer
	tomb *tombstone   // a peer that revoked our grant
	id   string
}

// MinDevicePrefix is the shortest device ID prefix that names a paired
// device (the Short form; 7 base32 characters, 35 bits).
const MinDevicePrefix = 7

// resolve finds the agent ref names, most specific first:
//
//  1. a full device ID (any form pairing.ParseDeviceID accepts): that
//     paired device (or the revoked one), and nothing else: a device ID is
//     a hash of the device's certificate, so no name can take it;
//  2. an external agent's URL, as added;
//  3. else everything ref could mean: an external agent's id, a device ID
//     prefix of at least MinDevicePrefix characters, an agent's name
//     (case-insensitive; a revoked peer's only when nothing else matches).
//     One agent: it. Several: ErrInvalidInput listing each with what names
//     it alone, so an agent whose id or card name equals a paired device's
//     name never captures it.
func (a *Agents) resolve(ref string) (target, error) {
	ref = strings.TrimSpace(ref)
	if ref == "" {
		return target{}, fmt.Errorf("%w: no agent named", ErrInvalidInput)
	}
	peers := a.peerList()
	a.mu.Lock()
	defer a.mu.Unlock()
	unknown := func() (target, error) {
		return target{}, &AgentError{Agent: ref, Kind: ErrAgentUnknown,
			Detail: fmt.Sprintf("no agent %q: see `meshtray agents list` (paired devices that publish A2A, and agents added with `meshtray agents add URL`)", agent.Truncate(ref, 64))}
	}

	// 1. A full device ID.
	if id, err := pairing.ParseDeviceID(ref); err == nil {
		full := id.String()
		for i := range peers {
			if peers[i].DeviceID == full {
				return target{peer: &peers[i], id: full}, nil
			}
		}
		if t, ok := a.tombs[full]; ok {
			return target{tomb: &t, id: full}, nil
		}
		return unknown()
	}
	// 2. An external agent's URL.
	for _, r := range a.ext {
		if strings.EqualFold(strings.TrimRight(ref, "/"), r.URL) {
			return target{ext: r, id: r.ID}, nil
		}
	}
	// 3. Ids, device ID prefixes, names.
	var hits []target
	add := func(t target) {
		for _, h := range hits {
			if h.id == t.id {
				return
			}
		}
		hits = append(hits, t)
	}
	if r, ok := a.ext[strings.ToLower(ref)]; ok {
		add(target{ext: r, id: r.ID})
	}
	if norm := strings.ToUpper(strings.ReplaceAll(ref, "-", "")); len(norm) >= MinDevicePrefix {
		for i := range peers {
			if strings.HasPrefix(strings.ReplaceAll(peers[i].DeviceID, "-", ""), norm) {
				add(target{peer: &peers[i], id: peers[i].DeviceID})
			}
		}
		for id, t := range a.tombs {
			if strings.HasPrefix(strings.ReplaceAll(id, "-", ""), norm) {
				add(target{tomb: &t, id: id})
			}
		}
	}
	for i := range peers {
		if strings.EqualFold(peers[i].Name, ref) {
			add(target{peer: &peers[i], id: peers[i].DeviceID})
		}
	}
	for _, r := range a.ext {
		if r.Card != nil && strings.EqualFold(r.Card.Name, ref) {
			add(target{ext: r, id: r.ID})
		}
	}
	if len(hits) == 0 {
		for id, t := range a.tombs {
			if strings.EqualFold(t.name, ref) {
				add(target{tomb: &t, id: id})
			}
		}
	}
	switch len(hits) {
	case 0:
		return unknown()
	case 1:
		return hits[0], nil
	}
	var names []string
	for _, h := range hits {
		switch {
		case h.ext != nil:
			name := h.ext.ID
			if h.ext.Card != nil {
				name = h.ext.Card.Name
			}
			names = append(names, fmt.Sprintf("agent %q at %s", agent.Truncate(name, 64), h.ext.URL))
		case h.peer != nil:
			names = append(names, fmt.Sprintf("paired device %q, %s", agent.Truncate(h.peer.Name, 64), pairing.ShortID(h.id)))
		default:
			names = append(names, fmt.Sprintf("revoked device %q, %s", agent.Truncate(h.tomb.name, 64), pairing.ShortID(h.id)))
		}
	}
	slices.Sort(names)
	return target{}, fmt.Errorf("%w: %q could mean %d agents (%s); name a device by its ID (at least %d characters) and an added agent by its URL",
		ErrInvalidInput, agent.Truncate(ref, 64), len(hits), strings.Join(names, "; "), MinDevicePrefix)
}

func revokedError(id string, t tombstone) error {
	return &AgentError{Agent: t.name, Kind: ErrAgentUnauthorized,
		Detail: fmt.Sprintf("device %q (%s) no longer honours this device: %s at %s; pair again with `meshtray pair --join` to delegate to it",
			t.name, pairing.ShortID(id), t.reason, t.at.Local().Format("15:04:05"))}
}

// Get returns one agent by reference: a full device ID, an added agent's
// URL, else an added agent's id, a device ID prefix (at least
// MinDevicePrefix characters) or a name; a reference that could mean two
// agents is ErrInvalidInput naming them.
func (a *Agents) Get(ref string) (Agent, error) {
	t, err := a.resolve(ref)
	if err != nil {
		return Agent{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case t.ext != nil:
		return a.extViewLocked(t.ext), nil
	case t.peer != nil:
		return a.peerViewLocked(*t.peer), nil
	}
	return Agent{ID: t.id, Kind: AgentPeer, Name: t.tomb.name, DeviceID: t.id, Status: AgentRevoked, Problem: t.tomb.reason}, nil
}

// normalizeToken checks a token given for an agent: at most MaxTokenLen
// visible ASCII characters (it goes in an Authorization header); a leading
// "Bearer " is dropped.
func normalizeToken(tok string) (string, error) {
	tok = strings.TrimSpace(tok)
	if t, ok := strings.CutPrefix(tok, "Bearer "); ok {
		tok = strings.TrimSpace(t)
	}
	if len(tok) > MaxTokenLen {
		return "", fmt.Errorf("%w: the token is over %d bytes", ErrInvalidInput, MaxTokenLen)
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] < 0x21 || tok[i] > 0x7e {
			return "", fmt.Errorf("%w: the token has a character outside visible ASCII", ErrInvalidInput)
		}
	}
	return tok, nil
}

// Add adds (or, for a URL already added, updates) the external agent at
// rawURL: a base URL (its card is at agent.CardPath below it) or the card's own
// URL (a path ending in .json). The card is fetched and verified
// (VerifyCard) before anything is stored; then the token, when given,
// goes to the keychain (agent/<id>) and the record to the agents file.
// Re-adding without a token keeps the token kept before.
func (a *Agents) Add(ctx context.Context, rawURL, token string) (Agent, error) {
	u, err := CheckAgentURL(rawURL, a.o.IsTailnetAddr)
	if err != nil {
		return Agent{}, fmt.Errorf("%w: %v", ErrInvalidInput, err)
	}
	if token, err = normalizeToken(token); err != nil {
		return Agent{}, err
	}
	u.Scheme, u.Host = strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	u.Path, u.RawPath = strings.TrimRight(u.Path, "/"), ""
	norm := u.String()
	card, err := a.fetchExternal(ctx, u, norm)
	if err != nil {
		return Agent{}, err
	}

	a.addMu.Lock()
	defer a.addMu.Unlock()
	a.mu.Lock()
	var rec *agentRecord
	for _, r := range a.ext {
		if r.URL == norm {
			rec = r
		}
	}
	isNew := rec == nil
	if isNew {
		if len(a.ext) >= a.o.MaxAgents {
			a.mu.Unlock()
			return Agent{}, fmt.Errorf("%w: %d external agents is the limit; remove one first", ErrInvalidInput, a.o.MaxAgents)
		}
		rec = &agentRecord{ID: a.newIDLocked(card.Name), URL: norm, Enabled: true, Added: a.o.Now().UTC()}
	}
	id := rec.ID
	a.mu.Unlock()

	if token != "" {
		if err := a.o.Secrets.Set(agentKeyPrefix+id, []byte(token)); err != nil {
			return Agent{}, fmt.Errorf("keep the agent's token in the keychain: %w", err)
		}
	}
	a.mu.Lock()
	next := *rec
	next.Card, next.Checked, next.Problem, next.ProblemStatus = &card, a.o.Now().UTC(), "", ""
	if token != "" {
		next.HasToken, next.Unauthorized = true, false
	}
	a.ext[id] = &next
	err = a.saveLocked()
	if err != nil {
		if isNew {
			delete(a.ext, id)
		} else {
			a.ext[id] = rec
		}
	}
	v := a.extViewLocked(a.ext[id])
	a.mu.Unlock()
	if err != nil {
		if isNew && token != "" {
			_ = a.o.Secrets.Delete(agentKeyPrefix + id)
		}
		return Agent{}, fmt.Errorf("save the agents file: %w", err)
	}
	a.log.Info("external agent added", "agent", id, "url", norm, "name", card.Name, "token", token != "")
	a.changed()
	return v, nil
}

// validAgentID reports an id newIDLocked could have made (it is part of a
// keychain key, agent/<id>).
func validAgentID(id string) bool {
	if id == "" || len(id) > 40 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// newIDLocked makes a unique id from a card name: lower-case letters,
// digits and dashes, at most 32 characters; "-2", "-3", ... on collision.
func (a *Agents) newIDLocked(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
			dash = false
		case !dash && b.Len() > 0:
			b.WriteByte('-')
			dash = true
		}
		if b.Len() >= 32 {
			break
		}
	}
	base := strings.Trim(b.String(), "-")
	if base == "" {
		base = "agent"
	}
	id := base
	for i := 2; ; i++ {
		if _, taken := a.ext[id]; !taken {
			return id
		}
		id = fmt.Sprintf("%s-%d", base, i)
	}
}

// fetchExternal fetches and verifies the card of the external agent at u.
func (a *Agents) fetchExternal(ctx context.Context, u *url.URL, label string) (CardInfo, error) {
	hc := &http.Client{Transport: headerTimeout{rt: a.extRT, d: HeaderTimeout}, CheckRedirect: noRedirects}
	card, err := fetchCard(ctx, hc, cardURL(u))
	if err != nil {
		return CardInfo{}, classify(label, false, err)
	}
	info, err := VerifyCard(card, u)
	if err != nil {
		return CardInfo{}, classify(label, false, err)
	}
	return info, nil
}

// Remove removes an external agent and its token, or forgets a peer that
// revoked our grant. A live paired peer cannot be removed here: it is an
// agent while it is paired (disable it instead).
func (a *Agents) Remove(ref string) error {
	a.addMu.Lock()
	defer a.addMu.Unlock()
	t, err := a.resolve(ref)
	if err != nil {
		return err
	}
	switch {
	case t.peer != nil:
		return fmt.Errorf("%w: %q is a paired device: it is an agent while it is paired; `meshtray agents disable` stops using it", ErrInvalidInput, t.peer.Name)
	case t.tomb != nil:
		a.mu.Lock()
		delete(a.tombs, t.id)
		a.mu.Unlock()
		a.changed()
		return nil
	}
	if err := a.o.Secrets.Delete(agentKeyPrefix + t.id); err != nil && !errors.Is(err, keychain.ErrNotFound) {
		return fmt.Errorf("delete the agent's token from the keychain: %w", err)
	}
	a.mu.Lock()
	old := a.ext[t.id]
	delete(a.ext, t.id)
	err = a.saveLocked()
	if err != nil && old != nil {
		a.ext[t.id] = old
	}
	a.mu.Unlock()
	if err != nil {
		return fmt.Errorf("save the agents file: %w", err)
	}
	a.log.Info("external agent removed", "agent", t.id)
	a.changed()
	return nil
}

// SetEnabled switches an agent (external or peer) on or off.
func (a *Agents) SetEnabled(ref string, on bool) (Agent, error) {
	t, err := a.resolve(ref)
	if err != nil {
		return Agent{}, err
	}
	if t.tomb != nil {
		return Agent{}, revokedError(t.id, *t.tomb)
	}
	a.mu.Lock()
	var v Agent
	if t.ext != nil {
		r := a.ext[t.id]
		if r == nil {
			a.mu.Unlock()
			return Agent{}, &AgentError{Agent: ref, Kind: ErrAgentUnknown, Detail: fmt.Sprintf("no agent %q", ref)}
		}
		old := r.Enabled
		r.Enabled = on
		if err = a.saveLocked(); err != nil {
			r.Enabled = old
		}
		v = a.extViewLocked(r)
	} else {
		old := a.disabledPeers[t.id]
		if on {
			delete(a.disabledPeers, t.id)
		} else {
			a.disabledPeers[t.id] = true
		}
		if err = a.saveLocked(); err != nil {
			if old {
				a.disabledPeers[t.id] = true
			} else {
				delete(a.disabledPeers, t.id)
			}
		}
		v = a.peerViewLocked(*t.peer)
	}
	a.mu.Unlock()
	if err != nil {
		return Agent{}, fmt.Errorf("save the agents file: %w", err)
	}
	a.changed()
	return v, nil
}

// Refresh fetches and verifies the card of the agent ref names again, or
// of every agent when ref is "". A card that no longer verifies marks the
// agent invalid (it is not used until a refresh verifies it again); the
// error of a single refresh is returned with the updated view.
func (a *Agents) Refresh(ctx context.Context, ref string) ([]Agent, error) {
	if ref == "" {
		a.mu.Lock()
		ids := make([]string, 0, len(a.ext))
		for id := range a.ext {
			ids = append(ids, id)
		}
		a.mu.Unlock()
		var wg sync.WaitGroup
		sem := make(chan struct{}, 4)
		for _, id := range ids {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				_ = a.refreshExternal(ctx, id)
			})
		}
		for _, p := range a.peerList() {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				_ = a.refreshPeer(ctx, p)
			})
		}
		wg.Wait()
		a.changed()
		return a.List(ctx), nil
	}
	t, err := a.resolve(ref)
	if err != nil {
		return nil, err
	}
	switch {
	case t.tomb != nil:
		return nil, revokedError(t.id, *t.tomb)
	case t.ext != nil:
		err = a.refreshExternal(ctx, t.id)
	default:
		err = a.refreshPeer(ctx, *t.peer)
	}
	a.changed()
	v, gerr := a.Get(t.id)
	if gerr != nil {
		return nil, gerr
	}
	return []Agent{v}, err
}

// refreshExternal fetches and verifies an external agent's card and
// records the outcome. A card that fails verification marks it invalid; a
// network failure marks it unreachable and keeps the last verified card
// (not used until a check succeeds).
func (a *Agents) refreshExternal(ctx context.Context, id string) error {
	a.mu.Lock()
	r := a.ext[id]
	var raw string
	if r != nil {
		raw = r.URL
	}
	a.mu.Unlock()
	if r == nil {
		return &AgentError{Agent: id, Kind: ErrAgentUnknown, Detail: fmt.Sprintf("no agent %q", id)}
	}
	u, err := CheckAgentURL(raw, a.o.IsTailnetAddr)
	var card CardInfo
	if err != nil {
		err = &AgentError{Agent: id, Kind: ErrCardInvalid, Detail: fmt.Sprintf("agent %q: %v", id, err)}
	} else {
		card, err = a.fetchExternal(ctx, u, id)
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	r = a.ext[id]
	if r == nil {
		return err // removed meanwhile
	}
	r.Checked = a.o.Now().UTC()
	switch {
	case err == nil:
		if r.Card != nil && r.Card.Name != card.Name {
			a.log.Info("external agent card changed name", "agent", id, "was", r.Card.Name, "now", card.Name)
		}
		r.Card, r.Problem, r.ProblemStatus = &card, "", ""
	case errors.Is(err, ErrAgentUnreachable):
		r.Problem, r.ProblemStatus = err.Error(), AgentUnreachable
	default:
		r.Problem, r.ProblemStatus = err.Error(), AgentInvalid
		a.log.Warn("external agent card does not verify; not used", "agent", id, "err", err)
	}
	if serr := a.saveLocked(); serr != nil {
		a.log.Warn("cannot save the agents file", "err", serr)
	}
	return err
}

// refreshPeer fetches and verifies a peer's card over its pinned
// transport, trying its addresses in order until one answers.
func (a *Agents) refreshPeer(ctx context.Context, p PeerAgent) error {
	rt, err := a.o.Peers.PeerTransport(p.DeviceID)
	if err != nil {
		return &AgentError{Agent: p.Name, Kind: ErrAgentUnknown, Detail: fmt.Sprintf("device %q: %v", p.Name, err), Err: err}
	}
	defer closeIdle(rt)
	dev, err := pairing.ParseDeviceID(p.DeviceID)
	if err != nil {
		return &AgentError{Agent: p.Name, Kind: ErrAgentUnknown, Detail: fmt.Sprintf("device %q: %v", p.Name, err), Err: err}
	}
	hc := &http.Client{Transport: headerTimeout{rt: rt, d: HeaderTimeout}, CheckRedirect: noRedirects}
	var card CardInfo
	var base string
	err = &AgentError{Agent: p.Name, Kind: ErrAgentUnreachable, Detail: fmt.Sprintf("device %q has no known address", p.Name)}
	for _, b := range p.URLs {
		u, perr := CheckAgentURL(b, a.o.IsTailnetAddr)
		if perr != nil {
			a.log.Debug("peer address skipped", "device", pairing.ShortID(p.DeviceID), "err", perr)
			continue
		}
		raw, ferr := fetchCard(ctx, hc, cardURL(u))
		if ferr == nil {
			card, ferr = verifyCardOfPeer(raw, u, dev)
		}
		err = classify(p.Name, true, ferr)
		if err == nil {
			base = b
			break
		}
		if !errors.Is(err, ErrAgentUnreachable) || ctx.Err() != nil {
			break
		}
	}
	if errors.Is(err, context.Canceled) && a.ctx.Err() != nil {
		return err
	}
	now := a.o.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, present := a.known[p.DeviceID]; !present && a.o.Peers != nil {
		// Unpaired meanwhile; syncPeers decides what it shows.
		found := false
		for _, q := range a.o.Peers.PeerAgents() {
			if q.DeviceID == p.DeviceID {
				found = true
			}
		}
		if !found {
			return err
		}
	}
	st := &peerState{checked: now, base: base}
	switch {
	case err == nil:
		st.card, st.status = &card, AgentReady
	case errors.Is(err, ErrCardUnpublished):
		st.status, st.problem = AgentUnpublished, err.Error()
	case errors.Is(err, ErrAgentUnreachable):
		st.status, st.problem = AgentUnreachable, err.Error()
	case errors.Is(err, ErrAgentUnauthorized):
		st.status, st.problem = AgentUnauthorized, err.Error()
	default:
		st.status, st.problem = AgentInvalid, err.Error()
	}
	a.peers[p.DeviceID] = st
	return err
}

func closeIdle(rt http.RoundTripper) {
	if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// open resolves ref to an agent that may take work now and returns a
// remote to call it: the agent is enabled, and its card verified within
// its TTL (fetched and verified again otherwise). allowDisabled skips the
// enabled check (a cancel still reaches a disabled agent). Close the
// remote after use.
func (a *Agents) open(ctx context.Context, ref string, allowDisabled bool) (*remote, Agent, error) {
	t, err := a.resolve(ref)
	if err != nil {
		return nil, Agent{}, err
	}
	if t.tomb != nil {
		return nil, Agent{}, revokedError(t.id, *t.tomb)
	}
	if t.ext != nil {
		return a.openExternal(ctx, t.id, allowDisabled)
	}
	return a.openPeer(ctx, *t.peer, allowDisabled)
}

func (a *Agents) openExternal(ctx context.Context, id string, allowDisabled bool) (*remote, Agent, error) {
	a.mu.Lock()
	r := a.ext[id]
	if r == nil {
		a.mu.Unlock()
		return nil, Agent{}, &AgentError{Agent: id, Kind: ErrAgentUnknown, Detail: fmt.Sprintf("no agent %q", id)}
	}
	v := a.extViewLocked(r)
	stale := r.Card == nil || r.Problem != "" || a.o.Now().Sub(r.Checked) > a.o.CardTTL
	a.mu.Unlock()
	if !v.Enabled && !allowDisabled {
		return nil, v, &AgentError{Agent: v.Name, Kind: ErrAgentDisabled, Detail: fmt.Sprintf("agent %q is disabled; `meshtray agents enable %s` turns it on", v.Name, id)}
	}
	if stale {
		if err := a.refreshExternal(ctx, id); err != nil {
			a.changed()
			if errors.Is(err, ErrCardInvalid) {
				return nil, v, &AgentError{Agent: id, Kind: ErrCardInvalid,
					Detail: fmt.Sprintf("%v; the agent is not used until its card verifies (`meshtray agents refresh %s`)", err, id), Err: err}
			}
			return nil, v, err
		}
	}
	a.mu.Lock()
	r = a.ext[id]
	if r == nil || r.Card == nil {
		a.mu.Unlock()
		return nil, v, &AgentError{Agent: id, Kind: ErrAgentUnknown, Detail: fmt.Sprintf("no agent %q", id)}
	}
	v = a.extViewLocked(r)
	card, hasTok := *r.Card, r.HasToken
	a.mu.Unlock()
	var token string
	if hasTok {
		b, err := a.o.Secrets.Get(agentKeyPrefix + id)
		if err != nil && !errors.Is(err, keychain.ErrNotFound) {
			return nil, v, fmt.Errorf("read the agent's token from the keychain: %w", err)
		}
		token = string(b)
	}
	label := v.Name
	if label == "" {
		label = id
	}
	rem, err := newRemote(ctx, label, false, card, headerTimeout{rt: a.extRT, d: HeaderTimeout}, token, nil)
	return rem, v, err
}

func (a *Agents) openPeer(ctx context.Context, p PeerAgent, allowDisabled bool) (*remote, Agent, error) {
	a.mu.Lock()
	v := a.peerViewLocked(p)
	st := a.peers[p.DeviceID]
	fresh := st != nil && st.status == AgentReady && a.o.Now().Sub(st.checked) <= a.o.PeerCardTTL
	a.mu.Unlock()
	if !v.Enabled && !allowDisabled {
		return nil, v, &AgentError{Agent: p.Name, Kind: ErrAgentDisabled,
			Detail: fmt.Sprintf("device %q is disabled as an agent; `meshtray agents enable %s` turns it on", p.Name, pairing.ShortID(p.DeviceID))}
	}
	if !fresh {
		err := a.refreshPeer(ctx, p)
		a.changed()
		if err != nil {
			return nil, v, err
		}
	}
	a.mu.Lock()
	v = a.peerViewLocked(p)
	st = a.peers[p.DeviceID]
	if st == nil || st.card == nil {
		a.mu.Unlock()
		return nil, v, &AgentError{Agent: p.Name, Kind: ErrAgentUnreachable, Detail: fmt.Sprintf("device %q: no verified card", p.Name)}
	}
	card := *st.card
	a.mu.Unlock()
	rt, err := a.o.Peers.PeerTransport(p.DeviceID)
	if err != nil {
		return nil, v, &AgentError{Agent: p.Name, Kind: ErrAgentUnknown, Detail: fmt.Sprintf("device %q: %v", p.Name, err), Err: err}
	}
	rem, err := newRemote(ctx, p.Name, true, card, headerTimeout{rt: rt, d: HeaderTimeout}, "", func() { closeIdle(rt) })
	return rem, v, err
}

// report records what a call to agent v taught: a 401 marks an external
// agent unauthorized (and a peer that refused our grant revoked), a
// success clears that mark.
func (a *Agents) report(v Agent, err error) {
	now := a.o.Now()
	changed := false
	a.mu.Lock()
	switch v.Kind {
	case AgentExternal:
		r := a.ext[v.ID]
		if r == nil {
			break
		}
		switch {
		case err == nil && r.Unauthorized:
			r.Unauthorized, changed = false, true
		case errors.Is(err, ErrAgentUnauthorized) && !r.Unauthorized:
			r.Unauthorized, changed = true, true
		}
		if changed {
			if serr := a.saveLocked(); serr != nil {
				a.log.Warn("cannot save the agents file", "err", serr)
			}
		}
	case AgentPeer:
		var se *statusError
		if errors.Is(err, ErrAgentUnauthorized) && errors.As(err, &se) && !se.Paused {
			a.tombLocked(v.ID, v.Name, "it refused the grant it gave this device (HTTP 401: revoked)", now)
			delete(a.peers, v.ID)
			changed = true
		} else if errors.Is(err, ErrAgentUnauthorized) {
			if st := a.peers[v.ID]; st != nil {
				st.status, st.problem = AgentUnauthorized, err.Error()
				changed = true
			}
		}
	}
	a.mu.Unlock()
	if changed {
		a.changed()
	}
}
