package mesh

import (
	"context"
	"errors"
	"testing"
	"time"

	"meshtray/egress"
)

// TestManualPeerFromNetworkUnderPolicy: a manual peer a request from the
// network adds is probed only where the egress policy allows, at the add
// and at every re-probe after it (a name may resolve to this machine
// later); the owner's add is not limited.
func TestManualPeerFromNetworkUnderPolicy(t *testing.T) {
	t.Parallel()
	self, peer := newTestIdentity(t), newTestIdentity(t)
	d, peerLn := newManualLab(t, self, peer, Timing{ProbeTimeout: 2 * time.Second})
	url := "https://" + peerLn.Addr().String()
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if _, err := d.Table().AddManual(egress.FromNetwork(context.Background()), url); !errors.Is(err, egress.ErrRefused) {
		t.Fatalf("network caller adding a loopback peer: %v, want egress.ErrRefused", err)
	}
	if len(d.Table().Snapshot()) != 0 {
		t.Fatal("a refused add left a row")
	}
	p, err := d.Table().AddManual(context.Background(), url)
	if err != nil || !p.Online {
		t.Fatalf("owner's add: %+v, %v", p, err)
	}
	// As if a network caller had added it (at an address that resolved
	// elsewhere then): the re-probe follows the policy and fails.
	d.table.mu.Lock()
	d.table.rows[p.ID].by[SourceManual].fromNetwork = true
	d.table.mu.Unlock()
	d.recheck()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if q, ok := d.Table().Get(p.ID); ok && !q.Online {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a re-probe of a network-added peer reached this machine's loopback")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
