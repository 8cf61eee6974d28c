//go:build race

package shm

import (
	"runtime"
	"unsafe"
)

// The race detector does not see the atomics on the shared mapping (it
// ignores memory outside the Go heap), so it would miss the ordering they
// give: a frame's payload is read by the sender before the receiver, having
// seen the frame, writes its own buffers. Like the runtime does for file
// descriptors, every published frame releases ringSync and every consumed
// one acquires it.
var ringSync uint64

func raceRelease() { runtime.RaceReleaseMerge(unsafe.Pointer(&ringSync)) }
func raceAcquire() { runtime.RaceAcquire(unsafe.Pointer(&ringSync)) }
