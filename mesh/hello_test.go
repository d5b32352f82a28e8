package mesh

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"meshtray/pairing"
)

func helloOf(id testIdentity, name string) Hello {
	return Hello{ID: id.id, Name: name, OS: "Debian GNU/Linux 12 (x86_64)", FP: id.fp, V: ProtocolVersion}
}

func listenLoopback(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func TestHelloHandler(t *testing.T) {
	t.Parallel()
	id := newTestIdentity(t)
	h := HelloHandler(func() Hello { return Hello{ID: id.id, Name: "n", FP: id.fp} })
	tests := []struct {
		method string
		code   int
	}{
		{http.MethodGet, 200},
		{http.MethodHead, 200},
		{http.MethodPost, 405},
		{http.MethodDelete, 405},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			t.Parallel()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, HelloPath, nil))
			if rec.Code != tt.code {
				t.Fatalf("%s: code %d, want %d", tt.method, rec.Code, tt.code)
			}
			if tt.method != http.MethodGet {
				return
			}
			var got Hello
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if got.V != ProtocolVersion || got.ID != id.id || got.FP != id.fp {
				t.Fatalf("hello %+v", got)
			}
			if cc := rec.Header().Get("Cache-Control"); cc != "no-store" {
				t.Fatalf("Cache-Control %q", cc)
			}
		})
	}
}

func TestHelloValidate(t *testing.T) {
	t.Parallel()
	id := newTestIdentity(t)
	good := helloOf(id, "laptop")
	tests := []struct {
		name string
		mod  func(*Hello)
		ok   bool
	}{
		{"good", func(*Hello) {}, true},
		{"no id", func(h *Hello) { h.ID = "" }, false},
		{"id chars", func(h *Hello) { h.ID = "AB/../C" }, false},
		{"long id", func(h *Hello) { h.ID = strings.Repeat("A", 65) }, false},
		{"upper fp", func(h *Hello) { h.FP = strings.ToUpper(h.FP) }, false},
		{"short fp", func(h *Hello) { h.FP = h.FP[:63] }, false},
		{"colon fp", func(h *Hello) { h.FP = h.FP[:2] + ":" + h.FP[2:] }, false},
		{"non-hex fp", func(h *Hello) { h.FP = "g" + h.FP[1:] }, false},
		{"no name", func(h *Hello) { h.Name = "" }, false},
		{"long name", func(h *Hello) { h.Name = strings.Repeat("é", 33) }, false},
		{"control in name", func(h *Hello) { h.Name = "a\x1b[2Jb" }, false},
		{"bad utf8 os", func(h *Hello) { h.OS = "\xff" }, false},
		{"v0", func(h *Hello) { h.V = 0 }, false},
		{"unicode name", func(h *Hello) { h.Name = "Åsa's Mac" }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := good
			tt.mod(&h)
			err := h.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate(%+v) = %v, want ok=%v", h, err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrNotMeshtray) {
				t.Fatalf("error %v does not wrap ErrNotMeshtray", err)
			}
		})
	}
}

// TestProbe runs the prober against real HTTPS servers on loopback.
func TestProbe(t *testing.T) {
	t.Parallel()
	id := newTestIdentity(t)
	other := newTestIdentity(t)

	serve := func(h http.Handler, cert testIdentity) string {
		ln := listenLoopback(t)
		srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Second}
		tln := tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert.cert}})
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(tln) }()
		t.Cleanup(func() { srv.Close(); <-done })
		return ln.Addr().String()
	}
	honest := serve(HelloHandler(func() Hello { return helloOf(id, "honest") }), id)
	// Claims id's fp but presents other's certificate.
	liar := serve(HelloHandler(func() Hello { return helloOf(id, "liar") }), other)
	// Presents other's cert and claims it, but with id's device ID.
	wrongID := serve(HelloHandler(func() Hello { h := helloOf(other, "x"); h.ID = id.id; return h }), other)
	huge := serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"id":"` + strings.Repeat("A", 4000) + `"}`))
	}), id)
	notFound := serve(http.NotFoundHandler(), id)
	garbage := serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("<html>")) }), id)
	closed := listenLoopback(t)
	closedAddr := closed.Addr().String()
	closed.Close()

	o := Options{DeviceID: testDeviceID, Timing: Timing{ProbeTimeout: 2 * time.Second}}
	o.Timing = o.Timing.withDefaults()
	p := newProber(&o)
	tests := []struct {
		name   string
		addr   string
		wantFP string
		err    error // nil: success
	}{
		{"honest", honest, "", nil},
		{"honest pinned", honest, id.fp, nil},
		{"honest wrong pin", honest, other.fp, ErrFingerprint},
		{"liar", liar, "", ErrFingerprint},
		{"id not of fp", wrongID, "", ErrDeviceID},
		{"oversized", huge, "", ErrNotMeshtray},
		{"404", notFound, "", ErrNotMeshtray},
		{"not json", garbage, "", ErrNotMeshtray},
		{"refused", closedAddr, "", nil},
	}
	// With pairing's client configs, as app wires them.
	pinned := Options{DeviceID: testDeviceID, Timing: o.Timing, TLSConfig: func(fp string) *tls.Config {
		if fp == "" {
			return pairing.ObserveTLSConfig(new(string))
		}
		return pairing.PinnedTLSConfig(fp)
	}}
	pp := newProber(&pinned)
	t.Run("pairing pin", func(t *testing.T) {
		t.Parallel()
		if h, err := pp.probe(context.Background(), honest, id.fp); err != nil || h.ID != id.id {
			t.Fatalf("pinned probe = %+v, %v", h, err)
		}
		if _, err := pp.probe(context.Background(), honest, other.fp); !errors.Is(err, pairing.ErrPinMismatch) || !identityChanged(err) {
			t.Fatalf("wrong pin: %v, want pairing.ErrPinMismatch", err)
		}
		if _, err := pp.probe(context.Background(), liar, ""); !errors.Is(err, ErrFingerprint) {
			t.Fatalf("observed liar: %v, want ErrFingerprint", err)
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, err := p.probe(context.Background(), tt.addr, tt.wantFP)
			switch {
			case tt.name == "refused":
				var op *net.OpError
				if !errors.As(err, &op) {
					t.Fatalf("err = %v, want a dial error", err)
				}
			case tt.err == nil:
				if err != nil || h.ID != id.id || h.FP != id.fp {
					t.Fatalf("probe = %+v, %v", h, err)
				}
			default:
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
			}
		})
	}
}

// TestProbeBoundsConcurrency checks at most maxConcurrentProbes hello
// requests are in flight at once against a slow peer.
func TestProbeBoundsConcurrency(t *testing.T) {
	t.Parallel()
	id := newTestIdentity(t)
	var inflight, peak int
	mu := make(chan struct{}, 1)
	mu <- struct{}{}
	release := make(chan struct{})
	ln := listenLoopback(t)
	h := HelloHandler(func() Hello { return helloOf(id, "slow") })
	serveTLS(t, ln, id, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-mu
		inflight++
		peak = max(peak, inflight)
		mu <- struct{}{}
		<-release
		<-mu
		inflight--
		mu <- struct{}{}
		h.ServeHTTP(w, r)
	}))
	o := Options{Timing: Timing{ProbeTimeout: 10 * time.Second}}
	o.Timing = o.Timing.withDefaults()
	p := newProber(&o)
	const n = 3 * maxConcurrentProbes
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := p.probe(context.Background(), ln.Addr().String(), "")
			errs <- err
		}()
	}
	waitFor(t, 5*time.Second, "probes to reach the bound", func() bool {
		<-mu
		defer func() { mu <- struct{}{} }()
		return inflight == maxConcurrentProbes
	})
	close(release)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if peak != maxConcurrentProbes {
		t.Fatalf("peak in flight %d, want %d", peak, maxConcurrentProbes)
	}
}

func TestNegCache(t *testing.T) {
	t.Parallel()
	c := newNegCache(80*time.Second, 4)
	now := time.Unix(1000, 0)
	// Backoff: 10 s, 20 s, 40 s, 80 s, 80 s.
	for i, want := range []time.Duration{10, 20, 40, 80, 80} {
		c.add("p", now, false)
		if !c.has("p", now.Add(want*time.Second-time.Millisecond)) || c.has("p", now.Add(want*time.Second)) {
			t.Fatalf("miss %d: not remembered for exactly %ds", i+1, want)
		}
	}
	c.del("p")
	if c.has("p", now) {
		t.Fatal("del did not forget")
	}
	// Timeouts back off from timeoutRetry: 2 s, 4 s.
	for i, want := range []time.Duration{2, 4} {
		c.add("slow", now, true)
		if !c.has("slow", now.Add(want*time.Second-time.Millisecond)) || c.has("slow", now.Add(want*time.Second)) {
			t.Fatalf("timeout %d: not remembered for exactly %ds", i+1, want)
		}
	}
	for i := range 10 {
		c.add(string(rune('a'+i)), now.Add(time.Duration(i)*time.Second), false)
	}
	if c.len() != 4 {
		t.Fatalf("len %d, want the bound 4", c.len())
	}
	if c.has("a", now) || !c.has("j", now.Add(9*time.Second)) {
		t.Fatal("the entries expiring first should have been evicted, the newest kept")
	}
}

func TestParsePeerURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, hostport string
		ok           bool
	}{
		{"https://192.0.2.1", "192.0.2.1:47654", true},
		{"https://192.0.2.1:8443/", "192.0.2.1:8443", true},
		{"https://[2001:db8::1]:9", "[2001:db8::1]:9", true},
		{"https://127.0.0.1:5000", "127.0.0.1:5000", true},
		{"https://localhost", "localhost:47654", true},
		// Plain http proves no identity, not even on loopback.
		{"http://127.0.0.1:5000", "", false},
		{"http://localhost", "", false},
		{"http://[::1]:5000", "", false},
		{"http://192.0.2.1", "", false},
		{"https://u:p@192.0.2.1", "", false},
		{"https://192.0.2.1/?token=x", "", false},
		{"https://192.0.2.1/a2a", "", false},
		{"ftp://192.0.2.1", "", false},
		{"https://192.0.2.1:0", "", false},
		{"https://", "", false},
	}
	for _, tt := range tests {
		hp, err := parsePeerURL(tt.in, DefaultPort)
		if (err == nil) != tt.ok || hp != tt.hostport {
			t.Errorf("parsePeerURL(%q) = %q, %v", tt.in, hp, err)
		}
		if err != nil && !errors.Is(err, ErrBadURL) {
			t.Errorf("parsePeerURL(%q): %v does not wrap ErrBadURL", tt.in, err)
		}
	}
}
