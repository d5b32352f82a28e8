package a2a

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/nodes"
)

// marshalJSON is json.Marshal without HTML escaping: what goes on the wire,
// into a summary or to a terminal keeps "<", ">" and "&" as they are
// instead of \u003c... (encoding/json escapes them by default for HTML
// pages; none of these are HTML).
func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// boundSummary is the form of a summary the owner is shown: one line
// (nodes.EscapeInvisible) of at most nodes.MaxSummaryRunes runes, cut with
// "…". It is idempotent, so a summary already bounded (nodes.Summarize's)
// is unchanged and an executor can compare it with the approved one.
func boundSummary(s string) string {
	s = nodes.EscapeInvisible(s)
	if utf8.RuneCountInString(s) > nodes.MaxSummaryRunes {
		rs := []rune(s)
		s = string(rs[:nodes.MaxSummaryRunes-1]) + "…"
	}
	return s
}

// textSummary is the line a person approves for a message that names no
// call: the first non-empty line of its text (with " …" when more text
// follows), else its data parts as JSON, then the name of every file it
// carries ("[file report.pdf]"); empty when the message has none of
// these. Everything a caller wrote goes through boundSummary, so control
// and bidirectional characters show as escapes.
func textSummary(msg *a2a.Message, empty string) string {
	var line string
	more := false
	var data, files []string
	for _, p := range msg.Parts {
		switch v := p.(type) {
		case a2a.TextPart:
			t := strings.TrimSpace(v.Text)
			if t == "" {
				continue
			}
			if line != "" {
				more = true
				continue
			}
			first, rest, _ := strings.Cut(t, "\n")
			line = strings.TrimSpace(first)
			more = strings.TrimSpace(rest) != ""
		case a2a.DataPart:
			b, _ := marshalJSON(v.Data)
			data = append(data, string(b))
		case a2a.FilePart:
			files = append(files, "[file "+fileName(v)+"]")
		}
	}
	var parts []string
	switch {
	case line != "":
		if more {
			line += " …"
		}
		parts = append(parts, line)
	case len(data) > 0:
		parts = append(parts, strings.Join(data, " "))
	}
	parts = append(parts, files...)
	if len(parts) == 0 {
		return empty
	}
	return boundSummary(strings.Join(parts, " "))
}

// fileName names a file part for a person: its name, else its URI, else
// "unnamed".
func fileName(p a2a.FilePart) string {
	switch f := p.File.(type) {
	case a2a.FileBytes:
		if f.Name != "" {
			return f.Name
		}
	case a2a.FileURI:
		if f.Name != "" {
			return f.Name
		}
		if f.URI != "" {
			return truncate(f.URI, 100)
		}
	}
	return "unnamed"
}
