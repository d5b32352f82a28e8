package app

import (
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/term"
)

// Text from peers, agents and pairing claimants reaches the owner's
// terminal. Control characters there are commands, not text: ESC starts
// ANSI/OSC sequences that recolour, rewrite (\r) or retitle the screen and
// even set the clipboard (OSC 52), and bidirectional overrides (U+202E)
// make a command read as something else. The CLI shows such runes as \uXXXX
// escapes, so the owner sees what arrived.

// safeText escapes every rune that is not printable (unicode.IsPrint) in s,
// keeping newlines and tabs when multiline is set.
func safeText(s string, multiline bool) string {
	clean := utf8.ValidString(s)
	for _, r := range s {
		if !printableRune(r, multiline) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case printableRune(r, multiline):
			b.WriteRune(r)
		case r > 0xFFFF:
			fmt.Fprintf(&b, "\\U%08X", r)
		default:
			fmt.Fprintf(&b, "\\u%04X", r)
		}
	}
	return b.String()
}

func printableRune(r rune, multiline bool) bool {
	return unicode.IsPrint(r) || (multiline && (r == '\n' || r == '\t'))
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// outputText is what the CLI writes of an agent's text answer to w: raw
// when w is a file or a pipe (the bytes the agent sent), escaped on a
// terminal.
func outputText(w io.Writer, s string) string {
	if isTerminal(w) {
		return safeText(s, true)
	}
	return s
}
