package pairing

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"time"

	"meshtray/keychain"
)

// Keychain keys of the identity (ARCHITECTURE.md, "Key layout").
const (
	identityKeyItem  = "identity/key"  // PEM "PRIVATE KEY" (PKCS #8, ECDSA P-256)
	identityCertItem = "identity/cert" // PEM "CERTIFICATE" (self-signed)
)

// certValidity is how long the self-signed certificate is valid. The device
// ID is the certificate's hash, so renewing it means pairing again: make it
// outlive the device.
const certValidity = 20 * 365 * 24 * time.Hour

// CertName is the certificate's subject CN and only DNS SAN.
const CertName = "meshtray"

// Identity is this device's long-lived key pair and self-signed
// certificate. ID and Fingerprint are both the certificate's SHA-256.
type Identity struct {
	ID          DeviceID
	Cert        tls.Certificate // Leaf set; PrivateKey is an *ecdsa.PrivateKey
	Fingerprint string          // lowercase hex SHA-256 of the certificate DER: the `fp` everywhere
}

// LogValue implements slog.LogValuer; the private key never appears.
func (id *Identity) LogValue() slog.Value {
	return slog.GroupValue(slog.String("id", id.ID.Short()), slog.String("fp", shortFP(id.Fingerprint)))
}

// LoadOrCreateIdentity returns the identity stored in ks, creating and
// storing one only when neither item exists. The new identity is an ECDSA
// P-256 key (every browser TLS stack accepts it; browsers do not offer
// Ed25519 certificate signatures, so a phone could not connect) and a
// self-signed X.509 certificate: CN and DNS SAN CertName, no IP SANs (the
// addresses change, the certificate must not), valid 20 years; name goes into
// the subject's organizational unit so a browser's certificate viewer shows
// whose device it is.
//
// It never replaces an identity it cannot read: a keychain error, an
// undecodable item, a key that does not match the certificate, or one item
// without the other is an error (ErrIdentityCorrupt for the item problems),
// because a new identity unpairs every peer. A caller that wants a fresh
// identity deletes both items first.
func LoadOrCreateIdentity(ks keychain.Store, name string) (*Identity, error) {
	keyPEM, kerr := ks.Get(identityKeyItem)
	certPEM, cerr := ks.Get(identityCertItem)
	for _, err := range []error{kerr, cerr} {
		if err != nil && !errors.Is(err, keychain.ErrNotFound) {
			return nil, fmt.Errorf("pairing: read identity: %w", err)
		}
	}
	switch {
	case kerr == nil && cerr == nil:
		return parseIdentity(keyPEM, certPEM)
	case kerr == nil || cerr == nil:
		missing := identityCertItem
		if kerr != nil {
			missing = identityKeyItem
		}
		return nil, fmt.Errorf("%w: keychain item %s is missing; delete %s and %s to create a new identity (every peer must then pair again)",
			ErrIdentityCorrupt, missing, identityKeyItem, identityCertItem)
	}
	keyPEM, certPEM, err := newIdentityPEM(name)
	if err != nil {
		return nil, err
	}
	// Certificate last: a crash between the two writes leaves a key alone,
	// which the next start reports instead of silently replacing.
	if err := ks.Set(identityKeyItem, keyPEM); err != nil {
		return nil, fmt.Errorf("pairing: save identity key: %w", err)
	}
	if err := ks.Set(identityCertItem, certPEM); err != nil {
		return nil, fmt.Errorf("pairing: save identity certificate: %w", err)
	}
	return parseIdentity(keyPEM, certPEM)
}

func newIdentityPEM(name string) (keyPEM, certPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now().UTC()
	subject := pkix.Name{CommonName: CertName, Organization: []string{"meshtray"}}
	if n := cleanText(name, MaxNameLen); n != "" {
		subject.OrganizationalUnit = []string{n}
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               subject,
		NotBefore:             now.Add(-time.Hour), // tolerate a peer's clock running slow
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		DNSNames:              []string{CertName},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("pairing: create certificate: %w", err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return keyPEM, certPEM, nil
}

func parseIdentity(keyPEM, certPEM []byte) (*Identity, error) {
	kb, _ := pem.Decode(keyPEM)
	cb, _ := pem.Decode(certPEM)
	if kb == nil || kb.Type != "PRIVATE KEY" || cb == nil || cb.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%w: not PEM", ErrIdentityCorrupt)
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: key: %v", ErrIdentityCorrupt, err)
	}
	ek, ok := key.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: key is %T, want ECDSA", ErrIdentityCorrupt, key)
	}
	leaf, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: certificate: %v", ErrIdentityCorrupt, err)
	}
	pub, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&ek.PublicKey) {
		return nil, fmt.Errorf("%w: the key does not match the certificate", ErrIdentityCorrupt)
	}
	id := NewDeviceID(cb.Bytes)
	return &Identity{
		ID:          id,
		Cert:        tls.Certificate{Certificate: [][]byte{cb.Bytes}, PrivateKey: ek, Leaf: leaf},
		Fingerprint: id.Fingerprint(),
	}, nil
}

// Fingerprint returns the fingerprint of a certificate: lowercase hex of
// the SHA-256 of its DER.
func Fingerprint(certDER []byte) string {
	sum := sha256.Sum256(certDER)
	return hex.EncodeToString(sum[:])
}

// ServerTLSConfig is the config for this device's HTTPS listeners: the
// identity certificate, TLS 1.2 or later (phone browsers need 1.2 at least;
// Go's defaults pick the cipher suites).
func (id *Identity) ServerTLSConfig() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{id.Cert},
		MinVersion:   tls.VersionTLS12,
	}
}

// PinError is the error of a pinned handshake that met another certificate.
// It wraps ErrPinMismatch; its message names the expected and presented
// device IDs and fingerprints in short form.
type PinError struct {
	Expected string // fingerprint we pinned
	Got      string // fingerprint the peer presented ("" when it sent none)
}

func (e *PinError) Error() string {
	exp, got := e.Expected, e.Got
	if id, err := DeviceIDFromFingerprint(exp); err == nil {
		exp = fmt.Sprintf("device %s (fp %s…)", id.Short(), shortFP(e.Expected))
	}
	if id, err := DeviceIDFromFingerprint(got); err == nil {
		got = fmt.Sprintf("device %s (fp %s…)", id.Short(), shortFP(e.Got))
	} else if got == "" {
		got = "no certificate"
	}
	return fmt.Sprintf("pairing: certificate pin mismatch: expected %s, got %s; if that device re-created its identity it must pair again", exp, got)
}

func (e *PinError) Unwrap() error { return ErrPinMismatch }

// PinnedTLSConfig returns a client config that accepts exactly the
// certificate whose fingerprint is fp, whatever its names, issuer or dates
// (a self-signed identity has no CA to check; the pin is the trust, like
// Syncthing and KDE Connect). The check runs in VerifyConnection, which Go
// calls on every handshake, resumed ones included; the SHA-256 of the leaf
// is compared with crypto/subtle. A mismatch fails the handshake with a
// *PinError (errors.Is ErrPinMismatch). An fp that does not parse gives a
// config whose every handshake fails the same way.
func PinnedTLSConfig(fp string) *tls.Config {
	want, perr := ParseFingerprint(fp)
	var wantSum []byte
	if perr == nil {
		wantSum, _ = hex.DecodeString(want)
	}
	return &tls.Config{
		InsecureSkipVerify: true, // replaced by the pin check below
		MinVersion:         tls.VersionTLS12,
		ServerName:         CertName,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return &PinError{Expected: want}
			}
			got := sha256.Sum256(cs.PeerCertificates[0].Raw)
			if wantSum == nil || subtle.ConstantTimeCompare(got[:], wantSum) != 1 {
				return &PinError{Expected: want, Got: hex.EncodeToString(got[:])}
			}
			return nil
		},
	}
}

// ObserveTLSConfig returns a client config that accepts any certificate and
// writes its fingerprint to *got during the handshake. Use it only for a
// first look at an unpaired peer (GET /mesh/hello), whose answer must then
// carry the same fp; never to send a token. Read *got only after the
// request using the config returned.
func ObserveTLSConfig(got *string) *tls.Config {
	return &tls.Config{
		InsecureSkipVerify: true, // observing, not trusting
		MinVersion:         tls.VersionTLS12,
		ServerName:         CertName,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("pairing: peer sent no certificate")
			}
			*got = Fingerprint(cs.PeerCertificates[0].Raw)
			return nil
		},
	}
}
