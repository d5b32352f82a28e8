package a2a

import (
	"bytes"
	"strings"
	"unicode/utf8"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/nodes"
)

// marshalJSON is json.Marshal without HTML escaping: what goes on the wire,
// into a summary or to a terminal keeps "<", ">" and "&" as they are
// instead of \u003c, \u003e, \u0026 (encoding/json escapes them by
// default, for JSON embedded in HTML; none of ours is). a2a-go's wire types
// marshal themselves with json.Marshal, so their escapes are undone too
// (unescapeHTML).
func marshalJSON(v any) ([]byte, error) {
	b, err := nodes.MarshalJSON(v)
	if err != nil {
		return nil, err
	}
	return unescapeHTML(b), nil
}

// unescapeHTML rewrites the escapes \u003c, \u003e and \u0026 of valid
// JSON (as encoding/json writes them) to "<", ">" and "&". An escaped
// backslash followed by "u003c" (the text \u003c itself) is left alone.
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
