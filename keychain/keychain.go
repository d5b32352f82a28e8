// Package keychain is meshtray's secret store: small items (identity key,
// grants, held tokens, agent tokens) addressed by a string key.
//
// Backends: the OS keychain through github.com/zalando/go-keyring (macOS
// Keychain, Windows Credential Manager, freedesktop Secret Service), a 0600
// file in the state directory (--keychain file), and an in-memory double for
// unit tests. go-keyring has no list operation, so every backend keeps an
// index of its keys; read-modify-write of the index is serialised across
// processes with a lock file, so two processes writing at once lose nothing.
//
// Keys are 1 to MaxKeyLen bytes of ASCII letters, digits and "._:/@+=-"
// (e.g. "grant/6f1c", "held/ABCDEFG-..."); "index" and keys starting with
// "index." are reserved for the OS backend's index. Other keys fail with
// ErrInvalidKey on every backend, so a key that works in a unit test against
// the Memory double works against the OS keychain too.
package keychain

import (
	"errors"
	"fmt"
	"strings"
)

// MaxItemSize is the largest value, in bytes, one item may hold. The real
// limits are ~2560 bytes of password on Windows and ~3000 bytes for
// service+account+password on macOS (go-keyring ErrSetDataTooBig); we stay
// well below both so an item written on one OS fits on every other.
const MaxItemSize = 2000

// MaxKeyLen is the longest key, in bytes. With MaxItemSize it keeps one
// macOS `security -i` command line (service, account and password, quoted)
// under its 4096-byte cap.
const MaxKeyLen = 200

var (
	// ErrNotFound is returned by Get and Delete for a key with no item.
	ErrNotFound = errors.New("keychain: item not found")
	// ErrTooBig is returned by Set for a value over MaxItemSize.
	ErrTooBig = errors.New("keychain: item too big")
	// ErrUnavailable wraps the reason no OS keychain can be reached
	// (no Secret Service on the session bus, a locked collection, ...).
	ErrUnavailable = errors.New("keychain: OS keychain unavailable")
	// ErrInvalidKey is returned for a key outside the rules in the package
	// documentation (empty, too long, other characters, reserved).
	ErrInvalidKey = errors.New("keychain: invalid key")
	// ErrTimeout is returned, together with ErrUnavailable, when the OS
	// keychain did not answer within the store's timeout (go-keyring can
	// block forever, e.g. on a Secret Service unlock prompt nobody answers).
	ErrTimeout = errors.New("keychain: OS keychain did not answer in time")
	// ErrInsecure is returned by OpenFile (and later reads) for a store file
	// that other users could read or write, or that another user owns.
	ErrInsecure = errors.New("keychain: insecure store file")
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

// reservedPrefix names the OS backend's own items: "index", "index.1",
// "index.2", ... (the index parts) and "index.probe.<hex>" (OpenOS's probe).
const (
	indexKey       = "index"
	reservedPrefix = indexKey + "."
)

// checkKey returns an error wrapping ErrInvalidKey when key breaks the key
// rules in the package documentation.
func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %d bytes, over %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if !keyByte(key[i]) {
			return fmt.Errorf("%w: %q: byte %#x at %d is not a letter, digit or one of ._:/@+=-", ErrInvalidKey, key, key[i], i)
		}
	}
	if key == indexKey || strings.HasPrefix(key, reservedPrefix) {
		return fmt.Errorf("%w: %q is reserved for the keychain index", ErrInvalidKey, key)
	}
	return nil
}

func keyByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("._:/@+=-", c) >= 0
}

// checkSize returns an error wrapping ErrTooBig for a value over MaxItemSize.
func checkSize(value []byte) error {
	if len(value) > MaxItemSize {
		return fmt.Errorf("%w: %d bytes, over %d", ErrTooBig, len(value), MaxItemSize)
	}
	return nil
}
