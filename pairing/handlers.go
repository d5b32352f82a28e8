package pairing

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"meshtray/egress"
	"meshtray/jsonout"
)

// Body limits of the pairing endpoints, in bytes (http.MaxBytesReader).
const (
	MaxClaimBody  = 4 << 10
	maxOfferBody  = 4 << 10
	maxNoticeBody = 1 << 10
	maxReplyBody  = 64 << 10 // answers we read from peers
)

// Mount registers the pairing endpoints on mux, each behind the right
// wrapper of auth:
//
//	GET  /pair/issuer       Public   IssuerHandler
//	POST /pair/claim        Public   ClaimHandler
//	GET  /pair/status/{id}  Public   StatusHandler
//	POST /pair/revoked      Public   RevokedHandler
//	POST /pair/reciprocate  AnyGrant ReciprocateHandler
//	GET  /pair/whoami       AnyGrant WhoAmIHandler
//
// The phone page (GET /pair) is served elsewhere.
func (p *Pairer) Mount(mux *http.ServeMux, auth *Auth) {
	mux.Handle("GET /pair/issuer", auth.Public(p.IssuerHandler()))
	mux.Handle("POST /pair/claim", auth.Public(p.ClaimHandler()))
	mux.Handle("GET /pair/status/{id}", auth.Public(p.StatusHandler()))
	mux.Handle("POST /pair/revoked", auth.Public(p.RevokedHandler()))
	mux.Handle("POST /pair/reciprocate", auth.AnyGrant(p.ReciprocateHandler()))
	mux.Handle("GET /pair/whoami", auth.AnyGrant(p.WhoAmIHandler()))
}

// IssuerHandler serves GET /pair/issuer: this device's PeerInfo (device
// ID, name, OS, fingerprint), public like /mesh/hello, for a claimant that
// has an address and a code but no fingerprint, and for the phone page.
func (p *Pairer) IssuerHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		jsonout.Write(w, http.StatusOK, p.Issuer())
	})
}

// ClaimHandler serves POST /pair/claim: body ClaimRequest (at most
// MaxClaimBody bytes, else 413), answer ClaimResponse. Errors are
// {"error": "..."} with 400 (bad body), 403 (bad code), 429 (rate,
// Retry-After), 503 (too many pending).
func (p *Pairer) ClaimHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		from := ClaimSource{Addr: remoteAddr(r), Listener: listenerOf(r)}
		if !p.limiter.allow(from.Addr.Addr(), p.o.Now()) { // before reading anything
			writeErr(w, ErrRateLimited)
			return
		}
		c, err := DecodeClaim(http.MaxBytesReader(w, r.Body, MaxClaimBody))
		if err != nil {
			writeErr(w, err)
			return
		}
		if from.Listener == ListenerTailnet && p.o.WhoIs != nil {
			from.Tailnet = p.o.WhoIs(r.Context(), from.Addr)
		}
		resp, err := p.claim(r.Context(), c, from)
		if err != nil {
			writeErr(w, err)
			return
		}
		jsonout.Write(w, http.StatusOK, resp)
	})
}

// DecodeClaim reads one ClaimRequest JSON object and nothing after it.
// Unknown fields are ignored (newer claimants). A body over the reader's
// limit gives an error wrapping *http.MaxBytesError; others wrap ErrInvalid.
func DecodeClaim(r io.Reader) (ClaimRequest, error) {
	var c ClaimRequest
	if err := decodeOne(r, &c); err != nil {
		return ClaimRequest{}, err
	}
	return c, nil
}

// decodeOne decodes exactly one JSON object from r into v.
func decodeOne(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return fmt.Errorf("%w: body is not the expected JSON object", ErrInvalid)
	}
	if _, err := dec.Token(); err != io.EOF {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return fmt.Errorf("%w: data after the JSON object", ErrInvalid)
	}
	return nil
}

// StatusHandler serves GET /pair/status/{id} with `Authorization: Bearer
// <poll_token>`: a StatusResponse, after waiting up to MaxWait while
// pending. Unknown id, wrong poll token, or a token already collected →
// 404. Rate-limited per source like claims.
func (p *Pairer) StatusHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.limiter.allow(remoteAddr(r).Addr(), p.o.Now()) {
			writeErr(w, ErrRateLimited)
			return
		}
		id := r.PathValue("id")
		if id == "" {
			id = r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
		}
		tok, _ := BearerToken(r)
		resp, err := p.Status(r.Context(), id, tok)
		if err == nil && resp.Token != "" {
			// Status handed the token over: write it whatever the context
			// says now; it is not kept anywhere else.
			jsonout.Write(w, http.StatusOK, resp)
			return
		}
		if r.Context().Err() != nil {
			// The claimant left (then nobody reads this) or the server is
			// shutting down: say so rather than an empty 200.
			writeErr(w, ErrClosed)
			return
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		jsonout.Write(w, http.StatusOK, resp)
	})
}

// WhoAmI answers GET /pair/whoami: the caller's grant as this device sees
// it. A holder calls it to re-check a grant; its 401 means revoked.
type WhoAmI struct {
	GrantID string   `json:"grant_id"`
	Scopes  Scopes   `json:"scopes"`
	Status  Status   `json:"status"`
	Policy  Policy   `json:"policy"` // approval policy of the grant's calls
	Issuer  PeerInfo `json:"issuer"`
}

// WhoAmIHandler serves GET /pair/whoami (behind AnyGrant).
func (p *Pairer) WhoAmIHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pr, ok := PrincipalFrom(r.Context())
		if !ok || pr.Local {
			jsonout.WriteError(w, http.StatusUnauthorized, "a grant token is required")
			return
		}
		jsonout.Write(w, http.StatusOK, WhoAmI{GrantID: pr.Grant.ID, Scopes: pr.Grant.Scopes, Status: pr.Grant.Status, Policy: pr.Grant.Policy, Issuer: p.Issuer()})
	})
}

// Offer is the body of POST /pair/reciprocate: the caller gives this device
// a token to hold for calling it back. Token is a secret.
type Offer struct {
	Token  string `json:"token"`
	URL    string `json:"url,omitempty"` // the caller's base URL; "" keeps the one we have
	FP     string `json:"fp"`            // the caller's fingerprint: must be its paired device ID's
	Name   string `json:"name"`
	OS     string `json:"os,omitempty"`
	Scopes Scopes `json:"scopes"` // what Token reaches on the caller
}

// LogValue implements slog.LogValuer without the token.
func (o Offer) LogValue() slog.Value {
	return slog.GroupValue(slog.String("fp", shortFP(o.FP)), slog.String("name", o.Name), slog.String("scopes", o.Scopes.String()))
}

// ReciprocateHandler serves POST /pair/reciprocate (behind AnyGrant): a
// paired meshtray, authenticated by the grant this device issued it, gives
// us a grant of its own (mutual pairing, or a rotated token). The grant the
// caller authenticates with must be bound to a device ID, and the offer's
// fingerprint must be that device's: otherwise 409 ErrIdentityChanged (the
// caller re-created its identity and must pair again) or 403 for a phone
// grant. The offer's URL must be https (CheckPeerURL), and may name this
// machine's loopback only when the offer arrived on the loopback listener
// (a second node on this machine): a peer on the network must not point
// our calls, and the token we hold for it, at a local service (400). The
// token is stored as the held grant for that device.
func (p *Pairer) ReciprocateHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pr, ok := PrincipalFrom(r.Context())
		if !ok || pr.Local {
			jsonout.WriteError(w, http.StatusUnauthorized, "a grant token is required")
			return
		}
		if pr.Grant.PeerID == "" {
			jsonout.WriteError(w, http.StatusForbidden, "this grant is not bound to a device ID; only a paired meshtray can reciprocate")
			return
		}
		var o Offer
		if err := decodeOne(http.MaxBytesReader(w, r.Body, maxOfferBody), &o); err != nil {
			writeErr(w, err)
			return
		}
		id, err := DeviceIDFromFingerprint(o.FP)
		if err != nil {
			writeErr(w, err)
			return
		}
		if id.String() != pr.Grant.PeerID {
			p.log.Warn("reciprocation from a device whose identity changed", "grant", pr.Grant, "offered", id)
			writeErr(w, fmt.Errorf("%w: grant %s was issued to device %s, the offer is from %s", ErrIdentityChanged, pr.Grant.ID, ShortID(pr.Grant.PeerID), id.Short()))
			return
		}
		if o.URL != "" {
			// The offered URL is dialled later: resolve it now and apply
			// the one address policy (egress) to what it resolves to.
			ctx := r.Context()
			if pr.Listener != ListenerLoopback {
				ctx = egress.FromNetwork(ctx)
			}
			host := ""
			if u, err := url.Parse(o.URL); err == nil {
				host = u.Hostname()
			}
			if err := egress.CheckHost(ctx, nil, host); err != nil {
				p.log.Warn("offer naming an address of this machine from a peer on the network refused", "grant", pr.Grant, "listener", pr.Listener, "err", err)
				writeErr(w, fmt.Errorf("%w: url names this machine (loopback), a link-local or a metadata address; only a peer on this machine may give one", ErrInvalid))
				return
			}
		}
		url := o.URL
		if url == "" {
			if old, err := p.o.Grants.Held(id.String()); err == nil {
				url = old.URL
			}
		}
		h := Held{PeerID: id.String(), Name: o.Name, OS: o.OS, URL: url, Fingerprint: o.FP, Scopes: o.Scopes, Token: o.Token}
		if h.Name == "" {
			h.Name = pr.Grant.Name
		}
		if err := p.o.Grants.putHeld(h, "offered by the device"); err != nil {
			writeErr(w, err)
			return
		}
		jsonout.Write(w, http.StatusOK, map[string]string{"peer_id": id.String()})
	})
}

// RevokedNotice is the body of POST /pair/revoked: "I, IssuerID, revoked
// the grant GrantID I gave you". It is only a hint: the holder re-checks
// the grant with the issuer (GET /pair/whoami, pinned) and drops it only if
// the issuer refuses it with 401. A stranger's notice costs one re-check at
// most every 30 s per held grant, and can never drop a grant that works.
type RevokedNotice struct {
	IssuerID string `json:"issuer_id"`
	GrantID  string `json:"grant_id"`
}

// recheckEvery bounds re-checks of one held grant.
const recheckEvery = 30 * time.Second

// RevokedHandler serves POST /pair/revoked (Public, rate-limited): always
// 202, whatever is known, so the endpoint tells a stranger nothing.
func (p *Pairer) RevokedHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.limiter.allow(remoteAddr(r).Addr(), p.o.Now()) {
			writeErr(w, ErrRateLimited)
			return
		}
		var n RevokedNotice
		if err := decodeOne(http.MaxBytesReader(w, r.Body, maxNoticeBody), &n); err != nil {
			writeErr(w, err)
			return
		}
		if h, err := p.o.Grants.Held(n.IssuerID); err == nil && h.GrantID == n.GrantID {
			p.recheck(h)
		}
		jsonout.Write(w, http.StatusAccepted, map[string]string{})
	})
}

// writeErr writes err with HTTPStatus; bodies over the limit get 413.
func writeErr(w http.ResponseWriter, err error) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		jsonout.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", mbe.Limit))
		return
	}
	status := HTTPStatus(err)
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", retryAfter)
	}
	msg := err.Error()
	if status == http.StatusInternalServerError {
		msg = "internal error"
	}
	jsonout.WriteError(w, status, strings.TrimPrefix(msg, "pairing: "))
}

// remoteAddr is the TCP peer of r.
func remoteAddr(r *http.Request) netip.AddrPort {
	ap, _ := netip.ParseAddrPort(r.RemoteAddr)
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// listenerOf is r's listener tag, or the one its peer address implies.
func listenerOf(r *http.Request) Listener {
	if l := ListenerFrom(r.Context()); l != "" {
		return l
	}
	if remoteAddr(r).Addr().IsLoopback() {
		return ListenerLoopback
	}
	return ListenerLAN
}
