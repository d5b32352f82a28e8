package nodes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"

	"meshtray/jsonout"
	"meshtray/pairing"
)

// MaxInvokeBody bounds a POST /nodes/invoke request body, in bytes. It fits
// the largest valid call (clipboard.write with MaxClipboardBytes of text,
// JSON-escaped) with room to spare.
const MaxInvokeBody = 2 << 20

// InvokeRequest is the body of POST /nodes/invoke.
type InvokeRequest struct {
	Capability string          `json:"capability"`
	Params     json.RawMessage `json:"params,omitempty"`
}

// ErrorResponse is the body of every error answer of the nodes handlers.
type ErrorResponse struct {
	Error   string   `json:"error"`
	Missing []string `json:"missing,omitempty"` // required parameters that were absent
	Invalid []string `json:"invalid,omitempty"` // "name: reason" per invalid parameter
}

// ManifestHandler serves GET (and HEAD) /nodes/manifest: the Manifest as
// JSON. app mounts it behind the scope-node auth middleware.
func (r *Registry) ManifestHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			jsonout.Write(w, http.StatusMethodNotAllowed, ErrorResponse{Error: "method not allowed"})
			return
		}
		jsonout.Write(w, http.StatusOK, r.Manifest())
	})
}

// InvokeHandler serves POST /nodes/invoke: body InvokeRequest
// `{"capability": NAME, "params": {...}}`, answer the Result
// `{"data": ..., "summary": "..."}` with 200. The caller is the
// pairing.Principal the auth middleware put in the request context; a
// request without one is refused with 401 (fail closed: an unauthenticated
// request must never pass as the local owner). Errors are an ErrorResponse:
//
//	400 malformed body or *ParamError (with missing / invalid)
//	401 no caller
//	403 ErrDenied (policy deny, the owner said no, no one to ask)
//	404 ErrUnknownCapability
//	405 not POST
//	409 ErrUnavailable (the capability cannot run on this device now)
//	413 body over MaxInvokeBody
//	415 a Content-Type other than application/json
//	500 the capability failed
//	503 the call was cancelled (client gone, node shutting down)
//	504 ErrTimeout or the request's deadline passed
//
// Answers carry Cache-Control: no-store (results can hold clipboard text).
func (r *Registry) InvokeHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			jsonout.Write(w, http.StatusMethodNotAllowed, ErrorResponse{Error: "method not allowed"})
			return
		}
		caller, ok := pairing.PrincipalFrom(req.Context())
		if !ok || caller == nil {
			jsonout.Write(w, http.StatusUnauthorized, ErrorResponse{Error: "unauthenticated"})
			return
		}
		if ct := req.Header.Get("Content-Type"); ct != "" {
			if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
				jsonout.Write(w, http.StatusUnsupportedMediaType, ErrorResponse{Error: "Content-Type must be application/json"})
				return
			}
		}
		var in InvokeRequest
		body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, MaxInvokeBody))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				jsonout.Write(w, http.StatusRequestEntityTooLarge, ErrorResponse{Error: "request body too large"})
				return
			}
			jsonout.Write(w, http.StatusBadRequest, ErrorResponse{Error: "cannot read request body"})
			return
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil || dec.More() {
			jsonout.Write(w, http.StatusBadRequest, ErrorResponse{Error: "body must be one JSON object {\"capability\": ..., \"params\": {...}}"})
			return
		}
		if in.Capability == "" {
			jsonout.Write(w, http.StatusBadRequest, ErrorResponse{Error: "capability is required", Missing: []string{"capability"}})
			return
		}
		res, err := r.Invoke(req.Context(), Call{Capability: in.Capability, Params: in.Params, Caller: caller})
		if err != nil {
			status, e := errorResponse(err)
			jsonout.Write(w, status, e)
			return
		}
		jsonout.Write(w, http.StatusOK, res)
	})
}

// errorResponse maps an Invoke error to its HTTP status and body.
func errorResponse(err error) (int, ErrorResponse) {
	var pe *ParamError
	switch {
	case errors.As(err, &pe):
		return http.StatusBadRequest, ErrorResponse{Error: pe.Error(), Missing: pe.Missing, Invalid: pe.Invalid}
	case errors.Is(err, ErrUnknownCapability):
		return http.StatusNotFound, ErrorResponse{Error: err.Error()}
	case errors.Is(err, ErrDenied):
		return http.StatusForbidden, ErrorResponse{Error: err.Error()}
	case errors.Is(err, ErrUnavailable):
		return http.StatusConflict, ErrorResponse{Error: err.Error()}
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, ErrorResponse{Error: err.Error()}
	case errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable, ErrorResponse{Error: "call cancelled"}
	}
	return http.StatusInternalServerError, ErrorResponse{Error: err.Error()}
}
