// Package hangtest tells a hang from an error in the tests of what must
// never block forever (a collective whose peer never comes, a Close
// waiting for the device): the call runs in a goroutine, and a generous
// limit, far above its time on a busy machine, marks a hang.
package hangtest

import (
	"testing"
	"time"
)

// Within runs f in a goroutine and returns its error; if f has not
// returned after limit it fails t (Fatalf: what hangs), leaving f
// blocked.
func Within(t testing.TB, limit time.Duration, what string, f func() error) error {
	t.Helper()
	res := make(chan error, 1)
	go func() { res <- f() }()
	select {
	case err := <-res:
		return err
	case <-time.After(limit):
		t.Fatalf("%s did not return within %v: it hangs", what, limit)
		return nil
	}
}
