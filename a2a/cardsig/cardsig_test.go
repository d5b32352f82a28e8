package cardsig

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"meshtray/keychain"
	"meshtray/pairing"
)

// TestRFC8785Vectors: the canonical form is the RFC's, on its own examples.
func TestRFC8785Vectors(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/rfc8785.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Transform []struct{ Input, Output string }
		Numbers   [][2]string
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Transform) != 2 || len(v.Numbers) < 20 {
		t.Fatalf("vectors missing: %d, %d", len(v.Transform), len(v.Numbers))
	}
	for i, tc := range v.Transform {
		got, err := Canonical([]byte(tc.Input))
		if err != nil || string(got) != tc.Output {
			t.Errorf("vector %d: %s, %v; want %s", i, got, err, tc.Output)
		}
	}
	for _, n := range v.Numbers {
		b, _ := hex.DecodeString(n[0])
		f := math.Float64frombits(binary.BigEndian.Uint64(b))
		in := `{"n":` + strconv.FormatFloat(f, 'g', -1, 64) + `}`
		got, err := Canonical([]byte(in))
		if want := `{"n":` + n[1] + `}`; err != nil || string(got) != want {
			t.Errorf("%s: %s, %v; want %s", n[0], got, err, want)
		}
	}
}

func identity(t *testing.T, name string) *pairing.Identity {
	t.Helper()
	id, err := pairing.LoadOrCreateIdentity(keychain.NewMemory(), name)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

const card = `{"name":"laptop","description":"a <b> & c","url":"https://127.0.0.1:7777/a2a/v1","protocolVersion":"0.3.0","skills":[{"id":"device.info","name":"Device info"}],"capabilities":{"streaming":true}}`

func TestSignAndVerify(t *testing.T) {
	t.Parallel()
	laptop, other := identity(t, "laptop"), identity(t, "other")
	signed, err := SignAs([]byte(card), laptop)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(signed, []byte(card[:len(card)-1])) {
		t.Fatalf("the signed card does not keep the card's bytes: %s", signed)
	}
	var doc struct{ Signatures []Signature }
	if err := json.Unmarshal(signed, &doc); err != nil || len(doc.Signatures) != 1 {
		t.Fatalf("signatures: %+v, %v", doc.Signatures, err)
	}
	prot, _ := base64.RawURLEncoding.DecodeString(doc.Signatures[0].Protected)
	var h protectedHeader
	if err := json.Unmarshal(prot, &h); err != nil || h.Alg != "ES256" || h.Kid != laptop.ID.String() || len(h.X5C) != 1 {
		t.Fatalf("protected header %s: %v", prot, err)
	}

	for _, tc := range []struct {
		name string
		card []byte
		pin  Pin
		want Status
	}{
		{"unsigned", []byte(card), nil, Unsigned},
		{"unsigned, pinned", []byte(card), PinDevice(laptop.ID), Unsigned},
		{"signed", signed, nil, Signed},
		{"signed, pinned", signed, PinDevice(laptop.ID), Signed},
		{"signed by another device than the paired one", signed, PinDevice(other.ID), Invalid},
		{"reformatted (whitespace, member order)", reorder(t, signed), PinDevice(laptop.ID), Signed},
		{"a field changed", bytes.Replace(signed, []byte(`"laptop"`), []byte(`"laptoq"`), 1), nil, Invalid},
		{"a skill added", bytes.Replace(signed, []byte(`"skills":[`), []byte(`"skills":[{"id":"x","name":"x"},`), 1), nil, Invalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Verify(tc.card, tc.pin); got.Status != tc.want {
				t.Fatalf("Verify = %+v, want %s", got, tc.want)
			}
		})
	}

	// A second signature by another key: either verifies alone; the pin
	// picks the paired one.
	both, err := SignAs(signed, other)
	if err != nil {
		t.Fatal(err)
	}
	if got := Verify(both, PinDevice(other.ID)); got.Status != Signed || got.KeyID != other.ID.String() {
		t.Fatalf("two signatures, pinned to the second: %+v", got)
	}
}

// reorder re-encodes a card with sorted members and indentation: the
// canonical form, so the signature, does not change.
func reorder(t *testing.T, b []byte) []byte {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestVerifyKeys(t *testing.T) {
	t.Parallel()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	// A jwk in the protected header (how other SDKs sign): checked with it.
	withJWK := signWith(t, key, map[string]any{"alg": "ES256", "kid": "k1", "jwk": jwkOf(key)})
	if got := Verify(withJWK, nil); got.Status != Signed || got.KeyID != "k1" {
		t.Fatalf("jwk: %+v", got)
	}
	// Only a URL for the key: never fetched, so not checked.
	withJKU := signWith(t, key, map[string]any{"alg": "ES256", "kid": "k1", "jku": "https://keys.example.com/jwks.json"})
	if got := Verify(withJKU, nil); got.Status != Unsigned || !strings.Contains(got.Detail, "not fetched") {
		t.Fatalf("jku: %+v", got)
	}
	// A paired device must sign with its certificate.
	if got := Verify(withJWK, PinDevice(pairing.DeviceID{})); got.Status != Invalid {
		t.Fatalf("jwk, pinned: %+v", got)
	}
	// HS256 (a shared secret, as the Psych seed signs): not checkable.
	hs := []byte(strings.TrimSuffix(card, "}") + `,"signatures":[{"protected":"` +
		base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","kid":"s"}`)) + `","signature":"AAAA"}]}`)
	if got := Verify(hs, nil); got.Status != Unsigned || !strings.Contains(got.Detail, "HS256") {
		t.Fatalf("HS256: %+v", got)
	}
	// Garbage where a signature should be.
	bad := []byte(strings.TrimSuffix(card, "}") + `,"signatures":[{"protected":"e30","signature":"!!"}]}`)
	if got := Verify(bad, nil); got.Status != Invalid {
		t.Fatalf("garbage: %+v", got)
	}
}

func jwkOf(k *ecdsa.PrivateKey) map[string]string {
	b := func(x []byte) string { return base64.RawURLEncoding.EncodeToString(x) }
	pub, _ := k.PublicKey.ECDH()
	raw := pub.Bytes() // 0x04 || X || Y
	return map[string]string{"kty": "EC", "crv": "P-256", "x": b(raw[1:33]), "y": b(raw[33:])}
}

// signWith signs card by hand (protected header as given), as a foreign
// signer would.
func signWith(t *testing.T, key *ecdsa.PrivateKey, header map[string]any) []byte {
	t.Helper()
	payload, err := Canonical([]byte(card))
	if err != nil {
		t.Fatal(err)
	}
	hb, _ := json.Marshal(header)
	prot := base64.RawURLEncoding.EncodeToString(hb)
	input := prot + "." + base64.RawURLEncoding.EncodeToString(payload)
	sig := es256(t, key, []byte(input))
	out, err := withSignature([]byte(card), Signature{Protected: prot, Signature: base64.RawURLEncoding.EncodeToString(sig)})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSignerSignsEachCardOnce(t *testing.T) {
	t.Parallel()
	id := identity(t, "laptop")
	sign := Signer(id)
	a, err := sign([]byte(card))
	if err != nil {
		t.Fatal(err)
	}
	b, err := sign([]byte(card))
	if err != nil || !bytes.Equal(a, b) {
		t.Fatalf("the same card signed twice differs: %v", err)
	}
	other := []byte(strings.Replace(card, "laptop", "desktop", 1))
	c, err := sign(other)
	if err != nil || bytes.Equal(a, c) || Verify(c, PinDevice(id.ID)).Status != Signed {
		t.Fatalf("a changed card: %s, %v", c, err)
	}
}
