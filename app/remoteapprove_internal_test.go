package app

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"meshtray/pairing"
)

// TestRemoteView: what a device holding the approve scope may do with each
// kind of pending request, including requests of another grant of its own
// device, and what it sees of them.
func TestRemoteView(t *testing.T) {
	t.Parallel()
	const dev, other = "DEVICEA-AAAAAAA", "DEVICEB-BBBBBBB"
	phone := &pairing.Principal{Grant: pairing.Grant{ID: "gphone"}}
	tray := &pairing.Principal{Grant: pairing.Grant{ID: "gtray", PeerID: dev}}
	for _, c := range []struct {
		name                      string
		p                         *pairing.Principal
		a                         Approval
		own, approve, deny, alway bool
	}{
		{"delegation of another grant", phone, Approval{Kind: KindDelegation, GrantID: "g1", DeviceID: other}, false, true, true, true},
		{"files of another grant", phone, Approval{Kind: KindFiles, GrantID: "g1"}, false, true, true, true},
		{"capability call", phone, Approval{Kind: KindCapability, GrantID: "g1"}, false, true, true, false},
		{"the owner's own capability call", phone, Approval{Kind: KindCapability}, false, true, true, false},
		{"pairing", phone, Approval{Kind: KindPairing, DeviceID: other, SAS: "123456"}, false, false, true, false},
		{"its own delegation", phone, Approval{Kind: KindDelegation, GrantID: "gphone"}, true, false, false, false},
		{"another grant of its own device", tray, Approval{Kind: KindDelegation, GrantID: "g2", DeviceID: dev}, true, false, false, false},
		{"its own device pairing again", tray, Approval{Kind: KindPairing, DeviceID: dev}, true, false, false, false},
		{"a phone's empty device ID is no match", phone, Approval{Kind: KindDelegation, GrantID: "g3"}, false, true, true, true},
	} {
		v := remoteView(c.p, c.a)
		if v.Own != c.own || v.CanApprove != c.approve || v.CanDeny != c.deny || v.CanAlways != c.alway {
			t.Errorf("%s: own %v approve %v deny %v always %v, want %v %v %v %v", c.name,
				v.Own, v.CanApprove, v.CanDeny, v.CanAlways, c.own, c.approve, c.deny, c.alway)
		}
		if v.SAS != "" {
			t.Errorf("%s: the SAS is shown to another device", c.name)
		}
		if (v.Own || !v.CanApprove) && v.Note == "" {
			t.Errorf("%s: no note says why", c.name)
		}
	}
	v := remoteView(phone, Approval{Kind: KindDelegation, GrantID: "g1", Peer: "evil\u202Eexe.txt", Summary: "a\u200Bb", Detail: "line 1\nline\u00A02"})
	if v.Peer != `evil\u202Eexe.txt` || v.Summary != `a\u200Bb` || v.Detail != "line 1\nline\\u00A02" {
		t.Errorf("invisible runes shown as %q %q %q", v.Peer, v.Summary, v.Detail)
	}
}

// TestRemoteDenialReason: a denial made on another device says where, in
// the requester's reason and in the audit trail's WHAT: "denied on desktop
// (SHORTID)", never "denied by the owner by SHORTID".
func TestRemoteDenialReason(t *testing.T) {
	t.Parallel()
	const dev = "OKEQ5Q4-AAAAAAA-BBBBBBB-CCCCCCC-DDDDDDD-EEEEEEE-FFFFFFF-GGGGGGG"
	db := openTestDB(t, "")
	for _, c := range []struct {
		p    *pairing.Principal
		want string
	}{
		{&pairing.Principal{Grant: pairing.Grant{ID: "g-desktop", Name: "desktop", PeerID: dev}}, "denied on desktop (" + pairing.ShortID(dev) + ")"},
		{&pairing.Principal{Grant: pairing.Grant{ID: "4d9a5aa93be23a07", Name: "Ada's phone"}}, "denied on Ada's phone (grant 4d9a5aa93be23a07)"},
	} {
		n := &Node{log: slog.New(slog.DiscardHandler)}
		n.approvals, _ = dbQueue(t, db, time.Minute, nil)
		got := make(chan ApprovalDecision, 1)
		id, err := n.approvals.Post(Approval{Kind: KindDelegation, GrantID: "g-agent", Peer: "ci-agent", Summary: "device.info", TaskID: "t-" + c.p.Grant.ID},
			func(d ApprovalDecision) { got <- d })
		if err != nil {
			t.Fatal(err)
		}
		if err := n.decideRemote(c.p, id, RemoteDecision{Decision: DecisionDeny}); err != nil {
			t.Fatal(err)
		}
		if d := <-got; d.Reason != c.want {
			t.Errorf("denied by %s: reason %q, want %q", c.p.Grant.Name, d.Reason, c.want)
		}
		es := approvalEntries(t, db)
		if what := auditView(es[len(es)-1]).What(); what != "delegation: device.info "+c.want {
			t.Errorf("denied by %s: audit WHAT %q", c.p.Grant.Name, what)
		}
		n.approvals.Close()
	}
	// The owner's own denial reads as before, without "by owner" twice.
	e := AuditEntry{Kind: "approval", Subject: "delegation: x", Params: "denied by the owner", DecidedBy: "owner"}
	if what := e.What(); what != "delegation: x denied by the owner" {
		t.Errorf("the owner's denial: WHAT %q", what)
	}
	if what := (AuditEntry{Kind: "approval", Subject: "delegation: x", DecidedBy: "owner"}).What(); what != "delegation: x by owner" {
		t.Errorf("the owner's approval: WHAT %q", what)
	}
}

// TestShownDir: a receive folder as a phone or an agent reads it: relative
// to the home folder, else its name; a meshtray device reads the path.
func TestShownDir(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	for dir, want := range map[string]string{
		filepath.Join(home, "Downloads", "meshtray"): filepath.Join("~", "Downloads", "meshtray"),
		"/srv/inbox":                       "inbox",
		home:                               filepath.Base(home),
		filepath.Join(home, "..", "other"): "other",
	} {
		if got := shownDir(dir); got != want {
			t.Errorf("shownDir(%q) = %q, want %q", dir, got, want)
		}
	}
	dir := filepath.Join(home, "Downloads", "meshtray")
	a := Approval{Kind: KindFiles, GrantID: "g1", Dir: dir}
	if v := remoteView(&pairing.Principal{Grant: pairing.Grant{ID: "gphone"}}, a); v.Dir != filepath.Join("~", "Downloads", "meshtray") {
		t.Errorf("a phone reads the folder as %q", v.Dir)
	}
	if v := remoteView(&pairing.Principal{Grant: pairing.Grant{ID: "gdesk", PeerID: "DEVICEA-AAAAAAA"}}, a); v.Dir != dir {
		t.Errorf("a meshtray device reads the folder as %q", v.Dir)
	}
}
