package app

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"meshtray/files"
	"meshtray/keychain"
	"meshtray/pairing"
)

// offerEnv is the offer routes of a node behind the real grant middleware,
// on an httptest server (loopback), with two phones' grants.
type offerEnv struct {
	n          *Node
	srv        *httptest.Server
	phone, bob pairing.Grant
	tokPhone   string
	tokBob     string
	tokNode    string // a grant with scope node only
}

func newOfferEnv(t *testing.T) *offerEnv {
	t.Helper()
	grants, err := pairing.NewGrants(keychain.NewMemory(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { grants.Close() })
	e := &offerEnv{n: &Node{cfg: Config{Name: "Ada’s laptop"}}}
	e.n.auth = &pairing.Auth{Grants: grants}
	e.phone, e.tokPhone, _ = grants.Issue(pairing.IssueRequest{Name: "Ada’s phone", Scopes: pairing.Scopes{pairing.ScopeAgent, pairing.ScopeNode}})
	e.bob, e.tokBob, _ = grants.Issue(pairing.IssueRequest{Name: "Bob’s phone", Scopes: pairing.Scopes{pairing.ScopeAgent}})
	_, e.tokNode, _ = grants.Issue(pairing.IssueRequest{Name: "script", Scopes: pairing.Scopes{pairing.ScopeNode}})
	mux := http.NewServeMux()
	e.n.offerRoutes(mux)
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	return e
}

func (e *offerEnv) do(t *testing.T, method, path, tok string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, nil)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func (e *offerEnv) list(t *testing.T, tok string) []OfferView {
	t.Helper()
	resp, b := e.do(t, "GET", "/files/offers", tok, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /files/offers: %d %s", resp.StatusCode, b)
	}
	var out []OfferView
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func writeFile(t *testing.T, dir, name string, n int) (string, []byte) {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p, b
}

// TestOfferIsDownloadedByItsGrantOnly: an offer is listed for its grant
// only, its files come whole or by range (a cut download resumes), with a
// safe attachment name; the sender's wait sees the downloads and ends when
// every file came whole.
func TestOfferIsDownloadedByItsGrantOnly(t *testing.T) {
	e := newOfferEnv(t)
	dir := t.TempDir()
	p1, b1 := writeFile(t, dir, "Trip photo é.jpg", 300<<10)
	p2, b2 := writeFile(t, dir, `evil"name.txt`, 10)
	srcs, err := files.Sources(p1, p2)
	if err != nil {
		t.Fatal(err)
	}
	o, err := e.n.offers.add(e.phone, e.n.cfg.Name, srcs)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var steps []OfferProgress
	done := make(chan error, 1)
	go func() {
		done <- e.n.offers.wait(context.Background(), o, func(p OfferProgress) {
			mu.Lock()
			steps = append(steps, p)
			mu.Unlock()
		})
	}()

	// Only its grant sees it; another grant and a grant without agent do not.
	got := e.list(t, e.tokPhone)
	if len(got) != 1 || got[0].ID != o.id || got[0].From != "Ada’s laptop" || len(got[0].Files) != 2 ||
		got[0].Files[0].SHA256 != srcs[0].Entry.SHA256 || got[0].Files[1].Name != `evil"name.txt` {
		t.Fatalf("phone lists %+v", got)
	}
	if l := e.list(t, e.tokBob); len(l) != 0 {
		t.Errorf("another grant lists %+v", l)
	}
	url := "/files/offers/" + o.id + "/0"
	if resp, _ := e.do(t, "GET", url, e.tokBob, nil); resp.StatusCode != 404 {
		t.Errorf("another grant's download: %d, want 404", resp.StatusCode)
	}
	if resp, _ := e.do(t, "GET", "/files/offers", e.tokNode, nil); resp.StatusCode != 403 {
		t.Errorf("a node-only grant: %d, want 403", resp.StatusCode)
	}
	if resp, _ := e.do(t, "GET", url, "", nil); resp.StatusCode != 401 {
		t.Errorf("no token: %d, want 401", resp.StatusCode)
	}
	for _, bad := range []string{"/files/offers/" + o.id + "/2", "/files/offers/" + o.id + "/-1", "/files/offers/" + o.id + "/01", "/files/offers/nope/0"} {
		if resp, _ := e.do(t, "GET", bad, e.tokPhone, nil); resp.StatusCode != 404 {
			t.Errorf("GET %s: %d, want 404", bad, resp.StatusCode)
		}
	}

	// A cut: the first range only, then the rest from where it stopped.
	resp, part := e.do(t, "GET", url, e.tokPhone, map[string]string{"Range": "bytes=0-99999"})
	if resp.StatusCode != 206 || len(part) != 100000 {
		t.Fatalf("range: %d, %d bytes", resp.StatusCode, len(part))
	}
	if cd := resp.Header.Get("Content-Disposition"); cd != `attachment; filename*=utf-8''Trip%20photo%20%C3%A9.jpg` {
		t.Errorf("Content-Disposition %q", cd)
	}
	if ct, csp := resp.Header.Get("Content-Type"), resp.Header.Get("Content-Security-Policy"); ct != "image/jpeg" || !strings.Contains(csp, "sandbox") {
		t.Errorf("Content-Type %q, CSP %q", ct, csp)
	}
	apptestWait(t, "the first range counted", func() bool { return e.list(t, e.tokPhone)[0].Files[0].Downloaded == 100000 })
	// A range past what was downloaded does not count as the prefix.
	e.do(t, "GET", url, e.tokPhone, map[string]string{"Range": "bytes=200000-200010"})
	if d := e.list(t, e.tokPhone)[0].Files[0].Downloaded; d != 100000 {
		t.Errorf("a gap counted: downloaded %d", d)
	}
	resp, rest := e.do(t, "GET", url, e.tokPhone, map[string]string{"Range": "bytes=100000-"})
	if resp.StatusCode != 206 || string(append(part, rest...)) != string(b1) {
		t.Fatalf("resumed range: %d, %d bytes, content differs", resp.StatusCode, len(rest))
	}
	resp, whole := e.do(t, "GET", "/files/offers/"+o.id+"/1", e.tokPhone, nil)
	if resp.StatusCode != 200 || string(whole) != string(b2) {
		t.Fatalf("file 2: %d %q", resp.StatusCode, whole)
	}
	if cd := resp.Header.Get("Content-Disposition"); cd != `attachment; filename=evil_name.txt` {
		t.Errorf("Content-Disposition %q", cd)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("wait: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end once both files were downloaded")
	}
	mu.Lock()
	last := steps[len(steps)-1]
	mu.Unlock()
	if last.TotalDone != last.Total || last.Total != int64(len(b1)+len(b2)) {
		t.Errorf("last progress %+v", last)
	}
	// Ended: gone from the list.
	if l := e.list(t, e.tokPhone); len(l) != 0 {
		t.Errorf("a finished offer is still listed: %+v", l)
	}
}

// TestOfferEnds: declined by the phone, withdrawn by the sender, expired,
// the file changed on disk, the grant gone, and the bounds of the table.
func TestOfferEnds(t *testing.T) {
	e := newOfferEnv(t)
	dir := t.TempDir()
	p, _ := writeFile(t, dir, "a.bin", 1000)
	srcs, err := files.Sources(p)
	if err != nil {
		t.Fatal(err)
	}
	start := func() (*offer, chan error, context.CancelFunc) {
		o, err := e.n.offers.add(e.phone, "laptop", srcs)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- e.n.offers.wait(ctx, o, nil) }()
		return o, done, cancel
	}
	waitErr := func(done chan error) error {
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the wait did not end")
			return nil
		}
	}

	o, done, cancel := start()
	if resp, _ := e.do(t, "DELETE", "/files/offers/"+o.id, e.tokBob, nil); resp.StatusCode != 404 {
		t.Errorf("another grant declined it: %d", resp.StatusCode)
	}
	if resp, _ := e.do(t, "DELETE", "/files/offers/"+o.id, e.tokPhone, nil); resp.StatusCode != 204 {
		t.Errorf("decline: %d", resp.StatusCode)
	}
	if err := waitErr(done); !errors.Is(err, ErrOfferDeclined) {
		t.Errorf("declined: %v", err)
	}
	cancel()

	o, done, cancel = start()
	cancel()
	if err := waitErr(done); !errors.Is(err, context.Canceled) {
		t.Errorf("withdrawn: %v", err)
	}
	if resp, _ := e.do(t, "GET", "/files/offers/"+o.id+"/0", e.tokPhone, nil); resp.StatusCode != 404 {
		t.Errorf("a withdrawn offer downloads: %d", resp.StatusCode)
	}

	o, done, cancel = start()
	future := time.Now().Add(OfferTTL + time.Minute)
	e.n.offers.mu.Lock()
	e.n.offers.now = func() time.Time { return future }
	e.n.offers.mu.Unlock()
	if l := e.list(t, e.tokPhone); len(l) != 0 {
		t.Errorf("expired offer listed: %+v", l)
	}
	if err := waitErr(done); !errors.Is(err, ErrOfferExpired) {
		t.Errorf("expired: %v", err)
	}
	cancel()
	e.n.offers.mu.Lock()
	e.n.offers.now = nil
	e.n.offers.mu.Unlock()

	o, done, cancel = start()
	os.WriteFile(p, []byte("changed!"), 0o600)
	if resp, b := e.do(t, "GET", "/files/offers/"+o.id+"/0", e.tokPhone, nil); resp.StatusCode != 410 || !strings.Contains(string(b), "changed") {
		t.Errorf("changed file: %d %s", resp.StatusCode, b)
	}
	e.n.offers.endGrant(e.phone.ID, errors.New("revoked"))
	if err := waitErr(done); err == nil || err.Error() != "revoked" {
		t.Errorf("grant gone: %v", err)
	}
	cancel()

	// Bounds: at most maxOffersPerGrant per grant (the oldest ends).
	p2, _ := writeFile(t, dir, "b.bin", 10)
	srcs, _ = files.Sources(p2)
	var first *offer
	for i := range maxOffersPerGrant + 1 {
		o, err := e.n.offers.add(e.bob, "laptop", srcs)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = o
		}
	}
	if l := e.list(t, e.tokBob); len(l) != maxOffersPerGrant {
		t.Errorf("%d offers listed, want %d", len(l), maxOffersPerGrant)
	}
	select {
	case <-first.end:
	default:
		t.Error("the oldest offer did not end when the grant's bound was reached")
	}
	if _, err := e.n.offers.add(e.bob, "laptop", nil); err == nil {
		t.Error("an empty offer was accepted")
	}
	many := make([]files.Source, maxOfferFiles+1)
	for i := range many {
		many[i] = srcs[0]
	}
	if _, err := e.n.offers.add(e.bob, "laptop", many); !errors.Is(err, ErrOfferTooBig) {
		t.Errorf("%d files: %v", len(many), err)
	}
}

// TestOfferOfAnEmptyFile: an empty file counts as downloaded once it was
// fetched, not before.
func TestOfferOfAnEmptyFile(t *testing.T) {
	e := newOfferEnv(t)
	p, _ := writeFile(t, t.TempDir(), "empty", 0)
	srcs, err := files.Sources(p)
	if err != nil {
		t.Fatal(err)
	}
	o, err := e.n.offers.add(e.phone, "laptop", srcs)
	if err != nil {
		t.Fatal(err)
	}
	if o.complete() {
		t.Fatal("an empty file counts as downloaded before anyone fetched it")
	}
	done := make(chan error, 1)
	go func() { done <- e.n.offers.wait(context.Background(), o, nil) }()
	if resp, b := e.do(t, "GET", "/files/offers/"+o.id+"/0", e.tokPhone, nil); resp.StatusCode != 200 || len(b) != 0 {
		t.Fatalf("GET: %d %q", resp.StatusCode, b)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end once the empty file was fetched")
	}
}

// TestContentDisposition: names that would break the header or point
// elsewhere are made safe.
func TestContentDisposition(t *testing.T) {
	for in, want := range map[string]string{
		"report.pdf":   `attachment; filename=report.pdf`,
		"a b.txt":      `attachment; filename="a b.txt"`,
		"../../x":      `attachment; filename=x`,
		"a\r\nb":       `attachment; filename=a__b`,
		"..":           `attachment; filename=file`,
		"日本.txt":       `attachment; filename*=utf-8''%E6%97%A5%E6%9C%AC.txt`,
		`q"uote\x.txt`: `attachment; filename=q_uote_x.txt`,
	} {
		if got := contentDisposition(in); got != want {
			t.Errorf("contentDisposition(%q) = %s, want %s", in, got, want)
		}
	}
}

func apptestWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
