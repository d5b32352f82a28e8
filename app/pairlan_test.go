//go:build linux

package app_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/pairing"
)

// phLANNode starts a node in ns, reachable on its LAN address (HTTPS with
// its identity certificate), and returns it with its LAN base URL.
func phLANNode(t *testing.T, ns, ip, name, stateDir string, port int) (*phNode, string) {
	t.Helper()
	n := startPhNode(t, ns, phNodeOptions{Name: name, StateDir: stateDir, Port: port, Config: "tailscale = false\n"})
	n.MustAPI("POST", "/config", map[string]any{"lan": true}, nil)
	url := "https://" + ip + ":" + strconv.Itoa(n.Port)
	apptest.WaitFor(t, 30*time.Second, name+"'s LAN listener", func() bool {
		var st app.Status
		n.MustAPI("GET", "/status", nil, &st)
		return slices.ContainsFunc(st.Listeners, func(l app.ListenerStatus) bool { return l.URL == url })
	})
	return n, url
}

// TestReidentifiedPeerMustPairAgain, on the real path between two
// computers (two namespaces joined by a veth, HTTPS on LAN addresses):
// bravo pairs with alpha by CLI; alpha then loses its identity (its
// keychain items deleted, as after a reinstall) and comes back on the same
// address with a new one. Bravo, claiming with the fingerprint it pinned,
// is refused in the TLS handshake and its CLI says why (pin mismatch, both
// device IDs, "pair again"); nothing reaches alpha's owner. Pairing again
// with alpha's new QR URL works, and alpha's owner is told that the claim
// replaces the grant bravo had.
func TestReidentifiedPeerMustPairAgain(t *testing.T) {
	lab := newPhLab(t)
	a, _ := phLANNode(t, lab.laptop, lab.laptopIP, "alpha", "", 0)
	b, _ := phLANNode(t, lab.phone, lab.phoneIP, "bravo", "", 0)

	pairLAN := func(a *phNode, url string) app.Approval {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		wait := ptBackgroundCmd(t, b.Command(ctx, "pair", "--join", url, "--give", "agent"), cancel)
		pa := phWaitApproval(t, a.approvals, app.KindPairing, nil)
		a.MustAPI("POST", "/approvals/"+pa.ID, app.ApprovalDecision{Decision: app.DecisionApprove, Scopes: pairing.Scopes{pairing.ScopeAgent}}, nil)
		if r := wait(); r.Code != 0 || !strings.Contains(r.Stdout, "Paired with alpha") {
			t.Fatalf("pair --join %s: exit %d\n%s%s", url, r.Code, r.Stdout, r.Stderr)
		}
		return pa
	}
	var ps app.PairingSession
	a.MustAPI("POST", "/pair/sessions", nil, &ps)
	if !strings.HasPrefix(ps.URL, "https://"+lab.laptopIP+":") {
		t.Fatalf("alpha's pairing URL %q is not its LAN address", ps.URL)
	}
	pairLAN(a, ps.URL)
	var oldA, stB app.Status
	a.MustAPI("GET", "/status", nil, &oldA)
	b.MustAPI("GET", "/status", nil, &stB)
	var db app.Devices
	b.MustAPI("GET", "/nodes/devices", nil, &db)
	if len(db.Held) != 1 || db.Held[0].PeerID != oldA.DeviceID || db.Held[0].Fingerprint != oldA.Fingerprint {
		t.Fatalf("bravo's held grants %+v, want one pinned to alpha %s", db.Held, oldA.DeviceID)
	}

	// Alpha re-creates its identity: same state dir, address and port.
	a.Stop()
	ks := ptNodeKeychain(t, a.StateDir)
	for _, item := range []string{"identity/key", "identity/cert"} {
		if err := ks.Delete(item); err != nil {
			t.Fatalf("delete %s: %v", item, err)
		}
	}
	a2, _ := phLANNode(t, lab.laptop, lab.laptopIP, "alpha", a.StateDir, a.Port)
	var newA app.Status
	a2.MustAPI("GET", "/status", nil, &newA)
	if newA.DeviceID == oldA.DeviceID {
		t.Fatalf("alpha kept its identity %s", oldA.DeviceID)
	}

	// Bravo claims a fresh code of alpha's with the fingerprint it pinned.
	var ps2 app.PairingSession
	a2.MustAPI("POST", "/pair/sessions", nil, &ps2)
	r := b.CLI("pair", "--join", ps.URL, "--code", ps2.Code)
	if r.Code == 0 {
		t.Fatalf("bravo paired with a device whose certificate is not the pinned one:\n%s", r.Stdout)
	}
	why := r.Stderr + r.Stdout
	for _, want := range []string{"pin mismatch", oldA.DeviceID[:7], newA.DeviceID[:7], "pair again"} {
		if !strings.Contains(why, want) {
			t.Errorf("the CLI's refusal does not say %q:\n%s", want, why)
		}
	}
	if as, err := a2.approvals(); err != nil || len(as) != 0 {
		t.Errorf("a refused claim reached alpha's owner: %+v %v", as, err)
	}

	// Pairing again with alpha's new QR URL works, and alpha's owner sees
	// that it replaces the grant bravo had (alpha kept its grants).
	var ps3 app.PairingSession
	a2.MustAPI("POST", "/pair/sessions", nil, &ps3)
	pa := pairLAN(a2, ps3.URL)
	if pa.DeviceID == "" || !strings.HasPrefix(stB.DeviceID, pa.DeviceID) || !strings.Contains(pa.Detail, "replaces") {
		t.Errorf("alpha's owner saw %+v: want bravo's device ID and that it replaces an earlier grant", pa)
	}
	b.MustAPI("GET", "/nodes/devices", nil, &db)
	if !slices.ContainsFunc(db.Held, func(h app.HeldView) bool { return h.PeerID == newA.DeviceID && h.Fingerprint == newA.Fingerprint }) {
		t.Errorf("bravo holds no grant from alpha's new identity: %+v", db.Held)
	}
	var da app.Devices
	a2.MustAPI("GET", "/nodes/devices", nil, &da)
	if len(da.Issued) != 1 || da.Issued[0].PeerID != stB.DeviceID {
		t.Errorf("alpha's issued grants after pairing again: %+v, want one, bravo's new one", da.Issued)
	}
}
