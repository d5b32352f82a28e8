package app_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"meshtray/app/apptest"
	"meshtray/store"
)

// TestCorruptDatabaseNamesFileAndFlag: a node whose database is not a
// database refuses to start, naming the file and the flag, and leaves the
// file alone; with the flag it keeps the file aside and starts empty.
func TestCorruptDatabaseNamesFileAndFlag(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, store.DefaultFile)
	junk := []byte(strings.Repeat("not a database, just words. ", 200))
	if err := os.WriteFile(db, junk, 0o600); err != nil {
		t.Fatal(err)
	}
	r := apptest.RunCLI(t, nil, "serve", "--state-dir", dir, "--port", "0", "--keychain", "file")
	if r.Code == 0 {
		t.Fatalf("serve started on a corrupt database:\n%s", r.Stderr)
	}
	for _, want := range []string{db, store.ResetFlag} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("error does not name %q:\n%s", want, r.Stderr)
		}
	}
	if got, _ := os.ReadFile(db); string(got) != string(junk) {
		t.Fatal("the refused start changed the corrupt file")
	}

	n := apptest.StartNode(t, apptest.Options{StateDir: dir, Keychain: "file", Args: []string{store.ResetFlag}})
	if r := n.CLI("status"); r.Code != 0 {
		t.Fatalf("status after reset: %d %s", r.Code, r.Stderr)
	}
	kept, _ := filepath.Glob(db + ".corrupt-*")
	if len(kept) != 1 {
		t.Fatalf("corrupt file not kept aside: %v", kept)
	}
	if got, _ := os.ReadFile(kept[0]); string(got) != string(junk) {
		t.Fatal("the kept copy is not the corrupt file")
	}
	if !strings.Contains(n.Logs(), "moved aside") {
		t.Errorf("the log does not say the database was moved aside:\n%s", n.Logs())
	}
	// The new database's trail starts with the reset: what went where.
	es := auditEntries(t, n)
	if len(es) == 0 || es[0].Kind != "database" || es[0].Subject != "reset" || es[0].Seq != 1 ||
		!strings.Contains(es[0].Params, "moved aside as "+filepath.Base(kept[0])) {
		t.Fatalf("first audit entry after the reset: %+v", es)
	}
	if out := ptCLI(t, n, "audit", "--kind", "database").Stdout; !strings.Contains(out, "reset meshtray.db was unreadable") {
		t.Errorf("audit --kind database:\n%s", out)
	}
}

// TestEmptyDatabaseRefused: a zero-byte meshtray.db (meshtray never
// leaves its database empty) is refused like a truncated one, naming the
// file and the flag; with the flag it is kept aside and the node starts
// with a new database.
func TestEmptyDatabaseRefused(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, store.DefaultFile)
	if err := os.WriteFile(db, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := apptest.RunCLI(t, []string{"LANG=C.UTF-8"}, "serve", "--state-dir", dir, "--port", "0", "--keychain", "file")
	t.Logf("serve on an empty database: exit %d\n%s", r.Code, r.Stderr)
	if r.Code == 0 {
		t.Fatalf("serve started on an empty database:\n%s", r.Stderr)
	}
	for _, want := range []string{db, store.ResetFlag, "empty"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("error does not name %q:\n%s", want, r.Stderr)
		}
	}
	n := apptest.StartNode(t, apptest.Options{StateDir: dir, Keychain: "file", Args: []string{store.ResetFlag}})
	if r := n.CLI("status"); r.Code != 0 {
		t.Fatalf("status after reset: %d %s", r.Code, r.Stderr)
	}
	if kept, _ := filepath.Glob(db + ".corrupt-*"); len(kept) != 1 {
		t.Fatalf("the empty file was not kept aside: %v", kept)
	}
}
