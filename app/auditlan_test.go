//go:build linux

package app_test

import (
	"errors"
	"net/http"
	"testing"

	"meshtray/app"
)

// TestAuditLANSwitch: the LAN switch, turned on from the tray and off from
// the CLI, is recorded with where each was made (in a network namespace:
// the LAN listener and mDNS must not touch this machine's interfaces); a
// where only the node may give (policy, timeout) is refused.
func TestAuditLANSwitch(t *testing.T) {
	lab := newPhLab(t)
	n := startPhNode(t, lab.laptop, phNodeOptions{Name: "alpha", Config: "tailscale = false\n"})
	on, off := true, false
	n.MustAPI(http.MethodPost, "/config", app.ConfigUpdate{LAN: &on, Where: app.WhereTray}, nil)
	n.MustAPI(http.MethodPost, "/config", app.ConfigUpdate{LAN: &on, Where: app.WhereTray}, nil) // no change: no entry
	n.MustAPI(http.MethodPost, "/config", app.ConfigUpdate{LAN: &off}, nil)                      // no where: the CLI
	var api *app.APIError
	if err := n.API(http.MethodPost, "/config", app.ConfigUpdate{LAN: &on, Where: "policy"}, nil); !errors.As(err, &api) || api.Status != http.StatusBadRequest {
		t.Fatalf("where policy from a client: %v, want 400", err)
	}
	var es []app.AuditEntry
	n.MustAPI(http.MethodGet, "/audit?kind=lan", nil, &es)
	if len(es) != 2 || es[0].Result != "on" || es[0].DecidedVia != "tray" || es[1].Result != "off" || es[1].DecidedVia != "cli" ||
		es[0].DecidedBy != "owner" || es[0].Kind != "lan" {
		t.Fatalf("LAN entries: %+v", es)
	}
	var st app.Settings
	n.MustAPI(http.MethodGet, "/config", nil, &st)
	if st.LAN {
		t.Fatal("the refused request switched LAN on")
	}
}
