package pairing

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
)

// DeviceID identifies a device: the SHA-256 of its identity certificate
// (DER). It is the same 32 bytes as the certificate fingerprint, written for
// people instead of machines.
//
// The string form is Syncthing's (syncthing lib/protocol/deviceid.go and
// luhn.go; man syncthing-device-ids): the 32 bytes in base32 (RFC 4648 §6,
// no padding) = 52 characters, cut into 4 groups of 13, each followed by a
// check character (Syncthing's Luhn mod 32 variant, see luhn32), and the 56
// characters shown as 8 groups of 7 joined by '-':
//
//	P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2
type DeviceID [32]byte

// DeviceIDLen is the length of the canonical string form, dashes included.
const DeviceIDLen = 63

// luhnAlphabet is the base32 alphabet (RFC 4648 §6) the check characters
// are computed over.
const luhnAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"

// NewDeviceID returns the device ID of a certificate given in DER.
func NewDeviceID(certDER []byte) DeviceID { return sha256.Sum256(certDER) }

// DeviceIDFromFingerprint converts a certificate fingerprint (hex SHA-256,
// any case, ':' separators allowed) to the device ID of that certificate.
func DeviceIDFromFingerprint(fp string) (DeviceID, error) {
	norm, err := ParseFingerprint(fp)
	if err != nil {
		return DeviceID{}, err
	}
	var id DeviceID
	hex.Decode(id[:], []byte(norm))
	return id, nil
}

// Fingerprint returns the certificate fingerprint this ID is: lowercase hex
// of the 32 bytes.
func (id DeviceID) Fingerprint() string { return hex.EncodeToString(id[:]) }

// IsZero reports whether id is the zero value (no device).
func (id DeviceID) IsZero() bool { return id == DeviceID{} }

// String returns the canonical form with check characters and dashes.
func (id DeviceID) String() string {
	b32 := base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(id[:])
	var withCheck [56]byte
	for g := range 4 {
		group := b32[g*13 : (g+1)*13]
		copy(withCheck[g*14:], group)
		withCheck[g*14+13] = luhn32(group)
	}
	var out strings.Builder
	out.Grow(DeviceIDLen)
	for i := range 8 {
		if i > 0 {
			out.WriteByte('-')
		}
		out.Write(withCheck[i*7 : (i+1)*7])
	}
	return out.String()
}

// Short returns the first 7 characters of the string form, the handle shown
// in logs and lists (like Syncthing's short ID, lib/protocol/deviceid.go).
func (id DeviceID) Short() string { return ShortID(id.String()) }

// ShortID is Short for a device ID held as a string (a peer table row, a
// grant's PeerID, a request's device_id), parsed or not: its first 7
// characters, or all of it when shorter.
func ShortID(id string) string {
	if len(id) > 7 {
		return id[:7]
	}
	return id
}

// LogValue implements slog.LogValuer: the short form.
func (id DeviceID) LogValue() slog.Value { return slog.StringValue(id.Short()) }

// MarshalText implements encoding.TextMarshaler: the canonical form, or
// empty for the zero ID.
func (id DeviceID) MarshalText() ([]byte, error) {
	if id.IsZero() {
		return []byte{}, nil
	}
	return []byte(id.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseDeviceID's
// rules; empty text gives the zero ID.
func (id *DeviceID) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*id = DeviceID{}
		return nil
	}
	p, err := ParseDeviceID(string(b))
	if err != nil {
		return err
	}
	*id = p
	return nil
}

// ParseDeviceID reads a device ID typed or pasted by a person: case is
// ignored, dashes and spaces may be anywhere or absent, and the typos 0→O,
// 1→I, 8→B are fixed (none of 0, 1, 8 is in the base32 alphabet), as
// Syncthing does. The four check characters must verify, and the value must
// be the canonical encoding of 32 bytes. Errors wrap ErrBadDeviceID.
func ParseDeviceID(s string) (DeviceID, error) {
	if len(s) > 2*DeviceIDLen {
		return DeviceID{}, fmt.Errorf("%w: too long", ErrBadDeviceID)
	}
	var buf [56]byte
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '-' || c == ' ':
			continue
		case 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		case c == '0':
			c = 'O'
		case c == '1':
			c = 'I'
		case c == '8':
			c = 'B'
		}
		if strings.IndexByte(luhnAlphabet, c) < 0 {
			return DeviceID{}, fmt.Errorf("%w: character %q is not in the alphabet", ErrBadDeviceID, rune(s[i]))
		}
		if n == len(buf) {
			return DeviceID{}, fmt.Errorf("%w: too long (want 56 characters without dashes)", ErrBadDeviceID)
		}
		buf[n] = c
		n++
	}
	if n != len(buf) {
		return DeviceID{}, fmt.Errorf("%w: %d characters, want 56 without dashes", ErrBadDeviceID, n)
	}
	var b32 [52]byte
	for g := range 4 {
		group := buf[g*14 : g*14+13]
		if want := luhn32(string(group)); buf[g*14+13] != want {
			return DeviceID{}, fmt.Errorf("%w: check character of group %d does not match (a typo?)", ErrBadDeviceID, g+1)
		}
		copy(b32[g*13:], group)
	}
	var id DeviceID
	nb, err := base32.StdEncoding.WithPadding(base32.NoPadding).Decode(id[:], b32[:])
	if err != nil || nb != len(id) {
		return DeviceID{}, fmt.Errorf("%w: not base32", ErrBadDeviceID)
	}
	// The last character carries 1 data bit and 4 padding bits; accept only
	// the canonical encoding so each ID has exactly one string form.
	if id.String()[DeviceIDLen-2] != b32[51] {
		return DeviceID{}, fmt.Errorf("%w: not a canonical encoding", ErrBadDeviceID)
	}
	return id, nil
}

// luhn32 returns the check character of s (characters of luhnAlphabet)
// by Syncthing's Luhn mod 32 variant: code points weighted 1, 2, 1, 2, ...
// from the left, each product folded as (p / 32) + (p % 32), summed, and the
// check code point is (32 - sum % 32) % 32. (It is not textbook Luhn mod N,
// which weights from the right; Syncthing kept this form for compatibility:
// https://forum.syncthing.net/t/v0-9-0-new-node-id-format/478/6.)
func luhn32(s string) byte {
	factor, sum := 1, 0
	for i := 0; i < len(s); i++ {
		cp := strings.IndexByte(luhnAlphabet, s[i])
		addend := factor * cp
		if factor == 2 {
			factor = 1
		} else {
			factor = 2
		}
		sum += addend/32 + addend%32
	}
	return luhnAlphabet[(32-sum%32)%32]
}

// ParseFingerprint normalises a certificate fingerprint: 64 hex digits, any
// case, optionally separated by ':' (the form browsers and openssl show).
// The result is lowercase hex without separators. Errors wrap ErrInvalid.
func ParseFingerprint(s string) (string, error) {
	if len(s) > 95 {
		return "", fmt.Errorf("%w: fingerprint too long", ErrInvalid)
	}
	s = strings.ToLower(strings.ReplaceAll(s, ":", ""))
	if len(s) != 64 || !isLowerHex(s) {
		return "", fmt.Errorf("%w: a fingerprint is 64 hex digits (SHA-256)", ErrInvalid)
	}
	return s, nil
}

// shortFP is the first 8 hex digits of a fingerprint, for messages.
func shortFP(fp string) string {
	if len(fp) > 8 {
		return fp[:8]
	}
	return fp
}
