package a2a

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"

	"meshtray/nodes"
)

type staticManifest nodes.Manifest

func (m staticManifest) Manifest() nodes.Manifest { return nodes.Manifest(m) }

var testManifest = staticManifest{
	Device: nodes.Device{ID: "DEV", Name: "testbox", OS: "Debian GNU/Linux 12 (x86_64)"},
	Capabilities: []nodes.Capability{
		{Name: "system.notify", Description: "Show a desktop notification.", Effects: nodes.EffectWrite, Available: true,
			Params: json.RawMessage(`{"type":"object","properties":{"title":{"type":"string"},"body":{"type":"string"}},"required":["title"]}`)},
		{Name: "device.info", Description: "Describe this device.", Effects: nodes.EffectRead, Available: true,
			Params: json.RawMessage(`{"type":"object","properties":{}}`)},
		{Name: "clipboard.read", Description: "Read the clipboard.", Effects: nodes.EffectRead, Available: false, Reason: "no display"},
	},
}

func TestCardFields(t *testing.T) {
	t.Parallel()
	env := newEnv(t, Options{OSEnvironment: "Debian GNU/Linux 12 (x86_64)", Version: "1.2.3", Manifest: testManifest})

	// The official resolver reads it.
	card, err := agentcard.NewResolver(env.httpClient()).Resolve(context.Background(), env.hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	if card.ProtocolVersion != "0.3.0" || card.PreferredTransport != a2a.TransportProtocolJSONRPC ||
		card.URL != env.hs.URL+"/a2a/v1" || card.Name != "testbox" || card.Version != "1.2.3" ||
		!strings.Contains(card.Description, "Debian GNU/Linux 12 (x86_64)") || !card.Capabilities.Streaming ||
		card.Capabilities.PushNotifications {
		t.Fatalf("card = %+v", card)
	}
	if len(card.Skills) != 2 || card.Skills[0].ID != "device.info" || card.Skills[1].ID != "system.notify" {
		t.Fatalf("skills = %+v (want the available capabilities, sorted)", card.Skills)
	}
	notify := card.Skills[1]
	if !strings.Contains(strings.Join(notify.Tags, ","), "write") || len(notify.Examples) == 0 {
		t.Fatalf("notify skill = %+v", notify)
	}
	var ex struct {
		Capability string         `json:"capability"`
		Params     map[string]any `json:"params"`
	}
	if err := json.Unmarshal([]byte(notify.Examples[0]), &ex); err != nil || ex.Capability != "system.notify" || ex.Params["title"] == nil {
		t.Fatalf("DataPart example %q: %v", notify.Examples[0], err)
	}
	sch, ok := card.SecuritySchemes[SecuritySchemeName].(a2a.HTTPAuthSecurityScheme)
	if !ok || !strings.EqualFold(sch.Scheme, "bearer") || len(card.Security) != 1 {
		t.Fatalf("security = %+v %+v", card.SecuritySchemes, card.Security)
	}
	if _, ok := card.Security[0][SecuritySchemeName]; !ok {
		t.Fatalf("security does not require the bearer scheme: %+v", card.Security)
	}
	if len(card.Capabilities.Extensions) != 1 {
		t.Fatalf("extensions = %+v", card.Capabilities.Extensions)
	}
	ext := card.Capabilities.Extensions[0]
	if ext.URI != ManifestExtensionURI || ext.Params["url"] != env.hs.URL+"/nodes/manifest" || ext.Params["scope"] != "node" {
		t.Fatalf("manifest extension = %+v", ext)
	}

	// On the wire: pushNotifications:false is spelled out, JSON type.
	resp, err := env.httpClient().Get(env.hs.URL + CardPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(string(raw), `"pushNotifications":false`) || !strings.Contains(string(raw), `"streaming":true`) {
		t.Fatalf("card JSON (%s): %s", resp.Header.Get("Content-Type"), raw)
	}
}

func TestCardURLFollowsTheRequest(t *testing.T) {
	t.Parallel()
	srv := NewServer(Options{Executor: &scriptExecutor{}})
	defer srv.Shutdown(t.Context())
	srv.SetPublished(true)
	tests := []struct {
		host   string
		tls    bool
		status int
		url    string
	}{
		{"127.0.0.1:47654", false, 200, "http://127.0.0.1:47654/a2a/v1"},
		{"100.64.0.7:47654", true, 200, "https://100.64.0.7:47654/a2a/v1"},
		{"[fd7a:115c::1]:47654", true, 200, "https://[fd7a:115c::1]:47654/a2a/v1"},
		{"evil.example/x?", false, 400, ""},
		{"a b", false, 400, ""},
	}
	for _, tc := range tests {
		req, _ := http.NewRequest("GET", CardPath, nil)
		req.Host = tc.host
		if tc.tls {
			req.TLS = &tlsState
		}
		rec := newRecorder()
		srv.CardHandler().ServeHTTP(rec, req)
		if rec.status != tc.status {
			t.Errorf("%s: status %d, want %d", tc.host, rec.status, tc.status)
			continue
		}
		if tc.status != 200 {
			continue
		}
		var card a2a.AgentCard
		if err := json.Unmarshal(rec.buf.Bytes(), &card); err != nil || card.URL != tc.url {
			t.Errorf("%s: url %q, want %q (%v)", tc.host, card.URL, tc.url, err)
		}
	}
}

var tlsState = tls.ConnectionState{HandshakeComplete: true}
