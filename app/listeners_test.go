package app

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"meshtray/keychain"
	"meshtray/pairing"
)

// listenerFixture is a listenerSet on an http.Server whose handler echoes
// the listener tag and whether the request came over TLS.
func listenerFixture(t *testing.T) (*listenerSet, *pairing.Identity) {
	t.Helper()
	id, err := pairing.LoadOrCreateIdentity(keychain.NewMemory(), "fixture")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		ConnContext:       connContext,
		ConnState:         connState,
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			json.NewEncoder(w).Encode(map[string]any{"listener": pairing.ListenerFrom(r.Context()), "tls": r.TLS != nil})
		}),
	}
	ls := &listenerSet{srv: srv, tls: id.ServerTLSConfig(), log: slog.New(slog.DiscardHandler)}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ls.Shutdown(ctx)
	})
	return ls, id
}

func getJSON(t *testing.T, c *http.Client, url string) map[string]any {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLoopbackSpeaksTLSAndHTTP: the loopback port answers TLS with the
// identity certificate (pinned by a peer on this machine) and plain HTTP
// (the local owner) alike, both tagged loopback; a client that connects
// and says nothing blocks nobody, and is dropped after the sniff timeout.
func TestLoopbackSpeaksTLSAndHTTP(t *testing.T) {
	t.Parallel()
	ls, id := listenerFixture(t)
	ln, err := listenLoopback(0)
	if err != nil {
		t.Fatal(err)
	}
	ls.serveLoopback(ln)
	addr := ln.Addr().String()

	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	plain := &http.Client{Transport: &http.Transport{Proxy: nil}}
	defer plain.CloseIdleConnections()
	if got := getJSON(t, plain, "http://"+addr+"/"); got["listener"] != "loopback" || got["tls"] != false {
		t.Fatalf("plain http on loopback: %v", got)
	}
	pinned := &http.Client{Transport: &http.Transport{Proxy: nil, TLSClientConfig: pairing.PinnedTLSConfig(id.Fingerprint)}}
	defer pinned.CloseIdleConnections()
	if got := getJSON(t, pinned, "https://"+addr+"/"); got["listener"] != "loopback" || got["tls"] != true {
		t.Fatalf("https on loopback: %v", got)
	}
	other, _ := pairing.LoadOrCreateIdentity(keychain.NewMemory(), "other")
	wrong := &http.Client{Transport: &http.Transport{Proxy: nil, TLSClientConfig: pairing.PinnedTLSConfig(other.Fingerprint)}}
	defer wrong.CloseIdleConnections()
	if _, err := wrong.Get("https://" + addr + "/"); err == nil {
		t.Fatal("a pin of another certificate was accepted on loopback")
	}
}

// TestSniffTimeoutDropsSilentConnections: a connection that sends nothing
// is closed after the sniff timeout instead of being held.
func TestSniffTimeoutDropsSilentConnections(t *testing.T) {
	t.Parallel()
	raw, err := listenLoopback(0)
	if err != nil {
		t.Fatal(err)
	}
	l := newSniffListener(raw, &tls.Config{}, pairing.ListenerLoopback, 200*time.Millisecond, slog.New(slog.DiscardHandler))
	defer l.Close()
	c, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("silent connection: read %v, want EOF (closed by the listener)", err)
	}
}
