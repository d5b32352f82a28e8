package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"meshtray/app"
	"meshtray/app/apptest"
)

// TestUIQueueRoutes checks the tray-to-UI-process surface (app/ui.go) on a
// real node: validation, de-duplication, the bound, peek vs take, and the
// "ui" change notice the UI process wakes on.
func TestUIQueueRoutes(t *testing.T) {
	t.Parallel()
	n := apptest.StartNode(t, apptest.Options{Keychain: app.KeychainFile})
	c := n.Client
	ctx := context.Background()

	events := make(chan []app.EventType, 16)
	ectx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Events(ectx, func(ts []app.EventType) {
			select {
			case events <- ts:
			default:
			}
		})
	}()
	defer func() { cancel(); <-done }()

	for _, bad := range []app.UIRequest{
		{Window: "settings"},
		{Window: app.UIPeer},                                 // a peer needs its ID
		{Window: app.UIDevices, Arg: "x"},                    // only peer takes an argument
		{Window: app.UIPeer, Arg: string(make([]byte, 200))}, // bounded
	} {
		var ae *app.APIError
		if err := c.OpenUI(ctx, bad); !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
			t.Errorf("open %+v: %v, want 400", bad, err)
		}
	}
	open := func(r app.UIRequest) {
		t.Helper()
		if err := c.OpenUI(ctx, r); err != nil {
			t.Fatalf("open %+v: %v", r, err)
		}
	}
	open(app.UIRequest{Window: app.UIApprovals})
	open(app.UIRequest{Window: app.UIApprovals}) // a duplicate is dropped
	open(app.UIRequest{Window: app.UIPeer, Arg: "PEER1"})

	deadline := time.After(10 * time.Second)
	for got := false; !got; {
		select {
		case ts := <-events:
			for _, e := range ts {
				got = got || e == app.EventUI
			}
		case <-deadline:
			t.Fatal("no ui change notice on GET /events")
		}
	}
	peek, err := c.PendingUI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(peek) != 2 || peek[0].Window != app.UIApprovals || peek[1] != (app.UIRequest{Window: app.UIPeer, Arg: "PEER1"}) {
		t.Fatalf("peek = %+v", peek)
	}
	take, err := c.TakeUI(ctx)
	if err != nil || len(take) != 2 {
		t.Fatalf("take = %+v, %v", take, err)
	}
	if after, err := c.PendingUI(ctx); err != nil || len(after) != 0 {
		t.Fatalf("after take: %+v, %v", after, err)
	}
	// Bounded: the oldest requests give way.
	for i := range 40 {
		open(app.UIRequest{Window: app.UIPeer, Arg: fmt.Sprintf("P%02d", i)})
	}
	if take, err = c.TakeUI(ctx); err != nil {
		t.Fatal(err)
	}
	if len(take) != 16 || take[0].Arg != "P24" || take[15].Arg != "P39" {
		t.Fatalf("after 40 requests: %d kept, first %+v", len(take), take[0])
	}
	// A peer that gave us no grant: 404, saying to pair.
	var ae *app.APIError
	if err := func() error { _, err := c.PeerManifest(ctx, "AAAAAAA-BBBBBBB"); return err }(); !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
		t.Fatalf("manifest of an unpaired peer: %v, want 404", err)
	}
	// The queue is the local owner's: no token, no access.
	resp, err := http.Post(n.BaseURL+"/ui/open", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /ui/open without the control token: %d, want 401", resp.StatusCode)
	}
}
