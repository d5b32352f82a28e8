package app_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshtray/app"
	"meshtray/app/apptest"
)

// TestStartRemovesStaleKeychainTemps: a temp copy of the file keychain that
// a writer killed mid-write left in the state dir (identity key and all)
// is removed at the next start, and the log says so.
func TestStartRemovesStaleKeychainTemps(t *testing.T) {
	dir := t.TempDir()
	n := apptest.StartNode(t, apptest.Options{StateDir: dir, Keychain: "file", Config: "tailscale = false\n"})
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	store, err := os.ReadFile(filepath.Join(dir, "keychain.json"))
	if err != nil {
		t.Fatal(err)
	}
	// What keychain.WriteFile leaves when killed between write and rename.
	tmp, err := os.CreateTemp(dir, ".keychain.json.tmp*")
	if err != nil {
		t.Fatal(err)
	}
	tmp.Write(store)
	tmp.Close()
	n2 := apptest.StartNode(t, apptest.Options{StateDir: dir, Keychain: "file", Config: "tailscale = false\n"})
	if _, err := os.Stat(tmp.Name()); !os.IsNotExist(err) {
		t.Errorf("%s still there after a start (%v)", filepath.Base(tmp.Name()), err)
	}
	if logs := n2.Logs(); !strings.Contains(logs, "removed temp copies of the file keychain") || !strings.Contains(logs, filepath.Base(tmp.Name())) {
		t.Errorf("the start does not say it removed %s:\n%s", filepath.Base(tmp.Name()), logs)
	}
}

// TestUncollectedPairingGrantDiesWithNode: a pairing the owner approved
// whose token the device never collected is listed as uncollected, and
// after the node is killed (kill -9) and started again it is revoked.
func TestUncollectedPairingGrantDiesWithNode(t *testing.T) {
	dir := t.TempDir()
	n := apptest.StartNode(t, apptest.Options{StateDir: dir, Keychain: "file", Config: "tailscale = false\n"})
	grantID := ptApproveUncollected(t, n, "pixel", "agent,node")
	var before app.Devices
	ptJSON(t, n, &before, "devices")
	listed := false
	for _, g := range before.Issued {
		if g.ID == grantID {
			listed = true
			if !g.Uncollected {
				t.Errorf("grant %s not marked uncollected before its token was collected: %+v", grantID, g)
			}
		}
	}
	if !listed {
		t.Errorf("grant %s not listed after the approval", grantID)
	}
	if err := n.Signal(os.Kill); err != nil {
		t.Fatal(err)
	}
	if exited, _ := n.Wait(10 * time.Second); !exited {
		t.Fatal("node did not die")
	}
	n2 := apptest.StartNode(t, apptest.Options{StateDir: dir, Keychain: "file", Config: "tailscale = false\n"})
	var after app.Devices
	ptJSON(t, n2, &after, "devices")
	for _, g := range after.Issued {
		if g.ID == grantID {
			t.Errorf("the uncollected grant %s is active after the restart: %+v", grantID, g)
		}
	}
	if !strings.Contains(n2.Logs(), "never collected") {
		t.Errorf("the start does not say it revoked the uncollected grant")
	}
}

// TestControlSocketLongStateDir: a state dir whose control.sock path would
// not fit sun_path puts the socket in a private runtime dir instead, and
// the owner's CLI finds it there through daemon.json.
func TestControlSocketLongStateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("long-state-dir-", 8))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	n := apptest.StartNode(t, apptest.Options{StateDir: dir, Keychain: "file", Config: "tailscale = false\n"})
	d, err := app.ReadDaemonInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d.Socket == "" || strings.HasPrefix(d.Socket, dir) || len(d.Socket) > 103 {
		t.Fatalf("control socket %q (%d bytes) for a state dir of %d bytes", d.Socket, len(d.Socket), len(dir))
	}
	fi, err := os.Stat(filepath.Dir(d.Socket))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("socket dir: %v, mode %v", err, fi.Mode())
	}
	if r := n.CLI("status"); r.Code != 0 {
		t.Fatalf("status: exit %d: %s", r.Code, r.Stderr)
	}
	if n.Client.Socket() != d.Socket {
		t.Errorf("client talks to %q, want the socket %q", n.Client.Socket(), d.Socket)
	}
}
