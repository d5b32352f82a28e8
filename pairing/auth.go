package pairing

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"meshtray/jsonout"
)

// Realm is the realm of every Bearer challenge meshtray sends.
const Realm = "meshtray"

// pausedDescription is the error_description of the 401 challenge for a
// paused grant. A holder that reads it keeps its token (see Grants.Refused).
const pausedDescription = "grant paused"

// maxAuthHeader bounds the Authorization header we look at.
const maxAuthHeader = 512

// Auth is the HTTP middleware guarding every surface (ARCHITECTURE.md,
// "pairing"; DESIGN.md, "Surfaces"). The zero value is not usable: set
// Grants. Fields must not change once requests are served.
//
// Every wrapper first applies two browser defences, both answered 403:
//   - DNS rebinding: on the loopback listener the Host header must be
//     localhost, 127.0.0.1 or [::1] (any port), so a page whose name was
//     rebound to 127.0.0.1 cannot talk to us under its own name.
//   - CSRF: a state-changing method (not GET, HEAD, OPTIONS) from another
//     origin is refused, per net/http.CrossOriginProtection (Sec-Fetch-Site,
//     else Origin against Host).
//
// Bearer tokens are read from the Authorization header only (RFC 6750
// §2.1); a token in a query string is ignored, never accepted.
type Auth struct {
	Grants *Grants
	// ControlToken returns the local owner's control token (the loopback
	// control API); "" matches nothing. Nil means no local owner.
	ControlToken func() string
	// WhoIs names the tailnet node and user behind a tailnet connection
	// (Tailscale LocalAPI WhoIs); nil or a nil answer leaves
	// Principal.Tailnet nil. It is called only for authenticated requests
	// on ListenerTailnet.
	WhoIs  func(ctx context.Context, addr netip.AddrPort) *TailnetIdentity
	Logger *slog.Logger

	copOnce sync.Once
	cop     *http.CrossOriginProtection

	// Refused requests that sent a token are logged at info, at most
	// refusalLogBurst per refusalLogWindow (a stranger guessing tokens
	// cannot flood the log); the rest at debug, counted in the next
	// window's first record.
	refusalMu      sync.Mutex
	refusalWindow  time.Time // guarded by refusalMu
	refusalLogged  int       // guarded by refusalMu
	refusalDropped int       // guarded by refusalMu
}

// Bounds of the info-level log of refused requests.
const (
	refusalLogBurst  = 10
	refusalLogWindow = time.Minute
)

// Require admits a bearer grant that has scope (ScopeFull has every scope)
// and puts its Principal in the request context. Missing, malformed,
// unknown, revoked or paused token → 401 with `WWW-Authenticate: Bearer
// realm="meshtray"` (plus error="invalid_token" when a token was sent, RFC
// 6750 §3.1); a valid grant without the scope → 403 (error="insufficient_scope").
func (a *Auth) Require(scope Scope, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l, remote, ok := a.guard(w, r)
		if !ok {
			return
		}
		p, ok := a.grant(w, r, l, remote, scope)
		if !ok {
			return
		}
		h.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
	})
}

// AnyGrant admits any valid grant whatever its scopes: the pairing
// endpoints a paired device calls with the token it just received
// (POST /pair/reciprocate, GET /pair/whoami). Refusals as Require.
func (a *Auth) AnyGrant(h http.Handler) http.Handler {
	return a.Require("", h)
}

// Local admits the admin surface's callers: the local owner (the request
// arrived on the loopback listener and carries `Authorization: Bearer
// <control token>`, compared in constant time) or a grant with ScopeFull.
// The Principal is Local for the former.
func (a *Auth) Local(h http.Handler) http.Handler { return a.LocalOr(ScopeFull, h) }

// LocalOr admits the local owner (as Local does) or a grant with scope: a
// surface both the owner's own windows and paired devices read, such as the
// node manifest.
func (a *Auth) LocalOr(scope Scope, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l, remote, ok := a.guard(w, r)
		if !ok || a.serveOwner(w, r, l, remote, h) {
			return
		}
		p, ok := a.grant(w, r, l, remote, scope)
		if !ok {
			return
		}
		h.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
	})
}

// Owner admits the local owner only (as Local does). Any grant, ScopeFull
// included, is refused 403: consent and trust stay with the person at the
// device. The routes behind it decide approvals, mint or change grants,
// start pairings and set approval policies; a grant that could do those
// could approve its own delegations (DESIGN.md: each delegation is
// approved by the owner) or mint tokens that outlive its revocation.
func (a *Auth) Owner(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l, remote, ok := a.guard(w, r)
		if !ok || a.serveOwner(w, r, l, remote, h) {
			return
		}
		p, ok := a.grant(w, r, l, remote, "")
		if !ok {
			return
		}
		a.refuse(w, r, http.StatusForbidden, "", "", OwnerOnlyMessage, "reason", "owner only", "grant", p.Grant.ID)
	})
}

// OwnerOnlyMessage is the error a grant gets on an owner-only route.
const OwnerOnlyMessage = "only this device's owner may do this: approvals, grants, pairing and approval policies are decided at the device"

// serveOwner serves h for the local owner (loopback listener, control
// token) and reports whether it answered the request: served, or refused
// for a wrong control token. It answers nothing for a grant token or none.
func (a *Auth) serveOwner(w http.ResponseWriter, r *http.Request, l Listener, remote netip.AddrPort, h http.Handler) bool {
	tok, _ := BearerToken(r)
	if l != ListenerLoopback || tok == "" || ValidToken(tok) {
		return false
	}
	if a.isControlToken(tok) {
		p := &Principal{Local: true, Listener: l, RemoteAddr: remote}
		h.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
		return true
	}
	a.refuse(w, r, http.StatusUnauthorized, "invalid_token", "", "unknown token", "reason", "bad control token")
	return true
}

// Public admits anyone, after the Host and cross-origin checks: the pairing
// claim and status endpoints, the Agent Card, /mesh/hello.
func (a *Auth) Public(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := a.guard(w, r); ok {
			h.ServeHTTP(w, r)
		}
	})
}

func (a *Auth) logger() *slog.Logger {
	if a.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return a.Logger
}

// guard applies the listener-independent checks and returns the listener
// and the TCP peer. A request whose context carries no listener tag (app
// tags every connection) is classified by its peer address: loopback peers
// get the loopback rules, others the LAN rules (no local owner).
func (a *Auth) guard(w http.ResponseWriter, r *http.Request) (Listener, netip.AddrPort, bool) {
	remote, _ := netip.ParseAddrPort(r.RemoteAddr)
	remote = netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())
	l := ListenerFrom(r.Context())
	if l == "" {
		l = ListenerLAN
		if remote.Addr().IsLoopback() {
			l = ListenerLoopback
		}
	}
	if l == ListenerLoopback && !allowedLoopbackHost(r.Host) {
		a.refuse(w, r, http.StatusForbidden, "", "", "host not allowed", "reason", "DNS rebinding defence: Host not localhost", "host", clip(r.Host, 64))
		return l, remote, false
	}
	a.copOnce.Do(func() { a.cop = http.NewCrossOriginProtection() })
	if err := a.cop.Check(r); err != nil {
		a.refuse(w, r, http.StatusForbidden, "", "", "cross-origin request refused", "reason", "CSRF defence", "origin", clip(r.Header.Get("Origin"), 64))
		return l, remote, false
	}
	return l, remote, true
}

// grant authenticates the bearer grant and checks scope ("" = any).
func (a *Auth) grant(w http.ResponseWriter, r *http.Request, l Listener, remote netip.AddrPort, scope Scope) (*Principal, bool) {
	tok, present := BearerToken(r)
	if !present {
		a.refuse(w, r, http.StatusUnauthorized, "", "", "missing bearer token", "reason", "no token")
		return nil, false
	}
	if a.Grants == nil {
		a.refuse(w, r, http.StatusUnauthorized, "invalid_token", "", "unknown token", "reason", "no grant store")
		return nil, false
	}
	gr, err := a.Grants.Authenticate(tok)
	switch {
	case errors.Is(err, ErrPaused):
		a.refuse(w, r, http.StatusUnauthorized, "invalid_token", pausedDescription, "grant paused", "reason", "paused", "grant", gr.ID)
		return nil, false
	case err != nil:
		a.refuse(w, r, http.StatusUnauthorized, "invalid_token", "", "unknown token", "reason", "unknown token")
		return nil, false
	}
	if scope != "" && !gr.Scopes.Has(scope) {
		a.refuse(w, r, http.StatusForbidden, "insufficient_scope", string(scope), "this grant does not reach this surface", "reason", "scope", "grant", gr.ID, "need", string(scope))
		return nil, false
	}
	p := &Principal{Grant: gr, Listener: l, RemoteAddr: remote}
	if l == ListenerTailnet && a.WhoIs != nil {
		p.Tailnet = a.WhoIs(r.Context(), remote)
	}
	return p, true
}

func (a *Auth) isControlToken(tok string) bool {
	if a.ControlToken == nil {
		return false
	}
	want := a.ControlToken()
	if want == "" {
		return false
	}
	// Hash both so the comparison takes the same time whatever the lengths.
	x, y := sha256.Sum256([]byte(tok)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(x[:], y[:]) == 1
}

// refuse writes a JSON error; for 401 and 403 with a Bearer challenge
// (RFC 6750 §3). For 403 from a scope check, extra is the missing scope; for
// a 401 it is the error_description. The log line never carries a token.
func (a *Auth) refuse(w http.ResponseWriter, r *http.Request, status int, errCode, extra, msg string, attrs ...any) {
	switch {
	case status == http.StatusUnauthorized:
		c := `Bearer realm="` + Realm + `"`
		if errCode != "" {
			c += `, error="` + errCode + `"`
		}
		if extra != "" {
			c += `, error_description="` + extra + `"`
		}
		w.Header().Set("WWW-Authenticate", c)
	case errCode == "insufficient_scope":
		w.Header().Set("WWW-Authenticate", `Bearer realm="`+Realm+`", error="insufficient_scope", scope="`+extra+`"`)
	}
	level, dropped := slog.LevelDebug, 0
	if _, sent := BearerToken(r); sent {
		level, dropped = a.refusalLevel(time.Now())
	}
	rec := append([]slog.Attr{
		slog.Int("status", status),
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.String("remote", r.RemoteAddr),
	}, attrsOf(attrs)...)
	if dropped > 0 {
		rec = append(rec, slog.Int("earlier_refusals_not_logged", dropped))
	}
	a.logger().LogAttrs(r.Context(), level, "request refused", rec...)
	jsonout.WriteError(w, status, msg)
}

// refusalLevel is the level of the next record of a refused request that
// carried a token: info within the window's burst, debug beyond it. dropped
// is how many went to debug in the window before, told once.
func (a *Auth) refusalLevel(now time.Time) (level slog.Level, dropped int) {
	a.refusalMu.Lock()
	defer a.refusalMu.Unlock()
	if now.Sub(a.refusalWindow) >= refusalLogWindow {
		a.refusalWindow, a.refusalLogged = now, 0
	}
	if a.refusalLogged >= refusalLogBurst {
		a.refusalDropped++
		return slog.LevelDebug, 0
	}
	a.refusalLogged++
	dropped, a.refusalDropped = a.refusalDropped, 0
	return slog.LevelInfo, dropped
}

func attrsOf(kv []any) []slog.Attr {
	var out []slog.Attr
	for i := 0; i+1 < len(kv); i += 2 {
		k, _ := kv[i].(string)
		out = append(out, slog.Any(k, kv[i+1]))
	}
	return out
}

// BearerToken returns the token of r's `Authorization: Bearer <token>`
// header (RFC 6750 §2.1; the scheme is case-insensitive, RFC 9110 §11.1)
// and whether an Authorization header was present at all. A header longer
// than 512 bytes or of another scheme gives "" and true: it is looked at no
// further. Every handler that reads a bearer token reads it here.
func BearerToken(r *http.Request) (token string, present bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", false
	}
	if len(h) > maxAuthHeader {
		return "", true
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", true
	}
	return strings.TrimSpace(tok), true
}

// allowedLoopbackHost reports whether the Host header names this machine's
// loopback interface: localhost, 127.0.0.1 or [::1], with any port or none.
func allowedLoopbackHost(host string) bool {
	if host == "" {
		return false
	}
	h := host
	if hp, _, err := net.SplitHostPort(host); err == nil {
		h = hp
	} else if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	switch strings.ToLower(h) {
	case "localhost", "127.0.0.1", "::1":
		return true
	}
	return false
}

// HTTPStatus maps this package's errors to HTTP statuses, for handlers at
// the edge (app's local API uses it too).
func HTTPStatus(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, ErrUnknownToken), errors.Is(err, ErrPaused):
		return http.StatusUnauthorized
	case errors.Is(err, ErrScope), errors.Is(err, ErrBadCode), errors.Is(err, ErrDenied):
		return http.StatusForbidden
	case errors.Is(err, ErrNoGrant), errors.Is(err, ErrNoHeld), errors.Is(err, ErrNoRequest):
		return http.StatusNotFound
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrBadDeviceID):
		return http.StatusBadRequest
	case errors.Is(err, ErrDecided), errors.Is(err, ErrIdentityChanged), errors.Is(err, ErrClaimantAway):
		return http.StatusConflict
	case errors.Is(err, ErrExpired):
		return http.StatusGone
	case errors.Is(err, ErrRateLimited):
		return http.StatusTooManyRequests
	case errors.Is(err, ErrBusy), errors.Is(err, ErrClosed):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// challengeParam returns the value of auth-param name in a WWW-Authenticate
// header value (RFC 7235 §2.1: token=token or token=quoted-string), or "".
func challengeParam(h, name string) string {
	_, rest, _ := strings.Cut(h, " ") // drop the scheme
	for rest != "" {
		rest = strings.TrimLeft(rest, " ,")
		k, after, ok := strings.Cut(rest, "=")
		if !ok {
			return ""
		}
		k = strings.TrimSpace(k)
		var v string
		if strings.HasPrefix(after, `"`) {
			var b strings.Builder
			i := 1
			for ; i < len(after) && after[i] != '"'; i++ {
				if after[i] == '\\' && i+1 < len(after) {
					i++
				}
				b.WriteByte(after[i])
			}
			v, rest = b.String(), after[min(i+1, len(after)):]
		} else {
			v, rest, _ = strings.Cut(after, ",")
			v = strings.TrimSpace(v)
		}
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}
