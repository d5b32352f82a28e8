package app

import (
	"testing"

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
