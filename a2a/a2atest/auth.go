// Package a2atest holds what the tests of meshtray/a2a and
// meshtray/a2a/delegate share. It imports only pairing, so the a2a
// package's own (internal) tests can use it without an import cycle.
package a2atest

import (
	"net/http"
	"sync"

	"meshtray/pairing"
)

// Auth is the tests' stand-in for pairing's auth middleware: a bearer token
// (read with pairing.BearerToken) maps to a Principal with scope agent and
// policy allow on the loopback listener; anything else is 401 with a Bearer
// challenge. The real middleware is tested in pairing and end to end in app.
// The zero value is ready to use.
type Auth struct {
	mu     sync.Mutex
	tokens map[string]*pairing.Principal
}

// Add makes token authenticate as the grant grantID named name.
func (a *Auth) Add(token, grantID, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.tokens == nil {
		a.tokens = map[string]*pairing.Principal{}
	}
	a.tokens[token] = &pairing.Principal{
		Grant:    pairing.Grant{ID: grantID, Name: name, Scopes: pairing.Scopes{pairing.ScopeAgent}, Policy: pairing.PolicyAllow, Status: pairing.StatusActive},
		Listener: pairing.ListenerLoopback,
	}
}

// Wrap serves h to requests whose token was added, with its Principal in
// the request context (pairing.WithPrincipal).
func (a *Auth) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, _ := pairing.BearerToken(r)
		a.mu.Lock()
		p := a.tokens[tok]
		a.mu.Unlock()
		if tok == "" || p == nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="meshtray"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r.WithContext(pairing.WithPrincipal(r.Context(), p)))
	})
}
