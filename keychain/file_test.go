package keychain_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"meshtray/keychain"
)

func TestFileModesAndFormat(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "new", "state")
	path := filepath.Join(dir, "keychain.json")
	ks, err := keychain.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, path: 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s mode %v, want %v", p, fi.Mode(), want)
		}
	}
	mustSet(t, ks, "grant/a", "\x00secret")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		V     int               `json:"v"`
		Items map[string][]byte `json:"items"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil || doc.V != 1 || string(doc.Items["grant/a"]) != "\x00secret" {
		t.Fatalf("file %s = %s (%v), want {v:1, items:{grant/a: base64}}", path, raw, err)
	}
	// Atomic writes leave no temp files behind.
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "keychain.json,keychain.json.lock" {
		t.Errorf("state dir holds %v, want only the store and its lock file", names)
	}
	if fi, _ := os.Stat(path); fi.Mode() != 0o600 {
		t.Errorf("after a write the file mode is %v, want 0600", fi.Mode())
	}
}

func TestFileRefusesInsecureOrForeignFiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		mode    os.FileMode
		content string
		want    error  // errors.Is target, nil: any error
		msg     string // in the error
	}{
		{"group readable", 0o640, `{"v":1,"items":{}}`, keychain.ErrInsecure, "chmod 600"},
		{"world readable", 0o644, `{"v":1,"items":{}}`, keychain.ErrInsecure, "chmod 600"},
		{"group writable", 0o620, `{"v":1,"items":{}}`, keychain.ErrInsecure, "chmod 600"},
		{"corrupt", 0o600, `{"v":1,"items":`, nil, "corrupt"},
		{"other version", 0o600, `{"v":2,"items":{}}`, nil, "version 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "keychain.json")
			if err := os.WriteFile(path, []byte(tc.content), tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tc.mode); err != nil { // past the umask
				t.Fatal(err)
			}
			_, err := keychain.OpenFile(path)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("OpenFile = %v, want %v mentioning %q", err, tc.want, tc.msg)
			}
			// Refused, not repaired: the mode and content are unchanged.
			fi, _ := os.Stat(path)
			b, _ := os.ReadFile(path)
			if fi.Mode() != tc.mode || string(b) != tc.content {
				t.Errorf("OpenFile changed the file: mode %v, content %q", fi.Mode(), b)
			}
		})
	}

	t.Run("loosened while open", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "keychain.json")
		ks, err := keychain.OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		mustSet(t, ks, "grant/a", "1")
		if err := os.Chmod(path, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ks.Get("grant/a"); !errors.Is(err, keychain.ErrInsecure) {
			t.Fatalf("Get after chmod 644 = %v, want ErrInsecure", err)
		}
		if err := ks.Set("grant/b", []byte("2")); !errors.Is(err, keychain.ErrInsecure) {
			t.Fatalf("Set after chmod 644 = %v, want ErrInsecure", err)
		}
	})

	t.Run("owned by another user", func(t *testing.T) {
		t.Parallel()
		if os.Getuid() != 0 {
			t.Skip("chown to another user needs root (CI runs as root)")
		}
		path := filepath.Join(t.TempDir(), "keychain.json")
		if err := os.WriteFile(path, []byte(`{"v":1,"items":{}}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(path, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := keychain.OpenFile(path); !errors.Is(err, keychain.ErrInsecure) || !strings.Contains(err.Error(), "uid 65534") {
			t.Fatalf("OpenFile of a file owned by uid 65534 = %v, want ErrInsecure", err)
		}
	})

	t.Run("removed while open", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "keychain.json")
		ks, err := keychain.OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		mustSet(t, ks, "grant/a", "1")
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		// A vanished store is an error, never silently an empty one that the
		// next Set would write back without the earlier grants.
		if err := ks.Set("grant/b", []byte("2")); err == nil || errors.Is(err, keychain.ErrNotFound) {
			t.Fatalf("Set after the file was removed = %v, want an error", err)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Set re-created the removed file: %v", err)
		}
	})
}
