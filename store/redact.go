package store

import (
	"regexp"
	"strings"
)

// Redacted replaces a secret Redact found.
const Redacted = "[redacted]"

var (
	// A meshtray grant token: mt1_<16 hex>_<43 base64url> (pairing/token.go).
	grantToken = regexp.MustCompile(`mt1_[0-9a-f]{16}_[A-Za-z0-9_-]{43}`)
	// An HTTP credential: "Bearer x", "Basic x" (RFC 6750 §2.1, RFC 7617).
	authScheme = regexp.MustCompile(`(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]+`)
	// key=value, key: value, "key": "value" with a secret-sounding key.
	secretPair = regexp.MustCompile(`(?i)("?\b(?:[a-z0-9_-]*(?:token|secret|password|passwd|passphrase|api[_-]?key|cookie|credential|private[_-]?key)|code|sas|pin|authorization)"?\s*[:=]\s*)("(?:[^"\\]|\\.)*"|'[^']*'|[^\s,;&}\]]+)`)
	// A long run of token alphabet (base64, base64url, hex-with-case).
	longRun = regexp.MustCompile(`[A-Za-z0-9_+/=-]{32,}`)
)

// Redact returns s with every secret-shaped part replaced by "[redacted]":
// meshtray grant tokens, Bearer/Basic credentials, the value of a
// key=value or "key": value pair whose key names a secret (token, secret,
// password, api key, cookie, credential, private key, code, sas, pin,
// authorization), and any run of 32 or more base64/base64url characters
// mixing lower case, upper case and digits (a random token: control
// tokens, JWTs, API keys). Device IDs (upper case, digits, dashes), SHA-256
// fingerprints (lower-case hex) and UUIDs are kept: they name things and
// are not secret.
func Redact(s string) string {
	if s == "" {
		return s
	}
	s = grantToken.ReplaceAllString(s, Redacted)
	s = authScheme.ReplaceAllString(s, "${1}${2}"+Redacted)
	s = secretPair.ReplaceAllStringFunc(s, func(m string) string {
		sub := secretPair.FindStringSubmatch(m)
		if sub[2] == Redacted || sub[2] == `"`+Redacted+`"` {
			return m
		}
		if strings.HasPrefix(sub[2], `"`) {
			return sub[1] + `"` + Redacted + `"`
		}
		return sub[1] + Redacted
	})
	s = longRun.ReplaceAllStringFunc(s, func(m string) string {
		var lower, upper, digit bool
		for i := 0; i < len(m); i++ {
			switch c := m[i]; {
			case c >= 'a' && c <= 'z':
				lower = true
			case c >= 'A' && c <= 'Z':
				upper = true
			case c >= '0' && c <= '9':
				digit = true
			}
		}
		if lower && upper && digit {
			return Redacted
		}
		return m
	})
	return s
}
