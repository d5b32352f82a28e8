package a2a

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/a2aproject/a2a-go/a2a"
)

// JSON-RPC 2.0 method names of the A2A 0.3.0 JSON-RPC binding (A2A spec
// §7, "Protocol RPC Methods").
const (
	MethodMessageSend       = "message/send"
	MethodMessageStream     = "message/stream"
	MethodTasksGet          = "tasks/get"
	MethodTasksCancel       = "tasks/cancel"
	MethodTasksResubscribe  = "tasks/resubscribe"
	MethodPushConfigSet     = "tasks/pushNotificationConfig/set"
	MethodPushConfigGet     = "tasks/pushNotificationConfig/get"
	MethodPushConfigList    = "tasks/pushNotificationConfig/list"
	MethodPushConfigDelete  = "tasks/pushNotificationConfig/delete"
	MethodExtendedAgentCard = "agent/getAuthenticatedExtendedCard"
)

// JSON-RPC error codes. The -327xx/-326xx codes are JSON-RPC 2.0's (§5.1);
// -32001..-32007 are A2A 0.3.0's (spec §8.2). -32010..-32012 are meshtray's
// own, in the range JSON-RPC 2.0 reserves for implementation-defined server
// errors (-32000..-32099).
const (
	CodeParseError        = -32700
	CodeInvalidRequest    = -32600
	CodeMethodNotFound    = -32601
	CodeInvalidParams     = -32602
	CodeInternalError     = -32603
	CodeTaskNotFound      = -32001
	CodeTaskNotCancelable = -32002
	CodePushNotSupported  = -32003
	CodeUnsupportedOp     = -32004
	CodeContentType       = -32005
	CodeExtendedCard      = -32007
	// CodeLiveTaskLimit: the caller's grant already has MaxLiveTasksPerOwner
	// live tasks (ErrLiveTaskLimit).
	CodeLiveTaskLimit = -32010
	// CodeStoreFull: the task store holds only live tasks and cannot take
	// another one (ErrStoreFull).
	CodeStoreFull = -32011
	// CodeUnavailable: the server is shutting down, or a task has reached a
	// per-task bound (subscribers, turns, stored bytes) (ErrUnavailable).
	CodeUnavailable = -32012
)

// Sentinel errors of the task engine. They are mapped to JSON-RPC codes only
// in rpcErrorFrom; the a2a-go sentinels (a2a.ErrTaskNotFound, ...) are used
// for the spec's own codes.
var (
	// ErrLiveTaskLimit: too many live tasks for one owner (CodeLiveTaskLimit).
	ErrLiveTaskLimit = errors.New("a2a: too many live tasks for this grant")
	// ErrStoreFull: the store is full of live tasks (CodeStoreFull).
	ErrStoreFull = errors.New("a2a: task store full of live tasks")
	// ErrUnavailable: shutting down, or a per-task bound was reached
	// (CodeUnavailable).
	ErrUnavailable = errors.New("a2a: unavailable")
	// ErrNoPrincipal: the request reached the handler without an
	// authenticated caller: a wiring bug (CodeInternalError).
	ErrNoPrincipal = errors.New("a2a: no authenticated caller on the request")
)

// rpcError is a JSON-RPC 2.0 error object (§5.1). Data is always an object
// when present: the a2a-go client fails to decode any other shape.
type rpcError struct {
	Code    int            `json:"code"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data,omitempty"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("jsonrpc %d: %s", e.Code, e.Message) }

func newRPCError(code int, format string, args ...any) *rpcError {
	return &rpcError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// codes maps engine and a2a-go sentinels to codes; the first match wins.
var codes = []struct {
	err  error
	code int
}{
	{a2a.ErrParseError, CodeParseError},
	{a2a.ErrInvalidRequest, CodeInvalidRequest},
	{a2a.ErrMethodNotFound, CodeMethodNotFound},
	{a2a.ErrInvalidParams, CodeInvalidParams},
	{a2a.ErrTaskNotFound, CodeTaskNotFound},
	{a2a.ErrTaskNotCancelable, CodeTaskNotCancelable},
	{a2a.ErrPushNotificationNotSupported, CodePushNotSupported},
	{a2a.ErrUnsupportedOperation, CodeUnsupportedOp},
	{a2a.ErrUnsupportedContentType, CodeContentType},
	{a2a.ErrAuthenticatedExtendedCardNotConfigured, CodeExtendedCard},
	{ErrLiveTaskLimit, CodeLiveTaskLimit},
	{ErrStoreFull, CodeStoreFull},
	{ErrUnavailable, CodeUnavailable},
}

// rpcErrorFrom maps an engine error to its JSON-RPC error. The message is
// the error's text: engine errors are written to be shown to the caller and
// never carry secrets. Unknown errors become -32603 with a generic message
// (their text stays in the server log).
func rpcErrorFrom(err error) *rpcError {
	var re *rpcError
	if errors.As(err, &re) {
		return re
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return &rpcError{Code: c.code, Message: err.Error()}
		}
	}
	return &rpcError{Code: CodeInternalError, Message: "internal error"}
}

// request is one decoded JSON-RPC 2.0 request object (§4). ID is the raw
// JSON of the id member: a string, a number, or null. Notification is set
// for a request object without an id member (§4.1), which gets no reply.
type request struct {
	ID           json.RawMessage
	Method       string
	Params       json.RawMessage
	Notification bool
}

var nullID = json.RawMessage("null")

// decodeRequest parses and validates a JSON-RPC 2.0 request envelope from
// body. On failure it returns the error to send and the id to send it with
// (null when the id itself could not be read), per JSON-RPC 2.0 §5:
//
//   - not JSON                                   -> -32700 Parse error
//   - a batch (array), or not an object          -> -32600 (batches are not supported)
//   - "jsonrpc" other than "2.0"                 -> -32600
//   - "id" other than string, number or null     -> -32600
//   - "method" missing, empty or not a string    -> -32600
//   - "params" present but not an object         -> -32602
//
// The method name itself is checked by the dispatcher (-32601). A request
// object that passes the envelope checks (jsonrpc, method) but has no
// "id" member is a notification (§4.1): req.Notification is set, also
// with a -32602 error for its params, and the caller sends no reply. An
// envelope too broken to be a request is answered with id null (§5) even
// without an id.
func decodeRequest(body []byte) (*request, json.RawMessage, *rpcError) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, nullID, newRPCError(CodeParseError, "parse error: empty body")
	}
	if !json.Valid(body) {
		return nil, nullID, newRPCError(CodeParseError, "parse error: the body is not valid JSON")
	}
	switch body[0] {
	case '{':
	case '[':
		return nil, nullID, newRPCError(CodeInvalidRequest, "invalid request: batch requests are not supported")
	default:
		return nil, nullID, newRPCError(CodeInvalidRequest, "invalid request: the request must be a JSON object")
	}
	var env struct {
		JSONRPC json.RawMessage `json:"jsonrpc"`
		Method  json.RawMessage `json:"method"`
		Params  json.RawMessage `json:"params"`
		ID      json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, nullID, newRPCError(CodeParseError, "parse error: %v", err)
	}
	id := nullID
	if len(env.ID) > 0 {
		switch env.ID[0] {
		case '"', 'n', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			id = env.ID
		default:
			return nil, nullID, newRPCError(CodeInvalidRequest, "invalid request: id must be a string, a number or null")
		}
	}
	if string(env.JSONRPC) != `"2.0"` {
		return nil, id, newRPCError(CodeInvalidRequest, `invalid request: "jsonrpc" must be "2.0"`)
	}
	var method string
	if len(env.Method) == 0 || env.Method[0] != '"' || json.Unmarshal(env.Method, &method) != nil || method == "" {
		return nil, id, newRPCError(CodeInvalidRequest, `invalid request: "method" must be a non-empty string`)
	}
	note := len(env.ID) == 0
	if len(env.Params) > 0 && env.Params[0] != '{' && string(env.Params) != "null" {
		return &request{ID: id, Method: method, Notification: note}, id, newRPCError(CodeInvalidParams, "invalid params: params must be an object")
	}
	if string(env.Params) == "null" {
		env.Params = nil
	}
	return &request{ID: id, Method: method, Params: env.Params, Notification: note}, id, nil
}

// decodeParams unmarshals params into v; a missing params object decodes
// as {}. Any decoding failure is -32602.
func decodeParams(params json.RawMessage, v any) error {
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	if err := json.Unmarshal(params, v); err != nil {
		return &rpcError{Code: CodeInvalidParams, Message: "invalid params: " + err.Error()}
	}
	return nil
}

// appendResponse appends one JSON-RPC response object to dst, with either
// result (already JSON) or e.
func appendResponse(dst []byte, id json.RawMessage, result []byte, e *rpcError) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = append(dst, id...)
	if e != nil {
		dst = append(dst, `,"error":{"code":`...)
		dst = strconv.AppendInt(dst, int64(e.Code), 10)
		dst = append(dst, `,"message":`...)
		msg, _ := marshalJSON(e.Message)
		dst = append(dst, msg...)
		if len(e.Data) > 0 {
			if data, err := marshalJSON(e.Data); err == nil {
				dst = append(dst, `,"data":`...)
				dst = append(dst, data...)
			}
		}
		dst = append(dst, "}}"...)
		return dst
	}
	dst = append(dst, `,"result":`...)
	dst = append(dst, result...)
	return append(dst, '}')
}

// writeJSON writes one non-streaming JSON-RPC response: always HTTP 200
// (errors included, per the A2A JSON-RPC binding) with Content-Type
// application/json.
func writeJSON(w http.ResponseWriter, id json.RawMessage, result []byte, e *rpcError) {
	buf := appendResponse(make([]byte, 0, len(result)+64), id, result, e)
	buf = append(buf, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(buf)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf)
}
