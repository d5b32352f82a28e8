package keychain_test

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"meshtray/keychain"
	"meshtray/keychain/keychaintest"
)

// backend opens a fresh, empty store of one kind; reopen (nil for Memory)
// opens a second Store on the same data, as a restarted process would.
type backend struct {
	name string
	open func(t testing.TB) (ks keychain.Store, reopen func() keychain.Store)
}

func backends() []backend {
	return []backend{
		{"memory", func(t testing.TB) (keychain.Store, func() keychain.Store) {
			return keychain.NewMemory(), nil
		}},
		{"file", func(t testing.TB) (keychain.Store, func() keychain.Store) {
			path := filepath.Join(t.TempDir(), "state", "keychain.json")
			open := func() keychain.Store {
				ks, err := keychain.OpenFile(path)
				if err != nil {
					t.Fatal(err)
				}
				return ks
			}
			return open(), open
		}},
		{"os-secret-service", func(t testing.TB) (keychain.Store, func() keychain.Store) {
			keychaintest.Require(t)
			service, lock := keychaintest.ServiceName(t), lockPath(t)
			open := func() keychain.Store {
				ks, err := keychain.OpenOS(service, lock)
				if err != nil {
					t.Fatal(err)
				}
				return ks
			}
			return open(), open
		}},
		{"os-double", func(t testing.TB) (keychain.Store, func() keychain.Store) {
			kr, lock := keychain.NewMapKeyring(), lockPath(t)
			open := func() keychain.Store {
				ks, err := keychain.OpenOSOn(kr, "meshtray", lock, time.Second, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				return ks
			}
			return open(), open
		}},
	}
}

// behaviours is the Store contract, run against every backend.
var behaviours = []struct {
	name string
	run  func(t *testing.T, ks keychain.Store, reopen func() keychain.Store)
}{
	{"get missing is ErrNotFound", func(t *testing.T, ks keychain.Store, _ func() keychain.Store) {
		if _, err := ks.Get("grant/none"); !errors.Is(err, keychain.ErrNotFound) {
			t.Fatalf("Get = %v, want ErrNotFound", err)
		}
	}},
	{"values round trip byte for byte", func(t *testing.T, ks keychain.Store, _ func() keychain.Store) {
		allBytes := make([]byte, keychain.MaxItemSize)
		for i := range allBytes {
			allBytes[i] = byte(i * 7)
		}
		values := map[string][]byte{
			"v/empty":    {},
			"v/one":      {0},
			"v/zeros":    make([]byte, keychain.MaxItemSize), // Ascii85 "z" groups
			"v/all":      allBytes,
			"v/odd":      allBytes[:keychain.MaxItemSize-3],
			"v/pem":      []byte("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\n"),
			"v/utf8":     []byte("größe ✓ 設定"),
			"v/ff":       bytes.Repeat([]byte{0xff}, 5),
			"v/newlines": []byte("\n\r\n\t "),
		}
		for k, v := range values {
			if err := ks.Set(k, v); err != nil {
				t.Fatalf("Set(%s): %v", k, err)
			}
		}
		for k, v := range values {
			got, err := ks.Get(k)
			if err != nil || !bytes.Equal(got, v) {
				t.Errorf("Get(%s) = %d bytes %v, want %d bytes", k, len(got), err, len(v))
			}
		}
	}},
	{"set replaces", func(t *testing.T, ks keychain.Store, _ func() keychain.Store) {
		mustSet(t, ks, "grant/a", "one")
		mustSet(t, ks, "grant/a", "two")
		wantValue(t, ks, "grant/a", "two")
		wantKeys(t, ks, "", "grant/a")
	}},
	{"values are copies", func(t *testing.T, ks keychain.Store, _ func() keychain.Store) {
		in := []byte("secret")
		if err := ks.Set("grant/a", in); err != nil {
			t.Fatal(err)
		}
		in[0] = 'X'
		out, err := ks.Get("grant/a")
		if err != nil {
			t.Fatal(err)
		}
		out[1] = 'Y'
		wantValue(t, ks, "grant/a", "secret")
	}},
	{"delete", func(t *testing.T, ks keychain.Store, _ func() keychain.Store) {
		mustSet(t, ks, "grant/a", "1")
		mustSet(t, ks, "grant/b", "2")
		if err := ks.Delete("grant/a"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if _, err := ks.Get("grant/a"); !errors.Is(err, keychain.ErrNotFound) {
			t.Fatalf("Get after Delete = %v, want ErrNotFound", err)
		}
		if err := ks.Delete("grant/a"); !errors.Is(err, keychain.ErrNotFound) {
			t.Fatalf("second Delete = %v, want ErrNotFound", err)
		}
		if err := ks.Delete("grant/never"); !errors.Is(err, keychain.ErrNotFound) {
			t.Fatalf("Delete of a never-set key = %v, want ErrNotFound", err)
		}
		wantKeys(t, ks, "", "grant/b")
		wantValue(t, ks, "grant/b", "2")
	}},
	{"keys by prefix, sorted", func(t *testing.T, ks keychain.Store, _ func() keychain.Store) {
		wantKeys(t, ks, "")
		for _, k := range []string{"held/x", "grant/b", "grantx", "grant/a", "identity/key"} {
			mustSet(t, ks, k, k)
		}
		wantKeys(t, ks, "grant/", "grant/a", "grant/b")
		wantKeys(t, ks, "grant", "grant/a", "grant/b", "grantx")
		wantKeys(t, ks, "", "grant/a", "grant/b", "grantx", "held/x", "identity/key")
		wantKeys(t, ks, "agent/")
	}},
	{"too big is refused whole", func(t *testing.T, ks keychain.Store, _ func() keychain.Store) {
		if err := ks.Set("grant/max", make([]byte, keychain.MaxItemSize)); err != nil {
			t.Fatalf("Set of MaxItemSize bytes: %v", err)
		}
		err := ks.Set("grant/big", make([]byte, keychain.MaxItemSize+1))
		if !errors.Is(err, keychain.ErrTooBig) {
			t.Fatalf("Set of MaxItemSize+1 bytes = %v, want ErrTooBig", err)
		}
		if _, err := ks.Get("grant/big"); !errors.Is(err, keychain.ErrNotFound) {
			t.Fatalf("Get of refused item = %v, want ErrNotFound", err)
		}
		mustSet(t, ks, "grant/a", "old")
		if err := ks.Set("grant/a", make([]byte, keychain.MaxItemSize+1)); !errors.Is(err, keychain.ErrTooBig) {
			t.Fatalf("replacing Set too big = %v", err)
		}
		wantValue(t, ks, "grant/a", "old")
		wantKeys(t, ks, "", "grant/a", "grant/max")
	}},
	{"invalid keys", func(t *testing.T, ks keychain.Store, _ func() keychain.Store) {
		for _, key := range []string{
			"", "index", "index.1", "index.probe.00", "with space", "tab\t", "nul\x00",
			"quote'", "semi;colon", "größe", strings.Repeat("k", keychain.MaxKeyLen+1),
		} {
			if err := ks.Set(key, []byte("x")); !errors.Is(err, keychain.ErrInvalidKey) {
				t.Errorf("Set(%q) = %v, want ErrInvalidKey", key, err)
			}
			if _, err := ks.Get(key); !errors.Is(err, keychain.ErrInvalidKey) {
				t.Errorf("Get(%q) = %v, want ErrInvalidKey", key, err)
			}
			if err := ks.Delete(key); !errors.Is(err, keychain.ErrInvalidKey) {
				t.Errorf("Delete(%q) = %v, want ErrInvalidKey", key, err)
			}
		}
		long := strings.Repeat("k", keychain.MaxKeyLen)
		for _, key := range []string{"indexes", "my.index", "a", long, "held/ABCDEFG-HIJKLMN", "x_y:z@h+1=2.3-4"} {
			mustSet(t, ks, key, "ok")
			wantValue(t, ks, key, "ok")
		}
	}},
	{"concurrent writers lose nothing", func(t *testing.T, ks keychain.Store, _ func() keychain.Store) {
		const goroutines, each = 6, 8
		var wg sync.WaitGroup
		errs := make(chan error, goroutines*each)
		var want []string
		for g := range goroutines {
			for j := range each {
				want = append(want, fmt.Sprintf("g%d/k%d", g, j))
			}
			wg.Go(func() {
				for j := range each {
					if err := ks.Set(fmt.Sprintf("g%d/k%d", g, j), []byte{byte(g), byte(j)}); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		slices.Sort(want)
		wantKeys(t, ks, "", want...)
	}},
	{"many long keys", func(t *testing.T, ks keychain.Store, _ func() keychain.Store) {
		// 40 keys of 150 bytes overflow one MaxItemSize index part many
		// times over in the OS backend.
		var want []string
		for i := range 40 {
			want = append(want, fmt.Sprintf("agent/%03d-%s", i, strings.Repeat("x", 140)))
		}
		for _, k := range want {
			mustSet(t, ks, k, k[:10])
		}
		wantKeys(t, ks, "agent/", want...)
		wantValue(t, ks, want[39], want[39][:10])
		for _, k := range want[:20] {
			if err := ks.Delete(k); err != nil {
				t.Fatal(err)
			}
		}
		wantKeys(t, ks, "", want[20:]...)
		for _, k := range want[20:] {
			if err := ks.Delete(k); err != nil {
				t.Fatal(err)
			}
		}
		wantKeys(t, ks, "")
		mustSet(t, ks, "agent/again", "1")
		wantKeys(t, ks, "", "agent/again")
	}},
	{"survives reopen", func(t *testing.T, ks keychain.Store, reopen func() keychain.Store) {
		if reopen == nil {
			return // Memory keeps nothing, by design
		}
		mustSet(t, ks, "identity/key", "pem")
		mustSet(t, ks, "grant/a", "1")
		mustSet(t, ks, "grant/b", "2")
		if err := ks.Delete("grant/a"); err != nil {
			t.Fatal(err)
		}
		ks2 := reopen()
		wantKeys(t, ks2, "", "grant/b", "identity/key")
		wantValue(t, ks2, "identity/key", "pem")
		// Writes through either handle are seen by the other.
		mustSet(t, ks2, "grant/c", "3")
		wantKeys(t, ks, "grant/", "grant/b", "grant/c")
		wantValue(t, ks, "grant/c", "3")
	}},
}

func TestStoreContract(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			for _, bh := range behaviours {
				t.Run(bh.name, func(t *testing.T) {
					t.Parallel()
					ks, reopen := b.open(t)
					bh.run(t, ks, reopen)
				})
			}
		})
	}
}

func mustSet(t *testing.T, ks keychain.Store, key, value string) {
	t.Helper()
	if err := ks.Set(key, []byte(value)); err != nil {
		t.Fatalf("Set(%s): %v", key, err)
	}
}

func wantValue(t *testing.T, ks keychain.Store, key, want string) {
	t.Helper()
	got, err := ks.Get(key)
	if err != nil || string(got) != want {
		t.Fatalf("Get(%s) = %q, %v; want %q", key, got, err, want)
	}
}

func wantKeys(t *testing.T, ks keychain.Store, prefix string, want ...string) {
	t.Helper()
	got, err := ks.Keys(prefix)
	if err != nil {
		t.Fatalf("Keys(%q): %v", prefix, err)
	}
	if len(got) != len(want) || (len(want) > 0 && !slices.Equal(got, want)) {
		t.Fatalf("Keys(%q) = %q, want %q", prefix, got, want)
	}
}
