package commtest

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// Log collects what a rank logs (pass its Logf as comm.Config.Logf), for
// tests that check a diagnostic or print them when they fail. Safe for
// concurrent use.
type Log struct {
	mu    sync.Mutex
	lines []string
}

// Logf appends one line.
func (l *Log) Logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

// Contains reports whether a line contains every one of parts.
func (l *Log) Contains(parts ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// WaitFor waits (5 s at most) for a line that contains every one of parts.
func (l *Log) WaitFor(t testing.TB, parts ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !l.Contains(parts...) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q; log:\n%s", parts, l)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// String is the lines, one per line.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// Buffer is a bytes.Buffer safe for concurrent writers (a child process's
// stdout and stderr, a launcher's log).
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
