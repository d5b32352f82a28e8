package keychain

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestEncodeValue(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, MaxItemSize)
	for i := range random {
		random[i] = byte(rnd.Uint32())
	}
	for _, tc := range []struct {
		name  string
		value []byte
	}{
		{"empty", []byte{}},
		{"one zero", []byte{0}},
		{"zeros", make([]byte, MaxItemSize)},
		{"random max", random},
		{"random odd", random[:1999]},
		{"all 0xff", bytes.Repeat([]byte{0xff}, MaxItemSize)},
		{"text", []byte("mt1_abc_def\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			enc := encodeValue(tc.value)
			if len(enc) > encodedMax {
				t.Fatalf("encoded %d bytes to %d, over encodedMax %d", len(tc.value), len(enc), encodedMax)
			}
			for i := 0; i < len(enc); i++ {
				if enc[i] < '!' || enc[i] > '~' {
					t.Fatalf("encoded form has byte %#x at %d: not printable ASCII", enc[i], i)
				}
			}
			got, err := decodeValue(enc)
			if err != nil || !bytes.Equal(got, tc.value) {
				t.Fatalf("decode(encode(v)) = %d bytes, %v; want %d bytes", len(got), err, len(tc.value))
			}
		})
	}
	// The largest encoded item fits Windows Credential Manager's 2560 bytes
	// of password (go-keyring keyring_windows.go).
	if encodedMax > 2560 {
		t.Errorf("encodedMax = %d, over the Windows limit of 2560", encodedMax)
	}
}

func TestDecodeValueRejects(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"", "hunter2", "a85", "b64:AAAA", "a85:\x00\x01", "a85:~>", "a85:" + strings.Repeat("!", encodedMax),
		"a85:" + strings.Repeat("z", MaxItemSize/4+1), // decodes past MaxItemSize
	} {
		if v, err := decodeValue(s); !errors.Is(err, errBadEncoding) {
			t.Errorf("decodeValue(%.20q) = %d bytes, %v; want errBadEncoding", s, len(v), err)
		}
	}
}

func TestCheckKey(t *testing.T) {
	t.Parallel()
	for key, ok := range map[string]bool{
		"grant/abc":              true,
		"held/ABCDEFG-HIJKLMN":   true,
		"a":                      true,
		"x_y:z@h+1=2.3-4":        true,
		"indexes":                true,
		"index/1":                true,
		"":                       false,
		"index":                  false,
		"index.1":                false,
		"index.probe.ab":         false,
		"a b":                    false,
		"a\n":                    false,
		"a'":                     false,
		`a"`:                     false,
		"a\\":                    false,
		"ü":                      false,
		strings.Repeat("k", 200): true,
		strings.Repeat("k", 201): false,
	} {
		err := checkKey(key)
		if (err == nil) != ok || (err != nil && !errors.Is(err, ErrInvalidKey)) {
			t.Errorf("checkKey(%.30q) = %v, want ok=%v", key, err, ok)
		}
	}
}
