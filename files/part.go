package files

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
)

// PartMetadataKey is the key, in an announcing FilePart's metadata, of the
// object PartMetadata (see the package doc).
const PartMetadataKey = "meshtray.file"

// PartMetadata is what an announcing FilePart carries under
// PartMetadataKey: the Entry fields the part itself has no place for.
type PartMetadata struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// niPrefix is RFC 6920 §3's "ni" URI with an empty authority and the
// sha-256 algorithm (Named Information Hash Algorithm Registry).
const niPrefix = "ni:///sha-256;"

// NamedInfoURI is the RFC 6920 "ni" URI naming content with the lowercase
// hex SHA-256 sum: "ni:///sha-256;" + unpadded base64url of the digest.
// It is "" when sum is not 64 hex characters.
func NamedInfoURI(sum string) string {
	b, err := hex.DecodeString(sum)
	if err != nil || len(b) != 32 {
		return ""
	}
	return niPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// ParseNamedInfoURI returns the lowercase hex SHA-256 an "ni:///sha-256;…"
// URI names (RFC 6920 §3; a query part is ignored). An error wraps
// ErrBadManifest.
func ParseNamedInfoURI(u string) (string, error) {
	rest, ok := strings.CutPrefix(u, niPrefix)
	if !ok {
		return "", fmt.Errorf("%w: not an ni:///sha-256 URI", ErrBadManifest)
	}
	rest, _, _ = strings.Cut(rest, "?")
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil || len(b) != 32 {
		return "", fmt.Errorf("%w: the ni URI's digest is not 32 bytes of base64url", ErrBadManifest)
	}
	return hex.EncodeToString(b), nil
}

// IsNamedInfoURI reports whether u has the "ni:" scheme (any algorithm).
func IsNamedInfoURI(u string) bool {
	return len(u) >= 3 && strings.EqualFold(u[:3], "ni:")
}
