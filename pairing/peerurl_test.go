package pairing

// Where a held token or a join's code may go: only HTTPS pinned to the
// peer, and a loopback address only when the peer is on this machine.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"meshtray/keychain"
)

// TestPlainHTTPPeerURLsRefused: a held grant's token and a join's code go
// only over HTTPS pinned to the peer, loopback included: plain http to
// 127.0.0.1 reaches whoever holds the port.
func TestPlainHTTPPeerURLsRefused(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	plain := taggedServer(t, ListenerLoopback, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusTeapot)
	}))
	for _, u := range []string{plain.URL, "http://localhost:47654", "http://[::1]:47654", "https://0.0.0.0:47654", "https://[::]:47654"} {
		if _, err := CheckPeerURL(u); !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckPeerURL(%s) = %v, want ErrInvalid", u, err)
		}
	}
	if got, err := CheckPeerURL("https://127.0.0.1:47654/"); err != nil || got != "https://127.0.0.1:47654" {
		t.Errorf("CheckPeerURL(https loopback) = %q, %v", got, err)
	}

	b := newNode(t, "desktop", nodeOpts{})
	peer := newIdentity(t, "laptop")
	tok, _ := newToken(newGrantID())
	if err := b.g.PutHeld(Held{PeerID: peer.ID.String(), Name: "laptop", URL: plain.URL, Token: tok}); !errors.Is(err, ErrInvalid) {
		t.Errorf("PutHeld with a plain http URL = %v, want ErrInvalid", err)
	}
	if err := b.g.PutHeld(Held{PeerID: peer.ID.String(), Name: "laptop", Token: tok}); err != nil {
		t.Fatal(err)
	}
	tr, err := b.g.PeerTransport(peer.ID.String())
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: tr}
	defer c.CloseIdleConnections()
	if resp, err := c.Get(plain.URL + "/nodes/manifest"); err == nil {
		resp.Body.Close()
		t.Errorf("a held token went over plain http to %s", plain.URL)
	}
	s := Session{Code: newCode(), Fingerprint: peer.Fingerprint}
	for _, u := range []string{s.URL(plain.URL), plain.URL + "/pair#c=" + s.Code} {
		if _, err := Join(context.Background(), JoinOptions{URL: u, Identity: b.id, Grants: b.g, Name: "desktop"}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Join(%s) = %v, want ErrInvalid", u, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the plain http server got %d requests", n)
	}
}

// TestLoopbackOfferOnlyFromLoopback: a peer on the network cannot make this
// device call a service on its own loopback (Offer.URL 127.0.0.1: our held
// token would go there), in whatever spelling, nor a link-local or metadata
// address; an offer arriving on the loopback listener, from a second node
// on this machine, may.
func TestLoopbackOfferOnlyFromLoopback(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		lan  bool
		url  string
		want int
	}{
		{"lan, loopback url", true, "https://127.0.0.1:9", http.StatusBadRequest},
		{"lan, localhost url", true, "https://localhost:9", http.StatusBadRequest},
		{"lan, v6 loopback url", true, "https://[::1]:9", http.StatusBadRequest},
		{"lan, absolute localhost url", true, "https://localhost.:9", http.StatusBadRequest},
		{"lan, hex loopback url", true, "https://0x7f000001:9", http.StatusBadRequest},
		{"lan, mapped loopback url", true, "https://[::ffff:127.0.0.1]:9", http.StatusBadRequest},
		{"lan, metadata url", true, "https://169.254.169.254:9", http.StatusBadRequest},
		{"lan, this-network url", true, "https://0.0.0.0:9", http.StatusBadRequest},
		{"lan, lan url", true, "https://192.0.2.7:47654", http.StatusOK},
		{"lan, no url", true, "", http.StatusOK},
		{"loopback, loopback url", false, "https://127.0.0.1:9", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newNode(t, "laptop", nodeOpts{lan: tc.lan})
			b := newIdentity(t, "desktop")
			_, tok, err := a.g.Issue(IssueRequest{PeerID: b.ID.String(), Name: "desktop", Scopes: Scopes{ScopeAgent}})
			if err != nil {
				t.Fatal(err)
			}
			give, _ := newToken(newGrantID())
			body, _ := json.Marshal(Offer{Token: give, URL: tc.url, FP: b.Fingerprint, Name: "desktop", Scopes: Scopes{ScopeAgent}})
			req, _ := http.NewRequest("POST", a.url+"/pair/reciprocate", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("Content-Type", "application/json")
			c := &http.Client{Transport: &http.Transport{TLSClientConfig: PinnedTLSConfig(a.id.Fingerprint)}}
			defer c.CloseIdleConnections()
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("offer with URL %q on the %s listener: %s, want %d", tc.url, map[bool]string{true: "lan", false: "loopback"}[tc.lan], resp.Status, tc.want)
			}
			h, err := a.g.Held(b.ID.String())
			if stored := err == nil; stored != (tc.want == http.StatusOK) {
				t.Fatalf("held grant stored = %v (%+v)", stored, h)
			}
		})
	}
}

// TestLegacyLoopbackHeldURLUpgraded: held grants stored with the old plain
// http loopback URL (before the loopback listener spoke TLS) load as the
// same address over https, so two nodes on one machine stay paired.
func TestLegacyLoopbackHeldURLUpgraded(t *testing.T) {
	t.Parallel()
	ks := keychain.NewMemory()
	peer := newIdentity(t, "laptop")
	tok, _ := newToken(newGrantID())
	rec, _ := json.Marshal(heldRecord{Held: Held{PeerID: peer.ID.String(), GrantID: TokenGrantID(tok), Name: "laptop", URL: "http://127.0.0.1:5555", Fingerprint: peer.Fingerprint, Scopes: Scopes{ScopeAgent}}, Token: tok})
	if err := ks.Set(heldKeyPrefix+peer.ID.String(), rec); err != nil {
		t.Fatal(err)
	}
	g := newGrants(t, ks)
	h, err := g.Held(peer.ID.String())
	if err != nil || h.URL != "https://127.0.0.1:5555" {
		t.Fatalf("held grant after load: URL %q, %v; want https://127.0.0.1:5555", h.URL, err)
	}
}
