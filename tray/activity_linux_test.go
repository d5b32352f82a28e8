//go:build linux

package tray

import (
	"encoding/json"
	"image"
	"strings"
	"testing"
	"time"
)

// TestActivityWindow: "Activity…" in the tray menu opens the Activity
// window in the UI process under Xvfb, showing the audit trail's entries
// (drawn, not blank), and a change made meanwhile (a grant paused from the
// CLI) appears in the open window without reopening it.
func TestActivityWindow(t *testing.T) {
	d := startDesktop(t, true)
	dir := t.TempDir()
	startTrayCmd(t, d.env(), dir, nil)
	it := d.Watcher.waitItem(t, 30*time.Second)
	cli(t, d.env(), nil, dir, "a2a", "on")
	id := strings.TrimSpace(cli(t, d.env(), nil, dir, "grant", "create", "--name", "phone", "--scope", "node", "--json"))
	cli(t, d.env(), nil, dir, "grant", "create", "--name", "build-agent", "--scope", "agent")

	// Click once the menu shows A2A on (the last rebuild the changes cause).
	d.Watcher.waitMenu(t, it, 15*time.Second, "A2A on in the menu", func(m menuNode) bool {
		pub, ok := m.item(labelPublish)
		_, act := m.item(labelActivity)
		return ok && act && pub.ToggleState == 1
	})
	d.Watcher.clickLabel(t, it, labelActivity)
	win, _ := waitWindow(t, d, "Activity", 30*time.Second)
	// The entries are rows of text in the lower half (the list; the
	// heading and the filter are above it): count the pixel rows there
	// that hold any ink.
	var prev image.Image
	_, first := pollShot(t, d, win, "activity-1-entries", "the entries drawn and settled", 15*time.Second, func(_ string, img image.Image) bool {
		ok := blankness(img) == "" && sameImage(prev, img) && inkRows(img) > 0
		prev = img
		return ok
	})
	before := inkRows(first)

	var gid struct{ ID string }
	if err := json.Unmarshal([]byte(id), &gid); err != nil || gid.ID == "" {
		t.Fatalf("grant create --json printed %q: %v", id, err)
	}
	cli(t, d.env(), nil, dir, "grant", "pause", gid.ID)
	prev = nil
	_, all := pollShot(t, d, win, "activity-2-live", "the new entry in the open window", 15*time.Second, func(_ string, img image.Image) bool {
		ok := !sameImage(first, img) && sameImage(prev, img) && blankness(img) == "" && inkRows(img) > before
		prev = img
		return ok
	})

	// Filter by device: a click on the device choice (the first wide bar
	// from the top) focuses it and opens its menu; Escape closes the menu,
	// and two steps right choose the third device, "phone" (All devices,
	// build-agent, phone): two of the four entries stay.
	y := selectRow(t, all)
	clickAt(t, d, win, all.Bounds().Dx()/2, y)
	time.Sleep(300 * time.Millisecond) // the menu opens; key events before it are lost (pacing, not synchronisation: the result is polled below)
	if out, err := xcmd(d, "xdotool", "key", "--window", win, "--delay", "150", "Escape", "Right", "Right").CombinedOutput(); err != nil {
		t.Fatalf("xdotool key: %v %s", err, out)
	}
	prev = nil
	pollShot(t, d, win, "activity-3-phone", "only the phone's entries", 15*time.Second, func(_ string, img image.Image) bool {
		ok := sameImage(prev, img) && blankness(img) == "" && inkRows(img) < inkRows(all) && inkRows(img) > 0
		prev = img
		return ok
	})
	if out := cli(t, d.env(), nil, dir, "audit", "--grant", gid.ID); !strings.Contains(out, "pause") || !strings.Contains(out, "cli") {
		t.Fatalf("audit of the paused grant:\n%s", out)
	}
}

// inkRows counts the pixel rows of img's lower half holding a pixel far
// from the background (the most common colour there): text drawn in the
// Activity window's list.
func inkRows(img image.Image) int {
	b := img.Bounds()
	top := b.Min.Y + b.Dy()/2
	counts := map[[3]uint32]int{}
	for y := top; y < b.Max.Y; y += 3 {
		for x := b.Min.X; x < b.Max.X; x += 3 {
			r, g, bl, _ := img.At(x, y).RGBA()
			counts[[3]uint32{r >> 8, g >> 8, bl >> 8}]++
		}
	}
	var bg [3]uint32
	for c, n := range counts {
		if n > counts[bg] {
			bg = c
		}
	}
	far := func(a, b uint32) bool { return a > b+60 || b > a+60 }
	rows := 0
	for y := top; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if far(r>>8, bg[0]) || far(g>>8, bg[1]) || far(bl>>8, bg[2]) {
				rows++
				break
			}
		}
	}
	return rows
}

// selectRow is the y of the first pixel row, from the top, where one
// colour other than the background runs across at least 40 % of img's
// width at its middle: the device choice's bar in the Activity window.
func selectRow(t *testing.T, img image.Image) int {
	t.Helper()
	b := img.Bounds()
	bg := img.At(b.Min.X+2, b.Min.Y+b.Dy()/2)
	for y := b.Min.Y; y < b.Min.Y+b.Dy()/2; y++ {
		mid := img.At(b.Min.X+b.Dx()/2, y)
		if mid == bg {
			continue
		}
		run := 0
		for x := b.Min.X + b.Dx()/2; x < b.Max.X && img.At(x, y) == mid; x++ {
			run++
		}
		for x := b.Min.X + b.Dx()/2 - 1; x >= b.Min.X && img.At(x, y) == mid; x-- {
			run++
		}
		if run*10 >= b.Dx()*4 {
			return y + 12
		}
	}
	t.Fatal("no device choice found in the Activity window")
	return 0
}
