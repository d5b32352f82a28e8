package windows

import (
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2/test"

	"meshtray/app"
)

// TestActivityViewFilterAndEscapes: newest first, the device filter lists
// every peer named and shows only its entries, invisible characters from
// other devices are escaped, and an entry seen again (a stream that
// reconnected) is not shown twice.
func TestActivityViewFilterAndEscapes(t *testing.T) {
	newTestApp(t)
	v := newActivityView()
	w := test.NewWindow(v.root)
	defer w.Close()
	now := time.Now()
	es := []app.AuditEntry{
		{Seq: 1, Time: now, Kind: "grant", Subject: "issue", Peer: "phone", GrantID: "g1", Result: "active", DecidedBy: "owner", DecidedVia: "cli"},
		{Seq: 2, Time: now, Kind: "capability", Subject: "device.info", Peer: "phone", GrantID: "g1", Result: "completed", Via: "lan", DurationMS: 1.5},
		{Seq: 3, Time: now, Kind: "capability", Subject: "clipboard.read", Peer: "evil\u202etxt.exe", Result: "denied", Via: "tailnet"},
		{Seq: 4, Time: now, Kind: "a2a", Subject: "A2A agent published", Result: "on", DecidedBy: "owner", DecidedVia: "tray"},
	}
	v.add(es[:2]...)
	v.add(es[1:]...) // entry 2 again
	if len(v.shown) != 4 || v.shown[0].Seq != 4 || v.shown[3].Seq != 1 {
		t.Fatalf("shown %+v, want 4..1", v.shown)
	}
	opts := v.filter.Options
	if strings.Join(opts, "|") != allDevices+`|evil\u202Etxt.exe|phone` {
		t.Fatalf("device choices %q", opts)
	}
	top, bottom := activityLines(v.shown[1])
	if strings.ContainsRune(top, '\u202e') || !strings.Contains(top, `evil\u202Etxt.exe · clipboard.read`) || !strings.Contains(bottom, "denied · tailnet") {
		t.Fatalf("lines %q / %q", top, bottom)
	}
	v.filter.SetSelected("phone")
	if len(v.shown) != 2 || v.shown[0].Subject != "device.info" || v.count.Text != "2 entries" {
		t.Fatalf("filtered to phone: %+v (%q)", v.shown, v.count.Text)
	}
	if _, bottom := activityLines(v.shown[0]); !strings.Contains(bottom, "completed 1.5ms · lan") {
		t.Fatalf("run line %q", bottom)
	}
	v.filter.SetSelected(`evil\u202Etxt.exe`)
	if len(v.shown) != 1 || v.shown[0].Seq != 3 {
		t.Fatalf("filtered to the escaped name: %+v", v.shown)
	}
	v.filter.SetSelected(allDevices)
	for i := 5; i < 5+activityLimit; i++ {
		v.add(app.AuditEntry{Seq: int64(i), Time: now, Kind: "lan", Result: "on"})
	}
	if len(v.entries) != activityLimit || v.entries[0].Seq != 5 {
		t.Fatalf("kept %d entries from %d, want the newest %d", len(v.entries), v.entries[0].Seq, activityLimit)
	}
}
