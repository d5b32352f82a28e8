package pairing

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Valid reports whether s is one of ScopeAgent, ScopeNode, ScopeFull,
// ScopeApprove.
func (s Scope) Valid() bool {
	switch s {
	case ScopeAgent, ScopeNode, ScopeFull, ScopeApprove:
		return true
	}
	return false
}

// ParseScopes reads the comma-separated form Scopes.String writes
// ("agent,node"), as the CLI's --scope flags and the pairing prompt give
// it; spaces around names are ignored. The result is sorted and without
// duplicates; an unknown name is an error wrapping ErrInvalid that names it
// and the four scopes. The empty string gives an empty set.
func ParseScopes(s string) (Scopes, error) {
	var out Scopes
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if !Scope(part).Valid() {
			return nil, &invalidError{fmt.Sprintf("scope %q: want agent, node, full or approve", clip(part, 16))}
		}
		out = append(out, Scope(part))
	}
	return NormalizeScopes(out)
}

// DefaultPairingScopes is what approving a pairing request grants when the
// owner names no scopes (the CLI's `approve`, the pairing windows'
// pre-selection): what the claimant asked for, but never full or approve
// (each takes an explicit choice), and at least agent.
func DefaultPairingScopes(requested Scopes) Scopes {
	var out Scopes
	for _, s := range requested {
		if s == ScopeAgent || s == ScopeNode {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		out = Scopes{ScopeAgent}
	}
	return out
}

// Describe is s as Scopes.String writes it, or "no scopes" for none: for
// sentences ("asking for agent,node").
func (s Scopes) Describe() string {
	if len(s) == 0 {
		return "no scopes"
	}
	return s.String()
}

// NormalizeScopes validates s and returns a sorted copy without duplicates.
// An unknown scope is an error wrapping ErrInvalid.
func NormalizeScopes(s Scopes) (Scopes, error) {
	if len(s) > 8 {
		return nil, fmt.Errorf("%w: too many scopes", ErrInvalid)
	}
	out := make(Scopes, 0, len(s))
	for _, sc := range s {
		if !sc.Valid() {
			return nil, fmt.Errorf("%w: unknown scope %q (want agent, node, full or approve)", ErrInvalid, clip(string(sc), 16))
		}
		if !slices.Contains(out, sc) {
			out = append(out, sc)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Without returns s minus the scopes xs (a new slice).
func (s Scopes) Without(xs ...Scope) Scopes {
	out := make(Scopes, 0, len(s))
	for _, sc := range s {
		if !slices.Contains(xs, sc) {
			out = append(out, sc)
		}
	}
	return out
}

// Valid reports whether p is ask, allow or deny.
func (p Policy) Valid() bool {
	switch p {
	case PolicyAsk, PolicyAllow, PolicyDeny:
		return true
	}
	return false
}

// Policies are the approval policies, in the order a choice lists them.
var Policies = []Policy{PolicyAsk, PolicyAllow, PolicyDeny}

// ParsePolicy reads an approval policy name: ask, allow or deny. The empty
// string gives "" (no policy given: the caller's default applies); another
// name is an error wrapping ErrInvalid that names it and the three
// policies.
func ParsePolicy(s string) (Policy, error) {
	if p := Policy(s); p == "" || p.Valid() {
		return p, nil
	}
	return "", &invalidError{fmt.Sprintf("approval %q: want ask, allow or deny", clip(s, 16))}
}

// invalidError is an ErrInvalid whose text is meant for a person as it is
// (no "pairing: invalid" prefix).
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }
func (e *invalidError) Unwrap() error { return ErrInvalid }

// Length limits, in runes, for names and OS strings a peer gives us. They
// keep every keychain item far below keychain.MaxItemSize and every popup
// readable.
const (
	MaxNameLen = 64
	MaxOSLen   = 64
	MaxURLLen  = 256
)

// cleanText makes a string a stranger sent fit for a popup and a log line:
// invalid UTF-8 replaced, control and bidirectional-override characters
// dropped (they can make "evil" render as "live", Unicode TR #36 §2.1),
// spaces collapsed at the ends, at most max runes.
func cleanText(s string, max int) string {
	var b strings.Builder
	n := 0
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if n >= max {
			break
		}
		if unicode.IsControl(r) || isBidiControl(r) || r == utf8.RuneError {
			continue
		}
		b.WriteRune(r)
		n++
	}
	return strings.TrimSpace(b.String())
}

// isBidiControl reports the explicit directional formatting characters of
// Unicode UAX #9 §2 (embeddings, overrides, isolates, marks).
func isBidiControl(r rune) bool {
	switch {
	case r >= 0x202A && r <= 0x202E, r >= 0x2066 && r <= 0x2069,
		r == 0x200E, r == 0x200F, r == 0x061C:
		return true
	}
	return false
}

// clip shortens untrusted s to at most n runes of clean text for an error
// message.
func clip(s string, n int) string {
	c := cleanText(s, n)
	if len(c) < len(s) {
		return c + "…"
	}
	return c
}
