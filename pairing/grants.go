package pairing

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"meshtray/keychain"
)

// Keychain key prefixes owned by this package (ARCHITECTURE.md, "Key layout").
const (
	grantKeyPrefix = "grant/" // grant/<id>: JSON grantRecord
	heldKeyPrefix  = "held/"  // held/<device id>: JSON heldRecord
)

// LastUsedFlushInterval is how often recorded LastUsed times are written to
// the keychain: at most once per interval per grant, and on Close.
const LastUsedFlushInterval = time.Minute

// lastUsedResolution: Authenticate stores a new LastUsed only when the old
// one is at least this old, so the hot path mostly reads.
const lastUsedResolution = time.Second

// IssueRequest describes a grant to mint.
type IssueRequest struct {
	PeerID string // device ID of the holder (any accepted form); "" for a phone or a CLI-minted grant
	Name   string // required; cleaned and cut to MaxNameLen runes
	OS     string // cut to MaxOSLen runes
	Scopes Scopes // at least one
	Policy Policy // "" means PolicyAsk
	// Uncollected issues the grant not valid yet (Grant.Uncollected): its
	// token is refused until Collected(id), and a start (NewGrants) that
	// finds it still uncollected revokes it. The pairing flow issues
	// its grants so: a grant whose token never reached the device (the
	// node died first) must not stay valid with nobody holding it.
	Uncollected bool
}

// Held is a grant another device issued to this one: we keep the raw token
// to call that peer, its base URL, and the certificate fingerprint we pin.
// Token never leaves through JSON (tag "-") or slog (LogValue).
type Held struct {
	PeerID      string    `json:"peer_id"`  // the issuer's device ID, canonical form
	GrantID     string    `json:"grant_id"` // the issuer's grant ID (the public part of Token)
	Name        string    `json:"name"`
	OS          string    `json:"os,omitempty"`
	URL         string    `json:"url,omitempty"` // base URL the peer gave, e.g. https://100.64.0.2:47654; the mesh table's current address wins
	Fingerprint string    `json:"fingerprint"`   // lowercase hex SHA-256 of the peer's certificate; equals PeerID's bytes
	Scopes      Scopes    `json:"scopes,omitempty"`
	Created     time.Time `json:"created"`
	Token       string    `json:"-"`
}

// LogValue implements slog.LogValuer without the token.
func (h Held) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("peer", ShortID(h.PeerID)),
		slog.String("grant_id", h.GrantID),
		slog.String("name", h.Name),
		slog.String("scopes", h.Scopes.String()),
	)
}

// LogValue implements slog.LogValuer: the fields an operator needs, short.
func (g Grant) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("id", g.ID),
		slog.String("peer", ShortID(g.PeerID)),
		slog.String("name", g.Name),
		slog.String("scopes", g.Scopes.String()),
		slog.String("status", string(g.Status)),
	)
}

// grantRecord is the keychain item grant/<id>.
type grantRecord struct {
	Grant
	TokenHash string `json:"token_sha256"` // hex SHA-256 of the token
}

// heldRecord is the keychain item held/<device id>.
type heldRecord struct {
	Held
	Token string `json:"token"`
}

// usage is the LastUsed bookkeeping of one grant, shared by every version of
// its entry so copy-on-write updates keep it.
type usage struct {
	last    atomic.Int64 // unix ns of the last successful Authenticate
	flushed atomic.Int64 // unix ns last written to the keychain
}

// grantEntry is one issued grant in memory. It is immutable once in the map
// (updates replace it), apart from use.
type grantEntry struct {
	grant Grant // LastUsed is the stored value; the live one is in use
	hash  [32]byte
	use   *usage
}

func (e *grantEntry) snapshot() Grant {
	g := e.grant
	if ns := e.use.last.Load(); ns != 0 {
		g.LastUsed = time.Unix(0, ns)
	}
	return g
}

// Grants is the grant store: grants this device issued (token hashes only)
// and grants it holds from peers (raw tokens), one keychain item each, all
// cached in memory. Authenticate, the hot path of every authenticated
// request, does a map lookup and one SHA-256 with no keychain I/O; LastUsed
// is flushed every LastUsedFlushInterval and on Close.
//
// Writes go through to the keychain. Changes that take access away (Pause,
// Revoke, a stricter policy) apply in memory first, so they bite at once even
// if the keychain write then fails (the error is returned); changes that give
// access (Issue, Resume, Rotate, a looser policy) apply only after the write
// succeeded.
type Grants struct {
	ks  keychain.Store
	log *slog.Logger

	// wmu serialises writers; keychain I/O happens under it, never under mu.
	wmu    sync.Mutex
	closed bool // guarded by wmu

	// grants maps grant ID → entry. The map is copy-on-write: readers Load
	// it without a lock, writers (holding wmu) store a modified copy. Entries
	// are replaced, never modified, apart from their usage counters.
	grants atomic.Pointer[map[string]*grantEntry]

	mu   sync.RWMutex
	held map[string]Held // by canonical peer device ID; guarded by mu

	changes  notifier
	observer atomic.Pointer[func(Change)] // Observe

	// Changes are queued under wmu, in the order they took effect, and
	// told to the observer after wmu is released (emitQueued), so a slow
	// observer (an audit append on a stalled disk) holds up only the
	// callers whose changes it records, never the writer lock.
	qmu    sync.Mutex
	queued []Change   // guarded by qmu
	emitMu sync.Mutex // serialises the observer's calls

	cancel context.CancelFunc
	done   chan struct{}
}

// NewGrants loads every grant and held grant from ks and starts the LastUsed
// flusher; Close stops it. A keychain error is returned; an item that does
// not decode is skipped with a warning (it is left in the keychain). A nil
// logger discards.
func NewGrants(ks keychain.Store, logger *slog.Logger) (*Grants, error) {
	return OpenGrants(ks, GrantsOptions{Logger: logger})
}

// GrantsOptions configure OpenGrants.
type GrantsOptions struct {
	Logger *slog.Logger // nil discards
	// Observer is set as by Observe before the grants load, so it is also
	// told of the changes the load makes: each pairing grant whose token
	// was never collected (the node stopped first) is revoked then
	// (ChangeRevoked, Cause says so).
	Observer func(Change)
}

// OpenGrants is NewGrants with options.
func OpenGrants(ks keychain.Store, o GrantsOptions) (*Grants, error) {
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	g := &Grants{
		ks:   ks,
		log:  logger,
		held: make(map[string]Held),
		done: make(chan struct{}),
	}
	g.Observe(o.Observer)
	g.grants.Store(&map[string]*grantEntry{})
	err := g.load()
	g.emitQueued() // the revocations load made, even when it then failed
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	go g.flushLoop(ctx)
	return g, nil
}

func (g *Grants) load() error {
	keys, err := g.ks.Keys(grantKeyPrefix)
	if err != nil {
		return fmt.Errorf("pairing: list grants: %w", err)
	}
	for _, k := range keys {
		b, err := g.ks.Get(k)
		if errors.Is(err, keychain.ErrNotFound) {
			continue // deleted since Keys
		}
		if err != nil {
			return fmt.Errorf("pairing: read %s: %w", k, err)
		}
		var rec grantRecord
		if err := json.Unmarshal(b, &rec); err != nil || rec.ID != strings.TrimPrefix(k, grantKeyPrefix) || !isLowerHex(rec.ID) || len(rec.ID) != grantIDLen {
			g.log.Warn("skipping unreadable grant item", "key", k)
			continue
		}
		hash, herr := hex.DecodeString(rec.TokenHash)
		if herr != nil || len(hash) != sha256.Size {
			g.log.Warn("skipping grant item without a token hash", "key", k)
			continue
		}
		if rec.Uncollected {
			// Approved, and the node stopped before the device collected
			// the token: nobody holds it.
			if err := g.ks.Delete(k); err != nil && !errors.Is(err, keychain.ErrNotFound) {
				return fmt.Errorf("pairing: revoke uncollected grant %s: %w", rec.ID, err)
			}
			g.log.Warn("revoked a pairing grant whose token was never collected (the node stopped first)", "grant", rec.Grant)
			g.queue(grantChange(ChangeRevoked, rec.Grant, "its token was never collected: the node stopped first"))
			continue
		}
		e := &grantEntry{grant: rec.Grant, use: new(usage)}
		copy(e.hash[:], hash)
		if !rec.LastUsed.IsZero() {
			e.use.last.Store(rec.LastUsed.UnixNano())
			e.use.flushed.Store(rec.LastUsed.UnixNano())
		}
		g.setLocked(e)
	}
	keys, err = g.ks.Keys(heldKeyPrefix)
	if err != nil {
		return fmt.Errorf("pairing: list held grants: %w", err)
	}
	for _, k := range keys {
		b, err := g.ks.Get(k)
		if errors.Is(err, keychain.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("pairing: read %s: %w", k, err)
		}
		var rec heldRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			g.log.Warn("skipping unreadable held grant item", "key", k)
			continue
		}
		h := rec.Held
		h.Token = rec.Token
		h.URL = upgradeLoopbackURL(h.URL)
		h, err = checkHeld(h)
		if err != nil || heldKeyPrefix+h.PeerID != k {
			g.log.Warn("skipping invalid held grant item", "key", k)
			continue
		}
		g.held[h.PeerID] = h
	}
	return nil
}

// Issue mints a grant and returns it with its token. The token is returned
// this once: the store keeps only its SHA-256.
func (g *Grants) Issue(req IssueRequest) (Grant, string, error) {
	gr, err := req.validate()
	if err != nil {
		return Grant{}, "", err
	}
	defer g.emitQueued() // after the unlock: the observer runs outside wmu
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if g.closed {
		return Grant{}, "", ErrClosed
	}
	for {
		gr.ID = newGrantID()
		if g.entry(gr.ID) == nil {
			break
		}
	}
	token, hash := newToken(gr.ID)
	gr.Status = StatusActive
	gr.Created = time.Now().UTC().Truncate(time.Second)
	gr.Uncollected = req.Uncollected
	e := &grantEntry{grant: gr, hash: hash, use: new(usage)}
	if err := g.saveLocked(e); err != nil {
		return Grant{}, "", err
	}
	g.setLocked(e)
	g.notify()
	g.log.Info("grant issued", "grant", gr)
	cause := ""
	if gr.Uncollected {
		cause = "valid once the device collects its token"
	}
	g.queue(grantChange(ChangeIssued, gr, cause))
	return gr, token, nil
}

func (req IssueRequest) validate() (Grant, error) {
	gr := Grant{
		Name:   cleanText(req.Name, MaxNameLen),
		OS:     cleanText(req.OS, MaxOSLen),
		Policy: req.Policy,
	}
	if gr.Name == "" {
		return Grant{}, fmt.Errorf("%w: a grant needs a name", ErrInvalid)
	}
	if req.PeerID != "" {
		id, err := ParseDeviceID(req.PeerID)
		if err != nil {
			return Grant{}, fmt.Errorf("%w: peer ID: %v", ErrInvalid, err)
		}
		gr.PeerID = id.String()
	}
	sc, err := NormalizeScopes(req.Scopes)
	if err != nil {
		return Grant{}, err
	}
	if len(sc) == 0 {
		return Grant{}, fmt.Errorf("%w: a grant needs at least one scope", ErrInvalid)
	}
	gr.Scopes = sc
	if gr.Policy == "" {
		gr.Policy = PolicyAsk
	}
	if !gr.Policy.Valid() {
		return Grant{}, fmt.Errorf("%w: unknown approval policy %q", ErrInvalid, clip(string(req.Policy), 16))
	}
	return gr, nil
}

// saveLocked writes e's record; the caller holds wmu.
func (g *Grants) saveLocked(e *grantEntry) error {
	rec := grantRecord{Grant: e.snapshot(), TokenHash: hex.EncodeToString(e.hash[:])}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := g.ks.Set(grantKeyPrefix+rec.ID, b); err != nil {
		return fmt.Errorf("pairing: save grant %s: %w", rec.ID, err)
	}
	if !rec.LastUsed.IsZero() {
		e.use.flushed.Store(rec.LastUsed.UnixNano())
	}
	return nil
}

// dummyHash is compared against when a token names no grant, so unknown and
// wrong tokens cost the same.
var dummyHash [32]byte

// Authenticate returns the active grant token belongs to and records its
// LastUsed. Errors: ErrUnknownToken (malformed, never issued, revoked,
// rotated away), ErrPaused (returned with the grant, for logging). The
// token's SHA-256 is compared in constant time (crypto/subtle); no keychain
// I/O. The returned Grant's Scopes must not be modified.
func (g *Grants) Authenticate(token string) (Grant, error) {
	id, ok := tokenGrantID(token)
	if !ok {
		return Grant{}, ErrUnknownToken
	}
	var buf [TokenLen]byte // hash from the stack: no allocation per request
	copy(buf[:], token)
	sum := sha256.Sum256(buf[:])
	e := (*g.grants.Load())[id]
	want := &dummyHash
	if e != nil {
		want = &e.hash
	}
	if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 || e == nil || e.grant.Uncollected {
		return Grant{}, ErrUnknownToken
	}
	if e.grant.Status != StatusActive {
		return e.snapshot(), ErrPaused
	}
	now := time.Now()
	if last := e.use.last.Load(); now.UnixNano()-last >= int64(lastUsedResolution) {
		e.use.last.Store(now.UnixNano())
	}
	return e.snapshot(), nil
}

// List returns every issued grant, oldest first.
func (g *Grants) List() []Grant {
	m := *g.grants.Load()
	out := make([]Grant, 0, len(m))
	for _, e := range m {
		out = append(out, e.snapshot())
	}
	slices.SortFunc(out, func(a, b Grant) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// Get returns the grant with that ID, or ErrNoGrant.
func (g *Grants) Get(id string) (Grant, error) {
	e := g.entry(id)
	if e == nil {
		return Grant{}, ErrNoGrant
	}
	return e.snapshot(), nil
}

// ByPeer returns the grants issued to the device with that ID (any accepted
// form), oldest first.
func (g *Grants) ByPeer(peerID string) []Grant {
	id, err := ParseDeviceID(peerID)
	if err != nil {
		return nil
	}
	want := id.String()
	var out []Grant
	for _, gr := range g.List() {
		if gr.PeerID == want {
			out = append(out, gr)
		}
	}
	return out
}

// Pause makes the grant's token refused (ErrPaused, HTTP 401) until Resume.
// It takes effect before the keychain write.
func (g *Grants) Pause(id string) error {
	return g.update(id, func(_, _ Grant) bool { return true }, func(gr *Grant) { gr.Status = StatusPaused })
}

// Resume re-activates a paused grant once the keychain write succeeded.
func (g *Grants) Resume(id string) error {
	return g.update(id, func(_, _ Grant) bool { return false }, func(gr *Grant) { gr.Status = StatusActive })
}

// SetPolicy sets the approval policy for delegations from the grant. A
// stricter policy applies before the keychain write, a looser one after;
// which one it is is judged against the policy it replaces, under the
// writer lock (a concurrent change may have moved it since the call).
func (g *Grants) SetPolicy(id string, p Policy) error {
	if !p.Valid() {
		return fmt.Errorf("%w: unknown approval policy %q", ErrInvalid, clip(string(p), 16))
	}
	return g.update(id, func(old, next Grant) bool {
		return Stricter(old.Policy, next.Policy) == next.Policy && old.Policy != next.Policy
	}, func(gr *Grant) { gr.Policy = p })
}

// SetFilesPolicy sets the approval policy for file transfers of grant id
// (Grant.FilesPolicy); "" is ask.
func (g *Grants) SetFilesPolicy(id string, p Policy) error {
	if p != "" && !p.Valid() {
		return fmt.Errorf("%w: unknown approval policy %q", ErrInvalid, clip(string(p), 16))
	}
	return g.update(id, func(old, next Grant) bool {
		return Stricter(filesPolicy(old.FilesPolicy), filesPolicy(next.FilesPolicy)) == filesPolicy(next.FilesPolicy) && old.FilesPolicy != next.FilesPolicy
	}, func(gr *Grant) { gr.FilesPolicy = p })
}

// filesPolicy reads an empty FilesPolicy as ask.
func filesPolicy(p Policy) Policy {
	if p == "" {
		return PolicyAsk
	}
	return p
}

// update applies mutate to a copy of grant id and stores it. A change
// restrictive(old, next) judges restrictive (computed here, under wmu) is
// visible to Authenticate before the keychain write; others after it.
func (g *Grants) update(id string, restrictiveFn func(old, next Grant) bool, mutate func(*Grant)) error {
	defer g.emitQueued() // after the unlock: the observer runs outside wmu
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if g.closed {
		return ErrClosed
	}
	old := g.entry(id)
	if old == nil {
		return ErrNoGrant
	}
	ne := &grantEntry{grant: old.grant, hash: old.hash, use: old.use}
	mutate(&ne.grant)
	if ne.grant.Status == old.grant.Status && ne.grant.Policy == old.grant.Policy && ne.grant.FilesPolicy == old.grant.FilesPolicy {
		return nil
	}
	restrictive := restrictiveFn(old.grant, ne.grant)
	op := ChangePolicy
	switch {
	case ne.grant.Status == old.grant.Status && ne.grant.Policy == old.grant.Policy:
		op = ChangeFilesPolicy
	case ne.grant.Status == old.grant.Status:
	case ne.grant.Status == StatusPaused:
		op = ChangePaused
	default:
		op = ChangeResumed
	}
	if restrictive {
		g.setLocked(ne)
		g.notify()
	}
	if err := g.saveLocked(ne); err != nil {
		if restrictive {
			g.log.Error("grant change applied in memory but not saved; it will be undone by a restart", "grant", ne.grant, "err", err)
			g.queue(grantChange(op, ne.grant, "in effect until a restart: the keychain write failed"))
		}
		return err
	}
	if !restrictive {
		g.setLocked(ne)
		g.notify()
	}
	g.log.Info("grant changed", "grant", ne.grant, "policy", ne.grant.Policy)
	g.queue(grantChange(op, ne.grant, ""))
	return nil
}

// Collected makes a grant issued Uncollected a grant like any other, once
// the keychain write succeeded: its token is now in the device's hands.
// ErrNoGrant when it is gone (revoked meanwhile); nil when it was not
// uncollected.
func (g *Grants) Collected(id string) error {
	defer g.emitQueued() // after the unlock: the observer runs outside wmu
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if g.closed {
		return ErrClosed
	}
	old := g.entry(id)
	if old == nil {
		return ErrNoGrant
	}
	if !old.grant.Uncollected {
		return nil
	}
	ne := &grantEntry{grant: old.grant, hash: old.hash, use: old.use}
	ne.grant.Uncollected = false
	if err := g.saveLocked(ne); err != nil {
		return err
	}
	g.setLocked(ne)
	g.notify()
	g.queue(grantChange(ChangePaired, ne.grant, ""))
	return nil
}

// entry returns the current entry of grant id, or nil.
func (g *Grants) entry(id string) *grantEntry { return (*g.grants.Load())[id] }

// setLocked stores e in a copy of the grant map; the caller holds wmu (or
// is NewGrants).
func (g *Grants) setLocked(e *grantEntry) {
	old := *g.grants.Load()
	m := make(map[string]*grantEntry, len(old)+1)
	maps.Copy(m, old)
	m[e.grant.ID] = e
	g.grants.Store(&m)
}

// deleteLocked removes grant id from a copy of the map and returns the
// entry it had; the caller holds wmu.
func (g *Grants) deleteLocked(id string) *grantEntry {
	old := *g.grants.Load()
	e := old[id]
	if e == nil {
		return nil
	}
	m := maps.Clone(old)
	delete(m, id)
	g.grants.Store(&m)
	return e
}

// Revoke deletes the grant: its token is refused (ErrUnknownToken) from
// this call on, even when the keychain delete then fails (the error is
// returned and the grant would come back after a restart).
func (g *Grants) Revoke(id string) error { return g.revoke(id, "") }

// revoke is Revoke, telling the observer why (cause; "" for the owner's
// own revocation).
func (g *Grants) revoke(id, cause string) error {
	defer g.emitQueued() // after the unlock: the observer runs outside wmu
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if g.closed {
		return ErrClosed
	}
	e := g.deleteLocked(id)
	if e == nil {
		return ErrNoGrant
	}
	g.notify()
	if err := g.ks.Delete(grantKeyPrefix + id); err != nil && !errors.Is(err, keychain.ErrNotFound) {
		g.log.Error("grant revoked in memory but not deleted from the keychain", "grant", e.grant, "err", err)
		g.queue(grantChange(ChangeRevoked, e.grant, joinCause(cause, "in effect until a restart: the keychain delete failed")))
		return fmt.Errorf("pairing: delete grant %s: %w", id, err)
	}
	g.log.Info("grant revoked", "grant", e.grant)
	g.queue(grantChange(ChangeRevoked, e.grant, cause))
	return nil
}

// RevokeOlder revokes every grant issued to the device peerID (any
// accepted form) but keep: a device pairs once, so the grant of a new
// pairing replaces the older ones, once the new one is in its hands. It
// returns the revoked grants; a grant revoked meanwhile is skipped, other
// errors are joined.
func (g *Grants) RevokeOlder(peerID, keep string) ([]Grant, error) {
	var revoked []Grant
	var errs []error
	for _, old := range g.ByPeer(peerID) {
		if old.ID == keep {
			continue
		}
		switch err := g.revoke(old.ID, "replaced by a new pairing of the device"); {
		case err == nil:
			revoked = append(revoked, old)
		case !errors.Is(err, ErrNoGrant):
			errs = append(errs, err)
		}
	}
	return revoked, errors.Join(errs...)
}

// Rotate gives the grant a new token and returns it; the old token is
// refused once the new hash is saved. The grant keeps its ID, scopes,
// status and policy. A peer holding the old token must receive the new one
// (see Client.Offer) or pair again.
func (g *Grants) Rotate(id string) (string, error) {
	defer g.emitQueued() // after the unlock: the observer runs outside wmu
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if g.closed {
		return "", ErrClosed
	}
	old := g.entry(id)
	if old == nil {
		return "", ErrNoGrant
	}
	token, hash := newToken(id)
	ne := &grantEntry{grant: old.grant, hash: hash, use: old.use}
	if err := g.saveLocked(ne); err != nil {
		return "", err
	}
	g.setLocked(ne)
	g.notify()
	g.log.Info("grant token rotated", "grant", ne.grant)
	g.queue(grantChange(ChangeRotated, ne.grant, ""))
	return token, nil
}

// Subscribe returns a channel that receives a value after grants or held
// grants change (LastUsed flushes excluded). Notifications coalesce: the
// channel has capacity 1 and a send never blocks, so a slow reader sees one
// wake-up for many changes and re-reads List/ListHeld. cancel closes the
// channel.
func (g *Grants) Subscribe() (<-chan struct{}, func()) { return g.changes.subscribe() }

func (g *Grants) notify() { g.changes.notify() }

// PutHeld stores a grant a peer gave us, replacing any earlier one from the
// same peer. PeerID and Fingerprint must name the same certificate (a
// device ID is the SHA-256 of its certificate), Token must be a grant token,
// and URL https (CheckPeerURL).
func (g *Grants) PutHeld(h Held) error { return g.putHeld(h, "") }

// putHeld is PutHeld, telling the observer how the grant came (cause).
func (g *Grants) putHeld(h Held, cause string) error {
	h, err := checkHeld(h)
	if err != nil {
		return err
	}
	if h.Created.IsZero() {
		h.Created = time.Now().UTC().Truncate(time.Second)
	}
	b, err := json.Marshal(heldRecord{Held: h, Token: h.Token})
	if err != nil {
		return err
	}
	defer g.emitQueued() // after the unlock: the observer runs outside wmu
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if g.closed {
		return ErrClosed
	}
	if err := g.ks.Set(heldKeyPrefix+h.PeerID, b); err != nil {
		return fmt.Errorf("pairing: save held grant: %w", err)
	}
	g.mu.Lock()
	g.held[h.PeerID] = h
	g.mu.Unlock()
	g.notify()
	g.log.Info("held grant stored", "held", h)
	g.queue(heldChange(ChangeHeld, h, cause))
	return nil
}

// checkHeld validates and normalises h.
func checkHeld(h Held) (Held, error) {
	id, err := ParseDeviceID(h.PeerID)
	if err != nil {
		return Held{}, fmt.Errorf("%w: held grant peer ID: %v", ErrInvalid, err)
	}
	h.PeerID = id.String()
	if h.Fingerprint == "" {
		h.Fingerprint = id.Fingerprint()
	}
	fp, err := ParseFingerprint(h.Fingerprint)
	if err != nil {
		return Held{}, err
	}
	if fp != id.Fingerprint() {
		return Held{}, fmt.Errorf("%w: fingerprint %s is not device %s", ErrIdentityChanged, shortFP(fp), id.Short())
	}
	h.Fingerprint = fp
	gid, ok := tokenGrantID(h.Token)
	if !ok {
		return Held{}, fmt.Errorf("%w: held grant token is not a meshtray token", ErrInvalid)
	}
	h.GrantID = gid
	h.Name = cleanText(h.Name, MaxNameLen)
	h.OS = cleanText(h.OS, MaxOSLen)
	if h.URL != "" {
		u, err := CheckPeerURL(h.URL)
		if err != nil {
			return Held{}, err
		}
		h.URL = u
	}
	sc, err := NormalizeScopes(h.Scopes)
	if err != nil {
		return Held{}, err
	}
	h.Scopes = sc
	return h, nil
}

// CheckPeerURL validates a peer's base URL and returns it normalised
// (https://host[:port], no path, query, fragment or user info). Peers are
// reached over HTTPS pinned to their certificate only, on loopback too
// (a second node on this machine answers TLS on its loopback port): plain
// http to 127.0.0.1 would hand a token or a code to whatever process holds
// the port. The unspecified addresses (0.0.0.0, ::), which reach this
// machine, are no peer's address.
func CheckPeerURL(s string) (string, error) {
	if len(s) > MaxURLLen {
		return "", fmt.Errorf("%w: URL longer than %d bytes", ErrInvalid, MaxURLLen)
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/") {
		return "", fmt.Errorf("%w: peer URL must be https://host:port", ErrInvalid)
	}
	switch u.Scheme {
	case "https":
	case "http":
		return "", fmt.Errorf("%w: plain http is refused for peers (a token or code must reach only the pinned device); use https://%s", ErrInvalid, u.Host)
	default:
		return "", fmt.Errorf("%w: peer URL scheme must be https", ErrInvalid)
	}
	if a, err := netip.ParseAddr(u.Hostname()); err == nil && a.Unmap().IsUnspecified() {
		return "", fmt.Errorf("%w: %s is not a peer address", ErrInvalid, u.Hostname())
	}
	return u.Scheme + "://" + u.Host, nil
}

// IsLoopbackURL reports whether the host of URL s is this machine's
// loopback (localhost or a loopback IP).
func IsLoopbackURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && isLoopbackHost(u.Hostname())
}

// upgradeLoopbackURL maps a held grant's plain-http loopback URL, stored
// before the loopback listener spoke TLS, to the same address over https
// (the same port answers both).
func upgradeLoopbackURL(s string) string {
	if rest, ok := strings.CutPrefix(s, "http://"); ok && IsLoopbackURL(s) {
		return "https://" + rest
	}
	return s
}

// isLoopbackHost reports whether host (no port) is localhost or a loopback IP.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// Held returns the grant held from the peer with that device ID (any
// accepted form), or ErrNoHeld.
func (g *Grants) Held(peerID string) (Held, error) {
	id, err := ParseDeviceID(peerID)
	if err != nil {
		return Held{}, ErrNoHeld
	}
	g.mu.RLock()
	h, ok := g.held[id.String()]
	g.mu.RUnlock()
	if !ok {
		return Held{}, ErrNoHeld
	}
	return h, nil
}

// ListHeld returns every held grant, by peer name then ID.
func (g *Grants) ListHeld() []Held {
	g.mu.RLock()
	out := slices.Collect(maps.Values(g.held))
	g.mu.RUnlock()
	slices.SortFunc(out, func(a, b Held) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.PeerID, b.PeerID)
	})
	return out
}

// DropHeld deletes the grant held from that peer; ErrNoHeld when none.
func (g *Grants) DropHeld(peerID string) error {
	return g.dropHeld(peerID, "", "")
}

// dropHeld deletes the held grant of peerID; when token is not empty, only
// if the held token is still that one. cause is told to the observer.
func (g *Grants) dropHeld(peerID, token, cause string) error {
	id, err := ParseDeviceID(peerID)
	if err != nil {
		return ErrNoHeld
	}
	key := id.String()
	defer g.emitQueued() // after the unlock: the observer runs outside wmu
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if g.closed {
		return ErrClosed
	}
	g.mu.Lock()
	h, ok := g.held[key]
	if ok && token != "" && subtle.ConstantTimeCompare([]byte(h.Token), []byte(token)) != 1 {
		ok = false
	}
	if ok {
		delete(g.held, key)
	}
	g.mu.Unlock()
	if !ok {
		return ErrNoHeld
	}
	g.notify()
	g.queue(heldChange(ChangeHeldDropped, h, cause))
	if err := g.ks.Delete(heldKeyPrefix + key); err != nil && !errors.Is(err, keychain.ErrNotFound) {
		return fmt.Errorf("pairing: delete held grant: %w", err)
	}
	g.log.Info("held grant dropped", "held", h)
	return nil
}

// Refused is what the outbound client calls after a peer answered a request
// made with a held token: when the answer is 401 for a revoked or unknown
// token it drops the held grant and reports true. A 401 for a paused grant
// (WWW-Authenticate error_description="grant paused") keeps it, and so does
// any other status. It drops nothing if the held token was replaced since
// the request was sent (token is the one the request carried), so a late
// answer never destroys a newer pairing.
//
// Only call it for answers from the pinned peer (HTTPS with PinnedTLSConfig,
// or loopback).
func (g *Grants) Refused(peerID, token string, resp *http.Response) (bool, error) {
	if resp == nil || resp.StatusCode != http.StatusUnauthorized {
		return false, nil
	}
	if challengeParam(resp.Header.Get("WWW-Authenticate"), "error_description") == pausedDescription {
		return false, nil
	}
	err := g.dropHeld(peerID, token, "the device refused its token: it revoked the grant")
	if errors.Is(err, ErrNoHeld) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, nil
}

// Flush writes every LastUsed recorded since the last flush. The flusher
// calls it every LastUsedFlushInterval and Close calls it once more.
func (g *Grants) Flush() error {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	return g.flushLocked()
}

func (g *Grants) flushLocked() error {
	var errs []error
	for _, e := range *g.grants.Load() {
		if e.use.last.Load() <= e.use.flushed.Load() {
			continue
		}
		if err := g.saveLocked(e); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (g *Grants) flushLoop(ctx context.Context) {
	defer close(g.done)
	t := time.NewTicker(LastUsedFlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := g.Flush(); err != nil {
				g.log.Warn("cannot save last-used times", "err", err)
			}
		}
	}
}

// Close stops the flusher, writes pending LastUsed times and refuses later
// writes (ErrClosed); Authenticate and reads keep working. A second Close
// returns ErrClosed.
func (g *Grants) Close() error {
	g.wmu.Lock()
	if g.closed {
		g.wmu.Unlock()
		return ErrClosed
	}
	g.closed = true
	g.wmu.Unlock()
	g.cancel()
	<-g.done
	g.wmu.Lock()
	defer g.wmu.Unlock()
	return g.flushLocked()
}
