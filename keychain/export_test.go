package keychain

import (
	"sync"
	"time"

	"github.com/zalando/go-keyring"
)

// MapKeyring is an in-memory double of go-keyring for the OS store: the
// same (service, user) -> password items, with hooks to make calls hang.
type MapKeyring struct {
	mu     sync.Mutex
	items  map[[2]string]string  // guarded by mu
	hook   func(op, user string) // guarded by mu; called before each op, outside mu
	active int                   // guarded by mu: calls in progress
	peak   int                   // guarded by mu: most calls in progress at once
}

func NewMapKeyring() *MapKeyring { return &MapKeyring{items: map[[2]string]string{}} }

// SetHook sets a function called at the start of every call (e.g. to block).
func (m *MapKeyring) SetHook(h func(op, user string)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hook = h
}

// PeakConcurrency returns the most calls that were in progress at once.
func (m *MapKeyring) PeakConcurrency() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak
}

func (m *MapKeyring) enter(op, user string) {
	m.mu.Lock()
	h := m.hook
	m.active++
	m.peak = max(m.peak, m.active)
	m.mu.Unlock()
	if h != nil {
		h(op, user)
	}
}

func (m *MapKeyring) leave() {
	m.mu.Lock()
	m.active--
	m.mu.Unlock()
}

func (m *MapKeyring) Set(service, user, password string) error {
	m.enter("set", user)
	defer m.leave()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.items[[2]string{service, user}] = password
	return nil
}

func (m *MapKeyring) Get(service, user string) (string, error) {
	m.enter("get", user)
	defer m.leave()
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.items[[2]string{service, user}]
	if !ok {
		return "", keyring.ErrNotFound
	}
	return v, nil
}

func (m *MapKeyring) Delete(service, user string) error {
	m.enter("delete", user)
	defer m.leave()
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]string{service, user}
	if _, ok := m.items[k]; !ok {
		return keyring.ErrNotFound
	}
	delete(m.items, k)
	return nil
}

// OpenOSOn opens the OS store over a go-keyring double, with its own
// probe and call timeouts.
func OpenOSOn(kr *MapKeyring, service, lockPath string, probeTimeout, timeout time.Duration) (Store, error) {
	return openOS(service, lockPath, kr, probeTimeout, timeout)
}

var (
	EncodeValue = encodeValue
	DecodeValue = decodeValue
	EncodedMax  = encodedMax
)
