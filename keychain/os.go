package keychain

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gofrs/flock"
	"github.com/zalando/go-keyring"
)

// Default time bounds of the OS backend. A keychain that hangs (go-keyring
// waits forever for a Secret Service prompt nobody answers, go-keyring #88)
// must not hang the daemon: every call gives up after CallTimeout with an
// error wrapping ErrTimeout and ErrUnavailable.
const (
	// ProbeTimeout bounds OpenOS's probe (a set, get and delete).
	ProbeTimeout = 5 * time.Second
	// CallTimeout bounds one Get, Set, Delete or Keys, including the wait
	// for the lock when another process is writing.
	CallTimeout = 10 * time.Second
)

// maxIndexParts bounds how many index parts are read: each part is one item
// of at most MaxItemSize bytes of JSON, so this is thousands of keys.
const maxIndexParts = 256

// lockRetry is how often a waiting writer retries the lock file.
const lockRetry = 2 * time.Millisecond

// backend is the part of go-keyring the OS store uses; tests substitute a
// double to make calls hang.
type backend interface {
	Set(service, user, password string) error
	Get(service, user string) (string, error)
	Delete(service, user string) error
}

// goKeyring is the real backend.
type goKeyring struct{}

func (goKeyring) Set(service, user, password string) error {
	return keyring.Set(service, user, password)
}
func (goKeyring) Get(service, user string) (string, error) { return keyring.Get(service, user) }
func (goKeyring) Delete(service, user string) error        { return keyring.Delete(service, user) }

// OS is the Store on the OS keychain (see OpenOS).
type OS struct {
	service string
	kr      backend
	timeout time.Duration

	// sem is the in-process writer lock (capacity 1, so that waiting for it
	// can time out); the holder also holds lock, the cross-process one.
	sem  chan struct{}
	lock *flock.Flock // guarded by sem
}

var _ Store = (*OS)(nil)

// OpenOS opens the OS keychain through github.com/zalando/go-keyring: macOS
// Keychain, Windows Credential Manager, or the freedesktop Secret Service
// (its "login" collection, else the "default" alias) on Linux and BSD.
//
// Layout: every item is one keyring item (service, key) whose secret is
// the value in Ascii85 text (see encoding.go); the index of keys is kept in
// items "index", "index.1", ... (JSON arrays of keys, each at most
// MaxItemSize bytes) since go-keyring cannot list. service names the app
// instance (app picks "meshtray" or "meshtray:<hash of state dir>").
//
// Writers (Set, Delete) hold an exclusive github.com/gofrs/flock lock on
// lockPath (its directory is created 0700 if missing) plus an in-process
// lock for the whole write: the item and the index are changed together and
// the index is re-read under the lock, so several goroutines and processes
// writing at once lose nothing. Readers (Get, Keys) take no lock: each item
// write is atomic in every backend.
//
// Index and items agree unless a writer died between its two writes, a call
// timed out, or someone edited the keychain by hand. Set writes the item
// before indexing it and Delete deletes the item before un-indexing it, so
// what can be left is either an unindexed item (Get finds it, Keys does not
// list it; the next Set or Delete of that key repairs it) or an indexed key
// with no item (Keys lists it, Get returns ErrNotFound; Delete of it
// un-indexes it and returns nil). Callers walking Keys must treat ErrNotFound
// from Get as "gone". Keys never lists a key that was never Set.
//
// On Linux and BSD, OpenOS first checks there is a session bus (as godbus
// looks for one); without one it fails instead of letting godbus autolaunch
// a dbus-daemon that would outlive meshtray. It then probes the backend
// (set, get and delete of a random reserved item) within ProbeTimeout and
// reads the index. When the keychain cannot be used
// it returns an error wrapping ErrUnavailable that names the reason ("no
// Secret Service on the session bus", "the login collection is locked", "no
// answer within 5s", ...). Every later call is bounded by CallTimeout.
func OpenOS(service, lockPath string) (Store, error) {
	return openOS(service, lockPath, goKeyring{}, ProbeTimeout, CallTimeout)
}

func openOS(service, lockPath string, kr backend, probeTimeout, timeout time.Duration) (*OS, error) {
	if service == "" || len(service) > 100 {
		return nil, fmt.Errorf("keychain: service name must be 1 to 100 bytes, got %d", len(service))
	}
	if lockPath == "" {
		return nil, errors.New("keychain: empty lock path")
	}
	if err := os.MkdirAll(filepath.Dir(lockPath), 0o700); err != nil {
		return nil, fmt.Errorf("keychain: lock file directory: %w", err)
	}
	if _, real := kr.(goKeyring); real {
		if err := sessionBusCheck(); err != nil {
			return nil, err
		}
	}
	s := &OS{
		service: service,
		kr:      kr,
		timeout: timeout,
		sem:     make(chan struct{}, 1),
		lock:    flock.New(lockPath),
	}
	if err := s.probe(probeTimeout); err != nil {
		return nil, err
	}
	if _, err := s.Keys(""); err != nil {
		return nil, err
	}
	return s, nil
}

// probe writes, reads back and deletes a random reserved item.
func (s *OS) probe(timeout time.Duration) error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	key := reservedPrefix + "probe." + hex.EncodeToString(b[:])
	want := encodeValue(b[:])
	_, err := bounded(s, "probe", timeout, func() (struct{}, error) {
		if err := s.kr.Set(s.service, key, want); err != nil {
			return struct{}{}, fmt.Errorf("write: %w", err)
		}
		got, err := s.kr.Get(s.service, key)
		if err != nil {
			return struct{}{}, fmt.Errorf("read back: %w", err)
		}
		if err := s.kr.Delete(s.service, key); err != nil {
			return struct{}{}, fmt.Errorf("delete: %w", err)
		}
		if got != want {
			return struct{}{}, errors.New("read back a different value than written")
		}
		return struct{}{}, nil
	})
	if err != nil && !errors.Is(err, ErrUnavailable) {
		err = &unavailableError{op: "probe", reason: unavailableReason(err), err: err}
	}
	return err
}

// Get returns the value under key, ErrNotFound, ErrInvalidKey, or an error
// wrapping ErrUnavailable (ErrTimeout after CallTimeout).
func (s *OS) Get(key string) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	return bounded(s, "get", s.timeout, func() ([]byte, error) { return s.get(key) })
}

// Set stores value under key and indexes the key; ErrTooBig over
// MaxItemSize, ErrInvalidKey, or an error wrapping ErrUnavailable.
func (s *OS) Set(key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := checkSize(value); err != nil {
		return err
	}
	enc := encodeValue(value)
	return s.write("set", func() error {
		if err := s.kr.Set(s.service, key, enc); err != nil {
			return s.wrap("set", key, err)
		}
		return s.updateIndexLocked(key, true)
	})
}

// Delete deletes the item under key and un-indexes the key. It returns
// ErrNotFound when there was neither an item nor an index entry.
func (s *OS) Delete(key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return s.write("delete", func() error {
		itemErr := s.kr.Delete(s.service, key)
		if itemErr != nil && !errors.Is(itemErr, keyring.ErrNotFound) {
			return s.wrap("delete", key, itemErr)
		}
		parts, err := s.readIndex()
		if err != nil {
			return err
		}
		indexed := slices.ContainsFunc(parts, func(p []string) bool { return slices.Contains(p, key) })
		if itemErr != nil && !indexed {
			return ErrNotFound
		}
		return s.updateIndexLocked(key, false)
	})
}

// Keys returns the indexed keys starting with prefix, sorted (see OpenOS for
// how the index and the items can disagree).
func (s *OS) Keys(prefix string) ([]string, error) {
	parts, err := bounded(s, "keys", s.timeout, s.readIndex)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, p := range parts {
		for _, k := range p {
			if strings.HasPrefix(k, prefix) {
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

// get reads and decodes one item.
func (s *OS) get(key string) ([]byte, error) {
	text, err := s.kr.Get(s.service, key)
	if err != nil {
		return nil, s.wrap("get", key, err)
	}
	v, err := decodeValue(text)
	if err != nil {
		return nil, fmt.Errorf("keychain: get %q: %w", key, err)
	}
	return v, nil
}

// indexPartKey is the item holding index part i: "index", "index.1", ...
func indexPartKey(i int) string {
	if i == 0 {
		return indexKey
	}
	return reservedPrefix + strconv.Itoa(i)
}

// readIndex reads index parts from "index" up to the first missing one.
func (s *OS) readIndex() ([][]string, error) {
	var parts [][]string
	for i := range maxIndexParts {
		raw, err := s.get(indexPartKey(i))
		if errors.Is(err, ErrNotFound) {
			break
		}
		if err != nil {
			return nil, err
		}
		var keys []string
		if err := json.Unmarshal(raw, &keys); err != nil {
			return nil, fmt.Errorf("keychain: index item %q of service %q is corrupt: %w", indexPartKey(i), s.service, err)
		}
		parts = append(parts, keys)
	}
	return parts, nil
}

// updateIndexLocked adds (add) or removes key in the index, re-reading it
// first. Only the one part that changes is written, and each part is one
// item, so every index write is atomic. The caller holds the write locks.
func (s *OS) updateIndexLocked(key string, add bool) error {
	parts, err := s.readIndex()
	if err != nil {
		return err
	}
	at := -1
	for i, p := range parts {
		if slices.Contains(p, key) {
			at = i
			break
		}
	}
	if add {
		if at >= 0 {
			return nil
		}
		for i, p := range parts {
			if b, _ := json.Marshal(sortedWith(p, key)); len(b) <= MaxItemSize {
				return s.writePart(i, sortedWith(p, key))
			}
		}
		if len(parts) == maxIndexParts {
			return fmt.Errorf("keychain: index of service %q is full (%d parts)", s.service, maxIndexParts)
		}
		return s.writePart(len(parts), []string{key})
	}
	if at < 0 {
		return nil
	}
	p := slices.DeleteFunc(slices.Clone(parts[at]), func(k string) bool { return k == key })
	if err := s.writePart(at, p); err != nil {
		return err
	}
	// Drop empty parts from the end only, so the parts stay contiguous for
	// readers that stop at the first missing one.
	parts[at] = p
	for i := len(parts) - 1; i > 0 && len(parts[i]) == 0; i-- {
		if err := s.kr.Delete(s.service, indexPartKey(i)); err != nil && !errors.Is(err, keyring.ErrNotFound) {
			return s.wrap("delete", indexPartKey(i), err)
		}
	}
	return nil
}

func sortedWith(keys []string, key string) []string {
	out := append(slices.Clone(keys), key)
	slices.Sort(out)
	return out
}

func (s *OS) writePart(i int, keys []string) error {
	if keys == nil {
		keys = []string{}
	}
	b, err := json.Marshal(keys)
	if err != nil {
		return err
	}
	if err := s.kr.Set(s.service, indexPartKey(i), encodeValue(b)); err != nil {
		return s.wrap("set", indexPartKey(i), err)
	}
	return nil
}

// wrap maps a go-keyring error: ErrNotFound, or the operation and key with
// ErrUnavailable added when the error says the keychain cannot be reached.
func (s *OS) wrap(op, key string, err error) error {
	if errors.Is(err, keyring.ErrNotFound) {
		return ErrNotFound
	}
	if isUnavailable(err) {
		return &unavailableError{op: op + " " + strconv.Quote(key), reason: unavailableReason(err), err: err}
	}
	return fmt.Errorf("keychain: %s %q: %w", op, key, err)
}

// unavailableError is an error wrapping ErrUnavailable (and ErrTimeout when
// timeout is set) with the operation and a reason a person can act on.
type unavailableError struct {
	op      string
	reason  string
	timeout bool
	err     error // the backend's error, if any
}

func (e *unavailableError) Error() string {
	msg := "keychain: " + e.op + ": OS keychain unavailable: " + e.reason
	if e.err != nil {
		msg += ": " + e.err.Error()
	}
	return msg
}

func (e *unavailableError) Is(target error) bool {
	return target == ErrUnavailable || (e.timeout && target == ErrTimeout)
}

func (e *unavailableError) Unwrap() error { return e.err }

// bounded runs fn on its own goroutine and waits at most timeout for it.
// On timeout fn keeps running until go-keyring returns; its result is
// dropped.
func bounded[T any](s *OS, op string, timeout time.Duration, fn func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := fn()
		done <- result{v, err}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-t.C:
		var zero T
		return zero, s.timeoutAfter(op, timeout, "")
	}
}

// write runs fn holding the in-process and the cross-process write locks,
// all within s.timeout. When fn times out, the locks stay held until fn
// really returns, so no other writer interleaves with a write that may
// still land; other writers meanwhile time out waiting for the lock.
func (s *OS) write(op string, fn func() error) error {
	deadline := time.Now().Add(s.timeout)
	t := time.NewTimer(s.timeout)
	defer t.Stop()
	select {
	case s.sem <- struct{}{}:
	case <-t.C:
		return s.timeoutErr(op, "another write of this process")
	}
	// state: waiting for the lock file -> running fn, or -> abandoned when
	// the deadline passes first (then the goroutine must not run fn).
	const waiting, running, abandoned = 0, 1, 2
	var state atomic.Int32
	done := make(chan error, 1)
	go func() {
		defer func() { <-s.sem }()
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		ok, err := s.lock.TryLockContext(ctx, lockRetry)
		cancel()
		if err != nil || !ok {
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("keychain: lock %s: %w", s.lock.Path(), err)
			} else {
				err = s.timeoutErr(op, "lock file "+s.lock.Path()+", held by another process")
			}
			done <- err
			return
		}
		if !state.CompareAndSwap(waiting, running) {
			_ = s.lock.Unlock() // the caller has given up: write nothing
			return
		}
		err = fn()
		if uerr := s.lock.Unlock(); uerr != nil && err == nil {
			err = fmt.Errorf("keychain: unlock %s: %w", s.lock.Path(), uerr)
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-t.C:
		if state.CompareAndSwap(waiting, abandoned) {
			return s.timeoutErr(op, "lock file "+s.lock.Path()+", held by another process")
		}
		return s.timeoutErr(op, "")
	}
}

func (s *OS) timeoutErr(op, waiting string) error { return s.timeoutAfter(op, s.timeout, waiting) }

func (s *OS) timeoutAfter(op string, d time.Duration, waiting string) error {
	reason := fmt.Sprintf("no answer within %v (a password prompt may be waiting)", d)
	if waiting != "" {
		reason = fmt.Sprintf("gave up after %v waiting for %s", d, waiting)
	}
	return &unavailableError{op: op, reason: reason, timeout: true}
}
