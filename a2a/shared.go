package a2a

import (
	"encoding/json"

	"github.com/a2aproject/a2a-go/a2a"
)

// What the delegating half (meshtray/a2a/delegate) shares with the server:
// one implementation each, exported under the server's own rules.

// Interrupted reports a state in which a task waits for its caller
// (A2A 0.3.0 §6.3: input-required, auth-required).
func Interrupted(s a2a.TaskState) bool { return interrupted(s) }

// Truncate shortens s to at most n bytes on a rune boundary, marking the
// cut with "…".
func Truncate(s string, n int) string { return truncate(s, n) }

// TextSummary is the one escaped line a person approves for msg: its first
// text, data parts as JSON, the names of its files; empty when it has none.
func TextSummary(msg *a2a.Message, empty string) string { return textSummary(msg, empty) }

// PartSize is the bytes a part holds, as the stores count them: a text's
// length, a file's bytes (or URI) plus name and MIME type, else its JSON.
func PartSize(p a2a.Part) int64 {
	switch v := p.(type) {
	case a2a.TextPart:
		return int64(len(v.Text))
	case a2a.FilePart:
		switch f := v.File.(type) {
		case a2a.FileBytes:
			return int64(len(f.Bytes) + len(f.Name) + len(f.MimeType))
		case a2a.FileURI:
			return int64(len(f.URI) + len(f.Name) + len(f.MimeType))
		}
	}
	b, _ := json.Marshal(p)
	return int64(len(b))
}
