package delegate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	agent "meshtray/a2a"
)

// The tolerant decoding layer: every JSON-RPC answer of an agent passes
// through it (rpcTransport) before a2a-go's client reads it, so what
// agents actually send decodes, over both versions:
//
//   - an error (JSON-RPC 2.0 §5.1) never reaches the SDK: the layer reads
//     its code and message, whatever the shape of data (an object, 1.0's
//     array of typed details, a string), and returns an *RPCError from
//     the round trip; errors.Is finds a2a-go's sentinel for the code
//     (a2a.ErrTaskNotFound for -32001).
//   - a streaming call (Accept: text/event-stream) answered with plain
//     JSON (a server that answers errors that way) is read as one event;
//     an SSE event carrying an error ends the stream with that error.
//   - ids: numbers and strings (and null) all become the string a2a-go
//     expects.
//   - timestamps: RFC 3339 with or without an offset (none is UTC), with
//     a space for the T, and epoch seconds or milliseconds (numbers or
//     digit strings); one that still does not parse is dropped (the field
//     is optional) rather than failing the whole answer.
//   - 0.3 only: a missing kind is filled in where the fields make the type
//     clear (messageId+parts: message; taskId+artifact: artifact-update;
//     taskId+status: status-update; id+contextId+status: task; a part's
//     text, file or data).
//   - SSE: data lines with or without the space after "data:", several
//     data lines of one event joined (the SSE rules), events of any name
//     (a2a-js sends errors as "event: error").

// RPCError is a JSON-RPC error an agent answered.
type RPCError struct {
	Code    int
	Message string // the agent's message, bounded and on one line
	Reason  string // 1.0's google.rpc.ErrorInfo reason (A2A 1.0 §9.5), if any
}

func (e *RPCError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = "(no message)"
	}
	if e.Reason != "" {
		return fmt.Sprintf("%s (JSON-RPC %d, %s)", msg, e.Code, e.Reason)
	}
	return fmt.Sprintf("%s (JSON-RPC %d)", msg, e.Code)
}

// Unwrap is a2a-go's sentinel for the code (nil for codes it has none
// for, such as meshtray's -32010).
func (e *RPCError) Unwrap() error { return codeErrors[e.Code] }

// codeErrors maps JSON-RPC codes to a2a-go v0.3.15's sentinels (its
// internal jsonrpc codeToError; A2A 0.3.0 §8, 1.0 §9.5 keep the codes).
var codeErrors = map[int]error{
	-32700: a2a.ErrParseError,
	-32600: a2a.ErrInvalidRequest,
	-32601: a2a.ErrMethodNotFound,
	-32602: a2a.ErrInvalidParams,
	-32603: a2a.ErrInternalError,
	-32000: a2a.ErrServerError,
	-32001: a2a.ErrTaskNotFound,
	-32002: a2a.ErrTaskNotCancelable,
	-32003: a2a.ErrPushNotificationNotSupported,
	-32004: a2a.ErrUnsupportedOperation,
	-32005: a2a.ErrUnsupportedContentType,
	-32006: a2a.ErrInvalidAgentResponse,
	-32007: a2a.ErrAuthenticatedExtendedCardNotConfigured,
	-31401: a2a.ErrUnauthenticated,
	-31403: a2a.ErrUnauthorized,
}

// maxEventBytes bounds one SSE event (a2a-go's own scanner bound).
const maxEventBytes = 10 << 20

// errNotRPC is an answer that is no JSON-RPC response object.
var errNotRPC = errors.New("not a JSON-RPC response")

// normalizeResponse reads one JSON-RPC response document. An error answer
// is returned as *RPCError; a result is returned re-encoded in the shape
// a2a-go decodes (v1: the 1.0 client's; else 0.3's).
func normalizeResponse(doc []byte, v1 bool) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %v", errNotRPC, err)
	}
	if m == nil {
		return nil, errNotRPC
	}
	if e, ok := m["error"]; ok && e != nil {
		return nil, rpcError(e)
	}
	if _, ok := m["result"]; !ok {
		return nil, fmt.Errorf("%w: neither result nor error", errNotRPC)
	}
	n := &normalizer{v1: v1}
	switch id := m["id"].(type) {
	case json.Number:
		m["id"], n.changed = id.String(), true
	case string:
	default:
		m["id"], n.changed = "", true
	}
	m["result"] = n.value(m["result"], "")
	if !n.changed {
		return doc, nil // already in the SDK's shape: no re-encoding
	}
	return json.Marshal(m)
}

// normalizer fixes decoded values, noting whether it changed any.
type normalizer struct {
	v1      bool
	changed bool
}

// rpcError reads an error member of any shape.
func rpcError(v any) *RPCError {
	e := &RPCError{Code: -32603}
	obj, ok := v.(map[string]any)
	if !ok {
		e.Message = agent.Truncate(oneLineText(fmt.Sprint(v)), maxCause)
		return e
	}
	switch c := obj["code"].(type) {
	case json.Number:
		if f, err := c.Float64(); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<31 {
			e.Code = int(f)
		}
	case string:
		if n, err := strconv.Atoi(strings.TrimSpace(c)); err == nil {
			e.Code = n
		}
	}
	if s, ok := obj["message"].(string); ok {
		e.Message = agent.Truncate(oneLineText(s), maxCause)
	}
	// 1.0 §9.5: data is a list of typed details; ErrorInfo names a reason.
	var details []any
	switch d := obj["data"].(type) {
	case []any:
		details = d
	case map[string]any:
		details = []any{d}
	}
	for _, d := range details {
		if dm, ok := d.(map[string]any); ok {
			if r, ok := dm["reason"].(string); ok && r != "" {
				e.Reason = agent.Truncate(oneLineText(r), 80)
				break
			}
		}
	}
	return e
}

// value fixes one decoded JSON value; key is the member name it was
// found under ("" at the top of result, "[]parts" for a part). A
// timestamp is read in a status only; metadata and a data part's data are
// the sender's own JSON and left alone.
func (n *normalizer) value(v any, key string) any {
	switch x := v.(type) {
	case map[string]any:
		for k, child := range x {
			switch {
			case k == "metadata" || k == "data" && key == "[]parts":
				// the sender's own JSON: left as it is
			case k == "timestamp" && key == "status":
				t, ok := normalizeTime(child)
				switch {
				case !ok:
					delete(x, k)
					n.changed = true
				case t != child:
					x[k], n.changed = t, true
				}
			case k == "parts":
				if parts, ok := child.([]any); ok {
					for i, p := range parts {
						parts[i] = n.value(p, "[]parts")
					}
				}
			default:
				x[k] = n.value(child, k)
			}
		}
		if !n.v1 {
			if _, has := x["kind"]; !has {
				if k := inferKind(x, key == "[]parts"); k != "" {
					x["kind"], n.changed = k, true
				}
			}
		}
		return x
	case []any:
		for i := range x {
			x[i] = n.value(x[i], key)
		}
		return x
	}
	return v
}

// inferKind is the 0.3 kind the members of an object make clear, or "".
func inferKind(x map[string]any, part bool) string {
	has := func(k string) bool { _, ok := x[k]; return ok }
	if part {
		switch {
		case has("text"):
			return "text"
		case has("file"):
			return "file"
		case has("data"):
			return "data"
		}
		return ""
	}
	switch {
	case has("messageId") && has("parts"):
		return "message"
	case has("taskId") && has("artifact"):
		return "artifact-update"
	case has("taskId") && has("status"):
		return "status-update"
	case has("id") && has("contextId") && has("status"):
		return "task"
	}
	return ""
}

// Timestamp layouts read besides RFC 3339 (an offset-less one is UTC).
var timeLayouts = []string{
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
}

// normalizeTime is a timestamp as RFC 3339 (UTC where none was given),
// or false when it is no timestamp meshtray can read.
func normalizeTime(v any) (string, bool) {
	var epoch float64
	switch x := v.(type) {
	case string:
		s := strings.TrimSpace(x)
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return t.Format(time.RFC3339Nano), true
		}
		for _, l := range timeLayouts {
			if t, err := time.Parse(l, s); err == nil {
				return t.UTC().Format(time.RFC3339Nano), true
			}
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return "", false
		}
		epoch = f
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return "", false
		}
		epoch = f
	default:
		return "", false
	}
	if epoch <= 0 || math.IsInf(epoch, 0) || math.IsNaN(epoch) || epoch > 1e15 {
		return "", false
	}
	if epoch == math.Trunc(epoch) { // whole seconds or milliseconds, exactly
		n := int64(epoch)
		if n >= 1e11 {
			return time.UnixMilli(n).UTC().Format(time.RFC3339Nano), true
		}
		return time.Unix(n, 0).UTC().Format(time.RFC3339Nano), true
	}
	// Epoch seconds reach 1e11 in the year 5138; milliseconds passed it
	// in 1973.
	if epoch >= 1e11 {
		epoch /= 1000
	}
	sec, frac := math.Modf(epoch)
	return time.Unix(int64(sec), int64(frac*1e9)).UTC().Format(time.RFC3339Nano), true
}

// sseEvent frames one normalized response as the SSE event a2a-go reads
// (one data line: a document written over several lines is compacted).
func sseEvent(doc []byte) []byte {
	if bytes.ContainsAny(doc, "\r\n") {
		var c bytes.Buffer
		if json.Compact(&c, doc) == nil {
			doc = c.Bytes()
		}
	}
	out := make([]byte, 0, len(doc)+8)
	out = append(out, "data: "...)
	out = append(out, doc...)
	return append(out, "\n\n"...)
}

// sseNormalizer re-frames an SSE stream of JSON-RPC responses: each event
// normalized (normalizeResponse), an error event ending the stream with
// its *RPCError as the read error.
type sseNormalizer struct {
	src  io.ReadCloser
	r    *bufio.Reader
	v1   bool
	out  []byte // framed bytes not yet read
	err  error  // returned once out is drained
	data []byte // data lines of the event being read
	has  bool   // the event has a data line
}

func newSSENormalizer(body io.ReadCloser, v1 bool) *sseNormalizer {
	return &sseNormalizer{src: body, r: bufio.NewReaderSize(body, 64<<10), v1: v1}
}

func (s *sseNormalizer) Close() error { return s.src.Close() }

func (s *sseNormalizer) Read(p []byte) (int, error) {
	for len(s.out) == 0 && s.err == nil {
		s.step()
	}
	if len(s.out) > 0 {
		n := copy(p, s.out)
		s.out = s.out[n:]
		return n, nil
	}
	return 0, s.err
}

// step reads one line and acts on it.
func (s *sseNormalizer) step() {
	line, err := s.readLine()
	if err != nil {
		if s.has && (errors.Is(err, io.EOF)) {
			s.flush()
		}
		if s.err == nil {
			s.err = err
		}
		return
	}
	switch {
	case len(line) == 0:
		s.flush()
	case bytes.HasPrefix(line, []byte("data:")):
		d := bytes.TrimPrefix(line[len("data:"):], []byte(" "))
		if s.has {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, d...)
		s.has = true
		if len(s.data) > maxEventBytes {
			s.err = fmt.Errorf("%w: an event over %d bytes", errTooLarge, maxEventBytes)
		}
	}
	// id:, event:, retry: and comments carry nothing meshtray uses.
}

// readLine reads one line without its end (LF, CRLF), bounded.
func (s *sseNormalizer) readLine() ([]byte, error) {
	var line []byte
	for {
		frag, err := s.r.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > maxEventBytes {
			return nil, fmt.Errorf("%w: an event over %d bytes", errTooLarge, maxEventBytes)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil && len(line) == 0 {
			return nil, err
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if err != nil {
			return line, nil // the last line, without its end; EOF next
		}
		return line, nil
	}
}

// flush ends the event being read.
func (s *sseNormalizer) flush() {
	if !s.has {
		return
	}
	data := bytes.TrimSpace(s.data)
	s.data, s.has = s.data[:0], false
	if len(data) == 0 {
		return
	}
	doc, err := normalizeResponse(data, s.v1)
	if err != nil {
		s.err = err
		return
	}
	s.out = append(s.out, sseEvent(doc)...)
}
