package hangtest

import (
	"errors"
	"testing"
	"time"
)

// TestWithin: a call that returns within the limit gives its error back.
func TestWithin(t *testing.T) {
	want := errors.New("closing: rank 1: aborted")
	if err := Within(t, time.Minute, "a close", func() error { return want }); err != want {
		t.Fatalf("got %v, want %v", err, want)
	}
}
