package app_test

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"meshtray/app"
	"meshtray/app/apptest"
	"meshtray/app/cli"
)

// trap listens on addr and counts the connections it gets, closing each.
func trap(t *testing.T, addr string) *atomic.Int64 {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return &n
}

// TestDialSendsTheTokenOnlyToTheNode: a client never sends the control
// token to a port the state dir's node does not listen on: not with a
// --port other than the node's (it says where the node is), and not to the
// port of a node that was killed (its daemon.json left behind) and that
// another program took since.
func TestDialSendsTheTokenOnlyToTheNode(t *testing.T) {
	n := apptest.StartNode(t, apptest.Options{Keychain: "file", Config: "tailscale = false\n"})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	hits := trap(t, "127.0.0.1:"+strconv.Itoa(port))
	r := n.CLI("status", "--port", strconv.Itoa(port))
	if r.Code != cli.ExitNotRunning || !strings.Contains(r.Stderr, "no meshtray on port "+strconv.Itoa(port)) || !strings.Contains(r.Stderr, "listens on "+strconv.Itoa(n.Port)) {
		t.Errorf("status --port %d: exit %d, stderr %q; want %d naming both ports", port, r.Code, r.Stderr, cli.ExitNotRunning)
	}
	if h := hits.Load(); h != 0 {
		t.Errorf("the client connected to port %d (%d times): the control token went to another program", port, h)
	}

	// kill -9: daemon.json stays; another program takes the port.
	if err := n.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	n.Wait(10 * time.Second)
	if _, err := os.Stat(filepath.Join(n.StateDir, "daemon.json")); err != nil {
		t.Fatalf("daemon.json after kill -9: %v (the test needs it left behind)", err)
	}
	squatter := trap(t, "127.0.0.1:"+strconv.Itoa(n.Port))
	r = n.CLI("status")
	if r.Code != cli.ExitNotRunning || !strings.Contains(r.Stderr, "not running") {
		t.Errorf("status after kill -9: exit %d, stderr %q; want %d, not running", r.Code, r.Stderr, cli.ExitNotRunning)
	}
	if h := squatter.Load(); h != 0 {
		t.Errorf("the client connected to the dead node's port (%d times): the control token went to whoever holds it", h)
	}
	// The next start replaces the stale daemon.json and the CLI works.
	n2 := apptest.StartNode(t, apptest.Options{StateDir: n.StateDir, Keychain: "file", Config: "tailscale = false\n"})
	if r := n2.CLI("status"); r.Code != 0 {
		t.Fatalf("status after restart: exit %d: %s", r.Code, r.Stderr)
	}
}

// TestKeychainBackendSwitchRefused: a state dir remembers the keychain
// backend its identity and grants live in; starting it with the other one
// (a flag, the config file, or --keychain os where keychain.json exists)
// is refused with what to do, instead of silently becoming a new device.
func TestKeychainBackendSwitchRefused(t *testing.T) {
	for _, tc := range []struct {
		name         string
		first, again string
		legacy       bool // remove the record: a state dir from before it
	}{
		{"file then os", app.KeychainFile, app.KeychainOS, false},
		{"os then file", app.KeychainOS, app.KeychainFile, false},
		{"legacy file dir, os", app.KeychainFile, app.KeychainOS, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := apptest.StartNode(t, apptest.Options{Keychain: tc.first, Config: "tailscale = false\n"})
			id := ptIdentity(t, n).ID
			if err := n.Stop(); err != nil {
				t.Fatal(err)
			}
			if tc.legacy {
				if err := os.Remove(filepath.Join(n.StateDir, "keychain.backend")); err != nil {
					t.Fatal(err)
				}
			}
			r := apptest.RunCLI(t, nil, "serve", "--state-dir", n.StateDir, "--port", "0", "--keychain", tc.again)
			if r.Code == 0 || !strings.Contains(r.Stderr, "--keychain "+tc.first) || !strings.Contains(r.Stderr, "new device") {
				t.Fatalf("serve --keychain %s on a %s state dir: exit %d\n%s", tc.again, tc.first, r.Code, r.Stderr)
			}
			// The config file choosing the other backend is refused too.
			if err := os.WriteFile(filepath.Join(n.StateDir, "config.toml"), []byte("tailscale = false\nkeychain = \""+tc.again+"\"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			r = apptest.RunCLI(t, nil, "serve", "--state-dir", n.StateDir, "--port", "0")
			if r.Code == 0 || !strings.Contains(r.Stderr, "--keychain "+tc.first) {
				t.Fatalf("config keychain = %s on a %s state dir: exit %d\n%s", tc.again, tc.first, r.Code, r.Stderr)
			}
			os.WriteFile(filepath.Join(n.StateDir, "config.toml"), []byte("tailscale = false\n"), 0o600)
			// With its own backend it is the same device.
			n2 := apptest.StartNode(t, apptest.Options{StateDir: n.StateDir, Keychain: tc.first})
			if got := ptIdentity(t, n2).ID; got != id {
				t.Fatalf("device ID %s after restart, want %s", got, id)
			}
		})
	}
}

// TestStateDirMadePrivate: an existing state dir others may read is made
// 0700 with a warning; a shared one (sticky, as /tmp) is refused.
func TestStateDirMadePrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	n := apptest.StartNode(t, apptest.Options{StateDir: dir, Keychain: "file", Config: "tailscale = false\n"})
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 || !strings.Contains(n.Logs(), "made private") || !strings.Contains(n.Logs(), "was=0755") {
		t.Fatalf("state dir mode %v after start (want 0700 and a warning)\n%s", fi.Mode().Perm(), n.Logs())
	}

	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(shared, 0o777|os.ModeSticky)
	r := apptest.RunCLI(t, nil, "serve", "--state-dir", shared, "--port", "0", "--keychain", "file")
	if fi, _ := os.Stat(shared); r.Code == 0 || !strings.Contains(r.Stderr, "private directory") || fi.Mode().Perm() != 0o777 {
		t.Fatalf("sticky shared state dir: exit %d, mode %v\n%s", r.Code, fi.Mode(), r.Stderr)
	}
	// Refused before anything is written there.
	if ents, _ := os.ReadDir(shared); len(ents) != 0 {
		t.Fatalf("the refused shared dir got %v", ents)
	}
}
