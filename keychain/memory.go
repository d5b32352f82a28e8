package keychain

import (
	"slices"
	"strings"
	"sync"
)

// Memory is the in-process test double for Store: same contract (key rules,
// size limit, sentinel errors), nothing persisted. Use the OS or file
// backend in integration tests.
type Memory struct {
	mu    sync.Mutex
	items map[string][]byte // guarded by mu
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory Store.
func NewMemory() *Memory { return &Memory{items: make(map[string][]byte)} }

// Get returns a copy of the value under key, ErrNotFound, or ErrInvalidKey.
func (m *Memory) Get(key string) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.items[key]
	if !ok {
		return nil, ErrNotFound
	}
	return slices.Clone(v), nil
}

// Set stores a copy of value under key; ErrTooBig over MaxItemSize.
func (m *Memory) Set(key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := checkSize(value); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.items[key] = slices.Clone(value)
	return nil
}

// Delete removes key, or returns ErrNotFound.
func (m *Memory) Delete(key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.items[key]; !ok {
		return ErrNotFound
	}
	delete(m.items, key)
	return nil
}

// Keys returns the keys starting with prefix, sorted.
func (m *Memory) Keys(prefix string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var keys []string
	for k := range m.items {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys, nil
}
