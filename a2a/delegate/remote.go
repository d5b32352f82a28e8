package delegate

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"

	agent "meshtray/a2a"
	"meshtray/egress"
	"meshtray/pairing"
	"meshtray/textsafe"
)

// The outbound client: how meshtray calls other A2A agents (external agents,
// paired meshtray peers, the forward executor's upstream). It uses the
// official clients — a2a-go v0.3.15's for A2A 0.3 agents, a2a-go v2.3.1's
// for 1.0 ones (client10.go), answers read through the tolerant decoding
// layer (tolerant.go) — over an http.Client without a client-wide
// Timeout (a2a-go's default 3-minute one cuts long streams; research note
// a2a-0.3.md §8.10): only connecting, the TLS handshake and the wait for
// response headers are bounded.

// Bounds and timeouts of the outbound client.
const (
	// MaxCardBytes bounds a fetched Agent Card.
	MaxCardBytes = 256 << 10
	// MaxResponseBytes bounds one non-streaming JSON-RPC response.
	MaxResponseBytes = 16 << 20
	// HeaderTimeout bounds connecting, the TLS handshake and the wait for
	// response headers of one request (not the body: streams stay open).
	HeaderTimeout = 30 * time.Second
	// pollFirst, pollMax: tasks/get polling starts at pollFirst and grows by
	// half each round up to pollMax, with ±20% jitter.
	pollFirst = 250 * time.Millisecond
	pollMax   = 5 * time.Second
	// pollFailures is how many consecutive transient failures polling
	// tolerates before it reports the contact lost (~30 s at pollMax).
	pollFailures = 8
)

// Errors of the outbound client. Every error a call returns wraps one of
// them (and the cause), so callers test with errors.Is; app maps them to
// HTTP statuses. A certificate that does not match a paired peer's pin is
// pairing.ErrPinMismatch.
var (
	// ErrAgentUnknown: no agent by that id or name.
	ErrAgentUnknown = errors.New("a2a: no such agent")
	// ErrAgentDisabled: the agent exists but the owner disabled it.
	ErrAgentDisabled = errors.New("a2a: agent disabled")
	// ErrAgentUnreachable: the agent could not be reached (connection
	// refused or reset, DNS, timeouts, HTTP 5xx).
	ErrAgentUnreachable = errors.New("a2a: agent unreachable")
	// ErrAgentUnauthorized: the agent answered HTTP 401: the token or grant
	// we hold for it was revoked or is wrong.
	ErrAgentUnauthorized = errors.New("a2a: agent refused our token")
	// ErrAgentRefused: the agent answered with an HTTP error other than 401
	// or 5xx, or a JSON-RPC error (an *RPCError with its code and message;
	// the a2a-go sentinel, e.g. a2a.ErrTaskNotFound, is wrapped too).
	ErrAgentRefused = errors.New("a2a: agent refused the request")
	// ErrAgentMalformed: the agent's answer is not a valid A2A JSON-RPC
	// response of its version, even read tolerantly (bad JSON, unknown
	// kinds, oversize).
	ErrAgentMalformed = errors.New("a2a: malformed response from agent")
	// ErrCardInvalid: the Agent Card does not verify (see VerifyCard).
	ErrCardInvalid = errors.New("a2a: agent card does not verify")
	// ErrCardUnpublished: there is no Agent Card at the agent's address
	// (HTTP 404; a meshtray with A2A off).
	ErrCardUnpublished = errors.New("a2a: agent card not published")
)

// AgentError is the error of a call to another agent: which agent, what
// happened in words a person can act on, and the sentinel and cause.
type AgentError struct {
	Agent  string // the agent's display name
	Kind   error  // one of the ErrAgent*/ErrCard* sentinels, or pairing.ErrPinMismatch
	Detail string // what happened, for a person
	Err    error  // the cause, may be nil
}

func (e *AgentError) Error() string { return e.Detail }

// Unwrap exposes the sentinel and the cause to errors.Is/As.
func (e *AgentError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// statusError is an HTTP answer other than 200 to a JSON-RPC call.
type statusError struct {
	Code    int
	Status  string
	Snippet string // the start of the body, for the message
	Paused  bool   // a 401 whose challenge says the grant is paused (meshtray)
}

func (e *statusError) Error() string {
	if e.Snippet != "" {
		return fmt.Sprintf("HTTP %s: %s", e.Status, e.Snippet)
	}
	return "HTTP " + e.Status
}

// errHeaderTimeout is the cause of a request canceled by headerTimeout.
var errHeaderTimeout = errors.New("no response headers in time")

// headerTimeout bounds a round trip up to the response headers (dial, TLS,
// request, headers) without bounding the body, so a stream can stay open.
type headerTimeout struct {
	rt http.RoundTripper
	d  time.Duration
}

func (h headerTimeout) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(h.d, func() { cancel(errHeaderTimeout) })
	resp, err := h.rt.RoundTrip(req.WithContext(ctx))
	if !timer.Stop() {
		// The timer fired: whatever came back is abandoned.
		if err == nil {
			resp.Body.Close()
		}
		cancel(nil)
		return nil, fmt.Errorf("%w after %s", errHeaderTimeout, h.d)
	}
	if err != nil {
		cancel(nil)
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

func (h headerTimeout) CloseIdleConnections() {
	if c, ok := h.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel(nil)
	return err
}

// rpcTransport wraps the transport of JSON-RPC calls: it adds the bearer
// token of an external agent (a peer's transport adds the held grant
// itself), turns every HTTP status other than 200 into a *statusError
// (a2a-go would report an opaque "unexpected HTTP status"), and bounds
// non-streaming bodies to MaxResponseBytes.
type rpcTransport struct {
	rt    http.RoundTripper
	token string // "" for none
	v1    bool   // the agent is called over A2A 1.0 (the decoding layer's shapes)
}

func (t rpcTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.token != "" {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+t.token)
	}
	resp, err := t.rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			// A JSON-RPC error sent with an HTTP error status (a2a-js
			// answers 400 and 500 that way): the agent's own code and
			// message say more than the status.
			var re *RPCError
			if _, err := normalizeResponse(body, t.v1); errors.As(err, &re) {
				return nil, re
			}
		}
		snip := body[:min(len(body), 300)]
		se := &statusError{Code: resp.StatusCode, Status: resp.Status, Snippet: redact(cleanSnippet(snip), t.token)}
		if resp.StatusCode == http.StatusUnauthorized {
			se.Paused = strings.Contains(resp.Header.Get("WWW-Authenticate"), `error_description="grant paused"`)
		}
		return nil, se
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		resp.Body = newSSENormalizer(resp.Body, t.v1)
		return resp, nil
	}
	// One JSON document (whatever the Content-Type: a2a-go's own server
	// says text/plain), through the tolerant decoding layer.
	body, err := io.ReadAll(&limitedBody{ReadCloser: resp.Body, left: MaxResponseBytes})
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	doc, err := normalizeResponse(body, t.v1)
	if err != nil {
		return nil, err // an *RPCError, or a malformed answer
	}
	if strings.Contains(req.Header.Get("Accept"), "text/event-stream") {
		// A streaming call answered with plain JSON: one event.
		doc = sseEvent(doc)
		resp.Header.Set("Content-Type", "text/event-stream")
	} else {
		resp.Header.Set("Content-Type", "application/json")
	}
	resp.Body = io.NopCloser(bytes.NewReader(doc))
	resp.ContentLength = int64(len(doc))
	resp.Header.Del("Content-Length")
	return resp, nil
}

func (t rpcTransport) CloseIdleConnections() {
	if c, ok := t.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// maxErrorBody bounds what is read of an HTTP error answer.
const maxErrorBody = 64 << 10

// errTooLarge is the read error of a body over its bound.
var errTooLarge = errors.New("response too large")

type limitedBody struct {
	io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, fmt.Errorf("%w: over %d bytes", errTooLarge, MaxResponseBytes)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// tokenLike matches bearer credentials an error body might echo back:
// meshtray grant tokens and "Bearer <credential>" (RFC 6750 §2.1).
var tokenLike = regexp.MustCompile(`mt1_[A-Za-z0-9_-]+|(?i)bearer\s+\S+`)

// plainWord is a credential position holding an English word ("bearer
// tokens", "bearer token", "bearer scheme"): meshtray's own messages say
// that, and no issued credential is a short all-lower-case word.
var plainWord = regexp.MustCompile(`^(?i:bearer)\s+[a-z]{1,12}[.,;:)]?$`)

// redact removes token and anything token-like from s, so an agent that
// echoes our Authorization header never gets it into a log or a message.
func redact(s, token string) string {
	if token != "" {
		s = strings.ReplaceAll(s, token, "[redacted]")
	}
	return tokenLike.ReplaceAllStringFunc(s, func(m string) string {
		if plainWord.MatchString(m) {
			return m
		}
		return "[redacted]"
	})
}

// cleanSnippet makes the start of an error body printable on one line.
func cleanSnippet(b []byte) string {
	s := strings.Join(strings.Fields(strings.ToValidUTF8(string(b), "?")), " ")
	return agent.Truncate(s, 200)
}

// newExternalTransport is the transport for agents that are not paired
// meshtray peers: system roots for TLS, the environment's proxy for https
// only (agentProxy), bounded dial, TLS handshake and response-header
// waits.
func newExternalTransport() *http.Transport {
	return &http.Transport{
		Proxy: agentProxy(http.ProxyFromEnvironment),
		// egress: an agent added by a caller on the network must not
		// point us at this machine's own ports (checked per address dialled).
		DialContext:            egress.Dialer(&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  HeaderTimeout,
		IdleConnTimeout:        60 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
		ForceAttemptHTTP2:      true,
	}
}

// agentProxy is proxy (the environment's, HTTPS_PROXY and friends) for
// https requests only. A plain-http agent is one CheckAgentURL accepted
// because the network path is private (loopback, a tailnet peer): sent
// through a proxy, the token and the work would cross the network in
// clear, so it is always called directly.
func agentProxy(proxy func(*http.Request) (*url.URL, error)) func(*http.Request) (*url.URL, error) {
	return func(r *http.Request) (*url.URL, error) {
		if r.URL.Scheme != "https" {
			return nil, nil
		}
		return proxy(r)
	}
}

// noRedirects keeps the client from following redirects with a token: a
// 3xx comes back as a response (and rpcTransport turns it into an error).
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// CheckAgentURL validates the address of an agent meshtray will send work
// and a token to, and returns it parsed: https to any host, or plain http
// only to a loopback host (localhost, 127.0.0.0/8, ::1) or to an address
// isTailnet reports as a tailnet peer's (WireGuard encrypts that path; an
// address in 100.64.0.0/10 alone proves nothing, that range is also
// carrier-grade NAT, RFC 6598). isTailnet nil means loopback only. Never
// across a LAN in clear. No user info, query or fragment (parseAgentURL).
func CheckAgentURL(raw string, isTailnet func(netip.Addr) bool) (*url.URL, error) {
	u, err := parseAgentURL(raw)
	if err != nil {
		return nil, err
	}
	if u.Scheme == "http" && !clearTextOK(u.Hostname(), isTailnet) {
		return nil, fmt.Errorf("plain http to %s would send the token and the work across the network in clear: "+
			"use https, or a loopback address (or the tailnet address of a peer this device sees on its tailnet)", u.Hostname())
	}
	return u, nil
}

// parseAgentURL checks the form of an agent URL: absolute http or https,
// at most 2048 bytes, no user info, query or fragment.
func parseAgentURL(raw string) (*url.URL, error) {
	if len(raw) > 2048 {
		return nil, errors.New("the URL is longer than 2048 bytes")
	}
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Host == "" || u.Opaque != "" {
		return nil, fmt.Errorf("%q is not an absolute http(s) URL", agent.Truncate(raw, 100))
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, errors.New("the agent URL must not carry user info, a query or a fragment (a token goes in --token-stdin)")
	}
	switch u.Scheme {
	case "https", "http":
	default:
		return nil, fmt.Errorf("scheme %q: want https (or http to a loopback or tailnet address)", agent.Truncate(u.Scheme, 20))
	}
	return u, nil
}

// clearTextOK reports hosts plain http may go to: loopback, and addresses
// isTailnet vouches for.
func clearTextOK(host string, isTailnet func(netip.Addr) bool) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	a = a.Unmap()
	return a.IsLoopback() || isTailnet != nil && isTailnet(a)
}

// origin is scheme://host:port of u with the default port spelled out, the
// unit of trust for where a token may be sent.
func origin(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(net.JoinHostPort(u.Hostname(), port))
}

// remote is one agent endpoint ready to call: the verified card, an HTTP
// client for it, and how to name it in errors.
type remote struct {
	name   string // display name
	peer   bool   // a paired meshtray: errors speak of grants and pairing
	token  string // the bearer token sent ("" for a peer: its transport adds the grant); redacted from errors
	card   CardInfo
	hc     *http.Client
	client rpcClient
	close  func() // releases idle connections of a per-call transport; may be nil
	// pollTolerance is how many transient failures in a row poll takes
	// before it reports the contact lost (0: pollFailures). The outbound
	// view takes 1: its follow-up retries a lost agent, visibly.
	pollTolerance int
}

// rpcClient is the four calls meshtray makes of an agent, in a2a-go
// v0.3.15's types whatever the version on the wire: a2a-go v0.3.15's
// client for 0.3 agents, a2a-go v2.3.1's (client10) for 1.0 ones. Both
// read answers through the tolerant decoding layer (rpcTransport).
type rpcClient interface {
	SendMessage(context.Context, *a2a.MessageSendParams) (a2a.SendMessageResult, error)
	SendStreamingMessage(context.Context, *a2a.MessageSendParams) iter.Seq2[a2a.Event, error]
	GetTask(context.Context, *a2a.TaskQueryParams) (*a2a.Task, error)
	CancelTask(context.Context, *a2a.TaskIDParams) (*a2a.Task, error)
	Destroy() error
}

var _ rpcClient = (*a2aclient.Client)(nil)

// newRemote builds the client for card's JSON-RPC endpoint over rt (which
// adds the token), in the version the card was matched to (CardInfo.V1).
// Polling is on: message/send asks blocking:false (1.0:
// returnImmediately) and the caller polls tasks/get.
func newRemote(ctx context.Context, name string, peer bool, card CardInfo, rt http.RoundTripper, token string, release func()) (*remote, error) {
	hc := &http.Client{
		Transport:     rpcTransport{rt: rt, token: token, v1: card.V1()},
		CheckRedirect: noRedirects,
	}
	var c rpcClient
	var err error
	if card.V1() {
		c, err = newClient10(ctx, card, hc)
	} else {
		c, err = a2aclient.NewFromEndpoints(ctx,
			[]a2a.AgentInterface{{URL: card.Endpoint, Transport: a2a.TransportProtocolJSONRPC}},
			a2aclient.WithJSONRPCTransport(hc),
			a2aclient.WithConfig(a2aclient.Config{
				PreferredTransports: []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC},
				Polling:             true,
			}))
	}
	if err != nil {
		if release != nil {
			release()
		}
		return nil, fmt.Errorf("a2a client for %s: %w", name, err)
	}
	return &remote{name: name, peer: peer, token: token, card: card, hc: hc, client: c, close: release}, nil
}

// classify is the package classify for a call to r.
func (r *remote) classify(err error) error { return classifyToken(r.name, r.peer, r.token, err) }

// Close releases the remote's connections.
func (r *remote) Close() {
	if r.client != nil {
		_ = r.client.Destroy()
	}
	if r.close != nil {
		r.close()
	}
}

// maxCause bounds the text of a cause an *AgentError carries (bytes).
const maxCause = 300

// causeText is what a person (the owner's log, a CLI, a forwarded task's
// caller) reads of err, an error that may hold what an agent sent (a2a-go
// embeds up to MaxResponseBytes of a body it cannot use): the URLs of
// *url.Error dropped (an upstream's address is not the caller's business;
// the owner's log has it from the configuration), token and anything
// token-like redacted, one line with invisible characters escaped
// (textsafe.EscapeInvisible), at most maxCause bytes.
func causeText(err error, token string) string {
	s := agent.Truncate(stripURLs(err), 4096) // bound the work; a token is < 4 KiB
	s = redact(s, token)
	return agent.Truncate(textsafe.EscapeInvisible(oneLineText(s)), maxCause)
}

// stripURLs is egress.StripURLs (the one implementation).
func stripURLs(err error) string { return egress.StripURLs(err) }

// classify turns an error of a call to the agent named name into an
// *AgentError a person can act on. peer selects wording about grants and
// pairing. Every cause in the Detail goes through causeText. Context
// cancellation is returned unchanged.
func classify(name string, peer bool, err error) error {
	return classifyToken(name, peer, "", err)
}

// classifyToken is classify for a call that sent token (redacted from the
// detail if the agent echoes it).
func classifyToken(name string, peer bool, token string, err error) error {
	if err == nil {
		return nil
	}
	var ae *AgentError
	if errors.As(err, &ae) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) && !isNetTimeout(err) {
		return err
	}
	mk := func(kind error, format string, args ...any) error {
		return &AgentError{Agent: name, Kind: kind, Detail: fmt.Sprintf(format, args...), Err: err}
	}
	cause := func(e error) string { return causeText(e, token) }
	what := "agent " + quote(name)
	switch {
	case peer:
		what = "device " + quote(name)
	case strings.HasPrefix(name, "the "): // a description, not a name
		what = name
	}
	var se *statusError
	var a2aErr *a2a.Error
	var rpcErr *RPCError
	var certErr *tls.CertificateVerificationError
	switch {
	case errors.Is(err, pairing.ErrPinMismatch):
		var pe *pairing.PinError
		if errors.As(err, &pe) {
			return mk(pairing.ErrPinMismatch, "%s presented another certificate than the one paired: %s", what, cause(pe))
		}
		if errors.Is(err, errPeerSignature) {
			return mk(pairing.ErrPinMismatch, "%s sent a card not signed by the certificate it paired with: %s", what, cause(err))
		}
		return mk(pairing.ErrPinMismatch, "%s presented another certificate than the one paired", what)
	case errors.As(err, &se) && se.Code == http.StatusUnauthorized:
		switch {
		case peer && se.Paused:
			return mk(ErrAgentUnauthorized, "%s paused the grant it gave this device (HTTP 401); ask its owner to resume it", what)
		case peer:
			return mk(ErrAgentUnauthorized, "%s refused the grant it gave this device (HTTP 401): the token was revoked; pair again with `meshtray pair --join`", what)
		}
		return mk(ErrAgentUnauthorized, "%s refused our token (HTTP 401): it was revoked or is wrong; give a new one with `meshtray agents add URL --token-stdin`", what)
	case errors.Is(err, a2a.ErrUnauthenticated): // a2a-go's -31401, with HTTP 200
		return mk(ErrAgentUnauthorized, "%s refused our credentials (JSON-RPC -31401): the token was revoked or is wrong", what)
	case errors.As(err, &se) && se.Code >= 500:
		return mk(ErrAgentUnreachable, "%s failed: %s", what, cause(se))
	case errors.As(err, &se):
		return mk(ErrAgentRefused, "%s refused the request: %s", what, cause(se))
	case errors.Is(err, ErrCardUnpublished):
		if peer {
			return mk(ErrCardUnpublished, "%s has not published its A2A agent card (A2A is off there; its owner turns it on with `meshtray a2a on`)", what)
		}
		return mk(ErrCardUnpublished, "%s: %s", what, cause(err))
	case errors.Is(err, ErrCardInvalid):
		return mk(ErrCardInvalid, "%s: %s", what, cause(err))
	case AgentRestarting(err):
		// A meshtray stopping with its tasks kept: the task goes on after
		// its restart, so this is contact lost for now, tried again.
		return mk(ErrAgentUnreachable, "%s is restarting (it keeps its tasks)", what)
	case errors.As(err, &rpcErr) && rpcErr.Code == -32601:
		return mk(ErrAgentRefused, "%s answered: %s; it does not know the A2A method meshtray called (an agent from before A2A 0.2 knows only tasks/send; meshtray speaks 0.3 and 1.0)", what, cause(rpcErr))
	case errors.As(err, &rpcErr):
		return mk(ErrAgentRefused, "%s answered: %s", what, cause(rpcErr))
	case errors.As(err, &a2aErr):
		return mk(ErrAgentRefused, "%s answered: %s", what, cause(a2aErr))
	case errors.Is(err, errTooLarge):
		return mk(ErrAgentMalformed, "%s sent a response over %d bytes", what, MaxResponseBytes)
	case errors.As(err, &certErr):
		return mk(ErrAgentUnreachable, "%s presented a TLS certificate this device does not trust: %s", what, cause(certErr.Err))
	case isUnreachable(err):
		return mk(ErrAgentUnreachable, "%s is unreachable: %s", what, cause(errors.New(netCause(err))))
	}
	return mk(ErrAgentMalformed, "%s sent a malformed response: %s", what, cause(err))
}

func quote(s string) string { return fmt.Sprintf("%q", s) }

func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isUnreachable reports transport failures: dial, DNS, resets, timeouts,
// a connection closed mid-answer.
func isUnreachable(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &op) || errors.As(err, &dns) || isNetTimeout(err) ||
		errors.Is(err, errHeaderTimeout) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) && !isJSONError(err)
}

func isJSONError(err error) bool {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	return errors.As(err, &se) || errors.As(err, &te)
}

// netCause is the short form of a transport failure: egress.Cause (the
// one wording of a dial error), with this package's header timeout.
func netCause(err error) string {
	if errors.Is(err, errHeaderTimeout) {
		return "no answer in time"
	}
	return egress.Cause(err)
}

// AgentRestarting reports the CodeRestarting error of a meshtray agent
// stopping with its tasks kept (agent.RestartingReason), as an exchange
// or a call returns it (classified ErrAgentUnreachable: the task goes on
// after the agent's restart).
func AgentRestarting(err error) bool {
	var re *RPCError
	return errors.As(err, &re) && re.Code == agent.CodeRestarting && re.Reason == agent.RestartingReason
}

// transient reports errors worth retrying a poll for.
func transient(err error) bool {
	return errors.Is(err, ErrAgentUnreachable)
}

// settled reports a state in which the agent waits or is done: the stream
// closes and polling stops (A2A 0.3.0 §7.2: final on terminal and
// interrupted states).
func settled(s a2a.TaskState) bool { return s.Terminal() || agent.Interrupted(s) }

// finalEvent reports whether ev ends a stream.
func finalEvent(ev a2a.Event) bool {
	switch e := ev.(type) {
	case *a2a.Message:
		return true
	case *a2a.Task:
		return settled(e.Status.State)
	case *a2a.TaskStatusUpdateEvent:
		return e.Final || settled(e.Status.State)
	}
	return false
}

// exchange sends params to the agent and reports every event (Task
// snapshots, status and artifact updates, or a single Message) to on, in
// order, until the task is terminal or waits for input, ctx ends, or the
// contact is lost. With stream it uses message/stream; a stream that ends
// without its final event falls back to tasks/get polling. Without, it
// sends message/send with blocking:false and polls tasks/get with backoff
// (pollFirst growing to pollMax, jittered; pollFailures transient errors
// in a row end it). Errors are classified (*AgentError) or ctx's.
func (r *remote) exchange(ctx context.Context, params *a2a.MessageSendParams, stream bool, log *slog.Logger, on func(a2a.Event)) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for attempt := 0; ; attempt++ {
		err := r.exchangeOnce(ctx, params, stream, log, on)
		taskID := params.Message.TaskID
		if err == nil || taskID == "" || attempt >= answerResends || !errors.Is(err, a2a.ErrInternalError) || !r.stillAsking(ctx, taskID) {
			return err
		}
		// An answer can reach an agent still closing the turn that asked
		// (a2a-go's a2asrv refuses it as "task execution is already in
		// progress", sent as -32603). The task still waiting for input
		// means the answer was not taken: send it again shortly.
		log.Debug("the agent refused an answer while the task still asks; sending it again", "task", taskID, "attempt", attempt+1)
		t := time.NewTimer(answerResendPause << attempt)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// An answer refused with an internal error while the task still asks is
// sent again up to answerResends times, answerResendPause apart, doubling.
const (
	answerResends     = 5
	answerResendPause = 50 * time.Millisecond
)

// stillAsking reports whether the agent's task id waits for input
// (input-required or auth-required), per tasks/get.
func (r *remote) stillAsking(ctx context.Context, id a2a.TaskID) bool {
	t, err := r.client.GetTask(ctx, &a2a.TaskQueryParams{ID: id})
	return err == nil && t != nil && agent.Interrupted(t.Status.State)
}

// exchangeOnce is one send of params and the following of its task.
func (r *remote) exchangeOnce(ctx context.Context, params *a2a.MessageSendParams, stream bool, log *slog.Logger, on func(a2a.Event)) error {
	var taskID a2a.TaskID
	var stale *a2a.TaskStatus
	if stream {
		var streamErr error
		got := false
		for ev, err := range r.client.SendStreamingMessage(ctx, params) {
			if err != nil {
				streamErr = err
				break
			}
			if ev == nil {
				continue
			}
			got = true
			if id := ev.TaskInfo().TaskID; id != "" {
				taskID = id
			}
			on(ev)
			if finalEvent(ev) {
				return nil
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if taskID == "" {
			if streamErr == nil {
				streamErr = errors.New("the stream ended before any event")
				if got {
					streamErr = errors.New("the stream sent no task id")
				}
			}
			return r.classify(streamErr)
		}
		if streamErr != nil {
			if c := r.classify(streamErr); !transient(c) || AgentRestarting(c) {
				// A refusal, or a meshtray agent going down to restart:
				// polling it now would only fail (the follow-up waits).
				return c
			}
		}
		log.Debug("stream ended early; polling the task", "task", taskID, "err", causeText(streamErr, r.token))
	} else {
		res, err := r.client.SendMessage(ctx, params)
		if err != nil {
			return r.classify(err)
		}
		switch v := res.(type) {
		case *a2a.Message:
			on(v)
			return nil
		case *a2a.Task:
			if v.ID == "" {
				return r.classify(errors.New("the answer is a task without an id"))
			}
			on(v)
			if settled(v.Status.State) {
				if params.Message.TaskID == "" || !agent.Interrupted(v.Status.State) {
					return nil
				}
				// An answer's immediate snapshot (blocking false, 1.0
				// returnImmediately) may still show the question it
				// answers: poll until the status moves.
				stale = &v.Status
			}
			taskID = v.ID
		default:
			return r.classify(fmt.Errorf("unexpected answer %T", res))
		}
	}
	return r.poll(ctx, taskID, stale, on)
}

// maxStale bounds how long poll waits for a task to leave a stale
// interrupted status.
const maxStale = 30 * time.Second

// poll reads the task with tasks/get until it settles. A status equal to
// stale (the snapshot an answer was sent against) does not count as
// settled for up to maxStale.
func (r *remote) poll(ctx context.Context, id a2a.TaskID, stale *a2a.TaskStatus, on func(a2a.Event)) error {
	staleUntil := time.Now().Add(maxStale)
	delay := pollFirst
	fails, tolerance := 0, r.pollTolerance
	if tolerance <= 0 {
		tolerance = pollFailures
	}
	var last a2a.TaskStatus
	timer := time.NewTimer(jitter(delay))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
		t, err := r.client.GetTask(ctx, &a2a.TaskQueryParams{ID: id})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			c := r.classify(err)
			if fails++; !transient(c) || fails >= tolerance {
				return c
			}
		} else {
			fails = 0
			if t.ID == "" {
				t.ID = id
			}
			on(t)
			if settled(t.Status.State) && (stale == nil || !sameStatus(t.Status, *stale) || time.Now().After(staleUntil)) {
				return nil
			}
			if t.Status.State != last.State || !sameMessage(t.Status.Message, last.Message) {
				delay = pollFirst // something moves: look again soon
			}
			last = t.Status
		}
		delay = min(delay*3/2, pollMax)
		timer.Reset(jitter(delay))
	}
}

func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.4-0.2)*float64(d))
}

func sameStatus(a, b a2a.TaskStatus) bool {
	return a.State == b.State && sameMessage(a.Message, b.Message) &&
		(a.Timestamp == nil) == (b.Timestamp == nil) && (a.Timestamp == nil || a.Timestamp.Equal(*b.Timestamp))
}

func sameMessage(a, b *a2a.Message) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.ID == b.ID
}

// cancel sends tasks/cancel for id and returns the task as the agent
// reports it.
func (r *remote) cancel(ctx context.Context, id a2a.TaskID) (*a2a.Task, error) {
	t, err := r.client.CancelTask(ctx, &a2a.TaskIDParams{ID: id})
	if err != nil {
		return nil, r.classify(err)
	}
	return t, nil
}

// artifactTracker follows the artifacts of one remote task across Task
// snapshots (polling, the first stream event) and artifact-update events,
// so each part is reported once: onNew for an artifact seen first, onAppend
// for parts added to one already reported.
type artifactTracker struct {
	parts map[a2a.ArtifactID]int // parts reported per artifact
}

func (at *artifactTracker) seen(id a2a.ArtifactID) bool {
	_, ok := at.parts[id]
	return ok
}

// snapshot reports what t's artifacts add to what was reported.
func (at *artifactTracker) snapshot(t *a2a.Task, onNew func(*a2a.Artifact), onAppend func(a *a2a.Artifact, parts a2a.ContentParts)) {
	if at.parts == nil {
		at.parts = make(map[a2a.ArtifactID]int)
	}
	for _, a := range t.Artifacts {
		if a == nil {
			continue
		}
		n, ok := at.parts[a.ID]
		switch {
		case !ok:
			at.parts[a.ID] = len(a.Parts)
			onNew(a)
		case len(a.Parts) > n:
			at.parts[a.ID] = len(a.Parts)
			onAppend(a, a.Parts[n:])
		}
	}
}

// update reports one artifact-update event (A2A 0.3.0 §7.2.2: append
// concatenates onto the artifact with the same id; otherwise the artifact
// is new, or replaced, which is reported as new).
func (at *artifactTracker) update(ev *a2a.TaskArtifactUpdateEvent, onNew func(*a2a.Artifact), onAppend func(a *a2a.Artifact, parts a2a.ContentParts)) {
	if at.parts == nil {
		at.parts = make(map[a2a.ArtifactID]int)
	}
	a := ev.Artifact
	if a == nil {
		return
	}
	if ev.Append && at.seen(a.ID) {
		at.parts[a.ID] += len(a.Parts)
		onAppend(a, a.Parts)
		return
	}
	at.parts[a.ID] = len(a.Parts)
	onNew(a)
}
