package cudafake

import (
	"syscall"
	"testing"
	"time"

	"github.com/gdist/gdist/gpu/cuda"
)

// Test resources: each helper makes one CUDA object on device for t,
// fails t (Fatal) if it cannot, and frees it when t ends (t.Cleanup).
// They serve the fake and a real GPU alike.

// NewStream is cuda.NewStream(device, nonBlocking) for t.
func NewStream(t testing.TB, device int, nonBlocking bool) *cuda.Stream {
	t.Helper()
	s, err := cuda.NewStream(device, nonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	return s
}

// NewEvent is cuda.NewEvent(device) for t.
func NewEvent(t testing.TB, device int) *cuda.Event {
	t.Helper()
	e, err := cuda.NewEvent(device)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Destroy() })
	return e
}

// Malloc is cuda.Malloc(device, n) for t.
func Malloc(t testing.TB, device, n int) uintptr {
	t.Helper()
	p, err := cuda.Malloc(device, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cuda.Free(device, p) })
	return p
}

// HostAlloc is cuda.HostAlloc(device, n) (pinned host memory) for t.
func HostAlloc(t testing.TB, device, n int) []byte {
	t.Helper()
	b, err := cuda.HostAlloc(device, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cuda.FreeHost(device, b) })
	return b
}

// CPUTime is the CPU time the process has used so far (user and system,
// every thread): a test of how a wait waits compares it with the wall
// time of a wait that the fake holds up (KernelDelay, NCCLDelay,
// StreamDelay), as a busy core shows only there (SpinWaits).
func CPUTime(t testing.TB) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
