package cli

import (
	"bytes"
	"strings"
	"testing"

	"meshtray/a2a/delegate"
)

// TestAgentsListShowsVersionAndSignature: each agent's A2A version and
// card signature are columns, and what meshtray assumed reading a card
// is said under it.
func TestAgentsListShowsVersionAndSignature(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	c := &cli{opts: options{Stdout: &out}}
	c.printAgents([]delegate.Agent{
		{ID: "research", Kind: delegate.AgentExternal, Name: "Research", Status: delegate.AgentReady, URL: "https://research.example",
			Card: &delegate.CardInfo{ProtocolVersion: delegate.Version10, Signature: "signed", Streaming: true}},
		{ID: "weather", Kind: delegate.AgentExternal, Name: "Weather", Status: delegate.AgentReady, URL: "https://weather.example",
			Card: &delegate.CardInfo{ProtocolVersion: delegate.Version03, Signature: "unsigned",
				Notes: []string{"the card has no protocolVersion: read as 0.3.0, its schema's default"}}},
	})
	lines := strings.Split(out.String(), "\n")
	if len(lines) < 4 || !strings.Contains(lines[0], "A2A") || !strings.Contains(lines[0], "CARD") {
		t.Fatalf("output:\n%s", out.String())
	}
	fields := func(l string) []string { return strings.Fields(l) }
	if f := fields(lines[1]); len(f) < 6 || f[4] != "1.0" || f[5] != "signed" {
		t.Fatalf("research: %q", lines[1])
	}
	if f := fields(lines[2]); len(f) < 6 || f[4] != "0.3" || f[5] != "unsigned" {
		t.Fatalf("weather: %q", lines[2])
	}
	if !strings.Contains(lines[3], "↳ the card has no protocolVersion: read as 0.3.0") {
		t.Fatalf("the note: %q", lines[3])
	}
}
