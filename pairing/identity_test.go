package pairing

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"meshtray/keychain"
)

func newIdentity(t testing.TB, name string) *Identity {
	t.Helper()
	id, err := LoadOrCreateIdentity(keychain.NewMemory(), name)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestIdentityCreateAndReload(t *testing.T) {
	t.Parallel()
	ks := &flakyStore{Store: keychain.NewMemory()}
	id, err := LoadOrCreateIdentity(ks, "laptop")
	if err != nil {
		t.Fatal(err)
	}
	leaf := id.Cert.Leaf
	sum := sha256.Sum256(leaf.Raw)
	if id.ID != DeviceID(sum) || id.Fingerprint != hex.EncodeToString(sum[:]) || id.Fingerprint != Fingerprint(leaf.Raw) {
		t.Fatal("ID and Fingerprint are not the certificate's SHA-256")
	}
	pub, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Fatalf("key %T, want ECDSA P-256", leaf.PublicKey)
	}
	if leaf.Subject.CommonName != CertName || len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != CertName || len(leaf.IPAddresses) != 0 {
		t.Errorf("names: CN %q, DNS %v, IPs %v", leaf.Subject.CommonName, leaf.DNSNames, leaf.IPAddresses)
	}
	if ou := leaf.Subject.OrganizationalUnit; len(ou) != 1 || ou[0] != "laptop" {
		t.Errorf("OU = %v", ou)
	}
	if left := time.Until(leaf.NotAfter); left < 19*365*24*time.Hour {
		t.Errorf("certificate valid only %v more", left)
	}
	if err := leaf.CheckSignature(leaf.SignatureAlgorithm, leaf.RawTBSCertificate, leaf.Signature); err != nil {
		t.Errorf("not self-signed: %v", err)
	}
	for _, k := range []string{"identity/key", "identity/cert"} {
		v, err := ks.Get(k)
		if err != nil {
			t.Fatal(err)
		}
		if len(v) > keychain.MaxItemSize/2 {
			t.Errorf("%s is %d bytes", k, len(v))
		}
	}
	writes := ks.sets.Load()
	for _, name := range []string{"laptop", "renamed"} {
		again, err := LoadOrCreateIdentity(ks, name)
		if err != nil {
			t.Fatal(err)
		}
		if again.ID != id.ID || !again.Cert.PrivateKey.(*ecdsa.PrivateKey).Equal(id.Cert.PrivateKey) {
			t.Fatalf("reload with name %q gave another identity", name)
		}
	}
	if ks.sets.Load() != writes {
		t.Error("reloading wrote to the keychain")
	}
}

func TestIdentityNeverSilentlyReplaced(t *testing.T) {
	t.Parallel()
	other := keychain.NewMemory()
	if _, err := LoadOrCreateIdentity(other, "other"); err != nil {
		t.Fatal(err)
	}
	otherCert, _ := other.Get("identity/cert")
	for _, tc := range []struct {
		name  string
		setup func(ks keychain.Store)
		want  error
	}{
		{"key without cert", func(ks keychain.Store) { ks.Delete("identity/cert") }, ErrIdentityCorrupt},
		{"cert without key", func(ks keychain.Store) { ks.Delete("identity/key") }, ErrIdentityCorrupt},
		{"garbage cert", func(ks keychain.Store) { ks.Set("identity/cert", []byte("not pem")) }, ErrIdentityCorrupt},
		{"key of another identity", func(ks keychain.Store) { ks.Set("identity/cert", otherCert) }, ErrIdentityCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ks := keychain.NewMemory()
			if _, err := LoadOrCreateIdentity(ks, "x"); err != nil {
				t.Fatal(err)
			}
			tc.setup(ks)
			before := map[string][]byte{}
			for _, k := range []string{"identity/key", "identity/cert"} {
				before[k], _ = ks.Get(k)
			}
			_, err := LoadOrCreateIdentity(ks, "x")
			if !errors.Is(err, tc.want) {
				t.Fatalf("LoadOrCreateIdentity = %v, want %v", err, tc.want)
			}
			for k, v := range before {
				now, _ := ks.Get(k)
				if string(now) != string(v) {
					t.Errorf("%s was overwritten", k)
				}
			}
		})
	}
	// A keychain that cannot be read creates nothing.
	broken := &failingGetStore{Store: keychain.NewMemory()}
	if _, err := LoadOrCreateIdentity(broken, "x"); !errors.Is(err, keychain.ErrUnavailable) {
		t.Fatalf("with an unavailable keychain: %v", err)
	}
	if keys, _ := broken.Store.Keys(""); len(keys) != 0 {
		t.Fatalf("wrote %v to an unreadable keychain", keys)
	}
}

type failingGetStore struct{ keychain.Store }

func (failingGetStore) Get(string) ([]byte, error) {
	return nil, errors.Join(keychain.ErrUnavailable, errors.New("collection locked"))
}

// tlsServer is a real HTTPS server on loopback with identity id.
func tlsServer(t *testing.T, id *Identity, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = id.ServerTLSConfig()
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the point
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func pinnedClient(fp string) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: PinnedTLSConfig(fp)}, Timeout: 10 * time.Second}
}

func TestPinnedTLS(t *testing.T) {
	t.Parallel()
	a, b := newIdentity(t, "a"), newIdentity(t, "b")
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	srvA, srvB := tlsServer(t, a, hello), tlsServer(t, b, hello)

	get := func(c *http.Client, url string) error {
		resp, err := c.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if string(body) != "hello" {
			t.Fatalf("body %q", body)
		}
		return nil
	}
	clientA := pinnedClient(strings.ToUpper(a.Fingerprint))
	defer clientA.CloseIdleConnections()
	if err := get(clientA, srvA.URL); err != nil {
		t.Fatalf("pinned to A, talking to A: %v", err)
	}
	err := get(clientA, srvB.URL)
	if !errors.Is(err, ErrPinMismatch) {
		t.Fatalf("pinned to A, talking to B: %v, want ErrPinMismatch", err)
	}
	var pe *PinError
	if !errors.As(err, &pe) || pe.Expected != a.Fingerprint || pe.Got != b.Fingerprint {
		t.Fatalf("PinError = %+v", pe)
	}
	for _, want := range []string{a.ID.Short(), b.ID.Short(), a.Fingerprint[:8], b.Fingerprint[:8], "pair again"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if strings.Contains(err.Error(), a.Fingerprint) {
		t.Errorf("error carries the whole fingerprint, want short forms: %q", err)
	}

	bad := pinnedClient("not-a-fingerprint")
	defer bad.CloseIdleConnections()
	if err := get(bad, srvA.URL); !errors.Is(err, ErrPinMismatch) {
		t.Errorf("invalid pin: %v", err)
	}

	var seen string
	obs := &http.Client{Transport: &http.Transport{TLSClientConfig: ObserveTLSConfig(&seen)}}
	defer obs.CloseIdleConnections()
	if err := get(obs, srvB.URL); err != nil || seen != b.Fingerprint {
		t.Errorf("observe: fp %q, err %v; want %s", seen, err, b.Fingerprint)
	}
}

// A resumed TLS session is still checked against the pin (VerifyConnection
// runs on resumption; VerifyPeerCertificate would not).
func TestPinSurvivesResumption(t *testing.T) {
	t.Parallel()
	a := newIdentity(t, "a")
	srv := tlsServer(t, a, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	calls := 0
	cfg := PinnedTLSConfig(a.Fingerprint)
	cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	inner := cfg.VerifyConnection
	resumed := false
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		calls++
		resumed = resumed || cs.DidResume
		return inner(cs)
	}
	for range 3 {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if calls != 3 {
		t.Errorf("pin checked %d times for 3 handshakes", calls)
	}
	t.Logf("resumed: %v", resumed)
}
