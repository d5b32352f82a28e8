package app_test

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/mesh"
	"meshtray/nodes"
	"meshtray/pairing"
)

// TestManifestCLI: `meshtray manifest` lists the node's capabilities with
// their policies, and `manifest set` changes one, which the manifest and a
// restart both show.
func TestManifestCLI(t *testing.T) {
	n := ptStart(t, "desk")
	out := ptCLI(t, n, "manifest").Stdout
	if !strings.Contains(out, "CAPABILITY") || !strings.Contains(out, "device.info") || !strings.Contains(out, "system.run") {
		t.Fatalf("manifest table:\n%s", out)
	}
	policy := func() pairing.Policy {
		var m nodes.Manifest
		ptJSON(t, n, &m, "manifest")
		i := slices.IndexFunc(m.Capabilities, func(c nodes.Capability) bool { return c.Name == "device.info" })
		if i < 0 {
			t.Fatalf("no device.info in %+v", m)
		}
		return m.Capabilities[i].Approval
	}
	if p := policy(); p != pairing.PolicyAllow {
		t.Fatalf("device.info starts at %q, want allow", p)
	}
	if got := ptCLI(t, n, "manifest", "set", "device.info", "ask").Stdout; !strings.Contains(got, "device.info: approval ask") {
		t.Errorf("manifest set said %q", got)
	}
	if p := policy(); p != pairing.PolicyAsk {
		t.Fatalf("device.info after set: %q, want ask", p)
	}
	if r := n.CLI("manifest", "set", "device.info", "maybe"); r.Code != 2 {
		t.Errorf("a bad policy: exit %d, want 2 (usage)\n%s", r.Code, r.Stderr)
	}
	if r := n.CLI("manifest", "set", "no.such", "ask"); r.Code == 0 || !strings.Contains(r.Stderr, "no.such") {
		t.Errorf("an unknown capability: exit %d %q", r.Code, r.Stderr)
	}
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	n = apptest.StartNode(t, apptest.Options{Name: "desk", StateDir: n.StateDir, Config: "tailscale = false\n"})
	if p := policy(); p != pairing.PolicyAsk {
		t.Fatalf("device.info after a restart: %q, want ask", p)
	}
}

// TestCLIErrorsSayWhich: a grant or approval ID that names nothing is
// said back with where the IDs are listed, for every grant action and for
// a second decision on the same approval.
func TestCLIErrorsSayWhich(t *testing.T) {
	n := ptStart(t, "desk")
	for _, args := range [][]string{
		{"grant", "pause", "nosuch"}, {"grant", "resume", "nosuch"}, {"grant", "revoke", "nosuch"},
		{"grant", "rotate", "nosuch"}, {"grant", "set", "nosuch", "--approval", "ask"},
	} {
		r := n.CLI(args...)
		if r.Code != 1 || !strings.Contains(r.Stderr, "no grant nosuch (meshtray grant list") || strings.Contains(r.Stderr, "pairing:") {
			t.Errorf("meshtray %v: exit %d %q", args, r.Code, r.Stderr)
		}
	}
	for _, args := range [][]string{{"approve", "NOPE"}, {"deny", "NOPE"}} {
		r := n.CLI(args...)
		if r.Code != 1 || !strings.Contains(r.Stderr, "no pending approval with that id: NOPE (meshtray approvals lists them)") {
			t.Errorf("meshtray %v: exit %d %q", args, r.Code, r.Stderr)
		}
	}
}

// TestPeersByHand: a peer added by hand can be removed again, by the
// short ID the table shows or by its name (a name two such peers share
// is refused, as send and --on refuse it), a URL without its scheme is refused with an
// example, and an empty table says why from the node's actual state.
func TestPeersByHand(t *testing.T) {
	a := ptStart(t, "desk")
	b := ptStart(t, "laptop")
	if out := ptCLI(t, a, "peers").Stdout; !strings.Contains(out, "LAN discovery needs `meshtray lan on`") || !strings.Contains(out, "tailnet discovery is off") {
		t.Errorf("empty peers, LAN off and no Tailscale: %q", out)
	}
	hostport := "127.0.0.1:" + strconv.Itoa(b.Port)
	if r := a.CLI("peers", "add", hostport); r.Code != 1 || !strings.Contains(r.Stderr, "has no scheme; want https://host[:port]") {
		t.Errorf("peers add without a scheme: exit %d %q", r.Code, r.Stderr)
	}
	ptCLI(t, a, "peers", "add", "https://"+hostport)
	idB := ptIdentity(t, b).ID
	if out := ptCLI(t, a, "peers").Stdout; !strings.Contains(out, "laptop") {
		t.Fatalf("peers after add:\n%s", out)
	}
	if r := a.CLI("peers", "rm", "NOSUCH"); r.Code != 1 || !strings.Contains(r.Stderr, `no peer added by hand is named "NOSUCH"`) {
		t.Errorf("peers rm NOSUCH: exit %d %q", r.Code, r.Stderr)
	}
	ptCLI(t, a, "peers", "rm", idB[:7])
	var ps []mesh.Peer
	ptJSON(t, a, &ps, "peers")
	if len(ps) != 0 {
		t.Fatalf("peers after rm: %+v", ps)
	}
	// By name, as send and --on take a device.
	ptCLI(t, a, "peers", "add", "https://"+hostport)
	if out := ptCLI(t, a, "peers", "rm", "Laptop").Stdout; !strings.Contains(out, "removed Laptop") {
		t.Errorf("peers rm by name said %q", out)
	}
	if ptJSON(t, a, &ps, "peers"); len(ps) != 0 {
		t.Fatalf("peers after rm by name: %+v", ps)
	}
	// Two peers added by hand named laptop: the name is refused, the ID
	// still removes one.
	b2 := ptStart(t, "laptop")
	ptCLI(t, a, "peers", "add", "https://"+hostport)
	ptCLI(t, a, "peers", "add", "https://127.0.0.1:"+strconv.Itoa(b2.Port))
	if r := a.CLI("peers", "rm", "laptop"); r.Code != 1 || !strings.Contains(r.Stderr, `"laptop" names 2 peers added by hand: give more of the device ID`) {
		t.Errorf("peers rm of a shared name: exit %d %q", r.Code, r.Stderr)
	}
	ptCLI(t, a, "peers", "rm", idB)
	if ptJSON(t, a, &ps, "peers"); len(ps) != 1 || ps[0].ID != ptIdentity(t, b2).ID {
		t.Fatalf("peers after rm by full ID: %+v", ps)
	}
}

// TestPairedPeerAlwaysListed: a paired device stays in the peer table when
// no discovery source sees it (here: LAN off, no Tailscale), with what the
// grants know of it; before, it vanished with its last sighting. Whether
// it is online, and publishes A2A, is what the check of its card at the
// address it gave at pairing found (source "pairing"); before, such a row
// said offline and no A2A whatever the device answered.
func TestPairedPeerAlwaysListed(t *testing.T) {
	a := ptStart(t, "desk")
	b := ptStart(t, "laptop")
	ptPairByCLI(t, a, b, "agent", "agent")
	idA := ptIdentity(t, a)
	// status counts the peers table's online rows: desk answers at its
	// pairing address though no discovery source sees it (before: 0).
	var st app.Status
	if ptJSON(t, b, &st, "status"); st.OnlinePeers != 1 {
		t.Errorf("status before peers: online_peers %d, want 1 (desk, via pairing)", st.OnlinePeers)
	}
	if out := ptCLI(t, b, "status").Stdout; !regexp.MustCompile(`(?m)^peers\s+1 online$`).MatchString(out) {
		t.Errorf("status:\n%s", out)
	}
	row := func(what string) mesh.Peer {
		t.Helper()
		var ps []mesh.Peer
		ptJSON(t, b, &ps, "peers")
		i := slices.IndexFunc(ps, func(p mesh.Peer) bool { return p.ID == idA.ID })
		if i < 0 {
			t.Fatalf("%s: the paired device is not listed: %+v", what, ps)
		}
		if p := ps[i]; !p.Paired || p.Name != "desk" || p.FP != idA.Fingerprint {
			t.Fatalf("%s: paired, unseen row %+v", what, p)
		}
		return ps[i]
	}
	// A2A off on desk: it answers (its card is 404), so online, no A2A.
	if p := row("A2A off"); !p.Online || p.A2A || !slices.Equal(p.Sources, []mesh.Source{app.SourcePairing}) ||
		p.LastSeen.IsZero() || !slices.Equal(p.Addrs[app.SourcePairing], []string{"127.0.0.1:" + strconv.Itoa(a.Port)}) {
		t.Fatalf("A2A off: row %+v", p)
	}
	// A2A on: online with A2A, in the table too.
	ptCLI(t, a, "a2a", "on")
	b.CLI("agents", "refresh", "desk")
	if p := row("A2A on"); !p.Online || !p.A2A {
		t.Fatalf("A2A on: row %+v", p)
	}
	if out := ptCLI(t, b, "peers").Stdout; !regexp.MustCompile(`(?m)^` + idA.ID[:7] + `\s+desk\s+.+\s+pairing\s+yes\s+yes\s+yes\s+just now\s+127\.0\.0\.1:`).MatchString(out) {
		t.Errorf("peers table, desk reachable with A2A on:\n%s", out)
	}
	// desk stopped: offline once checked again; never a "0001-01-01".
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	b.CLI("agents", "refresh", "desk")
	if p := row("stopped"); p.Online || p.A2A {
		t.Fatalf("stopped: row %+v", p)
	}
	if out := ptCLI(t, b, "peers").Stdout; !strings.Contains(out, "desk") || strings.Contains(out, "0001-01-01") {
		t.Errorf("peers table:\n%s", out)
	}
	if ptJSON(t, b, &st, "status"); st.OnlinePeers != 0 {
		t.Errorf("status, desk stopped: online_peers %d, want 0", st.OnlinePeers)
	}
}
