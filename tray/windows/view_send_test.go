package windows

import (
	"strings"
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/storage"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"

	"meshtray/app"
	"meshtray/files"
	"meshtray/pairing"
)

func TestSendStateText(t *testing.T) {
	for _, tc := range []struct{ state, msg, want string }{
		{"submitted", "waiting for approval on laptop", "Waiting for approval on laptop…"},
		{"working", "offered to Ada’s phone: open meshtray's page on it to download (until 13:25)", "Offered to Ada’s phone: open meshtray's page on it to download (until 13:25)."},
		{"working", "", "Sending…"},
		{"completed", "downloaded by Ada’s phone", "✓ Sent. Downloaded by Ada’s phone."},
		{"rejected", "", "Declined on laptop."},
	} {
		if got := sendStateText("laptop", tc.state, tc.msg); got != tc.want {
			t.Errorf("sendStateText(%s, %q) = %q, want %q", tc.state, tc.msg, got, tc.want)
		}
	}
}

func TestDroppedPaths(t *testing.T) {
	web, _ := storage.ParseURI("https://example.com/a.txt")
	got := droppedPaths([]fyne.URI{storage.NewFileURI("/home/ada/a b.txt"), web, nil, storage.NewFileURI("/tmp/dir")})
	if len(got) != 2 || got[0] != "/home/ada/a b.txt" || got[1] != "/tmp/dir" {
		t.Errorf("droppedPaths = %q", got)
	}
}

// TestSendViewListsSkipped: the window's result names the links and
// special files the folders held, which were not sent.
func TestSendViewListsSkipped(t *testing.T) {
	test.NewTempApp(t)
	v := newSendView("desk", sendCallbacks{})
	v.finished(app.SendResult{State: "completed", Dir: "/d", Files: []files.Saved{{Path: "Trip/a.txt"}},
		Skipped: &files.NotSent{Count: 2, Entries: []files.NotSentEntry{{Path: "Trip/l1", Why: "symbolic link"}, {Path: "Trip/p", Why: "named pipe"}}}}, nil)
	got := v.result.Text
	if !strings.Contains(got, "Not sent, 2 links or special files:\nTrip/l1 (symbolic link)\nTrip/p (named pipe)") {
		t.Errorf("result:\n%s", got)
	}
}

// TestSendViewListsRefused: the window's result names the files not sent
// because the device would refuse their names.
func TestSendViewListsRefused(t *testing.T) {
	test.NewTempApp(t)
	v := newSendView("desk", sendCallbacks{})
	v.finished(app.SendResult{State: "completed", Dir: "/d", Files: []files.Saved{{Path: "Box/ok.txt"}},
		Refused: &files.NotSent{Count: 1, Entries: []files.NotSentEntry{{Path: `Box/a\b.txt`, Why: "backslash"}}}}, nil)
	if got := v.result.Text; !strings.Contains(got, "Not sent, 1 with a name desk would refuse:\nBox/a\\b.txt (backslash)") {
		t.Errorf("result:\n%s", got)
	}
}

// TestSendViewRenamed: once the device's name is known (the window opens
// with a device ID), the heading and the explanation use it, as the title
// does; the 56-character ID shows nowhere.
func TestSendViewRenamed(t *testing.T) {
	test.NewTempApp(t)
	id := pairing.DeviceID{1, 2, 3}.String()
	v := newSendView(sendDeviceLabel(id), sendCallbacks{})
	v.setDevice("bee")
	var texts []string
	var walk func(o fyne.CanvasObject)
	walk = func(o fyne.CanvasObject) {
		switch w := o.(type) {
		case *widget.Label:
			texts = append(texts, w.Text)
		case *fyne.Container:
			for _, c := range w.Objects {
				walk(c)
			}
		case *container.Scroll:
			walk(w.Content)
		case *fixedWidth:
			walk(w.content)
		}
	}
	walk(v.root)
	all := strings.Join(texts, "\n")
	if !strings.Contains(all, "Send files to bee") || !strings.Contains(all, "The owner of bee approves") ||
		strings.Contains(all, id) || strings.Contains(all, pairing.ShortID(id)) {
		t.Errorf("the view's texts:\n%s", all)
	}
}
