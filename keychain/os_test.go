package keychain_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zalando/go-keyring"

	"meshtray/keychain"
	"meshtray/keychain/keychaintest"
)

// openOS opens a fresh OS store on the private Secret Service.
func openOS(t *testing.T) (keychain.Store, string) {
	t.Helper()
	keychaintest.Require(t)
	service := keychaintest.ServiceName(t)
	ks, err := keychain.OpenOS(service, lockPath(t))
	if err != nil {
		t.Fatal(err)
	}
	return ks, service
}

// rawIndex reads index part i straight from go-keyring.
func rawIndex(t *testing.T, service string, i int) ([]string, error) {
	t.Helper()
	key := "index"
	if i > 0 {
		key = fmt.Sprintf("index.%d", i)
	}
	text, err := keyring.Get(service, key)
	if err != nil {
		return nil, err
	}
	raw, err := keychain.DecodeValue(text)
	if err != nil {
		t.Fatalf("index part %d: %v", i, err)
	}
	var keys []string
	if err := json.Unmarshal(raw, &keys); err != nil {
		t.Fatalf("index part %d: %v", i, err)
	}
	return keys, nil
}

// TestOSLayout checks what other programs (Seahorse, secret-tool, another
// meshtray) see: one keyring item per key under (service, key), its value in
// Ascii85 text, and the index in items "index", "index.1", ...
func TestOSLayout(t *testing.T) {
	t.Parallel()
	ks, service := openOS(t)
	value := []byte{0, 1, 2, 0xff, 'p', 'e', 'm'}
	if err := ks.Set("grant/a", value); err != nil {
		t.Fatal(err)
	}
	text, err := keyring.Get(service, "grant/a")
	if err != nil {
		t.Fatalf("go-keyring Get(%s, grant/a): %v", service, err)
	}
	if !strings.HasPrefix(text, "a85:") {
		t.Fatalf("stored text %q lacks the a85: prefix", text)
	}
	if got, err := keychain.DecodeValue(text); err != nil || string(got) != string(value) {
		t.Fatalf("stored text decodes to %v, %v", got, err)
	}
	if keys, err := rawIndex(t, service, 0); err != nil || len(keys) != 1 || keys[0] != "grant/a" {
		t.Fatalf("index = %v, %v", keys, err)
	}
	// The probe leaves nothing behind.
	for _, p := range []string{"index.1", "index.probe"} {
		if _, err := keyring.Get(service, p); !errors.Is(err, keyring.ErrNotFound) {
			t.Errorf("go-keyring Get(%s) = %v, want not found", p, err)
		}
	}

	// Enough long keys to need several index parts; deleting them all trims
	// the parts back to an empty "index".
	var long []string
	for i := range 30 {
		k := fmt.Sprintf("agent/%02d-%s", i, strings.Repeat("y", 150))
		long = append(long, k)
		if err := ks.Set(k, nil); err != nil {
			t.Fatal(err)
		}
	}
	parts := 0
	for i := 0; ; i++ {
		keys, err := rawIndex(t, service, i)
		if errors.Is(err, keyring.ErrNotFound) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(keys)
		if len(b) > keychain.MaxItemSize {
			t.Errorf("index part %d is %d bytes, over MaxItemSize", i, len(b))
		}
		parts++
	}
	if parts < 2 {
		t.Fatalf("30 keys of 156 bytes fit in %d index part(s), want several", parts)
	}
	t.Logf("31 keys in %d index parts", parts)
	for _, k := range long {
		if err := ks.Delete(k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := keyring.Get(service, "index.1"); !errors.Is(err, keyring.ErrNotFound) {
		t.Errorf("index.1 still there after deleting every key in it: %v", err)
	}
	wantKeys(t, ks, "", "grant/a")
}

// TestOSIndexAndItemsDisagree checks the documented outcomes when the index
// and the items disagree (a writer died between its two writes, or someone
// edited the keychain by hand).
func TestOSIndexAndItemsDisagree(t *testing.T) {
	t.Parallel()
	ks, service := openOS(t)

	// An indexed key whose item is gone: listed, Get ErrNotFound, Delete
	// un-indexes it and succeeds, a second Delete is ErrNotFound.
	mustSet(t, ks, "grant/gone", "x")
	if err := keyring.Delete(service, "grant/gone"); err != nil {
		t.Fatal(err)
	}
	wantKeys(t, ks, "", "grant/gone")
	if _, err := ks.Get("grant/gone"); !errors.Is(err, keychain.ErrNotFound) {
		t.Fatalf("Get of indexed key without item = %v, want ErrNotFound", err)
	}
	if err := ks.Delete("grant/gone"); err != nil {
		t.Fatalf("Delete of indexed key without item = %v, want nil", err)
	}
	wantKeys(t, ks, "")
	if err := ks.Delete("grant/gone"); !errors.Is(err, keychain.ErrNotFound) {
		t.Fatalf("second Delete = %v, want ErrNotFound", err)
	}

	// An item nobody indexed: Get finds it, Keys does not list it, Set
	// indexes it; Delete of such an item succeeds.
	if err := keyring.Set(service, "grant/orphan", keychain.EncodeValue([]byte("o"))); err != nil {
		t.Fatal(err)
	}
	wantValue(t, ks, "grant/orphan", "o")
	wantKeys(t, ks, "")
	mustSet(t, ks, "grant/orphan", "o2")
	wantKeys(t, ks, "", "grant/orphan")
	if err := keyring.Set(service, "grant/orphan2", keychain.EncodeValue([]byte("o"))); err != nil {
		t.Fatal(err)
	}
	if err := ks.Delete("grant/orphan2"); err != nil {
		t.Fatalf("Delete of unindexed item = %v, want nil", err)
	}
	if _, err := keyring.Get(service, "grant/orphan2"); !errors.Is(err, keyring.ErrNotFound) {
		t.Fatalf("item still there after Delete: %v", err)
	}

	// An item some other program wrote under our service: an error that is
	// not ErrNotFound (we must not treat a foreign secret as absent).
	if err := keyring.Set(service, "grant/foreign", "hunter2"); err != nil {
		t.Fatal(err)
	}
	_, err := ks.Get("grant/foreign")
	if err == nil || errors.Is(err, keychain.ErrNotFound) {
		t.Fatalf("Get of a foreign item = %v, want a format error", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error %q leaks the stored secret", err)
	}

	// A corrupt index is reported, not read as empty.
	if err := keyring.Set(service, "index", keychain.EncodeValue([]byte("{not json"))); err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Keys(""); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("Keys over a corrupt index = %v, want a corrupt-index error", err)
	}
	if _, err := keychain.OpenOS(service, lockPath(t)); err == nil || errors.Is(err, keychain.ErrUnavailable) {
		t.Fatalf("OpenOS over a corrupt index = %v, want a non-ErrUnavailable error", err)
	}
}

// gate is a MapKeyring hook that blocks every call on one key until opened.
type gate struct {
	key     string
	entered chan struct{} // receives once per blocked call
	open    chan struct{}
	once    sync.Once
}

func newGate(key string) *gate {
	return &gate{key: key, entered: make(chan struct{}, 16), open: make(chan struct{})}
}

func (g *gate) hook(op, user string) {
	if user == g.key {
		g.entered <- struct{}{}
		<-g.open
	}
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// TestOSTimeouts uses the go-keyring double to make calls hang and checks
// every operation gives up with ErrTimeout (and ErrUnavailable), and that a
// write that timed out keeps other writers out until it really ends.
func TestOSTimeouts(t *testing.T) {
	t.Parallel()
	const timeout = 100 * time.Millisecond

	t.Run("probe", func(t *testing.T) {
		t.Parallel()
		kr := keychain.NewMapKeyring()
		g := newGate("")
		kr.SetHook(func(op, user string) {
			if strings.HasPrefix(user, "index.probe.") {
				g.hook(op, "")
			}
		})
		defer g.release()
		_, err := keychain.OpenOSOn(kr, "meshtray", lockPath(t), timeout, timeout)
		if !errors.Is(err, keychain.ErrTimeout) || !errors.Is(err, keychain.ErrUnavailable) {
			t.Fatalf("OpenOS on a hanging keychain = %v, want ErrTimeout and ErrUnavailable", err)
		}
	})

	for _, op := range []string{"get", "keys", "set", "delete"} {
		t.Run(op, func(t *testing.T) {
			t.Parallel()
			kr := keychain.NewMapKeyring()
			ks, err := keychain.OpenOSOn(kr, "meshtray", lockPath(t), time.Second, timeout)
			if err != nil {
				t.Fatal(err)
			}
			mustSet(t, ks, "grant/a", "1")
			g := newGate("grant/a")
			if op == "keys" {
				g = newGate("index")
			}
			kr.SetHook(g.hook)
			defer g.release()
			start := time.Now()
			switch op {
			case "get":
				_, err = ks.Get("grant/a")
			case "keys":
				_, err = ks.Keys("")
			case "set":
				err = ks.Set("grant/a", []byte("2"))
			case "delete":
				err = ks.Delete("grant/a")
			}
			if !errors.Is(err, keychain.ErrTimeout) || !errors.Is(err, keychain.ErrUnavailable) {
				t.Fatalf("%s on a hanging keychain = %v, want ErrTimeout and ErrUnavailable", op, err)
			}
			if el := time.Since(start); el < timeout {
				t.Fatalf("%s gave up after %v, before the %v timeout", op, el, timeout)
			}
		})
	}

	t.Run("a timed-out write keeps the lock until it ends", func(t *testing.T) {
		t.Parallel()
		kr := keychain.NewMapKeyring()
		lock := lockPath(t)
		ks, err := keychain.OpenOSOn(kr, "meshtray", lock, time.Second, timeout)
		if err != nil {
			t.Fatal(err)
		}
		// A second store on the same lock file stands for another process.
		other, err := keychain.OpenOSOn(kr, "meshtray", lock, time.Second, timeout)
		if err != nil {
			t.Fatal(err)
		}
		g := newGate("grant/slow")
		kr.SetHook(g.hook)
		defer g.release()
		if err := ks.Set("grant/slow", []byte("1")); !errors.Is(err, keychain.ErrTimeout) {
			t.Fatalf("slow Set = %v, want ErrTimeout", err)
		}
		<-g.entered
		// The slow write is still in go-keyring: writers of this process
		// and of the other one time out instead of interleaving with it.
		if err := ks.Set("grant/b", []byte("2")); !errors.Is(err, keychain.ErrTimeout) || !strings.Contains(err.Error(), "another write of this process") {
			t.Fatalf("Set during the slow write = %v, want a timeout waiting for it", err)
		}
		if err := other.Set("grant/c", []byte("3")); !errors.Is(err, keychain.ErrTimeout) || !strings.Contains(err.Error(), "lock file") {
			t.Fatalf("other store's Set during the slow write = %v, want a timeout waiting for the lock file", err)
		}
		// Reads are not blocked.
		if _, err := ks.Get("grant/none"); !errors.Is(err, keychain.ErrNotFound) {
			t.Fatalf("Get during the slow write = %v", err)
		}
		g.release()
		// Once it ends, writes go through again, and the slow write has
		// landed whole (item and index): its caller was told it may.
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := other.Set("grant/c", []byte("3"))
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Set after the slow write ended: %v", err)
			}
		}
		wantKeys(t, ks, "", "grant/c", "grant/slow")
		if p := kr.PeakConcurrency(); p > 2 {
			// The slow Set plus at most one reader: no two writers at once.
			t.Errorf("peak concurrent go-keyring calls = %d", p)
		}
	})
}
