package rendezvous

import (
	"bytes"
	"context"
	"math"
	"strconv"
	"sync"

	"github.com/gdist/gdist/comm"
)

// memStore is the server's in-memory table. Waiters block on changed, a
// channel closed and replaced at every change.
type memStore struct {
	mu      sync.Mutex
	m       map[string][]byte
	changed chan struct{}
}

func newMemStore() *memStore {
	return &memStore{m: map[string][]byte{}, changed: make(chan struct{})}
}

// notify wakes every waiter; s.mu is held.
func (s *memStore) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// set stores value (the store takes ownership of it).
func (s *memStore) set(key string, value []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = value
	s.notify()
}

// get blocks until key exists or ctx ends.
func (s *memStore) get(ctx context.Context, key string) ([]byte, error) {
	for {
		s.mu.Lock()
		v, ok := s.m[key]
		ch := s.changed
		s.mu.Unlock()
		if ok {
			return v, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// wait blocks until every key exists or ctx ends.
func (s *memStore) wait(ctx context.Context, keys []string) error {
	for {
		s.mu.Lock()
		missing := false
		for _, k := range keys {
			if _, ok := s.m[k]; !ok {
				missing = true
				break
			}
		}
		ch := s.changed
		s.mu.Unlock()
		if !missing {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// add adds delta to the decimal integer at key (0 if absent).
func (s *memStore) add(key string, delta int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var cur int64
	if v, ok := s.m[key]; ok {
		var err error
		cur, err = strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return 0, comm.InvalidArgf("add to key %q: value %.32q is not a decimal integer", key, v)
		}
	}
	if (delta > 0 && cur > math.MaxInt64-delta) || (delta < 0 && cur < math.MinInt64-delta) {
		return 0, comm.InvalidArgf("add %d to key %q (%d) overflows int64", delta, key, cur)
	}
	cur += delta
	s.m[key] = strconv.AppendInt(nil, cur, 10)
	s.notify()
	return cur, nil
}

// cas sets key to value if it now holds old (an absent key matches an empty
// old) and returns what key holds afterwards (nil if absent).
func (s *memStore) cas(key string, old, value []byte) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.m[key]
	if (!ok && len(old) == 0) || (ok && bytes.Equal(cur, old)) {
		s.m[key] = value
		s.notify()
		return value
	}
	return cur
}

// MemStore is a comm.Store in this process's memory: for process backends
// whose ranks are goroutines of one process (tests, mostly). It is the
// table the rendezvous server keeps, with the same semantics. Safe for
// concurrent use.
type MemStore struct{ s *memStore }

var _ comm.Store = (*MemStore)(nil)

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{s: newMemStore()} }

// Set: see comm.Store.
func (m *MemStore) Set(ctx context.Context, key string, value []byte) error {
	m.s.set(key, append([]byte(nil), value...))
	return nil
}

// Get: see comm.Store. It blocks until key exists or ctx ends.
func (m *MemStore) Get(ctx context.Context, key string) ([]byte, error) {
	v, err := m.s.get(ctx, key)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), v...), nil
}

// Add: see comm.Store.
func (m *MemStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	return m.s.add(key, delta)
}

// CompareAndSet: see comm.Store.
func (m *MemStore) CompareAndSet(ctx context.Context, key string, old, value []byte) ([]byte, error) {
	cur := m.s.cas(key, old, append([]byte(nil), value...))
	if cur == nil {
		return nil, nil
	}
	return append([]byte(nil), cur...), nil
}

// Wait: see comm.Store.
func (m *MemStore) Wait(ctx context.Context, keys ...string) error { return m.s.wait(ctx, keys) }

// Close does nothing.
func (m *MemStore) Close() error { return nil }
