// Package cardsig signs and verifies A2A Agent Cards (A2A 1.0 §8.4): each
// entry of a card's signatures is a JWS (RFC 7515) whose payload is the
// RFC 8785 (JCS) canonical form of the card without its signatures field,
// carried detached as {protected, signature, header?}.
//
// meshtray signs its own card with the device's identity key (ES256 over
// the P-256 key of pairing.Identity), naming the key twice in the
// protected header: kid is the device ID, x5c the device certificate, so a
// device that paired with it checks the signature against the certificate
// it pinned (Verify with a Pin). A key the header names by URL only (jku,
// x5u) is never fetched: a signer-chosen URL is no root of trust.
//
// Libraries: github.com/go-jose/go-jose/v4 (JWS), github.com/gowebpki/jcs
// (RFC 8785).
package cardsig

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/go-jose/go-jose/v4"
	"github.com/gowebpki/jcs"

	"meshtray/pairing"
)

// MaxSignatures bounds the signatures Verify looks at; a card with more is
// invalid.
const MaxSignatures = 8

// Signature is one entry of a card's signatures (A2A 1.0 AgentCardSignature).
type Signature struct {
	Protected string          `json:"protected"`
	Signature string          `json:"signature"`
	Header    json.RawMessage `json:"header,omitempty"`
}

// Status is what Verify found.
type Status string

const (
	// Unsigned: no signatures, or none meshtray can check (a shared-secret
	// algorithm, or a key named only by URL); Result.Detail says which.
	Unsigned Status = "unsigned"
	// Signed: a signature verifies with the key its header carries (and,
	// with a Pin, that key is the pinned certificate's).
	Signed Status = "signed"
	// Invalid: a signature is malformed or does not verify, or (with a Pin)
	// none is made with the pinned certificate. Callers refuse the card.
	Invalid Status = "invalid"
)

// Result is the outcome of Verify.
type Result struct {
	Status Status
	KeyID  string // the kid of the signature that verified
	Detail string // why the card is invalid, or why it counts as unsigned
}

// Pin checks the certificate a signature's x5c header names (a paired
// device's: its SHA-256 must be the pinned fingerprint). With a Pin,
// only signatures carrying an x5c certificate that passes it count.
type Pin func(cert *x509.Certificate) error

// Canonical is the RFC 8785 canonical form of card (a JSON object) without
// its top-level signatures member: the payload every card signature signs.
func Canonical(card []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(card, &m); err != nil {
		return nil, fmt.Errorf("cardsig: the card is not a JSON object: %w", err)
	}
	delete(m, "signatures")
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return jcs.Transform(b)
}

// Sign returns card with one ES256 signature by key appended to its
// signatures (the protected header names kid and, when cert is not nil,
// carries it as x5c). The card's other bytes are kept as they are. key
// must be a P-256 key.
func Sign(card []byte, key *ecdsa.PrivateKey, cert *x509.Certificate, kid string) ([]byte, error) {
	if key == nil || key.Curve != elliptic.P256() {
		return nil, errors.New("cardsig: ES256 needs a P-256 key")
	}
	payload, err := Canonical(card)
	if err != nil {
		return nil, err
	}
	opts := (&jose.SignerOptions{}).WithHeader(jose.HeaderKey("kid"), kid)
	if cert != nil {
		opts = opts.WithHeader(jose.HeaderKey("x5c"), []string{base64.StdEncoding.EncodeToString(cert.Raw)})
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, opts)
	if err != nil {
		return nil, fmt.Errorf("cardsig: %w", err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		return nil, fmt.Errorf("cardsig: %w", err)
	}
	compact, err := jws.DetachedCompactSerialize()
	if err != nil {
		return nil, fmt.Errorf("cardsig: %w", err)
	}
	prot, sig, _ := strings.Cut(compact, "..")
	return withSignature(card, Signature{Protected: prot, Signature: sig})
}

// withSignature appends s to card's signatures, keeping the other members
// in the order they were written.
func withSignature(card []byte, s Signature) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(card, &m); err != nil {
		return nil, fmt.Errorf("cardsig: the card is not a JSON object: %w", err)
	}
	var sigs []Signature
	if raw, ok := m["signatures"]; ok {
		if err := json.Unmarshal(raw, &sigs); err != nil {
			return nil, fmt.Errorf("cardsig: signatures: %w", err)
		}
	}
	sigs = append(sigs, s)
	enc, err := json.Marshal(sigs)
	if err != nil {
		return nil, err
	}
	trimmed := bytes.TrimSpace(card)
	if _, ok := m["signatures"]; ok || len(trimmed) < 2 {
		m["signatures"] = enc
		return json.Marshal(m)
	}
	out := make([]byte, 0, len(trimmed)+len(enc)+16)
	out = append(out, bytes.TrimRight(trimmed[:len(trimmed)-1], " \t\r\n")...)
	if len(m) > 0 {
		out = append(out, ',')
	}
	out = append(out, `"signatures":`...)
	out = append(out, enc...)
	return append(out, '}'), nil
}

// Algorithms Verify accepts (asymmetric only: a card's reader holds no
// shared secret).
var algorithms = []jose.SignatureAlgorithm{jose.ES256, jose.ES384, jose.ES512, jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512, jose.EdDSA}

// protectedHeader is what Verify reads of a protected header itself.
type protectedHeader struct {
	Alg string   `json:"alg"`
	Kid string   `json:"kid"`
	X5C []string `json:"x5c"`
	JWK any      `json:"jwk"`
	JKU string   `json:"jku"`
	X5U string   `json:"x5u"`
}

// Verify checks the signatures of card (the JSON as received). Without a
// pin, a card is Signed when one signature verifies with the key its
// protected header carries (x5c's first certificate, or jwk), Invalid when
// one is malformed or fails, else Unsigned. With a pin, only signatures
// whose x5c certificate passes pin are checked; a card with signatures but
// none by the pinned certificate is Invalid (a bad signature from a paired
// device is refused like a certificate that does not match its pin).
func Verify(card []byte, pin Pin) Result {
	var doc struct {
		Signatures []Signature `json:"signatures"`
	}
	if err := json.Unmarshal(card, &doc); err != nil {
		return Result{Status: Invalid, Detail: "signatures do not parse: " + err.Error()}
	}
	if len(doc.Signatures) == 0 {
		return Result{Status: Unsigned}
	}
	if len(doc.Signatures) > MaxSignatures {
		return Result{Status: Invalid, Detail: fmt.Sprintf("%d signatures (at most %d)", len(doc.Signatures), MaxSignatures)}
	}
	payload, err := Canonical(card)
	if err != nil {
		return Result{Status: Invalid, Detail: err.Error()}
	}
	var skipped []string
	for i, s := range doc.Signatures {
		raw, err := base64.RawURLEncoding.DecodeString(s.Protected)
		var h protectedHeader
		if err == nil {
			err = json.Unmarshal(raw, &h)
		}
		if err != nil {
			return Result{Status: Invalid, Detail: fmt.Sprintf("signature %d: the protected header does not parse", i)}
		}
		var key any
		var cert *x509.Certificate
		if len(h.X5C) > 0 {
			der, err := base64.StdEncoding.DecodeString(h.X5C[0])
			if err == nil {
				cert, err = x509.ParseCertificate(der)
			}
			if err != nil {
				return Result{Status: Invalid, Detail: fmt.Sprintf("signature %d: its x5c certificate does not parse", i)}
			}
			key = cert.PublicKey
		}
		if pin != nil {
			if cert == nil {
				skipped = append(skipped, fmt.Sprintf("signature %d carries no certificate", i))
				continue
			}
			if err := pin(cert); err != nil {
				skipped = append(skipped, fmt.Sprintf("signature %d: %v", i, err))
				continue
			}
		}
		jws, err := jose.ParseDetached(s.Protected+".."+s.Signature, payload, algorithms)
		if err != nil {
			if strings.HasPrefix(h.Alg, "HS") && pin == nil {
				skipped = append(skipped, fmt.Sprintf("signature %d uses %s, a shared secret meshtray does not hold", i, h.Alg))
				continue
			}
			return Result{Status: Invalid, Detail: fmt.Sprintf("signature %d: %v", i, err)}
		}
		if key == nil && len(jws.Signatures) == 1 && jws.Signatures[0].Protected.JSONWebKey != nil {
			key = jws.Signatures[0].Protected.JSONWebKey.Key
		}
		if key == nil {
			skipped = append(skipped, fmt.Sprintf("signature %d names its key by URL or id only (not fetched)", i))
			continue
		}
		if err := jws.DetachedVerify(payload, key); err != nil {
			return Result{Status: Invalid, KeyID: h.Kid, Detail: fmt.Sprintf("signature %d (kid %q) does not verify over the card", i, h.Kid)}
		}
		return Result{Status: Signed, KeyID: h.Kid}
	}
	if pin != nil {
		return Result{Status: Invalid, Detail: "no signature by the paired certificate: " + strings.Join(skipped, "; ")}
	}
	return Result{Status: Unsigned, Detail: strings.Join(skipped, "; ")}
}

// PinSHA256 is a Pin accepting exactly the certificate whose DER has this
// SHA-256 (a paired device's fingerprint; pairing.DeviceID is the same
// hash).
func PinSHA256(sum [32]byte) Pin {
	return func(cert *x509.Certificate) error {
		if sha256.Sum256(cert.Raw) != sum {
			return errors.New("its certificate is not the paired one")
		}
		return nil
	}
}

// SignAs is Sign with a device identity: its P-256 key, its certificate as
// x5c, its device ID as kid.
func SignAs(card []byte, id *pairing.Identity) ([]byte, error) {
	key, ok := id.Cert.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || id.Cert.Leaf == nil {
		return nil, errors.New("cardsig: the identity has no ECDSA key or no certificate")
	}
	return Sign(card, key, id.Cert.Leaf, id.ID.String())
}

// PinDevice is the Pin of a paired device: its certificate's SHA-256 is
// its device ID.
func PinDevice(id pairing.DeviceID) Pin { return PinSHA256([32]byte(id)) }

// Signer is SignAs for a card served again and again: the last card and
// its signed form are kept, so the same card is signed once (a served card
// is public; nobody makes the device sign in a loop) and served byte for
// byte the same. Safe for concurrent use.
func Signer(id *pairing.Identity) func(card []byte) ([]byte, error) {
	var mu sync.Mutex
	var lastIn, lastOut []byte
	return func(card []byte) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		if lastOut != nil && bytes.Equal(card, lastIn) {
			return lastOut, nil
		}
		out, err := SignAs(card, id)
		if err != nil {
			return nil, err
		}
		lastIn, lastOut = append([]byte(nil), card...), out
		return out, nil
	}
}
