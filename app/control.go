package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"meshtray/egress"
	"meshtray/jsonout"
	"meshtray/keychain"
	"meshtray/mesh"
	"meshtray/pairing"
	"meshtray/store"
)

// maxControlBody bounds every control-API request body.
const maxControlBody = 64 << 10

// controlRoutes mounts the local control API on mux; every route goes
// through auth.Local (the local owner on loopback, or a grant with scope
// full) or, for consent and trust (approvals, grants, approval policies),
// auth.Owner (the local owner only).
func (n *Node) controlRoutes(mux *http.ServeMux) {
	local, owner := n.localRoutes(mux), n.ownerRoutes(mux)
	local("GET /status", func(w http.ResponseWriter, r *http.Request) {
		jsonout.Write(w, http.StatusOK, n.Status())
	})
	local("GET /a2a/status", func(w http.ResponseWriter, r *http.Request) {
		jsonout.Write(w, http.StatusOK, n.A2AStatus())
	})
	local("POST /a2a/status", func(w http.ResponseWriter, r *http.Request) {
		var req A2AUpdate
		if !readJSON(w, r, &req) {
			return
		}
		if req.Enabled == nil {
			writeError(w, http.StatusBadRequest, errors.New(`body must be {"enabled": true|false}`))
			return
		}
		who, err := actorOf(r, req.Where)
		if err != nil {
			writeError(w, statusFor(err), err)
			return
		}
		st, err := n.setA2A(*req.Enabled, who)
		if err != nil {
			writeError(w, http.StatusInternalServerError, err)
			return
		}
		jsonout.Write(w, http.StatusOK, st)
	})
	local("GET /config", func(w http.ResponseWriter, r *http.Request) {
		jsonout.Write(w, http.StatusOK, n.Settings())
	})
	owner("POST /config", func(w http.ResponseWriter, r *http.Request) {
		var req ConfigUpdate
		if !readJSON(w, r, &req) {
			return
		}
		st, err := n.UpdateSettings(req)
		if err != nil {
			writeError(w, statusFor(err), err)
			return
		}
		jsonout.Write(w, http.StatusOK, st)
	})
	local("GET /approvals", func(w http.ResponseWriter, r *http.Request) {
		jsonout.Write(w, http.StatusOK, n.approvals.List())
	})
	owner("POST /approvals/{id}", func(w http.ResponseWriter, r *http.Request) {
		var d ApprovalDecision
		if !readJSON(w, r, &d) {
			return
		}
		// The person at this device decides, in the tray or the CLI.
		switch d.Where {
		case "", store.WhereCLI, store.WhereTray:
		default:
			writeError(w, http.StatusBadRequest, fmt.Errorf("where must be %q or %q", store.WhereCLI, store.WhereTray))
			return
		}
		d.By = decidedByOwner
		if err := n.Decide(r.PathValue("id"), d); err != nil {
			writeError(w, statusFor(err), err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	local("GET /nodes/devices", func(w http.ResponseWriter, r *http.Request) {
		jsonout.Write(w, http.StatusOK, n.Devices())
	})
	owner("POST /nodes/devices", func(w http.ResponseWriter, r *http.Request) {
		var req GrantRequest
		if !readJSON(w, r, &req) {
			return
		}
		tok, err := n.CreateGrant(req)
		if err != nil {
			writeError(w, statusFor(err), err)
			return
		}
		jsonout.Write(w, http.StatusCreated, tok)
	})
	owner("POST /nodes/devices/{id}", func(w http.ResponseWriter, r *http.Request) {
		var req GrantUpdate
		if !readJSON(w, r, &req) {
			return
		}
		tok, err := n.UpdateGrant(r.PathValue("id"), req)
		if err != nil {
			writeError(w, statusFor(err), err)
			return
		}
		if tok.Token != "" {
			jsonout.Write(w, http.StatusOK, tok)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	local("GET /mesh/peers", func(w http.ResponseWriter, r *http.Request) {
		n.CheckPairedPeers(r.Context())
		jsonout.Write(w, http.StatusOK, n.Peers())
	})
	local("POST /mesh/peers", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			URL string `json:"url"`
		}
		if !readJSON(w, r, &req) {
			return
		}
		if req.URL == "" {
			writeError(w, http.StatusBadRequest, errors.New(`body must be {"url": "https://host:port"}`))
			return
		}
		p, err := n.AddManualPeer(r.Context(), req.URL)
		switch {
		case errors.Is(err, mesh.ErrBadURL), errors.Is(err, mesh.ErrSelf):
			writeError(w, http.StatusBadRequest, err)
			return
		case errors.Is(err, egress.ErrRefused):
			writeError(w, http.StatusForbidden, fmt.Errorf("%s names an address of this machine (loopback, link-local or metadata): only the owner at the device may add it", req.URL))
			return
		case errors.As(err, new(*mesh.UnreachableError)):
			writeError(w, http.StatusBadGateway, err) // "could not reach HOST:PORT: connection refused"
			return
		case err != nil:
			writeError(w, http.StatusBadGateway, fmt.Errorf("no meshtray answered at %s: %w", req.URL, err))
			return
		}
		jsonout.Write(w, http.StatusCreated, p)
	})
	local("DELETE /mesh/peers/{id}", func(w http.ResponseWriter, r *http.Request) {
		if err := n.RemoveManualPeer(r.PathValue("id")); err != nil {
			writeError(w, statusFor(err), err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	local("GET /events", n.serveEvents)
	n.auditRoutes(mux)
	n.delegationRoutes(mux)
	n.uiRoutes(mux)
}

// localRoutes returns a function that mounts a handler on mux behind
// auth.Local (the local owner on loopback, or a grant with scope full).
func (n *Node) localRoutes(mux *http.ServeMux) func(pattern string, h http.HandlerFunc) {
	return func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, n.auth.Local(h)) }
}

// ownerRoutes is localRoutes for the owner-only routes: consent and trust
// (approvals, grants, pairing, approval policies, where approved work is
// forwarded). A grant, even with scope full, gets 403 (pairing.Auth.Owner).
func (n *Node) ownerRoutes(mux *http.ServeMux) func(pattern string, h http.HandlerFunc) {
	return func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, n.auth.Owner(h)) }
}

// serveEvents streams change notices as server-sent events until the client
// leaves or the node stops: `data: {"types":["approvals"]}`.
func (n *Node) serveEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, errors.New("streaming unsupported"))
		return
	}
	sub := n.events.Subscribe()
	defer sub.Close()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	// The first notice names everything: a subscriber that read the state
	// before this stream was connected would otherwise miss a change made
	// in between.
	first, _ := json.Marshal(map[string][]EventType{"types": everything})
	fmt.Fprintf(w, ": meshtray events\n\ndata: %s\n\n", first)
	fl.Flush()
	ctx := r.Context()
	for {
		// Wait for a change, or 25 s for a keep-alive comment that tells
		// proxies and the client the stream is alive.
		wait, cancel := context.WithTimeout(ctx, 25*time.Second)
		ts, err := sub.Next(wait)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			_, err = fmt.Fprint(w, ": keep-alive\n\n")
		} else {
			b, _ := json.Marshal(map[string][]EventType{"types": ts})
			_, err = fmt.Fprintf(w, "data: %s\n\n", b)
		}
		if err != nil {
			return
		}
		fl.Flush()
	}
}

// writeError answers with status and {"error": err's text}.
func writeError(w http.ResponseWriter, status int, err error) {
	jsonout.WriteError(w, status, err.Error())
}

// readJSON decodes a bounded JSON body into v; on failure it answers 400
// (413 when too large) and returns false.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	return readJSONLimit(w, r, maxControlBody, v)
}

// readJSONLimit is readJSON with a body bound of limit bytes.
func readJSONLimit(w http.ResponseWriter, r *http.Request, limit int64, v any) bool {
	body := http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("body over %d bytes", limit))
			return false
		}
		if errors.Is(err, io.EOF) {
			err = errors.New("empty body: JSON expected")
		}
		writeError(w, http.StatusBadRequest, fmt.Errorf("bad JSON body: %w", err))
		return false
	}
	return true
}

// statusFor maps the errors of node operations to HTTP statuses.
func statusFor(err error) int {
	var bad *badRequestError
	switch {
	case errors.As(err, &bad), errors.Is(err, ErrBadDecision):
		return http.StatusBadRequest
	case errors.Is(err, ErrNoApproval), errors.Is(err, pairing.ErrNoGrant), errors.Is(err, keychain.ErrNotFound), errors.Is(err, ErrNoPeer):
		return http.StatusNotFound
	case errors.Is(err, ErrQueueFull):
		return http.StatusTooManyRequests
	case errors.Is(err, pairing.ErrClaimantAway):
		return http.StatusConflict
	case errors.Is(err, ErrShuttingDown):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// badRequestError marks an error caused by the request's content.
type badRequestError struct{ error }

func (e *badRequestError) Unwrap() error { return e.error }

func badRequest(format string, args ...any) error {
	return &badRequestError{fmt.Errorf(format, args...)}
}
