//go:build linux

package app_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"meshtray/app"
	"meshtray/pairing"
)

// TestNetworkCallerCannotAimAtThisMachine: a `full` grant calling over the
// LAN cannot make the node connect to its own loopback (to tell open ports
// from closed ones): not by IP, not as `localhost.`, `0x7f000001` or a
// mapped address, not by a DNS name that resolves to 127.0.0.1 — for
// POST /mesh/peers (hello probe) and POST /a2a/agents (card fetch) alike.
// The owner, on loopback, still may.
func TestNetworkCallerCannotAimAtThisMachine(t *testing.T) {
	lab := newPhLab(t)
	// `ip netns exec` bind-mounts /etc/netns/<ns>/hosts over /etc/hosts:
	// the node resolves rebind.test to its loopback.
	hostsDir := filepath.Join("/etc/netns", lab.laptop)
	if err := os.MkdirAll(hostsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostsDir) })
	if err := os.WriteFile(filepath.Join(hostsDir, "hosts"), []byte("127.0.0.1 localhost\n127.0.0.1 rebind.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	node, lanURL := phLANNode(t, lab.laptop, lab.laptopIP, "laptop", "", 0)
	var tok app.GrantToken
	node.MustAPI("POST", "/nodes/devices", app.GrantRequest{Name: "script", Scopes: pairing.Scopes{pairing.ScopeFull}}, &tok)
	var issuer pairing.PeerInfo
	node.MustAPI("GET", "/pair/issuer", nil, &issuer)

	// A port on the node's own loopback that counts who connects.
	trap := phNSListen(t, lab.laptop, "127.0.0.1:0")
	var hits atomic.Int64
	go func() {
		for {
			c, err := trap.Accept()
			if err != nil {
				return
			}
			hits.Add(1)
			c.Close()
		}
	}()
	port := strconv.Itoa(trap.Addr().(*net.TCPAddr).Port)

	phone := &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: phNSDialer(lab.phone),
		TLSClientConfig: pairing.PinnedTLSConfig(issuer.FP), DisableKeepAlives: true}}
	post := func(path, url string) (int, string) {
		b, _ := json.Marshal(map[string]string{"url": url})
		req, _ := http.NewRequest("POST", lanURL+path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+tok.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := phone.Do(req)
		if err != nil {
			t.Fatalf("POST %s over the LAN: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return resp.StatusCode, string(body)
	}
	for _, c := range []struct{ path, url string }{
		{"/mesh/peers", "https://127.0.0.1:" + port},
		{"/mesh/peers", "https://localhost:" + port},
		{"/mesh/peers", "https://localhost.:" + port},
		{"/mesh/peers", "https://0x7f000001:" + port},
		{"/mesh/peers", "https://[::ffff:127.0.0.1]:" + port},
		{"/mesh/peers", "https://rebind.test:" + port},
		{"/a2a/agents", "http://127.0.0.1:" + port},
		{"/a2a/agents", "https://0x7f000001:" + port},
		{"/a2a/agents", "http://rebind.test:" + port},
		{"/a2a/agents", "https://rebind.test:" + port},
	} {
		before := hits.Load()
		st, body := post(c.path, c.url)
		if st/100 == 2 {
			t.Errorf("POST %s %s over the LAN: %d %s", c.path, c.url, st, body)
		}
		if n := hits.Load() - before; n != 0 {
			t.Errorf("POST %s %s over the LAN made the node connect to its own loopback port %d times (%d %s)", c.path, c.url, n, st, body)
		}
	}
	// The owner is not limited: the same probe as the owner reaches the port.
	before := hits.Load()
	err := node.API("POST", "/mesh/peers", map[string]string{"url": "https://127.0.0.1:" + port}, nil)
	if hits.Load() == before {
		t.Errorf("the owner's POST /mesh/peers did not reach the loopback port (%v): the trap sees nothing", err)
	}
}
