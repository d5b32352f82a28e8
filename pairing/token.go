package pairing

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// Grant tokens have the form
//
//	mt1_<grant id>_<secret>
//
// where the grant ID is 16 lowercase hex characters (8 random bytes, not
// secret: it names the grant in lists and logs) and the secret is 32 bytes
// from crypto/rand in unpadded base64url (RFC 4648 §5), 43 characters. The
// issuer keeps only SHA-256 of the whole token; with 256 bits of entropy a
// plain hash is enough (no password KDF needed). Tokens travel only in
// `Authorization: Bearer` (RFC 6750 §2.1), never in a URL.
const (
	tokenPrefix    = "mt1_"
	grantIDLen     = 16
	tokenSecretLen = 43
	// TokenLen is the length of every grant token, in bytes.
	TokenLen = len(tokenPrefix) + grantIDLen + 1 + tokenSecretLen
)

// newGrantID returns a fresh random grant ID.
func newGrantID() string {
	var b [grantIDLen / 2]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newToken returns a fresh token for grant id and its SHA-256.
func newToken(id string) (token string, hash [32]byte) {
	var secret [32]byte
	rand.Read(secret[:])
	token = tokenPrefix + id + "_" + base64.RawURLEncoding.EncodeToString(secret[:])
	return token, sha256.Sum256([]byte(token))
}

// tokenGrantID returns the grant ID inside token, checking the token's shape
// (prefix, lengths, alphabets) but not its secret. It never allocates.
func tokenGrantID(token string) (string, bool) {
	if len(token) != TokenLen || !strings.HasPrefix(token, tokenPrefix) {
		return "", false
	}
	id := token[len(tokenPrefix) : len(tokenPrefix)+grantIDLen]
	if !isLowerHex(id) || token[len(tokenPrefix)+grantIDLen] != '_' {
		return "", false
	}
	for i := len(tokenPrefix) + grantIDLen + 1; i < len(token); i++ {
		if !isBase64URL(token[i]) {
			return "", false
		}
	}
	return id, true
}

// ValidToken reports whether s has the shape of a meshtray grant token.
func ValidToken(s string) bool {
	_, ok := tokenGrantID(s)
	return ok
}

// TokenGrantID returns the (public) grant ID a token names, or "" when s is
// not a grant token.
func TokenGrantID(s string) string {
	id, _ := tokenGrantID(s)
	return id
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func isBase64URL(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

// randomString returns n random bytes in unpadded base64url.
func randomString(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
