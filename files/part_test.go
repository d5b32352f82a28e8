package files

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestNamedInfoURI: RFC 6920's "ni" form of a SHA-256, both ways; the
// package doc's example is exact.
func TestNamedInfoURI(t *testing.T) {
	const foo = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae" // sha256("foo")
	u := NamedInfoURI(foo)
	if u != "ni:///sha-256;LCa0a2j_xo_5m0U8HTBBNBNCLXBkg7-g-YpeiGJm564" {
		t.Fatalf("NamedInfoURI = %q", u)
	}
	if got, err := ParseNamedInfoURI(u); err != nil || got != foo {
		t.Fatalf("ParseNamedInfoURI = %q, %v", got, err)
	}
	if got, err := ParseNamedInfoURI(u + "?ct=text/plain"); err != nil || got != foo {
		t.Fatalf("with a query: %q, %v", got, err)
	}
	for _, bad := range []string{"", "https://x/y", "ni:///sha-512;LCa0", "ni:///sha-256;", "ni:///sha-256;LCa0a2j", "ni:///sha-256;" + foo} {
		if _, err := ParseNamedInfoURI(bad); !errors.Is(err, ErrBadManifest) {
			t.Errorf("ParseNamedInfoURI(%q) = %v, want ErrBadManifest", bad, err)
		}
	}
	if NamedInfoURI("abc") != "" || NamedInfoURI(foo[:62]+"zz") != "" {
		t.Error("a malformed sum gave a URI")
	}
	if !IsNamedInfoURI("NI:///sha-256;x") || IsNamedInfoURI("nix") || IsNamedInfoURI("https://x") {
		t.Error("IsNamedInfoURI")
	}
}

// TestReceiverSweepsStalePartials: partial files of a process that died
// are removed when a receiver opens the folder; other files stay, in
// sub-folders too.
func TestReceiverSweepsStalePartials(t *testing.T) {
	dir := t.TempDir()
	keep := []string{"photo.jpg", "Trip/day1.txt", "Trip/.hidden", "x.meshtray-partial.txt"}
	stale := []string{".T1.0" + partialSuffix, "Trip/sub/.T1.3" + partialSuffix}
	for _, p := range append(append([]string{}, keep...), stale...) {
		full := filepath.Join(dir, filepath.FromSlash(p))
		os.MkdirAll(filepath.Dir(full), 0o700)
		if err := os.WriteFile(full, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r, err := NewReceiver(dir, Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, p := range keep {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
	for _, p := range stale {
		if _, err := os.Stat(filepath.Join(dir, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stale %s is still there (%v)", p, err)
		}
	}
}

// TestCheckIsBeginWithoutRegistering: Check refuses what Begin refuses and
// registers nothing.
func TestReserveIsBeginWithoutRegistering(t *testing.T) {
	r, err := NewReceiver(t.TempDir(), Limits{MaxFiles: 2, KeepFree: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sum := "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"
	e := Entry{Name: "a", Path: "a", Size: 3, SHA256: sum}
	if err := r.Reserve("t1", Manifest{Files: []Entry{e, e, e}}); !errors.Is(err, ErrTooMany) {
		t.Errorf("three files: %v", err)
	}
	if err := r.Reserve("t1", Manifest{Files: []Entry{{Name: "x", Path: "../x", Size: 1, SHA256: sum}}}); !errors.Is(err, ErrBadName) {
		t.Errorf("../x: %v", err)
	}
	if err := r.Reserve("t1", Manifest{Files: []Entry{e}}); err != nil {
		t.Fatalf("one file: %v", err)
	}
	if _, err := r.Transfer("t1"); !errors.Is(err, ErrNotFound) {
		t.Fatal("Reserve began a transfer")
	}
	if got := r.Reserved(); got != 3 {
		t.Fatalf("reserved %d bytes, want 3", got)
	}
	r.Release("t1")
	if got := r.Reserved(); got != 0 {
		t.Fatalf("reserved %d bytes after Release, want 0", got)
	}
}
