package delegate

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"

	"meshtray/pairing"
)

// listedPeers is a PeerSource of fixed peers (resolution never calls
// them).
type listedPeers []PeerAgent

func (l listedPeers) PeerAgents() []PeerAgent { return append([]PeerAgent(nil), l...) }
func (l listedPeers) PeerTransport(string) (http.RoundTripper, error) {
	return nil, errors.New("no transport in this test")
}
func (l listedPeers) Subscribe() (<-chan struct{}, func()) { return make(chan struct{}), func() {} }

func deviceID(b byte) string {
	var id pairing.DeviceID
	for i := range id {
		id[i] = b + byte(i)
	}
	return id.String()
}

// TestResolveNeverLetsANameCaptureADevice: an external agent whose card
// name (so its id) is a paired device's name does not take that name.
func TestResolveNeverLetsANameCaptureADevice(t *testing.T) {
	t.Parallel()
	laptop, phone := deviceID(1), deviceID(90)
	up := newUpstream(t, upstreamOpts{})
	up.setCard(func(c *a2a.AgentCard) { c.Name = "laptop" })
	other := newUpstream(t, upstreamOpts{})
	other.setCard(func(c *a2a.AgentCard) { c.Name = "Weather" })
	a, _ := newAgents(t, AgentsOptions{Peers: listedPeers{
		{DeviceID: laptop, Name: "laptop"},
		{DeviceID: phone, Name: "phone"},
	}})
	ctx := context.Background()
	ext, err := a.Add(ctx, up.hs.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	weather, err := a.Add(ctx, other.hs.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	if ext.ID != "laptop" {
		t.Fatalf("the external agent's id is %q", ext.ID)
	}
	for _, tc := range []struct {
		ref  string
		want string // the agent's id, or "" for an ambiguity error
	}{
		{"laptop", ""},   // the device's name and the agent's id and name
		{"LAPTOP", ""},   // names are case-insensitive
		{laptop, laptop}, // the full device ID wins, whatever names say
		{strings.ToLower(strings.ReplaceAll(laptop, "-", "")), laptop},
		{laptop[:MinDevicePrefix], laptop},
		{up.hs.URL, "laptop"}, // the URL names the external agent
		{up.hs.URL + "/", "laptop"},
		{"phone", phone},
		{"weather", weather.ID},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			got, err := a.Get(tc.ref)
			if tc.want == "" {
				if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), laptop[:7]) || !strings.Contains(err.Error(), up.hs.URL) {
					t.Fatalf("Get(%q) = %+v, %v: want an error listing the device and the agent", tc.ref, got, err)
				}
				return
			}
			if err != nil || got.ID != tc.want {
				t.Fatalf("Get(%q) = %s, %v; want %s", tc.ref, got.ID, err, tc.want)
			}
		})
	}
	// A full device ID of no paired device is unknown, even if a name
	// matched it.
	if _, err := a.Get(deviceID(200)); !errors.Is(err, ErrAgentUnknown) {
		t.Fatalf("unknown device ID: %v", err)
	}
	// Shorter than MinDevicePrefix is not a prefix.
	if _, err := a.Get(laptop[:MinDevicePrefix-1]); !errors.Is(err, ErrAgentUnknown) {
		t.Fatalf("a 6-character prefix: %v", err)
	}
}
