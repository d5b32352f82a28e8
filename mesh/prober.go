package mesh

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"tailscale.com/net/tsaddr"

	"meshtray/egress"
	"meshtray/pairing"
)

// prober fetches GET /mesh/hello from an address and checks it: the body is a
// valid Hello, its fp is the fingerprint of the certificate actually
// presented (and the expected one when known), its id is the device ID of
// that fp. Concurrency is bounded by sem; every request has a timeout.
type prober struct {
	tlsConfig func(fp string) *tls.Config
	dial      func(ctx context.Context, network, addr string) (net.Conn, error)
	deviceID  func(fp string) (string, error)
	timeout   time.Duration
	sem       chan struct{}
}

// maxConcurrentProbes bounds the hello probes in flight at once.
const maxConcurrentProbes = 8

func newProber(o *Options) *prober {
	// egress: a manual peer added by a caller on the network is probed
	// only at addresses the policy allows (the request's ctx carries it).
	std := egress.Dialer(nil).DialContext
	dial := std
	if o.Dial != nil {
		tailnet := o.Dial
		dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if ap, err := netip.ParseAddrPort(addr); err == nil && tsaddr.IsTailscaleIP(ap.Addr()) {
				return tailnet(ctx, network, addr)
			}
			return std(ctx, network, addr)
		}
	}
	return &prober{
		tlsConfig: o.TLSConfig,
		dial:      dial,
		deviceID:  o.DeviceID,
		timeout:   o.Timing.ProbeTimeout,
		sem:       make(chan struct{}, maxConcurrentProbes),
	}
}

// observeTLS accepts any certificate: used when the caller gave no TLSConfig.
// It is safe for the hello only: the request carries nothing secret and the
// presented certificate's fingerprint is checked against the hello after the
// fact (see probe).
func observeTLS() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // checked by fingerprint after the handshake
}

// probe GETs https://hostport/mesh/hello. wantFP, when not empty, is the
// fingerprint the peer must present (TLSConfig(wantFP) pins it; the check is
// repeated here). There is no plain-http probe: only a certificate proves
// the hello's fp, and so its id. Errors wrap ErrNotMeshtray, ErrFingerprint,
// ErrDeviceID, or the transport error.
func (p *prober) probe(ctx context.Context, hostport, wantFP string) (Hello, error) {
	select {
	case p.sem <- struct{}{}:
		defer func() { <-p.sem }()
	case <-ctx.Done():
		return Hello{}, ctx.Err()
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()

	var cfg *tls.Config
	if p.tlsConfig != nil {
		cfg = p.tlsConfig(wantFP)
	}
	if cfg == nil {
		cfg = observeTLS()
	}
	tr := &http.Transport{
		Proxy:                  nil, // never through a proxy: peers are on our LAN or tailnet
		DialContext:            p.dial,
		TLSClientConfig:        cfg,
		DisableKeepAlives:      true,
		MaxResponseHeaderBytes: 8 << 10,
		ForceAttemptHTTP2:      false,
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+hostport+HelloPath, nil)
	if err != nil {
		return Hello{}, fmt.Errorf("%w: %v", ErrBadURL, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := (&http.Client{Transport: tr, CheckRedirect: noRedirect}).Do(req)
	if err != nil {
		return Hello{}, &UnreachableError{Addr: hostport, Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Hello{}, fmt.Errorf("%w: %s answered %d", ErrNotMeshtray, hostport, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxHelloBytes+1))
	if err != nil {
		return Hello{}, &UnreachableError{Addr: hostport, Err: err}
	}
	if len(body) > MaxHelloBytes {
		return Hello{}, fmt.Errorf("%w: %s: hello over %d bytes", ErrNotMeshtray, hostport, MaxHelloBytes)
	}
	var h Hello
	if err := json.Unmarshal(body, &h); err != nil {
		return Hello{}, fmt.Errorf("%w: %s: %v", ErrNotMeshtray, hostport, err)
	}
	if err := h.Validate(); err != nil {
		return Hello{}, fmt.Errorf("%s: %w", hostport, err)
	}
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		return Hello{}, fmt.Errorf("%w: %s presented no certificate", ErrFingerprint, hostport)
	}
	if got := pairing.Fingerprint(resp.TLS.PeerCertificates[0].Raw); got != h.FP {
		return Hello{}, fmt.Errorf("%w: %s says fp %.16s… but presented %.16s…", ErrFingerprint, hostport, h.FP, got)
	}
	if wantFP != "" && h.FP != wantFP {
		return Hello{}, fmt.Errorf("%w: %s: expected %.16s…, got %.16s…", ErrFingerprint, hostport, wantFP, h.FP)
	}
	if p.deviceID != nil {
		id, err := p.deviceID(h.FP)
		if err != nil || id != h.ID {
			return Hello{}, fmt.Errorf("%w: %s", ErrDeviceID, hostport)
		}
	}
	return h, nil
}

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// UnreachableError is a hello that got no answer: the connection failed
// (refused, reset, timed out, a TLS handshake that did not finish, a name
// that does not resolve) or closed mid-answer. Its text is "could not
// reach HOST:PORT: " and the cause in egress.Cause's words; it unwraps to
// the transport error (egress.ErrRefused, a timeout).
type UnreachableError struct {
	Addr string // host:port
	Err  error
}

func (e *UnreachableError) Error() string {
	return "could not reach " + e.Addr + ": " + egress.Cause(e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// negCache remembers peers that did not answer as meshtray, so tailnet
// peers without meshtray are not probed on every status change. The first
// miss is remembered for max/8, each further one twice as long, up to max
// (a peer that starts meshtray later is found soon; one that never does
// costs little). A timeout is not an answer (the first packets through a
// new tunnel can be slow): it starts from timeoutRetry instead. Bounded: at
// limit entries the one expiring first goes.
type negCache struct {
	mu    sync.Mutex
	max   time.Duration
	limit int
	m     map[string]negEntry
}

type negEntry struct {
	until  time.Time
	misses int
}

func newNegCache(max time.Duration, limit int) *negCache {
	return &negCache{max: max, limit: limit, m: make(map[string]negEntry)}
}

// has reports whether key is remembered as not meshtray at now.
func (c *negCache) has(key string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	return ok && now.Before(e.until)
}

// timeoutRetry is the first back-off after a probe timed out.
const timeoutRetry = 2 * time.Second

// add records a miss for key at now; timedOut marks an inconclusive one.
// It returns how long the miss is remembered.
func (c *negCache) add(key string, now time.Time, timedOut bool) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok && len(c.m) >= c.limit {
		var oldK string
		var oldT time.Time
		for k, v := range c.m {
			if oldK == "" || v.until.Before(oldT) {
				oldK, oldT = k, v.until
			}
		}
		delete(c.m, oldK)
	}
	ttl := c.max / 8
	if timedOut {
		ttl = min(ttl, timeoutRetry)
	}
	for i := 0; i < e.misses && ttl < c.max; i++ {
		ttl *= 2
	}
	e.misses++
	ttl = min(ttl, c.max)
	e.until = now.Add(ttl)
	c.m[key] = e
	return ttl
}

// del forgets key (the peer came back online, or called us).
func (c *negCache) del(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
}

func (c *negCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
