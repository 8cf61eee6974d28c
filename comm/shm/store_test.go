//go:build linux

package shm

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
)

// memStore is an in-memory comm.Store for tests.
type memStore struct {
	mu      sync.Mutex
	data    map[string][]byte
	changed chan struct{} // closed and replaced on every change
}

var _ comm.Store = (*memStore)(nil)

func newMemStore() *memStore {
	return &memStore{data: map[string][]byte{}, changed: make(chan struct{})}
}

func (s *memStore) setLocked(key string, v []byte) {
	s.data[key] = append([]byte(nil), v...)
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *memStore) Set(ctx context.Context, key string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setLocked(key, value)
	return nil
}

func (s *memStore) Get(ctx context.Context, key string) ([]byte, error) {
	if err := s.Wait(ctx, key); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.data[key]...), nil
}

func (s *memStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, _ := strconv.ParseInt(string(s.data[key]), 10, 64)
	n += delta
	s.setLocked(key, []byte(strconv.FormatInt(n, 10)))
	return n, nil
}

func (s *memStore) CompareAndSet(ctx context.Context, key string, old, value []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.data[key]
	if (!ok && len(old) == 0) || (ok && bytes.Equal(cur, old)) {
		s.setLocked(key, value)
		cur = value
	}
	return append([]byte(nil), cur...), nil
}

func (s *memStore) Wait(ctx context.Context, keys ...string) error {
	for {
		s.mu.Lock()
		all := true
		for _, k := range keys {
			if _, ok := s.data[k]; !ok {
				all = false
			}
		}
		ch := s.changed
		s.mu.Unlock()
		if all {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

func (s *memStore) Close() error { return nil }

// The spin time comes from $GDIST_SHM_SPIN_US as documented.
func TestEnvUS(t *testing.T) {
	for v, want := range map[string]time.Duration{"": 50 * time.Microsecond, "7": 7 * time.Microsecond, "0": 0, "-1": 50 * time.Microsecond, "x": 50 * time.Microsecond} {
		t.Setenv("GDIST_SHM_SPIN_US", v)
		if got := envUS("GDIST_SHM_SPIN_US", 50); got != want {
			t.Errorf("%q: %v, want %v", v, got, want)
		}
	}
}
