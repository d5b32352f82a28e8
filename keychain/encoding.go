package keychain

import (
	"encoding/ascii85"
	"errors"
	"strings"
)

// go-keyring stores strings, and not every backend keeps arbitrary bytes
// intact (macOS `security` output, D-Bus text/plain secrets), so values are
// stored as text: valuePrefix + Ascii85 (Adobe/btoa alphabet, encoding/ascii85).
// Ascii85 costs 5/4 of the input where base64 costs 4/3: a MaxItemSize value
// (2000 bytes) becomes at most 2504 characters, under the 2560-byte limit of
// Windows Credential Manager; base64 would be 2668 and fail there.
const valuePrefix = "a85:"

// encodedMax is the longest encoded form of a MaxItemSize value.
const encodedMax = len(valuePrefix) + (MaxItemSize+3)/4*5

var errBadEncoding = errors.New("keychain: item is not in meshtray's format")

// encodeValue returns the stored text form of value.
func encodeValue(value []byte) string {
	var b strings.Builder
	b.Grow(len(valuePrefix) + ascii85.MaxEncodedLen(len(value)))
	b.WriteString(valuePrefix)
	dst := make([]byte, ascii85.MaxEncodedLen(len(value)))
	n := ascii85.Encode(dst, value)
	b.Write(dst[:n])
	return b.String()
}

// decodeValue reverses encodeValue. Text that is not in that form (an item
// some other program wrote under our service name) is errBadEncoding.
func decodeValue(s string) ([]byte, error) {
	body, ok := strings.CutPrefix(s, valuePrefix)
	if !ok || len(s) > encodedMax {
		return nil, errBadEncoding
	}
	// encoding/ascii85 skips spaces and control characters; we wrote none.
	for i := 0; i < len(body); i++ {
		if c := body[i]; (c < '!' || c > 'u') && c != 'z' {
			return nil, errBadEncoding
		}
	}
	// Each 5 characters decode to at most 4 bytes; "z" (4 zero bytes) is 1.
	dst := make([]byte, 4*len(body))
	n, _, err := ascii85.Decode(dst, []byte(body), true)
	if err != nil {
		return nil, errors.Join(errBadEncoding, err)
	}
	if n > MaxItemSize {
		return nil, errBadEncoding
	}
	return dst[:n:n], nil
}
