package files

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"meshtray/keychain"
	"meshtray/pairing"
)

// testIdentity is a real device identity (ECDSA P-256, self-signed), the
// certificate the node's HTTPS listener serves.
func testIdentity(t testing.TB) *pairing.Identity {
	t.Helper()
	id, err := pairing.LoadOrCreateIdentity(keychain.NewMemory(), "files-test")
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// pinnedServer serves h over HTTPS with the identity's certificate; the
// returned client pins its fingerprint (pairing.PinnedTLSConfig), as a paired
// peer does.
func pinnedServer(t testing.TB, h http.Handler) (*httptest.Server, *http.Client) {
	t.Helper()
	id := testIdentity(t)
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = id.ServerTLSConfig()
	srv.Config.ErrorLog = nil
	srv.StartTLS()
	tr := NewTransport(pairing.PinnedTLSConfig(id.Fingerprint))
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
	})
	return srv, &http.Client{Transport: tr}
}

type fixture struct {
	r      *Receiver
	srv    *httptest.Server
	client *Client
	dir    string
}

func newFixture(t testing.TB, dir string, l Limits) *fixture {
	t.Helper()
	if dir == "" {
		dir = filepath.Join(t.TempDir(), "inbox")
	}
	r, err := NewReceiver(dir, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, hc := pinnedServer(t, r.Handler(nil))
	t.Cleanup(func() { r.Close() })
	return &fixture{r: r, srv: srv, dir: r.Dir(),
		client: &Client{HTTP: hc, BaseURL: srv.URL}}
}

// send announces srcs as transfer id and uploads them, returning the result.
func (fx *fixture) send(t testing.TB, id string, srcs []Source) (Result, error) {
	t.Helper()
	tr, err := fx.r.Begin(id, "", ManifestOf(srcs))
	if err != nil {
		return Result{}, err
	}
	if _, err := fx.client.Upload(context.Background(), id, srcs); err != nil {
		return Result{}, err
	}
	return tr.Wait(context.Background())
}

// writeRandom writes n pseudo-random bytes (seeded) and returns the path.
func writeRandom(t testing.TB, p string, n int64, seed uint64) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.CopyN(f, rand.NewChaCha8(seedBytes(seed)), n); err != nil {
		t.Fatal(err)
	}
	return p
}

func seedBytes(s uint64) (b [32]byte) {
	for i := range 8 {
		b[i] = byte(s >> (8 * i))
	}
	return b
}

func fileSHA(t testing.TB, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// partials lists the temporary files left anywhere under dir.
func partials(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, partialSuffix) {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func shaOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
