package mesh

import (
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"meshtray/keychain"
	"meshtray/pairing"
)

// TestMain re-executes the test binary with the Tailscale knobs that keep
// tsnet off the host's gateway and addresses (they are read at package
// init, so they must be in the environment before the process starts), then
// runs the tests under goleak.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "" &&
		(os.Getenv("TS_DISABLE_PORTMAPPER") != "1" || os.Getenv("TS_DEBUG_OMIT_LOCAL_ADDRS") != "1") {
		env := append(os.Environ(), "TS_DISABLE_PORTMAPPER=1", "TS_DEBUG_OMIT_LOCAL_ADDRS=1")
		exe, err := os.Executable()
		if err == nil {
			err = syscall.Exec(exe, os.Args, env)
		}
		fmt.Fprintln(os.Stderr, "mesh tests: re-exec with TS_DISABLE_PORTMAPPER=1 TS_DEBUG_OMIT_LOCAL_ADDRS=1:", err)
		os.Exit(2)
	}
	goleak.VerifyTestMain(m, leakIgnores()...)
}

// testIdentity is a device identity made by pairing (an ECDSA P-256
// self-signed certificate in an in-memory keychain), as the app makes it.
type testIdentity struct {
	cert tls.Certificate
	fp   string
	id   string
}

func newTestIdentity(t testing.TB) testIdentity {
	t.Helper()
	ident, err := pairing.LoadOrCreateIdentity(keychain.NewMemory(), "mesh test")
	if err != nil {
		t.Fatal(err)
	}
	return testIdentity{cert: ident.Cert, fp: ident.Fingerprint, id: ident.ID.String()}
}

// testDeviceID is what app passes as Options.DeviceID.
func testDeviceID(fp string) (string, error) {
	id, err := pairing.DeviceIDFromFingerprint(fp)
	return id.String(), err
}

// serveHello serves HelloHandler over TLS with id's certificate on ln until
// the test ends.
func serveHello(t testing.TB, ln net.Listener, id testIdentity, hello func() Hello) *http.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("GET "+HelloPath, HelloHandler(hello))
	return serveTLS(t, ln, id, mux)
}

// serveTLS serves h over TLS with id's certificate on ln until the test ends.
func serveTLS(t testing.TB, ln net.Listener, id testIdentity, h http.Handler) *http.Server {
	t.Helper()
	// Handshakes cut short by killed peers are expected here: not logged.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	tln := tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{id.cert}, MinVersion: tls.VersionTLS12})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(tln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return srv
}

// waitFor polls cond until it holds or d passes (no sleeps as
// synchronisation: the poll has a deadline and a reason).
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testLogger logs at debug level through t.Log (shown with -v or on
// failure). The code under test must stop logging before the test ends.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}
