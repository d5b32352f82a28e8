package app

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"meshtray/pairing"
)

// TestLogValuesRedactSecrets: every app type holding a secret (control
// token, grant token, pairing code, SAS, forward token) logs without it,
// with the JSON and the text handler alike, and still says something.
func TestLogValuesRedactSecrets(t *testing.T) {
	t.Parallel()
	const secret = "S3CRETS3CRET"
	fp := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name string
		v    any
		want string // a field that must show
	}{
		{"DaemonInfo", DaemonInfo{PID: 4242, Port: 47654, Token: secret}, "47654"},
		{"GrantToken", GrantToken{ID: "0123456789abcdef", Token: "mt1_0123456789abcdef_" + secret}, "0123456789abcdef"},
		{"PairingSession", PairingSession{URL: "https://192.0.2.1:47654/pair#c=" + secret + "&fp=" + fp, URLs: []string{"https://127.0.0.1:47654/pair#c=" + secret}, Code: secret, DeviceID: "DEVICEID", Expires: time.Now()}, "DEVICEID"},
		{"JoinRequest", JoinRequest{URL: "https://192.0.2.1:47654/pair#c=" + secret + "&fp=" + fp, Code: secret, Ask: pairing.Scopes{pairing.ScopeAgent}}, "192.0.2.1:47654"},
		{"JoinEvent", JoinEvent{SAS: secret, Peer: &pairing.PeerInfo{ID: "PEERIDX"}}, "PEERIDX"},
		{"ForwardConfig", ForwardConfig{URL: "http://127.0.0.1:8000", Token: secret}, "127.0.0.1:8000"},
		{"Config", Config{Name: "laptop", A2A: A2AConfig{Forward: ForwardConfig{URL: "http://127.0.0.1:8000", Token: secret}}}, "laptop"},
		{"Approval", Approval{ID: "APPROVALID", Kind: KindPairing, Peer: "phone", SAS: secret, Detail: "pair " + secret}, "APPROVALID"},
		{"Client", &Client{base: "http://127.0.0.1:47654", token: secret, StateDir: "/state"}, "/state"},
		{"Node", &Node{cfg: Config{Name: "laptop", StateDir: "/state"}, controlToken: secret}, "/state"},
	} {
		for _, h := range []string{"json", "text"} {
			var buf bytes.Buffer
			var handler slog.Handler = slog.NewJSONHandler(&buf, nil)
			if h == "text" {
				handler = slog.NewTextHandler(&buf, nil)
			}
			slog.New(handler).Info("logged", "v", tc.v)
			out := buf.String()
			if strings.Contains(out, secret) {
				t.Errorf("%s (%s) logs the secret: %s", tc.name, h, out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("%s (%s) logs without %q: %s", tc.name, h, tc.want, out)
			}
		}
	}
}
