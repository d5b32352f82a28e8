package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"meshtray/textsafe"
)

// Text from peers, agents and pairing claimants reaches the owner's
// terminal. Control characters there are commands, not text: ESC starts
// ANSI/OSC sequences that recolour, rewrite (\r) or retitle the screen and
// even set the clipboard (OSC 52), and bidirectional overrides (U+202E)
// make a command read as something else. The CLI shows such runes as \uXXXX
// escapes, so the owner sees what arrived.

// safeText escapes every rune that is not printable in s
// (textsafe.EscapeInvisible), keeping newlines and tabs when multiline is set.
func safeText(s string, multiline bool) string {
	if multiline {
		return textsafe.EscapeInvisibleText(s)
	}
	return textsafe.EscapeInvisible(s)
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

// oneLine is the first line of untrusted text s, escaped (safeText) and cut
// to max runes.
func oneLine(s string, max int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	s = safeText(s, false)
	if r := []rune(s); len(r) > max {
		s = string(r[:max-1]) + "…"
	}
	return s
}

// pathText is a file name or path from anywhere (a folder being sent, a
// peer) as one line: every invisible rune escaped, a newline included
// (\u000A), so the whole name shows and no two names look alike; cut to
// max runes. oneLine, for sentences, drops what follows a newline.
func pathText(s string, max int) string {
	s = safeText(s, false)
	if r := []rune(s); len(r) > max {
		s = string(r[:max-1]) + "…"
	}
	return s
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return t.Local().Format("2006-01-02")
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func spacedSAS(s string) string {
	if len(s) == 6 {
		return s[:3] + " " + s[3:]
	}
	return s
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown OS"
	}
	return s
}
