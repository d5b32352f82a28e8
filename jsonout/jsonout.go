// Package jsonout encodes the JSON meshtray sends and writes it as HTTP
// responses.
//
// Nothing meshtray writes is embedded in HTML: people, terminals, agents
// and scripts read it as written. So Marshal keeps "<", ">" and "&" as they
// are, where encoding/json writes \u003c, \u003e and \u0026 by default
// (encoding/json, "String values encode as JSON strings coerced to valid
// UTF-8 ... escaped to keep some browsers from misinterpreting JSON output
// as HTML"). Write and Stream answer HTTP requests with the headers every
// JSON answer of meshtray carries: the media type (RFC 8259 §11; NDJSON,
// one value a line, for streams), Cache-Control: no-store (RFC 9111
// §5.2.2.5: an answer may carry a token once, and state changes at any
// time) and X-Content-Type-Options: nosniff (WHATWG Fetch, the
// "X-Content-Type-Options" header), so no browser renders an answer as a
// page.
package jsonout

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
)

// Media types of the answers written here.
const (
	ContentType       = "application/json"
	StreamContentType = "application/x-ndjson"
)

// Marshal is json.Marshal without HTML escaping and without a trailing
// newline. Values whose own MarshalJSON escapes HTML (types that call
// json.Marshal inside, as a2a-go's wire types do) are undone too: the
// result never holds \u003c, \u003e or \u0026 for "<", ">" and "&". Both
// forms decode to the same value; this one is the one a person can read.
// The errors are json.Marshal's.
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return unescapeHTML(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
}

// MarshalIndent is Marshal with each element on its own line, indented by
// two spaces (json.MarshalIndent with prefix "" and indent "  ").
func MarshalIndent(v any) ([]byte, error) {
	b, err := Marshal(v)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// unescapeHTML rewrites the escapes \u003c, \u003e and \u0026 of valid
// JSON (as encoding/json writes them, lower-case hex) to "<", ">" and "&".
// An escaped backslash followed by "u003c" (the text \u003c itself) is
// left alone. b is returned as it is when it holds no such escape.
func unescapeHTML(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u00`)) {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\\' || i+1 >= len(b) {
			out = append(out, c)
			continue
		}
		if b[i+1] == 'u' && i+5 < len(b) && b[i+2] == '0' && b[i+3] == '0' {
			r := byte(0)
			switch string(b[i+4 : i+6]) {
			case "3c":
				r = '<'
			case "3e":
				r = '>'
			case "26":
				r = '&'
			}
			if r != 0 {
				out = append(out, r)
				i += 5
				continue
			}
		}
		out = append(out, c, b[i+1]) // any other escape, \\ included, as it is
		i++
	}
	return out
}

// SetHeaders sets the headers of a JSON answer on h: Content-Type
// application/json, Cache-Control no-store, X-Content-Type-Options
// nosniff. It is for handlers that write JSON they encoded themselves
// (the A2A JSON-RPC binding, the Agent Card); Write calls it.
func SetHeaders(h http.Header) {
	h.Set("Content-Type", ContentType)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
}

// Write answers with status and v as JSON (Marshal, then a newline), with
// SetHeaders' headers and the Content-Length. When v does not encode it
// answers 500 with WriteError's body instead.
func Write(w http.ResponseWriter, status int, v any) {
	b, err := Marshal(v)
	if err != nil {
		WriteError(w, http.StatusInternalServerError, "encoding the answer: "+err.Error())
		return
	}
	writeBody(w, status, append(b, '\n'))
}

// ErrorBody is the body of an error answer: {"error": "..."}.
type ErrorBody struct {
	Error string `json:"error"`
}

// WriteError answers with status and {"error": msg}, with Write's headers.
func WriteError(w http.ResponseWriter, status int, msg string) {
	b, _ := Marshal(ErrorBody{Error: msg}) // a struct of one string always encodes
	writeBody(w, status, append(b, '\n'))
}

func writeBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	SetHeaders(h)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// Stream answers with a stream of JSON values, one a line (NDJSON), each
// flushed to the client as it is sent. It is not safe for concurrent use.
type Stream struct {
	w  http.ResponseWriter
	fl http.Flusher // nil when w cannot flush
}

// NewStream starts the answer: status 200, Content-Type
// application/x-ndjson and SetHeaders' other headers.
func NewStream(w http.ResponseWriter) *Stream {
	h := w.Header()
	SetHeaders(h)
	h.Set("Content-Type", StreamContentType)
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	return &Stream{w: w, fl: fl}
}

// Send writes v (WriteLine) and flushes it. The error is Marshal's or the
// connection's (the client left).
func (s *Stream) Send(v any) error {
	if err := WriteLine(s.w, v); err != nil {
		return err
	}
	if s.fl != nil {
		s.fl.Flush()
	}
	return nil
}

// WriteLine writes v to w as one line of JSON: Marshal, then a newline, in
// one Write (an NDJSON record). Nothing is written when v does not encode.
func WriteLine(w io.Writer, v any) error {
	b, err := Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
