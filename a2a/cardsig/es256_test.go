package cardsig

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"testing"
)

// es256 is a JWS ES256 signature (RFC 7518 §3.4: R || S, 32 bytes each).
func es256(t *testing.T, key *ecdsa.PrivateKey, input []byte) []byte {
	t.Helper()
	h := sha256.Sum256(input)
	r, s, err := ecdsa.Sign(rand.Reader, key, h[:])
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 64)
	r.FillBytes(out[:32])
	s.FillBytes(out[32:])
	return out
}
