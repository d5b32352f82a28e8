package mesh

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestRestoreManual: a peer added by hand before a restart is listed at
// once, offline, and comes online only when its address answers with the
// kept fingerprint; an address that now answers with another identity
// never brings the kept row online nor adds a row for the newcomer.
func TestRestoreManual(t *testing.T) {
	t.Parallel()
	self, peer, gone := newTestIdentity(t), newTestIdentity(t), newTestIdentity(t)
	d, ln := newManualLab(t, self, peer, Timing{ProbeTimeout: 2 * time.Second, Recheck: 100 * time.Millisecond})
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	url := "https://" + ln.Addr().String()

	if err := d.RestoreManual(url, peer.id, gone.fp, "x", "", time.Time{}); !errors.Is(err, ErrDeviceID) {
		t.Fatalf("an id not of the fingerprint: %v, want ErrDeviceID", err)
	}
	if err := d.RestoreManual(url, self.id, self.fp, "self", "", time.Time{}); !errors.Is(err, ErrSelf) {
		t.Fatalf("this device: %v, want ErrSelf", err)
	}
	if err := d.RestoreManual("http://"+ln.Addr().String(), peer.id, peer.fp, "x", "", time.Time{}); !errors.Is(err, ErrBadURL) {
		t.Fatalf("plain http: %v, want ErrBadURL", err)
	}

	// Kept as gone's address, which peer answers now.
	// Listed offline with its last known name, OS and sighting.
	seen := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	if err := d.RestoreManual(url, gone.id, gone.fp, "old box", "Debian GNU/Linux 12 (x86_64)", seen); err != nil {
		t.Fatal(err)
	}
	p, ok := d.Table().Get(gone.id)
	if !ok || p.Online || p.Name != "old box" || p.OS != "Debian GNU/Linux 12 (x86_64)" || !p.LastSeen.Equal(seen) ||
		p.FP != gone.fp || !slices.Equal(p.Sources, []Source{SourceManual}) {
		t.Fatalf("restored row %+v %v", p, ok)
	}
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(time.Millisecond) { // the first probe and several re-probes
		if p, _ := d.Table().Get(gone.id); p.Online {
			t.Fatalf("another identity at the kept address brought the row online: %+v", p)
		}
	}
	if _, ok := d.Table().Get(peer.id); ok {
		t.Fatal("the identity now at the address got a row without being added")
	}

	// The right identity: online, with what its hello says now.
	if err := d.RestoreManual(url, peer.id, peer.fp, "stale name", "", time.Time{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the restored peer online", func() bool {
		p, ok := d.Table().Get(peer.id)
		return ok && p.Online && p.Name == "desktop"
	})
	if !d.Table().Remove(peer.id) {
		t.Fatal("a restored peer is removed like an added one")
	}
}
