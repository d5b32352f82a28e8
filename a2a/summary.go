package a2a

import (
	"strings"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/jsonout"
	"meshtray/nodes"
)

// textSummary is the line a person approves for a message that names no
// call: the first non-empty line of its text (with " …" when more text
// follows), else its data parts as JSON, then the name of every file it
// carries ("[file report.pdf]"); empty when the message has none of
// these. Everything a caller wrote goes through nodes.BoundSummary, so control
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
			b, _ := jsonout.Marshal(v.Data)
			data = append(data, string(b))
		case a2a.FilePart:
			files = append(files, "[file "+FileName(v)+"]")
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
	return nodes.BoundSummary(strings.Join(parts, " "))
}

// MessageText is the text parts of m joined by newlines, as written: no
// escaping of any kind (HTML included; escape invisible characters with
// textsafe where a person reads it). It is "" for a nil message or one
// without text parts.
func MessageText(m *a2a.Message) string {
	if m == nil {
		return ""
	}
	var b strings.Builder
	for _, p := range m.Parts {
		if tp, ok := p.(a2a.TextPart); ok {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(tp.Text)
		}
	}
	return b.String()
}

// FileName names a file part for a person: its name, else its URI (cut
// to 100 bytes), else "unnamed". It is not escaped.
func FileName(p a2a.FilePart) string {
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
