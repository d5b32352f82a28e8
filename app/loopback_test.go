package app_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/pairing"
)

// TestLoopbackPeersOverPinnedTLS: two nodes on one machine pair through the
// loopback listener over TLS pinned to the issuer's certificate (a plain
// http loopback URL would hand the code and tokens to whatever holds the
// port): the pairing URL is https://127.0.0.1:PORT, each side holds an
// https URL, the card fetched over TLS names an https endpoint, and a
// delegation-free call with the held token works over it.
func TestLoopbackPeersOverPinnedTLS(t *testing.T) {
	a := ptStart(t, "laptop")
	b := ptStart(t, "desktop")
	p := ptPairByCLI(t, a, b, "agent,node", "agent")
	want := "https://127.0.0.1:" + strconv.Itoa(a.Port) + "/pair#"
	if !strings.HasPrefix(p.URL, want) {
		t.Fatalf("loopback pairing URL %q, want %s...", p.URL, want)
	}
	var sess struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal([]byte(p.Start.Stdout), &sess); err != nil || !strings.HasPrefix(sess.URL, want) {
		t.Fatalf("pair --json url %q (%v), want %s...", sess.URL, err, want)
	}
	for _, side := range []struct {
		n    *apptest.Node
		peer *apptest.Node
	}{{b, a}, {a, b}} {
		var d app.Devices
		ptJSON(t, side.n, &d, "devices")
		if len(d.Held) != 1 || d.Held[0].URL != "https://127.0.0.1:"+strconv.Itoa(side.peer.Port) {
			t.Fatalf("%s holds %+v, want one grant with URL https://127.0.0.1:%d", side.n.StateDir, d.Held, side.peer.Port)
		}
	}
	// A's agent card, read over TLS on loopback, names its https endpoint.
	ptCLI(t, a, "a2a", "on")
	id := ptIdentity(t, a)
	c := &http.Client{Transport: &http.Transport{Proxy: nil, TLSClientConfig: pairing.PinnedTLSConfig(id.Fingerprint)}}
	defer c.CloseIdleConnections()
	resp, err := c.Get(fmt.Sprintf("https://127.0.0.1:%d/.well-known/agent-card.json", a.Port))
	if err != nil {
		t.Fatal(err)
	}
	var card struct {
		URL string `json:"url"`
	}
	json.NewDecoder(resp.Body).Decode(&card)
	resp.Body.Close()
	if !strings.HasPrefix(card.URL, "https://127.0.0.1:") {
		t.Fatalf("card over TLS names %q, want an https URL", card.URL)
	}
	// B's held token reaches A's manifest over it.
	tok := ptHeldToken(t, b, id.ID)
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/nodes/manifest", a.Port), nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("manifest with the held token over loopback TLS: %s", resp.Status)
	}
}

// TestSlowRequestBodyCut: a request whose body trickles in (a claim sent a
// byte at a time, then nothing) is cut by the server's read timeout instead
// of holding a connection and a goroutine forever.
func TestSlowRequestBodyCut(t *testing.T) {
	n := apptest.StartNode(t, apptest.Options{Keychain: "file", Config: "tailscale = false\n"})
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(n.Port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /pair/claim HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{\"code\":")
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(50 * time.Second))
	_, err = io.ReadAll(bufio.NewReader(c))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the server still holds a stalled request body after %v", time.Since(start).Round(time.Second))
	}
	t.Logf("stalled body cut after %v", time.Since(start).Round(time.Second))
}

// TestPortInUseMessage: the error names the address once and says what to do.
func TestPortInUseMessage(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	r := apptest.RunCLI(t, nil, "serve", "--state-dir", t.TempDir(), "--keychain", "file", "--port", port)
	addr := "127.0.0.1:" + port
	if r.Code == 0 || strings.Count(r.Stderr, addr) != 1 || !strings.Contains(r.Stderr, "in use") || !strings.Contains(r.Stderr, "--port") {
		t.Fatalf("port in use: exit %d, stderr:\n%s\nwant the address once, \"in use\" and --port", r.Code, r.Stderr)
	}
}
