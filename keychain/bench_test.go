package keychain_test

import (
	"fmt"
	"testing"

	"github.com/zalando/go-keyring"

	"meshtray/keychain"
	"meshtray/keychain/keychaintest"
)

// BenchmarkStore prints, side by side, the cost of one Get, Set (replace)
// and Keys (50 keys) on each backend, next to the reference: go-keyring's
// own Get and Set on the same Secret Service (what the OS backend adds on
// top is the Ascii85 coding, the index read and the lock).
//
//	go test -run '^$' -bench BenchmarkStore ./keychain/
func BenchmarkStore(b *testing.B) {
	const keys = 50
	value := make([]byte, 500) // about a grant record
	for _, be := range backends() {
		if be.name == "memory" {
			continue // no I/O: nothing to compare
		}
		b.Run(be.name, func(b *testing.B) {
			ks, _ := be.open(b)
			for i := range keys {
				if err := ks.Set(fmt.Sprintf("grant/%03d", i), value); err != nil {
					b.Fatal(err)
				}
			}
			b.Run("Get", func(b *testing.B) {
				for b.Loop() {
					if _, err := ks.Get("grant/007"); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("Set", func(b *testing.B) {
				for b.Loop() {
					if err := ks.Set("grant/007", value); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("Keys", func(b *testing.B) {
				for b.Loop() {
					if k, err := ks.Keys("grant/"); err != nil || len(k) != keys {
						b.Fatal(len(k), err)
					}
				}
			})
		})
	}
	b.Run("reference-go-keyring", func(b *testing.B) {
		keychaintest.Require(b)
		service := keychaintest.ServiceName(b)
		text := keychain.EncodeValue(value)
		if err := keyring.Set(service, "grant/007", text); err != nil {
			b.Fatal(err)
		}
		b.Run("Get", func(b *testing.B) {
			for b.Loop() {
				if _, err := keyring.Get(service, "grant/007"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("Set", func(b *testing.B) {
			for b.Loop() {
				if err := keyring.Set(service, "grant/007", text); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}
