package a2a

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/a2aproject/a2a-go/a2a"
	a2av1 "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/errordetails"

	"meshtray/jsonout"
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
// -32001..-32007 are A2A 0.3.0's (spec §8.2). -32010..-32013 are meshtray's
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
	// CodeVersionNotSupported: the request's A2A-Version is not one this
	// server speaks (A2A 1.0 §3.6.2, §9.5).
	CodeVersionNotSupported = -32009
	// CodeLiveTaskLimit: the caller's grant already has MaxLiveTasksPerOwner
	// live tasks (ErrLiveTaskLimit).
	CodeLiveTaskLimit = -32010
	// CodeStoreFull: the task store holds only live tasks and cannot take
	// another one (ErrStoreFull).
	CodeStoreFull = -32011
	// CodeUnavailable: the server is shutting down, or a task has reached a
	// per-task bound (subscribers, turns, stored bytes) (ErrUnavailable).
	CodeUnavailable = -32012
	// CodeRestarting: the node is stopping with its tasks kept in its
	// database, to start again (RestartingReason; the task, when there
	// is one, in data.taskId). Neither A2A 0.3 nor 1.0 has an error for
	// this: an open stream or a waiting call on a task ends with it, not
	// with a final state the task does not reach; the caller reads the
	// task again with tasks/get (GetTask) or subscribes again
	// (tasks/resubscribe, SubscribeToTask) once the node answers.
	CodeRestarting = -32013
)

// RestartingReason is the reason of a CodeRestarting error: over 1.0 the
// google.rpc.ErrorInfo reason (domain ErrorDomain), over 0.3 the "reason"
// member of its data object.
const RestartingReason = "NODE_RESTARTING"

// restartingError is the CodeRestarting error of a call on task id ("" for
// a call on no task yet).
func restartingError(id a2a.TaskID) *rpcError {
	e := &rpcError{
		Code:    CodeRestarting,
		Message: "the node is restarting and keeps its tasks: try again once it answers",
		Data:    map[string]any{"reason": RestartingReason},
	}
	if id != "" {
		e.Message = fmt.Sprintf("the node is restarting; task %s is kept and goes on after the restart: read it with tasks/get (GetTask) "+
			"or subscribe again (tasks/resubscribe, SubscribeToTask) once the node answers", id)
		e.Data["taskId"] = string(id)
	}
	return e
}

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

// MaxIDBytes bounds the JSON text of a request's id. A longer id, or one
// that is not valid UTF-8, is answered -32600 with a null id: the id is
// echoed in the reply (and in every event of a stream), so it must be
// small and valid JSON text.
const MaxIDBytes = 256

// rpcError is a JSON-RPC 2.0 error object (§5.1). Data, when present, is
// written as an object over 0.3 (the a2a-go v0.3 client fails to decode any
// other shape) and, over 1.0, as a google.protobuf.Struct entry of the data
// array next to the google.rpc.ErrorInfo (A2A 1.0 §9.5).
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
//   - "id" over MaxIDBytes or not valid UTF-8    -> -32600, answered with id null
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
	var method string
	methodOK := len(env.Method) > 0 && env.Method[0] == '"' && json.Unmarshal(env.Method, &method) == nil && method != ""
	// An id refused for its size or encoding is answered with id null; the
	// method, when readable, still says how (a streaming method's error is
	// a stream).
	var partial *request
	if methodOK {
		partial = &request{ID: nullID, Method: method}
	}
	id := nullID
	if len(env.ID) > MaxIDBytes {
		return partial, nullID, newRPCError(CodeInvalidRequest, "invalid request: id longer than %d bytes", MaxIDBytes)
	}
	if !utf8.Valid(env.ID) {
		return partial, nullID, newRPCError(CodeInvalidRequest, "invalid request: id is not valid UTF-8")
	}
	if len(env.ID) > 0 {
		switch env.ID[0] {
		case '"', 'n', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			id = env.ID
		default:
			return partial, nullID, newRPCError(CodeInvalidRequest, "invalid request: id must be a string, a number or null")
		}
	}
	if string(env.JSONRPC) != `"2.0"` {
		if partial != nil {
			partial.ID = id
		}
		return partial, id, newRPCError(CodeInvalidRequest, `invalid request: "jsonrpc" must be "2.0"`)
	}
	if !methodOK {
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
// result (already JSON) or e, e written in ver's form (appendError).
func appendResponse(dst []byte, ver protoVersion, id json.RawMessage, result []byte, e *rpcError) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = append(dst, id...)
	if e != nil {
		dst = append(dst, `,"error":`...)
		dst = appendError(dst, ver, e)
		return append(dst, '}')
	}
	dst = append(dst, `,"result":`...)
	dst = append(dst, result...)
	return append(dst, '}')
}

// appendError appends the error object e. Over 0.3 its data is e.Data as
// an object; over 1.0 it is an array (A2A 1.0 §9.5): a
// google.rpc.ErrorInfo with the error's reason (errorReason) and domain,
// then e.Data as a google.protobuf.Struct when there is any.
func appendError(dst []byte, ver protoVersion, e *rpcError) []byte {
	dst = append(dst, `{"code":`...)
	dst = strconv.AppendInt(dst, int64(e.Code), 10)
	dst = append(dst, `,"message":`...)
	msg, _ := jsonout.Marshal(e.Message)
	dst = append(dst, msg...)
	var data any
	switch {
	case ver == v10:
		reason, domain := errorReason(e.Code)
		details := []*errordetails.Typed{errordetails.NewErrorInfo(reason, domain, nil)}
		extra := e.Data
		if r, _ := e.Data["reason"].(string); r == reason {
			// 0.3's place for the reason; over 1.0 the ErrorInfo holds it.
			extra = maps.Clone(e.Data)
			delete(extra, "reason")
		}
		if len(extra) > 0 {
			details = append(details, errordetails.NewFromStruct(extra))
		}
		data = details
	case len(e.Data) > 0:
		data = e.Data
	}
	if data != nil {
		if b, err := jsonout.Marshal(data); err == nil {
			dst = append(dst, `,"data":`...)
			dst = append(dst, b...)
		}
	}
	return append(dst, '}')
}

// ErrorDomain is the google.rpc.ErrorInfo domain of meshtray's own codes
// (-32010..-32013); the spec's codes use a2a-go's ProtocolDomain,
// "a2a-protocol.org" (A2A 1.0 §9.5).
const ErrorDomain = "meshtray"

// v1Sentinels maps the spec's JSON-RPC codes to a2a-go v2's sentinels,
// whose ErrorReason is the ErrorInfo reason (TASK_NOT_FOUND, ...).
var v1Sentinels = map[int]error{
	CodeParseError:          a2av1.ErrParseError,
	CodeInvalidRequest:      a2av1.ErrInvalidRequest,
	CodeMethodNotFound:      a2av1.ErrMethodNotFound,
	CodeInvalidParams:       a2av1.ErrInvalidParams,
	CodeInternalError:       a2av1.ErrInternalError,
	CodeTaskNotFound:        a2av1.ErrTaskNotFound,
	CodeTaskNotCancelable:   a2av1.ErrTaskNotCancelable,
	CodePushNotSupported:    a2av1.ErrPushNotificationNotSupported,
	CodeUnsupportedOp:       a2av1.ErrUnsupportedOperation,
	CodeContentType:         a2av1.ErrUnsupportedContentType,
	CodeExtendedCard:        a2av1.ErrExtendedCardNotConfigured,
	CodeVersionNotSupported: a2av1.ErrVersionNotSupported,
}

// errorReason returns the ErrorInfo reason and domain of code.
func errorReason(code int) (reason, domain string) {
	if err, ok := v1Sentinels[code]; ok {
		return a2av1.ErrorReason(err), a2av1.ProtocolDomain
	}
	switch code {
	case CodeLiveTaskLimit:
		return "LIVE_TASK_LIMIT", ErrorDomain
	case CodeStoreFull:
		return "TASK_STORE_FULL", ErrorDomain
	case CodeUnavailable:
		return "UNAVAILABLE", ErrorDomain
	case CodeRestarting:
		return RestartingReason, ErrorDomain
	}
	return "INTERNAL_ERROR", a2av1.ProtocolDomain
}

// writeJSON writes one non-streaming JSON-RPC response: always HTTP 200
// (errors included, per the A2A JSON-RPC binding) with jsonout's headers
// (Content-Type application/json, no-store, nosniff).
func writeJSON(w http.ResponseWriter, ver protoVersion, id json.RawMessage, result []byte, e *rpcError) {
	buf := appendResponse(make([]byte, 0, len(result)+64), ver, id, result, e)
	buf = append(buf, '\n')
	h := w.Header()
	jsonout.SetHeaders(h)
	h.Set("Content-Length", strconv.Itoa(len(buf)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf)
}

// writeStreamError answers a streaming method's error as its stream: HTTP
// 200, text/event-stream, one event whose data is the JSON-RPC error
// response, then the end of the stream (A2A 0.3 §7.2, 1.0 §9.4: the
// response to a streaming method is an SSE stream of JSON-RPC responses).
func writeStreamError(w http.ResponseWriter, ver protoVersion, id json.RawMessage, e *rpcError) {
	buf := append(make([]byte, 0, 256), "data: "...)
	buf = appendResponse(buf, ver, id, nil, e)
	buf = append(buf, "\n\n"...)
	setStreamHeaders(w.Header())
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf)
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
}

// setStreamHeaders sets the headers of an SSE response.
func setStreamHeaders(h http.Header) {
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
}
