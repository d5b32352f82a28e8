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
	pollShot(t, d, win, "activity-2-live", "the new entry in the open window", 15*time.Second, func(_ string, img image.Image) bool {
		ok := !sameImage(first, img) && sameImage(prev, img) && blankness(img) == "" && inkRows(img) > before
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
