// Package textsafe makes untrusted text safe to show a person: every
// invisible rune (control and format characters, bidirectional overrides,
// zero-width characters, separators) becomes a visible escape, so what is
// shown is what the text holds (Unicode Technical Report #36 §2.2,
// "Trojan Source", CVE-2021-42574).
//
// It is for text from peers, agents and callers before it reaches a
// terminal, a window, a log line or an approval summary. It does no HTML or
// markup escaping: that belongs to the surface that interprets markup
// (nodes' desktop notifications escape it there).
package textsafe

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// EscapeInvisible returns s with every rune that is not printable
// (unicode.IsPrint: control characters, \n, \r and \t included, format
// characters such as the bidirectional overrides U+202E and
// U+2066..U+2069, zero-width and line separators, spaces other than
// U+0020) written as a \uXXXX (or \UXXXXXXXX) escape with upper-case hex
// digits, so the text is one line that shows what it holds. Printable
// text, backslashes included, is unchanged, so escaping twice changes
// nothing more. Invalid UTF-8 bytes become U+FFFD. Text that needs no
// escape is returned as it is, without allocating.
func EscapeInvisible(s string) string { return escape(s, false) }

// EscapeInvisibleText is EscapeInvisible for text shown on several lines:
// line breaks (\n) and tabs stay as they are; \r and every other invisible
// rune are escaped.
func EscapeInvisibleText(s string) string { return escape(s, true) }

func escape(s string, multiline bool) string {
	visible := func(r rune) bool { return unicode.IsPrint(r) || (multiline && (r == '\n' || r == '\t')) }
	clean := utf8.ValidString(s)
	for _, r := range s {
		if !clean || !visible(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for _, r := range s {
		switch {
		case visible(r):
			b.WriteRune(r)
		case r > 0xFFFF:
			fmt.Fprintf(&b, "\\U%08X", r)
		default:
			fmt.Fprintf(&b, "\\u%04X", r)
		}
	}
	return b.String()
}
