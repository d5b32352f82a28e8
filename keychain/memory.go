package keychain

import (
	"slices"
	"strings"
	"sync"
)

// Memory is the in-process test double for Store: same contract, nothing
// persisted. Use the OS or file backend in integration tests.
type Memory struct {
	mu    sync.Mutex
	items map[string][]byte // guarded by mu
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory Store.
func NewMemory() *Memory { return &Memory{items: make(map[string][]byte)} }

func (m *Memory) Get(key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.items[key]
	if !ok {
		return nil, ErrNotFound
	}
	return slices.Clone(v), nil
}

func (m *Memory) Set(key string, value []byte) error {
	if len(value) > MaxItemSize {
		return ErrTooBig
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.items[key] = slices.Clone(value)
	return nil
}

func (m *Memory) Delete(key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.items[key]; !ok {
		return ErrNotFound
	}
	delete(m.items, key)
	return nil
}

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
