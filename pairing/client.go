package pairing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"syscall"
	"time"

	"meshtray/egress"
)

// PeerError is a peer's refusal of one of our pairing calls: its status
// and its {"error"} text. It unwraps to this package's sentinel for the
// status (401 ErrUnknownToken, 403 ErrBadCode on a claim, 404 ErrNoRequest,
// 409 ErrIdentityChanged, 429 ErrRateLimited, ...), so callers use errors.Is.
type PeerError struct {
	Op      string // "claim", "status", "reciprocate", "whoami", "revoked"
	Status  int
	Message string // the peer's words, cleaned and cut
	kind    error
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("pairing: peer refused %s (HTTP %d): %s", e.Op, e.Status, e.Message)
}

func (e *PeerError) Unwrap() error { return e.kind }

func peerError(op string, status int, msg string) *PeerError {
	var kind error
	switch status {
	case http.StatusUnauthorized:
		kind = ErrUnknownToken
	case http.StatusForbidden:
		kind = ErrScope
		if op == "claim" {
			kind = ErrBadCode
		}
	case http.StatusNotFound:
		kind = ErrNoRequest
	case http.StatusConflict:
		kind = ErrIdentityChanged
	case http.StatusGone:
		kind = ErrExpired
	case http.StatusTooManyRequests:
		kind = ErrRateLimited
	case http.StatusServiceUnavailable:
		kind = ErrBusy
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		kind = ErrInvalid
	}
	return &PeerError{Op: op, Status: status, Message: clip(msg, 200), kind: kind}
}

// joinHeaderTimeout bounds the wait for a peer's answer headers during a
// join: a status long poll answers within DefaultMaxWait, plus margin.
const joinHeaderTimeout = DefaultMaxWait + 15*time.Second

// peerClient returns an HTTP client for a peer's base URL: HTTPS pinned to
// fp (CheckPeerURL: https only, loopback included). A peer that accepts the
// connection and never answers is given up after headerTimeout (the
// transport's ResponseHeaderTimeout), whatever the caller's context. It
// never follows redirects (a token must not travel elsewhere).
func peerClient(base, fp string, headerTimeout time.Duration) (*http.Client, error) {
	if _, err := CheckPeerURL(base); err != nil {
		return nil, err
	}
	if fp == "" {
		return nil, fmt.Errorf("%w: a peer needs its certificate fingerprint to pin", ErrInvalid)
	}
	tr := &http.Transport{
		Proxy:                 nil, // never hand pairing traffic to a proxy
		DialContext:           egress.Dialer(nil).DialContext,
		TLSClientConfig:       PinnedTLSConfig(fp),
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: headerTimeout,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       30 * time.Second,
	}
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}

// callJSON sends in (nil for none) to base+path with an optional bearer
// token and decodes a 2xx JSON answer into out. A non-2xx answer is a
// *PeerError; resp is returned for Grants.Refused.
func callJSON(ctx context.Context, c *http.Client, op, method, base, path, token string, in, out any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("pairing: %s: %w", op, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxReplyBody))
	if err != nil {
		return resp, fmt.Errorf("pairing: %s: read answer: %w", op, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var e struct {
			Error string `json:"error"`
		}
		json.Unmarshal(b, &e)
		return resp, peerError(op, resp.StatusCode, e.Error)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return resp, fmt.Errorf("pairing: %s: answer is not JSON: %w", op, err)
		}
	}
	return resp, nil
}

// JoinOptions configure Join (`meshtray pair --join`).
type JoinOptions struct {
	// URL is the pairing URL the other device shows
	// (https://host:port/pair#c=CODE&fp=FP), or its base URL with Code and
	// FP set. https only (CheckPeerURL), loopback included.
	URL  string
	Code string // overrides the URL's c
	FP   string // overrides the URL's fp; required for https (the pin)

	Identity *Identity // this device: required
	Grants   *Grants   // this device's store: the received grant is kept here
	Name, OS string    // this device, as the other owner will see it

	// Scopes to ask for; the other owner decides. Default agent,node.
	Scopes Scopes
	// Give is what this device grants back (mutual pairing): a grant with
	// these scopes and GivePolicy is issued to the other device and handed
	// over through POST /pair/reciprocate. Empty gives nothing.
	Give       Scopes
	GivePolicy Policy
	// SelfURL is this device's base URL as the other device can reach it;
	// required when Give is set.
	SelfURL string

	// OnSAS is called with the verification code once the claim is
	// accepted: show it; the other device's owner must see the same.
	OnSAS  func(sas string, issuer PeerInfo)
	Logger *slog.Logger
}

// JoinResult is what Join did.
type JoinResult struct {
	Held  Held   // the grant the other device gave us (stored)
	Given *Grant // the grant we gave it, nil when none
	// Revoked are the grants we had given that device before, revoked by
	// a one-way (re-)pairing (none given back).
	Revoked []Grant
	SAS     string
	// FirstContact: no fingerprint was given, the one seen on first contact
	// was pinned; only the owners' SAS comparison vouches for it.
	FirstContact bool
}

// lookAtIssuer reads GET /pair/issuer of a peer we have no pin for: it
// accepts any certificate but requires the answer's fp to be the
// certificate's.
func lookAtIssuer(ctx context.Context, base string) (string, error) {
	var seen string
	tr := &http.Transport{Proxy: nil, DialContext: egress.Dialer(nil).DialContext, TLSClientConfig: ObserveTLSConfig(&seen), TLSHandshakeTimeout: 10 * time.Second, ResponseHeaderTimeout: DefaultCallTimeout}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var info PeerInfo
	if _, err := callJSON(ctx, c, "issuer", "GET", base, "/pair/issuer", "", nil, &info); err != nil {
		return "", err
	}
	fp, err := ParseFingerprint(info.FP)
	if err != nil {
		return "", err
	}
	if seen != fp {
		return "", &PinError{Expected: fp, Got: seen}
	}
	return fp, nil
}

// Join pairs this device with another meshtray as the claimant: it claims
// with the code over HTTPS pinned to the fingerprint from the URL (with no
// fingerprint, the one GET /pair/issuer shows on first contact), proves it holds its identity key (ClaimProof), checks the issuer's fingerprint and the SAS it
// computes itself (ErrSASMismatch), reports the SAS through OnSAS,
// long-polls until the other owner decides (ErrDenied, ErrExpired), stores
// the received token as a held grant, and, when Give is set, issues a grant
// to the other device and hands it over (POST /pair/reciprocate). If that
// last step fails, the grant given is revoked and an error returned with
// the result: the pairing is then one way.
func Join(ctx context.Context, o JoinOptions) (JoinResult, error) {
	if o.Identity == nil || o.Grants == nil {
		return JoinResult{}, errors.New("pairing: Join needs Identity and Grants")
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	base, code, fp, err := ParsePairURL(o.URL)
	if err != nil {
		return JoinResult{}, err
	}
	if o.Code != "" {
		code = o.Code
	}
	if o.FP != "" {
		if fp, err = ParseFingerprint(o.FP); err != nil {
			return JoinResult{}, err
		}
	}
	if code == "" {
		return JoinResult{}, fmt.Errorf("%w: no pairing code: the URL has no #c=CODE; give the code the other device shows", ErrInvalid)
	}
	if len(o.Give) > 0 && o.SelfURL == "" {
		return JoinResult{}, fmt.Errorf("%w: giving a grant back needs SelfURL", ErrInvalid)
	}
	scopes := o.Scopes
	if len(scopes) == 0 {
		scopes = Scopes{ScopeAgent, ScopeNode}
	}
	firstLook := fp == ""
	if firstLook {
		// Address and code only: trust on first contact, checked by the
		// owner comparing the SAS (a relaying middleman cannot make the
		// claim's proof, bound to the fingerprint we saw, verify at the
		// real device).
		if fp, err = lookAtIssuer(ctx, base); err != nil {
			return JoinResult{}, err
		}
		log.Warn("no fingerprint given: trusting the certificate seen on first contact; compare the verification code on both screens", "fp", shortFP(fp))
	}
	c, err := peerClient(base, fp, joinHeaderTimeout)
	if err != nil {
		return JoinResult{}, err
	}
	defer c.CloseIdleConnections()

	selfID := o.Identity.ID.String()
	nonce := randomString(32)
	claim := ClaimRequest{
		Code: code, Name: o.Name, OS: o.OS, DeviceID: selfID, FP: o.Identity.Fingerprint,
		Nonce: nonce, RequestedScopes: scopes,
	}
	if err := claim.signClaim(o.Identity, fp); err != nil {
		return JoinResult{}, err
	}
	var cr ClaimResponse
	if _, err := callJSON(ctx, c, "claim", "POST", base, "/pair/claim", "", claim, &cr); err != nil {
		return JoinResult{}, err
	}
	issuerFP, err := ParseFingerprint(cr.Issuer.FP)
	if err != nil {
		return JoinResult{}, fmt.Errorf("pairing: the peer's answer has no valid fingerprint: %w", err)
	}
	if issuerFP != fp {
		return JoinResult{}, &PinError{Expected: fp, Got: issuerFP}
	}
	issuerID, _ := DeviceIDFromFingerprint(fp)
	if id, err := ParseDeviceID(cr.Issuer.ID); err != nil || id != issuerID {
		return JoinResult{}, fmt.Errorf("%w: the peer's device ID is not its certificate's", ErrIdentityChanged)
	}
	sas := SAS(fp, selfID, nonce, cr.ServerNonce, cr.RequestID)
	if sas != cr.SAS {
		return JoinResult{}, ErrSASMismatch
	}
	issuer := PeerInfo{ID: issuerID.String(), Name: cleanText(cr.Issuer.Name, MaxNameLen), OS: cleanText(cr.Issuer.OS, MaxOSLen), FP: fp}
	log.Info("pairing claim accepted; waiting for the other owner", "peer", issuerID, "name", issuer.Name)
	if o.OnSAS != nil {
		o.OnSAS(sas, issuer)
	}

	st, err := pollStatus(ctx, c, base, cr)
	if err != nil {
		return JoinResult{SAS: sas}, err
	}
	h := Held{PeerID: issuer.ID, Name: issuer.Name, OS: issuer.OS, URL: base, Fingerprint: fp, Scopes: st.Scopes, Token: st.Token}
	if err := o.Grants.PutHeld(h); err != nil {
		return JoinResult{SAS: sas}, fmt.Errorf("pairing: approved, but the token cannot be stored: %w", err)
	}
	h, _ = o.Grants.Held(issuer.ID)
	res := JoinResult{Held: h, SAS: sas, FirstContact: firstLook}
	log.Info("paired: holding a grant", "held", h)
	if len(o.Give) == 0 {
		// A one-way pairing replaces an earlier mutual one: what this
		// device gave that peer before goes, as a mutual re-pairing
		// replaces it with the new grant.
		revoked, err := o.Grants.RevokeOlder(issuer.ID, "")
		if err != nil {
			log.Warn("cannot revoke the grants given to this device before", "peer", issuerID, "err", err)
		}
		res.Revoked = revoked
		return res, nil
	}

	gr, token, err := o.Grants.Issue(IssueRequest{PeerID: issuer.ID, Name: issuer.Name, OS: issuer.OS, Scopes: o.Give, Policy: o.GivePolicy})
	if err != nil {
		return res, fmt.Errorf("pairing: paired one way only: cannot issue our grant: %w", err)
	}
	_, err = callJSON(ctx, c, "reciprocate", "POST", base, "/pair/reciprocate", st.Token, Offer{
		Token: token, URL: o.SelfURL, FP: o.Identity.Fingerprint, Name: o.Name, OS: o.OS, Scopes: gr.Scopes,
	}, nil)
	if err != nil {
		if rerr := o.Grants.revoke(gr.ID, "the device did not take it"); rerr != nil {
			log.Warn("cannot revoke the grant the peer did not take", "grant", gr, "err", rerr)
		}
		return res, fmt.Errorf("pairing: paired one way only: %s did not take our grant: %w", issuer.Name, err)
	}
	if _, err := o.Grants.RevokeOlder(issuer.ID, gr.ID); err != nil {
		log.Warn("cannot revoke the grants given to this device before", "peer", issuerID, "err", err)
	}
	res.Given = &gr
	log.Info("paired both ways", "grant", gr)
	return res, nil
}

// maxRefused is how many connection refusals in a row end a status poll:
// the other device's process is gone, and the request (kept in its memory)
// with it.
const maxRefused = 3

// pollStatus long-polls GET /pair/status until a decision. Network errors
// are retried (2 s apart) until the request's expiry, except repeated
// connection refusals (maxRefused): the other device stopped. ctx bounds it all.
func pollStatus(ctx context.Context, c *http.Client, base string, cr ClaimResponse) (StatusResponse, error) {
	deadline := cr.Expires.Add(time.Minute)
	path := "/pair/status/" + url.PathEscape(cr.RequestID)
	refused := 0
	for {
		var st StatusResponse
		callCtx, cancel := context.WithTimeout(ctx, DefaultMaxWait+15*time.Second)
		_, err := callJSON(callCtx, c, "status", "GET", base, path, cr.PollToken, nil, &st)
		cancel()
		var pe *PeerError
		switch {
		case ctx.Err() != nil:
			return StatusResponse{}, ctx.Err()
		case errors.As(err, &pe) && pe.Status != http.StatusTooManyRequests && pe.Status < 500:
			return StatusResponse{}, err
		case err != nil:
			if time.Now().After(deadline) {
				return StatusResponse{}, err
			}
			if errors.Is(err, syscall.ECONNREFUSED) {
				if refused++; refused >= maxRefused {
					return StatusResponse{}, fmt.Errorf("pairing: lost contact with the other device, which stopped (%w); pair again when it runs", err)
				}
			} else {
				refused = 0
			}
			t := time.NewTimer(2 * time.Second)
			select {
			case <-ctx.Done():
				t.Stop()
				return StatusResponse{}, ctx.Err()
			case <-t.C:
			}
			continue
		}
		switch st.Status {
		case StatusApproved:
			if !ValidToken(st.Token) {
				return StatusResponse{}, errors.New("pairing: approved, but the answer has no valid token")
			}
			return st, nil
		case StatusDenied:
			return StatusResponse{}, ErrDenied
		case StatusExpired:
			return StatusResponse{}, ErrExpired
		case StatusPending:
			continue
		default:
			return StatusResponse{}, fmt.Errorf("pairing: unknown pairing status %q", clip(st.Status, 20))
		}
	}
}

// Revoke revokes an issued grant at once (Grants.Revoke) and, when its
// holder is a meshtray this device also holds a grant from, tells it in the
// background (POST /pair/revoked, pinned), so it drops the dead token
// instead of finding out at its next call.
func (p *Pairer) Revoke(id string) error {
	gr, err := p.o.Grants.Get(id)
	if err != nil {
		return err
	}
	if err := p.o.Grants.Revoke(id); err != nil {
		return err
	}
	if gr.PeerID == "" {
		return nil
	}
	h, err := p.o.Grants.Held(gr.PeerID)
	if err != nil || h.URL == "" {
		return nil
	}
	p.background(func(ctx context.Context) {
		c, err := peerClient(h.URL, h.Fingerprint, p.o.CallTimeout)
		if err != nil {
			return
		}
		defer c.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(ctx, p.o.CallTimeout)
		defer cancel()
		_, err = callJSON(ctx, c, "revoked", "POST", h.URL, "/pair/revoked", "", RevokedNotice{IssuerID: p.o.Identity.ID.String(), GrantID: id}, nil)
		if err != nil {
			p.log.Info("revocation notice not delivered (the peer finds out at its next call)", "peer", h, "err", err)
		}
	})
	return nil
}

// Rotate gives an issued grant a new token (Grants.Rotate). When the holder
// is a meshtray this device holds a grant from, the new token is offered to
// it (POST /pair/reciprocate, authenticated by our held grant) and
// delivered reports whether it took it; otherwise the owner hands the token
// over, or the holder pairs again. The offer is given up after
// PairerOptions.CallTimeout (or when ctx ends): the token is rotated
// either way.
func (p *Pairer) Rotate(ctx context.Context, id string) (token string, delivered bool, err error) {
	gr, err := p.o.Grants.Get(id)
	if err != nil {
		return "", false, err
	}
	token, err = p.o.Grants.Rotate(id)
	if err != nil || gr.PeerID == "" {
		return token, false, err
	}
	h, herr := p.o.Grants.Held(gr.PeerID)
	if herr != nil || h.URL == "" {
		return token, false, nil
	}
	c, cerr := peerClient(h.URL, h.Fingerprint, p.o.CallTimeout)
	if cerr != nil {
		return token, false, nil
	}
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, p.o.CallTimeout)
	defer cancel()
	self := ""
	if p.o.SelfURL != nil {
		self = p.o.SelfURL()
	}
	resp, oerr := callJSON(ctx, c, "reciprocate", "POST", h.URL, "/pair/reciprocate", h.Token, Offer{
		Token: token, URL: self, FP: p.o.Identity.Fingerprint, Name: p.o.Name, OS: p.o.OS, Scopes: gr.Scopes,
	}, nil)
	if oerr != nil {
		p.o.Grants.Refused(h.PeerID, h.Token, resp)
		p.log.Info("rotated token not delivered; hand it over or pair again", "grant", gr, "err", oerr)
		return token, false, nil
	}
	return token, true, nil
}

// recheck asks the issuer of held grant h whether it still honours it
// (GET /pair/whoami) and drops it on a 401 for a revoked token, in the
// background, at most once per recheckEvery per peer.
func (p *Pairer) recheck(h Held) {
	now := p.o.Now()
	p.mu.Lock()
	if last, ok := p.checking[h.PeerID]; ok && now.Sub(last) < recheckEvery {
		p.mu.Unlock()
		return
	}
	if len(p.checking) > maxSourceKeys {
		clear(p.checking)
	}
	p.checking[h.PeerID] = now
	p.mu.Unlock()
	p.background(func(ctx context.Context) {
		dropped, err := p.CheckHeld(ctx, h.PeerID)
		p.log.Info("re-checked a held grant after a revocation notice", "held", h, "dropped", dropped, "err", err)
	})
}

// CheckHeld asks the peer whether it still honours the grant we hold from
// it (GET /pair/whoami over the pinned connection) and drops the grant when
// the peer answers 401 for a revoked or unknown token (Grants.Refused).
// A network error or a paused grant keeps it.
func (p *Pairer) CheckHeld(ctx context.Context, peerID string) (dropped bool, err error) {
	h, err := p.o.Grants.Held(peerID)
	if err != nil {
		return false, err
	}
	if h.URL == "" {
		return false, fmt.Errorf("%w: no URL for that peer", ErrInvalid)
	}
	c, err := peerClient(h.URL, h.Fingerprint, p.o.CallTimeout)
	if err != nil {
		return false, err
	}
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, p.o.CallTimeout)
	defer cancel()
	resp, err := callJSON(ctx, c, "whoami", "GET", h.URL, "/pair/whoami", h.Token, nil, nil)
	if resp == nil {
		return false, err
	}
	dropped, derr := p.o.Grants.Refused(h.PeerID, h.Token, resp)
	if derr != nil {
		return false, derr
	}
	if dropped {
		return true, nil
	}
	return false, err
}

// background runs fn on a goroutine Close waits for, with a context Close
// cancels. After Close it does nothing.
func (p *Pairer) background(fn func(ctx context.Context)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		fn(p.ctx)
	}()
}

// PeerTransport returns an http.RoundTripper for calling the peer we hold
// a grant from, for the outbound A2A and node clients: TLS pinned to the
// held fingerprint (whatever address the request goes to, so the mesh
// table's current address can be used), https only (loopback included),
// the held token in `Authorization: Bearer`, no proxy, no redirects followed
// with the token, and every answer passed
// to Refused, so a 401 for a revoked token drops the held grant.
func (g *Grants) PeerTransport(peerID string) (http.RoundTripper, error) {
	h, err := g.Held(peerID)
	if err != nil {
		return nil, err
	}
	return &peerTransport{g: g, h: h, base: &http.Transport{
		Proxy:               nil,
		DialContext:         egress.Dialer(nil).DialContext,
		TLSClientConfig:     PinnedTLSConfig(h.Fingerprint),
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     60 * time.Second,
		ForceAttemptHTTP2:   true,
	}}, nil
}

type peerTransport struct {
	g    *Grants
	h    Held
	base *http.Transport
}

func (t *peerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Response != nil {
		return nil, fmt.Errorf("pairing: refusing to follow a redirect from %s with a grant token", t.h.Name)
	}
	if req.URL.Scheme != "https" {
		return nil, fmt.Errorf("%w: refusing to send a grant token over plain http to %s (peers are reached over pinned https, loopback included)", ErrInvalid, req.URL.Host)
	}
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer "+t.h.Token)
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if _, err := t.g.Refused(t.h.PeerID, t.h.Token, resp); err != nil {
		resp.Body.Close()
		return nil, err
	}
	return resp, nil
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// pinned transport.
func (t *peerTransport) CloseIdleConnections() { t.base.CloseIdleConnections() }
