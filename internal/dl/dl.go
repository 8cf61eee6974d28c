// Package dl holds what gpu/cuda and comm/nccl share to load their
// libraries with dlopen at run time: the C loader helpers (dl.h, included
// by both shims through #cgo CFLAGS: -I), the lazily loaded, reloadable
// library state (Lazy), the names to try (Candidates) and the message that
// says why none loaded (Unloadable).
package dl

import (
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// Lazy is a library state loaded on first use by Load, which Reload
// replaces (for tests, or after the environment changed).
type Lazy[T any] struct {
	Load func() *T
	mu   sync.Mutex
	cur  atomic.Pointer[T]
}

// Get returns the state, loading it once.
func (l *Lazy[T]) Get() *T {
	if s := l.cur.Load(); s != nil {
		return s
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.cur.Load(); s != nil {
		return s
	}
	s := l.Load()
	l.cur.Store(s)
	return s
}

// Reload loads the state again and keeps the new one.
func (l *Lazy[T]) Reload() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cur.Store(l.Load())
}

// Candidates are the library names to try: the one the environment
// variable env names, else defaults.
func Candidates(env string, defaults []string) []string {
	if p := os.Getenv(env); p != "" {
		return []string{p}
	}
	return defaults
}

// Unloadable says that what could not be loaded, with each attempt's error
// and, unless env is set, how to point env at a library (hint: "a
// libnccl.so.2 (the pip package ... ships one)").
func Unloadable(what string, tried []string, env, hint string) string {
	msg := "cannot load " + what + " (" + strings.Join(tried, "; ") + ")"
	if os.Getenv(env) == "" {
		msg += "; set " + env + " to " + hint
	}
	return msg
}
