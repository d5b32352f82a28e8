package pairing

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"meshtray/keychain"
	"meshtray/keychain/keychaintest"
)

// Tests on the real backends: the OS keychain through go-keyring on a
// private Secret Service (gnome-keyring in its own dbus session, started
// by keychaintest in TestMain), and the 0600 file store.

// childEnv makes the test binary a child process: "issue" opens the store
// named by CHILD_BACKEND/CHILD_SERVICE/CHILD_LOCK/CHILD_PATH, creates the
// identity, issues a grant, stores a held grant, and prints a childOut.
const childEnv = "MESHTRAY_PAIRING_TEST_CHILD"

type childOut struct {
	DeviceID  string `json:"device_id"`
	GrantID   string `json:"grant_id"`
	Token     string `json:"token"`
	HeldPeer  string `json:"held_peer"`
	HeldToken string `json:"held_token"`
}

func openBackend(backend string) (keychain.Store, error) {
	if backend == "os" {
		return keychain.OpenOS(os.Getenv("CHILD_SERVICE"), os.Getenv("CHILD_LOCK"))
	}
	return keychain.OpenFile(os.Getenv("CHILD_PATH"))
}

func child(mode string) int {
	if mode != "issue" {
		fmt.Fprintln(os.Stderr, "unknown child mode", mode)
		return 2
	}
	fail := func(err error) int { fmt.Fprintln(os.Stderr, err); return 3 }
	ks, err := openBackend(os.Getenv("CHILD_BACKEND"))
	if err != nil {
		return fail(err)
	}
	id, err := LoadOrCreateIdentity(ks, "child")
	if err != nil {
		return fail(err)
	}
	g, err := NewGrants(ks, nil)
	if err != nil {
		return fail(err)
	}
	gr, tok, err := g.Issue(IssueRequest{PeerID: testDeviceID(1).String(), Name: "phone", Scopes: Scopes{ScopeNode}})
	if err != nil {
		return fail(err)
	}
	if _, err := g.Authenticate(tok); err != nil { // LastUsed, saved by Close
		return fail(err)
	}
	_, heldTok, _ := g.Issue(IssueRequest{Name: "token source", Scopes: Scopes{ScopeAgent}})
	peer := testDeviceID(2).String()
	if err := g.PutHeld(Held{PeerID: peer, Name: "desk", URL: "https://192.0.2.10:47654", Token: heldTok, Scopes: Scopes{ScopeAgent}}); err != nil {
		return fail(err)
	}
	if err := g.Close(); err != nil {
		return fail(err)
	}
	b, _ := json.Marshal(childOut{DeviceID: id.ID.String(), GrantID: gr.ID, Token: tok, HeldPeer: peer, HeldToken: heldTok})
	fmt.Println(string(b))
	return 0
}

type backend struct {
	name string
	env  []string
	open func(t *testing.T) keychain.Store
}

func backends(t *testing.T) []backend {
	keychaintest.Require(t)
	service, lock := keychaintest.ServiceName(t), filepath.Join(t.TempDir(), "keychain.lock")
	path := filepath.Join(t.TempDir(), "state", "keychain.json")
	return []backend{
		{"os", []string{"CHILD_BACKEND=os", "CHILD_SERVICE=" + service, "CHILD_LOCK=" + lock}, func(t *testing.T) keychain.Store {
			ks, err := keychain.OpenOS(service, lock)
			if err != nil {
				t.Fatal(err)
			}
			return ks
		}},
		{"file", []string{"CHILD_BACKEND=file", "CHILD_PATH=" + path}, func(t *testing.T) keychain.Store {
			ks, err := keychain.OpenFile(path)
			if err != nil {
				t.Fatal(err)
			}
			return ks
		}},
	}
}

// TestRestartKeepsEverythingOnRealKeychains: a child process creates the
// identity, issues a grant, uses it and stores a held grant, then exits;
// this process opens the same store and finds all of it, the token still
// valid.
func TestRestartKeepsEverythingOnRealKeychains(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(append(os.Environ(), childEnv+"=issue", "GORACE=atexit_sleep_ms=0"), b.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("child: %v\n%s", err, stderr.String())
			}
			var out childOut
			if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &out); err != nil {
				t.Fatalf("child printed %q", stdout.String())
			}

			ks := b.open(t)
			id, err := LoadOrCreateIdentity(ks, "parent")
			if err != nil || id.ID.String() != out.DeviceID {
				t.Fatalf("identity after restart: %v, %v (was %s)", id, err, out.DeviceID)
			}
			g := newGrants(t, ks)
			gr, err := g.Authenticate(out.Token)
			if err != nil || gr.ID != out.GrantID || gr.PeerID != testDeviceID(1).String() || gr.LastUsed.IsZero() {
				t.Fatalf("grant after restart: %+v, %v", gr, err)
			}
			h, err := g.Held(out.HeldPeer)
			if err != nil || h.Token != out.HeldToken || h.URL != "https://192.0.2.10:47654" {
				t.Fatalf("held after restart: %+v, %v", h, err)
			}
			// The issued item holds the hash only.
			raw, err := ks.Get("grant/" + out.GrantID)
			if err != nil || bytes.Contains(raw, []byte(out.Token[len(out.Token)-tokenSecretLen:])) {
				t.Fatalf("issued grant item: %v / contains the token", err)
			}
			// Revoke and drop reach the real store.
			if err := g.Revoke(out.GrantID); err != nil {
				t.Fatal(err)
			}
			if err := g.DropHeld(out.HeldPeer); err != nil {
				t.Fatal(err)
			}
			again := newGrants(t, b.open(t))
			if _, err := again.Authenticate(out.Token); err == nil {
				t.Fatal("revoked grant back after reopening")
			}
			if _, err := again.Held(out.HeldPeer); err == nil {
				t.Fatal("dropped held grant back after reopening")
			}
			keys, _ := ks.Keys("")
			t.Logf("%s store keys after revoke/drop: %v", b.name, keys)
		})
	}
}

// TestPairingOnOSKeychains pairs two nodes whose stores are two services
// of the real Secret Service, then reopens both stores: each side's issued
// and held grants survive and the tokens still work.
func TestPairingOnOSKeychains(t *testing.T) {
	keychaintest.Require(t)
	open := func(service, lock string) keychain.Store {
		ks, err := keychain.OpenOS(service, lock)
		if err != nil {
			t.Fatal(err)
		}
		return ks
	}
	sa, la := keychaintest.ServiceName(t)+"a", filepath.Join(t.TempDir(), "a.lock")
	sb, lb := keychaintest.ServiceName(t)+"b", filepath.Join(t.TempDir(), "b.lock")
	a := newNode(t, "laptop", nodeOpts{ks: open(sa, la)})
	b := newNode(t, "desktop", nodeOpts{ks: open(sb, lb)})
	s, _ := a.p.Start()
	sas := make(chan string, 1)
	decided := a.approveNext(t, sas, true, Scopes{ScopeNode})
	res, err := b.join(context.Background(), a, s, Scopes{ScopeAgent}, sas, nil)
	if err != nil || <-decided != nil {
		t.Fatal(err)
	}
	a.g.Close()
	b.g.Close()

	ga := newGrants(t, open(sa, la))
	gb := newGrants(t, open(sb, lb))
	hb, err := gb.Held(a.id.ID.String())
	if err != nil || hb.Token != res.Held.Token {
		t.Fatalf("B's held grant after reopening: %v", err)
	}
	if gr, err := ga.Authenticate(hb.Token); err != nil || gr.PeerID != b.id.ID.String() || gr.Scopes.String() != "node" {
		t.Fatalf("A honours B's token after reopening: %+v, %v", gr, err)
	}
	ha, err := ga.Held(b.id.ID.String())
	if err != nil {
		t.Fatal(err)
	}
	if gr, err := gb.Authenticate(ha.Token); err != nil || gr.PeerID != a.id.ID.String() || !strings.Contains(gr.Scopes.String(), "agent") {
		t.Fatalf("B honours A's token after reopening: %+v, %v", gr, err)
	}
}
