// Package keychain is meshtray's secret store: small items (identity key,
// grants, held tokens, agent tokens) addressed by a string key.
//
// Backends: the OS keychain through github.com/zalando/go-keyring (macOS
// Keychain, Windows Credential Manager, freedesktop Secret Service), a 0600
// file in the state directory (--keychain file), and an in-memory double for
// unit tests. go-keyring has no list operation, so every backend keeps an
// index of its keys; read-modify-write of the index is serialised across
// processes with a lock file, so two processes writing at once lose nothing.
package keychain

import "errors"

// MaxItemSize is the largest value, in bytes, one item may hold. The real
// limits are ~2560 bytes of password on Windows and ~3000 bytes for
// service+account+password on macOS (go-keyring ErrSetDataTooBig); we stay
// well below both so an item written on one OS fits on every other.
const MaxItemSize = 2000

var (
	// ErrNotFound is returned by Get and Delete for a key with no item.
	ErrNotFound = errors.New("keychain: item not found")
	// ErrTooBig is returned by Set for a value over MaxItemSize.
	ErrTooBig = errors.New("keychain: item too big")
	// ErrUnavailable wraps the reason no OS keychain can be reached
	// (no Secret Service on the session bus, a locked collection, ...).
	ErrUnavailable = errors.New("keychain: OS keychain unavailable")
)

// Store is a small secret store. Implementations are safe for concurrent use
// by several goroutines and, for the OS and file backends, several processes.
type Store interface {
	// Get returns the value stored under key, or ErrNotFound.
	Get(key string) ([]byte, error)
	// Set stores value under key, replacing any earlier value. It returns
	// ErrTooBig when len(value) > MaxItemSize.
	Set(key string, value []byte) error
	// Delete removes key; it returns ErrNotFound when there was no item.
	Delete(key string) error
	// Keys returns the keys starting with prefix, sorted.
	Keys(prefix string) ([]string, error)
}
