package pairing

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Pairing flow limits (README, "Security model": pairing codes).
const (
	DefaultCodeTTL    = 10 * time.Minute // a code is valid this long after Start
	DefaultRequestTTL = 5 * time.Minute  // a claim waits this long for the owner, and an approved token this long for collection
	DefaultMaxWait    = 30 * time.Second // longest GET /pair/status wait
	// DefaultCallTimeout bounds a call to a paired peer (PairerOptions.CallTimeout).
	DefaultCallTimeout = 15 * time.Second
	// MaxWrongAttempts wrong codes kill a live code: a code
	// can be guessed at most 5 times, each a 1 in 30^8 (2^39) chance.
	// Every wrong claim is a guess at every live code, so it counts
	// against each.
	MaxWrongAttempts = 5
	// MaxWrongPerSource wrong codes from one source (an IPv4 address, an
	// IPv6 /64) bar that source from a live code: later claims from it
	// fail for that code, the right code included, and no longer count
	// against it. So one host, even with an IPv4 address and an IPv6 /64
	// (2 × 2 = 4 < MaxWrongAttempts), cannot kill the owner's codes and
	// block all pairing; killing a code takes wrong claims from at least
	// three sources, and a code still meets at most MaxWrongAttempts
	// guesses. A new code gives every source a fresh allowance (a person
	// who mistyped twice asks the owner for a new code).
	MaxWrongPerSource = 2

	// CodeLen and CodeAlphabet define pairing codes: 8 characters drawn
	// uniformly (crypto/rand, rejection sampling) from 30 symbols: digits
	// and capitals without 0, 1, I, L, O and U (Crockford's base32 choice:
	// no look-alikes).
	CodeLen      = 8
	CodeAlphabet = "23456789ABCDEFGHJKMNPQRSTVWXYZ"

	maxSessions          = 8  // live codes at once; starting more ends the oldest
	maxPending           = 32 // undecided claims at once; more get ErrBusy
	maxWaitersPerRequest = 4  // concurrent long polls on one request
	sweepEvery           = 10 * time.Second

	// Per-source rate of pairing calls (claims, status polls, revocation
	// notices; sources as SourceKey counts them, all of loopback as one):
	// a burst of 8, then one every 4 s. The global bucket (50/s, burst
	// 640) bounds the work of many sources at once, and is sized so that
	// a handful cannot fill it: its rate takes 200 sources at their full
	// rate, its burst 80 sources bursting together.
	sourceEvery   = 4 * time.Second
	sourceBurst   = 8
	globalPerSec  = 50
	globalBurst   = 640
	maxSourceKeys = 4096
	// retryAfter is the Retry-After of a 429 (RFC 9110 §10.2.3), in
	// seconds: the time one token of a source's bucket takes to refill.
	retryAfter = "4"

	minNonceLen = 22 // characters of base64url: 128 bits
	maxNonceLen = 128
)

// PairerOptions configure NewPairer. Grants and Identity are required.
type PairerOptions struct {
	Grants   *Grants
	Identity *Identity
	Name     string // this device's name, shown to claimants
	OS       string // this device's OS environment string
	// SelfURL returns the base URL peers reach this device at, sent when
	// this device offers a rotated token to a peer; nil or "" keeps the URL
	// the peer has.
	SelfURL func() string
	// OnRequest is called once per new pending request, outside any lock,
	// on the claiming request's goroutine: it must not block (queue it).
	OnRequest func(Request)
	// WhoIs, when set, names the tailnet node and user of claims arriving
	// on ListenerTailnet.
	WhoIs  func(ctx context.Context, addr netip.AddrPort) *TailnetIdentity
	Logger *slog.Logger

	// CallTimeout bounds each call this device makes to a paired peer on
	// its own (rotated-token offers, revocation notices, held-grant
	// re-checks), whatever the caller's context. Default
	// DefaultCallTimeout.
	CallTimeout time.Duration
	CodeTTL     time.Duration    // default DefaultCodeTTL
	RequestTTL  time.Duration    // default DefaultRequestTTL
	MaxWait     time.Duration    // default DefaultMaxWait
	Now         func() time.Time // default time.Now; tests move time with it
}

// Session is one pairing code the owner started. Code is a secret until
// used: it is shown on the screen and in the QR fragment, never logged.
type Session struct {
	Code        string    `json:"code"`
	Expires     time.Time `json:"expires"`
	DeviceID    string    `json:"device_id"`   // this device
	Fingerprint string    `json:"fingerprint"` // this device's certificate
}

// LogValue implements slog.LogValuer without the code.
func (s Session) LogValue() slog.Value {
	return slog.GroupValue(slog.Time("expires", s.Expires))
}

// URL returns the pairing URL for this device's base URL (scheme://host:port):
// base + "/pair#c=<code>&fp=<fingerprint>". Code and pin ride in the
// fragment, which browsers never send (RFC 3986 §3.5), so they stay out of
// every request line and server log.
func (s Session) URL(base string) string {
	return strings.TrimSuffix(base, "/") + "/pair#" + url.Values{"c": {s.Code}, "fp": {s.Fingerprint}}.Encode()
}

// ParsePairURL splits a pairing URL (Session.URL) into the peer's base URL,
// code and fingerprint. The base is checked with CheckPeerURL (https, or
// http to loopback). A URL without fragment gives empty code and fp.
func ParsePairURL(s string) (base, code, fp string, err error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", "", "", fmt.Errorf("%w: pairing URL: %v", ErrInvalid, err)
	}
	frag, _ := url.ParseQuery(u.Fragment)
	base, err = CheckPeerURL(u.Scheme + "://" + u.Host)
	if err != nil {
		return "", "", "", err
	}
	code, fp = frag.Get("c"), frag.Get("fp")
	if fp != "" {
		if fp, err = ParseFingerprint(fp); err != nil {
			return "", "", "", err
		}
	}
	return base, code, fp, nil
}

// ClaimRequest is the body of POST /pair/claim. Code and Nonce are secrets.
type ClaimRequest struct {
	Code     string `json:"code"`
	Name     string `json:"name"`
	OS       string `json:"os,omitempty"`
	DeviceID string `json:"device_id,omitempty"` // a meshtray claimant's device ID; "" for a phone
	FP       string `json:"fp,omitempty"`        // a meshtray claimant's fingerprint; must be DeviceID's
	// Nonce: 22 to 128 characters of [A-Za-z0-9_-] from a CSPRNG (base64url
	// or hex of at least 16 random bytes); it enters the SAS.
	Nonce           string `json:"nonce"`
	RequestedScopes Scopes `json:"requested_scopes,omitempty"`
	// Cert and Sig prove a meshtray claimant holds the key of the device ID
	// it claims (required with DeviceID or FP): Cert is its identity
	// certificate, DER in standard base64; Sig the ASN.1 ECDSA signature by
	// that certificate's key over SHA-256 of ClaimProof(issuer fp, Nonce).
	Cert string `json:"cert,omitempty"`
	Sig  string `json:"sig,omitempty"`
}

// ClaimProof is the message a meshtray claimant signs:
// "meshtray-claim-v1" ‖ 00 ‖ issuer fingerprint ‖ 00 ‖ claimant nonce.
// Binding the issuer's fingerprint keeps a proof from being replayed to
// another device; the fresh nonce keeps it to one claim.
func ClaimProof(issuerFP, nonce string) []byte {
	return []byte("meshtray-claim-v1\x00" + issuerFP + "\x00" + nonce)
}

// maxCertDER bounds the claimant certificate we parse.
const maxCertDER = 2048

// signClaim fills c.Cert and c.Sig for identity id claiming at issuerFP.
func (c *ClaimRequest) signClaim(id *Identity, issuerFP string) error {
	key, ok := id.Cert.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return fmt.Errorf("pairing: identity key is %T, want ECDSA", id.Cert.PrivateKey)
	}
	digest := sha256.Sum256(ClaimProof(issuerFP, c.Nonce))
	sig, err := ecdsa.SignASN1(rand.Reader, key, digest[:])
	if err != nil {
		return err
	}
	c.Cert = base64.StdEncoding.EncodeToString(id.Cert.Certificate[0])
	c.Sig = base64.StdEncoding.EncodeToString(sig)
	return nil
}

// verifyProof checks that c.Cert is c.DeviceID's certificate and c.Sig its
// key's signature of ClaimProof(issuerFP, c.Nonce). Errors wrap ErrInvalid.
func (c ClaimRequest) verifyProof(issuerFP string) error {
	der, err := base64.StdEncoding.DecodeString(c.Cert)
	if err != nil || len(der) == 0 || len(der) > maxCertDER {
		return fmt.Errorf("%w: a claim with a device ID needs its certificate (cert)", ErrInvalid)
	}
	if NewDeviceID(der).String() != c.DeviceID {
		return fmt.Errorf("%w: cert is not the certificate of device_id", ErrInvalid)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return fmt.Errorf("%w: cert does not parse", ErrInvalid)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	sig, serr := base64.StdEncoding.DecodeString(c.Sig)
	digest := sha256.Sum256(ClaimProof(issuerFP, c.Nonce))
	if !ok || serr != nil || !ecdsa.VerifyASN1(pub, digest[:], sig) {
		return fmt.Errorf("%w: the claim's signature does not verify with device_id's key", ErrInvalid)
	}
	return nil
}

// LogValue implements slog.LogValuer without code, nonce and signature.
func (c ClaimRequest) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", cleanText(c.Name, MaxNameLen)), slog.String("device", ShortID(c.DeviceID)))
}

// PeerInfo names a device in pairing answers.
type PeerInfo struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	OS   string `json:"os,omitempty"`
	FP   string `json:"fp"`
}

// ClaimResponse answers POST /pair/claim. PollToken is the claimant's secret
// for GET /pair/status/{request_id} (sent as `Authorization: Bearer`).
type ClaimResponse struct {
	RequestID   string    `json:"request_id"`
	PollToken   string    `json:"poll_token"`
	SAS         string    `json:"sas"`
	ServerNonce string    `json:"server_nonce"`
	Expires     time.Time `json:"expires"`
	Issuer      PeerInfo  `json:"issuer"`
}

// LogValue implements slog.LogValuer without poll token and SAS.
func (c ClaimResponse) LogValue() slog.Value {
	return slog.GroupValue(slog.String("request", c.RequestID), slog.Time("expires", c.Expires))
}

// Status values of a pairing request (GET /pair/status).
const (
	StatusPending  = "pending"
	StatusApproved = "approved"
	StatusDenied   = "denied"
	StatusExpired  = "expired"
)

// StatusResponse answers GET /pair/status/{id}. Token is present once: in
// the first answer after approval.
type StatusResponse struct {
	Status  string    `json:"status"` // pending | approved | denied | expired
	Token   string    `json:"token,omitempty"`
	GrantID string    `json:"grant_id,omitempty"`
	Scopes  Scopes    `json:"scopes,omitempty"`
	Expires time.Time `json:"expires"`
	Issuer  PeerInfo  `json:"issuer"`
}

// LogValue implements slog.LogValuer without the token.
func (s StatusResponse) LogValue() slog.Value {
	return slog.GroupValue(slog.String("status", s.Status), slog.String("grant_id", s.GrantID))
}

// ClaimSource is where a claim came from.
type ClaimSource struct {
	Addr     netip.AddrPort
	Listener Listener
	Tailnet  *TailnetIdentity
}

// Request is a pending pairing request as the owner sees it (the approvals
// queue, kind "pairing"). SAS is shown next to the claimant's; it is never
// logged.
type Request struct {
	ID              string           `json:"id"`
	Name            string           `json:"name"`
	OS              string           `json:"os,omitempty"`
	DeviceID        string           `json:"device_id,omitempty"` // "" for a phone
	Fingerprint     string           `json:"fingerprint,omitempty"`
	RequestedScopes Scopes           `json:"requested_scopes,omitempty"`
	SAS             string           `json:"sas"`
	Source          netip.AddrPort   `json:"source"`
	Listener        Listener         `json:"listener,omitempty"`
	Tailnet         *TailnetIdentity `json:"tailnet,omitempty"`
	// Replaces lists grants already issued to this device ID; approving
	// revokes them (a device pairs once). A device whose identity changed
	// shows up with a new ID and an empty Replaces.
	Replaces []string  `json:"replaces,omitempty"`
	Created  time.Time `json:"created"`
	Expires  time.Time `json:"expires"`
	// PollHash is the SHA-256 of the claimant's poll token: what a
	// durable queue keeps so Restore can find the claimant's next poll
	// after a restart. It is not the token and cannot be used as one.
	PollHash [32]byte `json:"-"`
	// Restored marks a request put back by Restore: it has no SAS (the
	// nonces it is made of are not kept), and it can be approved only
	// once its claimant polled again (ErrClaimantAway).
	Restored bool `json:"restored,omitempty"`
}

// LogValue implements slog.LogValuer without the SAS.
func (r Request) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("id", r.ID),
		slog.String("name", r.Name),
		slog.String("device", ShortID(r.DeviceID)),
		slog.String("source", r.Source.String()),
	)
}

type reqState int

const (
	statePending  reqState = iota
	stateDeciding          // Decide is issuing the grant
	stateApproved          // token waiting for collection
	stateDenied
	stateExpired
)

// pending is one claim's server-side state; guarded by Pairer.mu.
type pending struct {
	req         Request
	pollHash    [32]byte
	state       reqState
	changed     chan struct{} // closed when state leaves pending/deciding
	waiters     int
	token       string // the grant token until collected
	grantID     string
	scopes      Scopes
	collectBy   time.Time // approved: the token must be collected before
	forgetAfter time.Time // denied/expired: answer status until, then forget
	// polled: a restored request's claimant polled since Restore (its
	// token would reach it); always true for a request claimed here.
	polled bool
}

type session struct {
	code    string
	expires time.Time
	wrongs  int // wrong codes claimed while this one was live
	// bySource counts those wrong codes per source (sourceKey); a source
	// at MaxWrongPerSource is barred from this code. At most
	// MaxWrongAttempts entries: the code dies at that many wrongs.
	bySource map[netip.Prefix]int
}

// barred reports whether source key k may no longer claim s.
func (s *session) barred(k netip.Prefix) bool { return s.bySource[k] >= MaxWrongPerSource }

// Pairer runs the pairing flow on the granting device (doc.go, "Wire
// protocol of the pairing flow"): codes
// the owner starts, claims posted with a code, the SAS, the long-poll
// status, the owner's decision, and the grant token handed over once. It
// also answers the calls paired meshtrays make to each other
// (reciprocation, revocation notices). Close stops it.
type Pairer struct {
	o       PairerOptions
	log     *slog.Logger
	limiter *sourceLimiter
	changes notifier

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // janitor, revocation notices, rechecks

	mu       sync.Mutex
	sessions []*session           // live codes, oldest first; guarded by mu
	reqs     map[string]*pending  // by request ID; guarded by mu
	orphans  []string             // grants approved but never collected: to revoke; guarded by mu
	checking map[string]time.Time // held-grant rechecks by peer ID: last start; guarded by mu
	closed   bool                 // guarded by mu
}

// NewPairer returns a running Pairer; Close stops its janitor.
func NewPairer(o PairerOptions) (*Pairer, error) {
	if o.Grants == nil || o.Identity == nil {
		return nil, errors.New("pairing: NewPairer needs Grants and Identity")
	}
	if o.CodeTTL <= 0 {
		o.CodeTTL = DefaultCodeTTL
	}
	if o.RequestTTL <= 0 {
		o.RequestTTL = DefaultRequestTTL
	}
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Name = cleanText(o.Name, MaxNameLen)
	o.OS = cleanText(o.OS, MaxOSLen)
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Pairer{
		o:        o,
		log:      log,
		limiter:  newSourceLimiter(rate.Every(sourceEvery), sourceBurst, globalPerSec, globalBurst, maxSourceKeys),
		reqs:     make(map[string]*pending),
		checking: make(map[string]time.Time),
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.janitor()
	return p, nil
}

// Issuer describes this device to claimants.
func (p *Pairer) Issuer() PeerInfo {
	return PeerInfo{ID: p.o.Identity.ID.String(), Name: p.o.Name, OS: p.o.OS, FP: p.o.Identity.Fingerprint}
}

// Start makes a new pairing code, valid CodeTTL, single use. At most 8
// codes live at once; starting a ninth ends the oldest.
func (p *Pairer) Start() (Session, error) {
	defer p.o.Grants.emitQueued() // the expiries sweepLocked queued, after mu is released
	code := newCode()
	now := p.o.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return Session{}, ErrClosed
	}
	p.sweepLocked(now)
	if len(p.sessions) >= maxSessions {
		p.sessions = p.sessions[1:]
	}
	s := &session{code: code, expires: now.Add(p.o.CodeTTL)}
	p.sessions = append(p.sessions, s)
	out := Session{Code: code, Expires: s.expires, DeviceID: p.o.Identity.ID.String(), Fingerprint: p.o.Identity.Fingerprint}
	p.log.Info("pairing code started", "session", out)
	return out, nil
}

// EndSessions kills every live code (the owner closed the pairing window).
// Claims already made stay pending.
func (p *Pairer) EndSessions() {
	p.mu.Lock()
	n := len(p.sessions)
	p.sessions = nil
	p.mu.Unlock()
	if n > 0 {
		p.log.Info("pairing codes ended", "count", n)
	}
}

// newCode draws CodeLen symbols uniformly from CodeAlphabet.
func newCode() string {
	var out [CodeLen]byte
	var buf [32]byte
	n := 0
	for n < CodeLen {
		rand.Read(buf[:])
		for _, b := range buf {
			// 30 symbols: accept b%32 < 30 (b&31 is uniform on 0..31).
			if v := int(b & 31); v < len(CodeAlphabet) && n < CodeLen {
				out[n] = CodeAlphabet[v]
				n++
			}
		}
	}
	return string(out[:])
}

// normalizeCode upper-cases a typed code and drops spaces and dashes.
func normalizeCode(s string) string {
	if len(s) > 64 {
		return ""
	}
	return strings.ToUpper(strings.NewReplacer(" ", "", "-", "").Replace(s))
}

// validate checks and normalises a claim body.
func (c ClaimRequest) validate() (ClaimRequest, error) {
	c.Name = cleanText(c.Name, MaxNameLen)
	c.OS = cleanText(c.OS, MaxOSLen)
	if c.Name == "" {
		return c, fmt.Errorf("%w: name is required", ErrInvalid)
	}
	if len(c.Nonce) < minNonceLen || len(c.Nonce) > maxNonceLen {
		return c, fmt.Errorf("%w: nonce must be %d to %d characters", ErrInvalid, minNonceLen, maxNonceLen)
	}
	for i := 0; i < len(c.Nonce); i++ {
		if !isBase64URL(c.Nonce[i]) {
			return c, fmt.Errorf("%w: nonce must be base64url or hex", ErrInvalid)
		}
	}
	if c.DeviceID != "" {
		id, err := ParseDeviceID(c.DeviceID)
		if err != nil {
			return c, fmt.Errorf("%w: device_id: %v", ErrInvalid, err)
		}
		c.DeviceID = id.String()
	}
	if c.FP != "" {
		id, err := DeviceIDFromFingerprint(c.FP)
		if err != nil {
			return c, err
		}
		if c.DeviceID != "" && c.DeviceID != id.String() {
			return c, fmt.Errorf("%w: fp is not the certificate of device_id", ErrInvalid)
		}
		c.DeviceID, c.FP = id.String(), id.Fingerprint()
	} else if c.DeviceID != "" {
		id, _ := ParseDeviceID(c.DeviceID)
		c.FP = id.Fingerprint()
	}
	sc, err := NormalizeScopes(c.RequestedScopes)
	if err != nil {
		return c, err
	}
	c.RequestedScopes = sc
	return c, nil
}

// Claim handles one claim: rate limit per source, body checks, the code
// (single use; a wrong code counts against every live code, which dies at
// MaxWrongAttempts, and against its source, barred from a code after
// MaxWrongPerSource), then a pending request the owner decides on.
// Errors: ErrRateLimited, ErrInvalid, ErrBadCode, ErrBusy, ErrClosed.
func (p *Pairer) Claim(ctx context.Context, c ClaimRequest, from ClaimSource) (ClaimResponse, error) {
	if !p.limiter.allow(from.Addr.Addr(), p.o.Now()) {
		return ClaimResponse{}, ErrRateLimited
	}
	return p.claim(ctx, c, from)
}

// claim is Claim after the rate limit.
func (p *Pairer) claim(ctx context.Context, c ClaimRequest, from ClaimSource) (ClaimResponse, error) {
	defer p.o.Grants.emitQueued() // the expiries sweepLocked queued, after mu is released
	now := p.o.Now()
	c, err := c.validate()
	if err != nil {
		return ClaimResponse{}, err
	}
	issuer := p.Issuer()
	if c.DeviceID != "" {
		if err := c.verifyProof(issuer.FP); err != nil {
			return ClaimResponse{}, err
		}
	}
	code := normalizeCode(c.Code)
	replaces := []string{}
	if c.DeviceID != "" {
		for _, g := range p.o.Grants.ByPeer(c.DeviceID) {
			replaces = append(replaces, g.ID)
		}
	}

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ClaimResponse{}, ErrClosed
	}
	p.sweepLocked(now)
	live := 0
	for _, r := range p.reqs {
		if r.state == statePending || r.state == stateDeciding {
			live++
		}
	}
	if live >= maxPending {
		p.mu.Unlock()
		return ClaimResponse{}, ErrBusy
	}
	key := sourceKey(from.Addr.Addr())
	matched, open := -1, 0
	for i, s := range p.sessions {
		// Compare every live code in constant time, whatever matches; a
		// code barred to this source matches nothing for it.
		if s.barred(key) {
			subtle.ConstantTimeCompare([]byte(s.code), []byte(code))
			continue
		}
		open++
		if subtle.ConstantTimeCompare([]byte(s.code), []byte(code)) == 1 {
			matched = i
		}
	}
	if matched < 0 {
		killed := p.wrongAttemptLocked(key)
		p.mu.Unlock()
		level := slog.LevelDebug // no code to guess (or none left to this source): noise
		if open > 0 {
			level = slog.LevelWarn
		}
		p.log.Log(ctx, level, "pairing claim with a wrong code", "source", from.Addr.Addr().String(), "open_codes", open, "codes_killed", killed)
		return ClaimResponse{}, ErrBadCode
	}
	p.sessions = slices.Delete(p.sessions, matched, matched+1) // single use

	id := randomString(16)
	for p.reqs[id] != nil {
		id = randomString(16)
	}
	poll := randomString(32)
	serverNonce := randomString(16)
	r := &pending{
		req: Request{
			ID:              id,
			Name:            c.Name,
			OS:              c.OS,
			DeviceID:        c.DeviceID,
			Fingerprint:     c.FP,
			RequestedScopes: c.RequestedScopes,
			SAS:             SAS(issuer.FP, c.DeviceID, c.Nonce, serverNonce, id),
			Source:          from.Addr,
			Listener:        from.Listener,
			Tailnet:         from.Tailnet,
			Replaces:        replaces,
			Created:         now,
			Expires:         now.Add(p.o.RequestTTL),
		},
		pollHash: sha256.Sum256([]byte(poll)),
		changed:  make(chan struct{}),
		polled:   true,
	}
	r.req.PollHash = r.pollHash
	p.reqs[id] = r
	req := r.req
	p.mu.Unlock()

	p.changes.notify()
	p.log.Info("pairing request waiting for the owner", "request", req)
	if p.o.OnRequest != nil {
		p.o.OnRequest(req)
	}
	return ClaimResponse{
		RequestID:   id,
		PollToken:   poll,
		SAS:         req.SAS,
		ServerNonce: serverNonce,
		Expires:     req.Expires,
		Issuer:      issuer,
	}, nil
}

// wrongAttemptLocked counts a wrong code from source key against every
// live session not barred to it, and kills those that reached
// MaxWrongAttempts; it returns how many died.
func (p *Pairer) wrongAttemptLocked(key netip.Prefix) int {
	killed := 0
	keep := p.sessions[:0]
	for _, s := range p.sessions {
		if !s.barred(key) {
			s.wrongs++
			if s.bySource == nil {
				s.bySource = make(map[netip.Prefix]int)
			}
			s.bySource[key]++
		}
		if s.wrongs >= MaxWrongAttempts {
			killed++
			continue
		}
		keep = append(keep, s)
	}
	p.sessions = keep
	return killed
}

// Pending returns the requests waiting for a decision, oldest first.
func (p *Pairer) Pending() []Request {
	defer p.o.Grants.emitQueued() // the expiries sweepLocked queued, after mu is released
	now := p.o.Now()
	p.mu.Lock()
	p.sweepLocked(now)
	var out []Request
	for _, r := range p.reqs {
		if r.state == statePending {
			out = append(out, r.req)
		}
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b Request) int { return a.Created.Compare(b.Created) })
	return out
}

// Restore puts back a pending request an earlier run of this node kept
// (r as OnRequest saw it, with its PollHash): a claimant still polling with
// its poll token finds it again and waits for the decision as before. The
// restored request has no SAS (it is made of nonces that are never kept)
// and is approved only once its claimant polled since (Decide:
// ErrClaimantAway before); denying it works at once. Errors: ErrExpired
// (r.Expires passed), ErrDecided (the ID is known here), ErrBusy,
// ErrInvalid (no ID or poll hash), ErrClosed.
func (p *Pairer) Restore(r Request) error {
	defer p.o.Grants.emitQueued() // the expiries sweepLocked queued, after mu is released
	now := p.o.Now()
	if r.ID == "" || r.PollHash == ([32]byte{}) {
		return fmt.Errorf("%w: a restored pairing request needs its ID and poll hash", ErrInvalid)
	}
	if !now.Before(r.Expires) {
		return ErrExpired
	}
	r.SAS, r.Restored = "", true
	r.Name, r.OS = cleanText(r.Name, MaxNameLen), cleanText(r.OS, MaxOSLen)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.sweepLocked(now)
	if p.reqs[r.ID] != nil {
		p.mu.Unlock()
		return ErrDecided
	}
	live := 0
	for _, q := range p.reqs {
		if q.state == statePending || q.state == stateDeciding {
			live++
		}
	}
	if live >= maxPending {
		p.mu.Unlock()
		return ErrBusy
	}
	p.reqs[r.ID] = &pending{req: r, pollHash: r.PollHash, changed: make(chan struct{})}
	p.mu.Unlock()
	p.changes.notify()
	p.log.Info("pairing request restored after a restart", "request", r)
	return nil
}

// Approvable reports whether Decide could approve request id now: nil, or
// the error it would return (ErrNoRequest, ErrDecided, ErrExpired,
// ErrClaimantAway for a restored request whose claimant has not polled
// since). Nothing changes.
func (p *Pairer) Approvable(id string) error {
	defer p.o.Grants.emitQueued() // the expiries sweepLocked queued, after mu is released
	now := p.o.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sweepLocked(now)
	r := p.reqs[id]
	if err := r.decidable(); err != nil {
		return err
	}
	if !r.polled {
		return ErrClaimantAway
	}
	return nil
}

// Subscribe returns a coalesced notice channel (capacity 1) that fires when
// the set of pending requests changes; re-read Pending. cancel closes it.
func (p *Pairer) Subscribe() (<-chan struct{}, func()) { return p.changes.subscribe() }

// Decide records the owner's decision on request id. On approval it issues
// a grant to the claimant (policy ask) with scopes, or, when scopes is nil,
// with the requested scopes minus ScopeFull and ScopeApprove (neither is
// ever granted by default), and keeps the token for the one status call that collects it.
// The grant is issued Uncollected: it is valid only once collected
// (Grants.Collected), and one still uncollected when the node stops is
// revoked then or at the next start. The collection revokes the grants
// this device ID held before
// (Request.Replaces, Grants.RevokeOlder). Errors:
// ErrNoRequest, ErrDecided, ErrExpired, ErrInvalid (no scopes), keychain
// errors from Issue.
func (p *Pairer) Decide(id string, approve bool, scopes Scopes) (Grant, error) {
	defer p.o.Grants.emitQueued() // the expiries sweepLocked queued, after mu is released
	now := p.o.Now()
	p.mu.Lock()
	p.sweepLocked(now)
	r := p.reqs[id]
	if err := r.decidable(); err != nil {
		p.mu.Unlock()
		return Grant{}, err
	}
	if approve && !r.polled {
		p.mu.Unlock()
		return Grant{}, ErrClaimantAway
	}
	if !approve {
		r.finish(stateDenied, now.Add(p.o.RequestTTL))
		req := r.req
		p.mu.Unlock()
		p.changes.notify()
		p.log.Info("pairing request denied", "request", req)
		p.o.Grants.emit(requestChange(ChangeDenied, req, ""))
		return Grant{}, nil
	}
	var err error
	if scopes == nil {
		scopes = r.req.RequestedScopes.Without(ScopeFull, ScopeApprove)
	}
	if scopes, err = NormalizeScopes(scopes); err == nil && len(scopes) == 0 {
		err = fmt.Errorf("%w: choose the scopes to grant (agent, node, full, approve)", ErrInvalid)
	}
	if err != nil {
		p.mu.Unlock()
		return Grant{}, err
	}
	r.state = stateDeciding
	req := r.req
	p.mu.Unlock()

	gr, token, err := p.o.Grants.Issue(IssueRequest{PeerID: req.DeviceID, Name: req.Name, OS: req.OS, Scopes: scopes, Uncollected: true})

	p.mu.Lock()
	if err != nil {
		r.state = statePending
		p.mu.Unlock()
		return Grant{}, err
	}
	if p.closed { // Close ran while we issued: nobody will collect the token
		r.state = statePending
		p.mu.Unlock()
		p.o.Grants.revoke(gr.ID, "the node stopped before the device collected its token")
		return Grant{}, ErrClosed
	}
	r.token, r.grantID, r.scopes = token, gr.ID, scopes
	r.collectBy = p.o.Now().Add(p.o.RequestTTL)
	r.finish(stateApproved, r.collectBy)
	p.mu.Unlock()
	p.changes.notify()
	p.log.Info("pairing request approved", "request", req, "grant", gr)
	return gr, nil
}

// replaceOlder revokes the grants device held before grant keep, once the
// new token is in its hands (a device pairs once; until then a failed
// re-pairing leaves the old grant working).
func (p *Pairer) replaceOlder(device, keep string) {
	if device == "" {
		return
	}
	if _, err := p.o.Grants.RevokeOlder(device, keep); err != nil {
		p.log.Warn("cannot revoke the grants a re-paired device had", "device", ShortID(device), "err", err)
	}
}

func (r *pending) decidable() error {
	switch {
	case r == nil:
		return ErrNoRequest
	case r.state == stateExpired:
		return ErrExpired
	case r.state != statePending:
		return ErrDecided
	}
	return nil
}

// finish moves r out of pending and wakes its long polls.
func (r *pending) finish(s reqState, forgetAfter time.Time) {
	r.state = s
	r.forgetAfter = forgetAfter
	close(r.changed)
}

// Status answers a status poll for request id, authenticated by the poll
// token the claim returned. While the request is pending it waits up to
// MaxWait (or until the request expires, ctx ends or Close) for a change.
// An approved request's token is returned once; the request is then
// forgotten and later polls get ErrNoRequest, as do unknown IDs and wrong
// poll tokens. A poll whose ctx has ended never takes the token: it stays
// for the next poll (until the collection deadline).
func (p *Pairer) Status(ctx context.Context, id, pollToken string) (StatusResponse, error) {
	defer p.o.Grants.emitQueued() // the expiries sweepLocked queued, after mu is released
	sum := sha256.Sum256([]byte(pollToken))
	for waited := false; ; waited = true {
		now := p.o.Now()
		p.mu.Lock()
		p.sweepLocked(now)
		r := p.reqs[id]
		if r == nil || subtle.ConstantTimeCompare(sum[:], r.pollHash[:]) != 1 {
			p.mu.Unlock()
			return StatusResponse{}, ErrNoRequest
		}
		resp := StatusResponse{Expires: r.req.Expires, Issuer: p.Issuer()}
		if !r.polled {
			r.polled = true
			p.changes.notify() // the claimant is back; never blocks
		}
		switch r.state {
		case statePending, stateDeciding:
			resp.Status = StatusPending
			if p.closed {
				// The node is stopping: the request is not decided (a
				// durable queue restores it at the next start), so the
				// claimant is told to retry, not that it expired.
				p.mu.Unlock()
				return StatusResponse{}, ErrClosed
			}
			if waited || r.waiters >= maxWaitersPerRequest {
				p.mu.Unlock()
				return resp, nil
			}
			r.waiters++
			ch := r.changed
			wait := min(p.o.MaxWait, r.req.Expires.Sub(now))
			p.mu.Unlock()
			p.o.Grants.emitQueued() // before the wait, not after it
			t := time.NewTimer(wait)
			select {
			case <-ch:
			case <-t.C:
			case <-ctx.Done():
			case <-p.ctx.Done():
			}
			t.Stop()
			p.mu.Lock()
			r.waiters--
			p.mu.Unlock()
			if err := ctx.Err(); err != nil {
				return StatusResponse{}, err
			}
			continue
		case stateApproved:
			if err := ctx.Err(); err != nil {
				// The collector is gone: keep the token for its next poll
				// rather than hand it to a connection nobody reads.
				p.mu.Unlock()
				return StatusResponse{}, err
			}
			resp.Status, resp.Token, resp.GrantID, resp.Scopes = StatusApproved, r.token, r.grantID, r.scopes
			r.token = ""
			delete(p.reqs, id)
			p.mu.Unlock()
			// The grant was issued Uncollected: it becomes valid now that
			// its token goes to the device (a node that dies before this
			// revokes it at the next start).
			if err := p.o.Grants.Collected(resp.GrantID); err != nil {
				p.log.Warn("cannot activate a collected pairing grant; revoking it", "grant_id", resp.GrantID, "err", err)
				p.o.Grants.revoke(resp.GrantID, "it could not be activated when the device collected its token")
				return StatusResponse{}, err
			}
			p.log.Info("pairing token collected", "request", r.req, "grant_id", resp.GrantID)
			p.replaceOlder(r.req.DeviceID, resp.GrantID)
			return resp, nil
		case stateDenied:
			resp.Status = StatusDenied
		default:
			resp.Status = StatusExpired
		}
		p.mu.Unlock()
		return resp, nil
	}
}

// sweepLocked expires codes and requests at now; the caller holds mu and
// calls Grants.emitQueued once it released it (the expiries it queued).
// Grants approved but not collected in time go to p.orphans, revoked by the
// janitor (keychain I/O stays outside mu).
func (p *Pairer) sweepLocked(now time.Time) {
	p.sessions = slices.DeleteFunc(p.sessions, func(s *session) bool { return !now.Before(s.expires) })
	changed := false
	for id, r := range p.reqs {
		switch r.state {
		case statePending:
			if !now.Before(r.req.Expires) {
				r.finish(stateExpired, now.Add(p.o.RequestTTL))
				changed = true
				p.log.Info("pairing request expired undecided", "request", r.req)
				p.o.Grants.queue(requestChange(ChangeExpired, r.req, "undecided")) // told once the caller unlocked mu
			}
		case stateApproved:
			if !now.Before(r.collectBy) {
				p.orphans = append(p.orphans, r.grantID)
				r.token = ""
				r.state = stateExpired
				r.forgetAfter = now.Add(p.o.RequestTTL)
				p.log.Warn("approved pairing token never collected; revoking its grant", "request", r.req, "grant_id", r.grantID)
			}
		case stateDenied, stateExpired:
			if !now.Before(r.forgetAfter) {
				delete(p.reqs, id)
			}
		}
	}
	if changed {
		p.changes.notify() // never blocks, takes no lock of ours
	}
}

// janitor sweeps every sweepEvery and revokes orphaned grants.
func (p *Pairer) janitor() {
	defer p.wg.Done()
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
			p.revokeOrphans(false)
		}
	}
}

// revokeOrphans revokes grants whose token was never collected; with all,
// also those still waiting for collection (at Close: nobody will collect).
func (p *Pairer) revokeOrphans(all bool) {
	defer p.o.Grants.emitQueued() // the expiries sweepLocked queued, after mu is released
	p.mu.Lock()
	p.sweepLocked(p.o.Now())
	ids := p.orphans
	p.orphans = nil
	if all {
		for _, r := range p.reqs {
			if r.state == stateApproved {
				ids = append(ids, r.grantID)
				r.token = ""
				r.state = stateExpired
			}
		}
	}
	p.mu.Unlock()
	for _, id := range ids {
		if err := p.o.Grants.revoke(id, "its token was never collected"); err != nil && !errors.Is(err, ErrNoGrant) {
			p.log.Warn("cannot revoke an uncollected grant", "grant_id", id, "err", err)
		}
	}
}

// Close ends every code, wakes long polls, revokes grants whose token was
// not collected, and waits for background work (notices, rechecks). A
// second Close returns ErrClosed.
func (p *Pairer) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.closed = true
	p.sessions = nil
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	p.revokeOrphans(true)
	return nil
}
