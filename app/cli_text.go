package app

import (
	"io"
	"os"

	"golang.org/x/term"

	"meshtray/nodes"
)

// Text from peers, agents and pairing claimants reaches the owner's
// terminal. Control characters there are commands, not text: ESC starts
// ANSI/OSC sequences that recolour, rewrite (\r) or retitle the screen and
// even set the clipboard (OSC 52), and bidirectional overrides (U+202E)
// make a command read as something else. The CLI shows such runes as \uXXXX
// escapes, so the owner sees what arrived.

// safeText escapes every rune that is not printable in s
// (nodes.EscapeInvisible), keeping newlines and tabs when multiline is set.
func safeText(s string, multiline bool) string {
	if multiline {
		return nodes.EscapeInvisibleText(s)
	}
	return nodes.EscapeInvisible(s)
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
