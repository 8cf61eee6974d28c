package algo

import (
	"math/bits"
	"sync"
)

// Scratch buffers (receive staging, reduce-scatter work areas) come from
// size-classed pools instead of make: a fresh large allocation is zeroed by
// the runtime (or faulted in page by page), which costs about as much as a
// copy of it, on every collective.

var scratchPools [64]sync.Pool // class c holds buffers of capacity 1<<c

// holders keeps the *[]byte boxes the pools hold buffers in, so that
// putting a buffer back allocates no new box.
var holders = sync.Pool{New: func() any { return new([]byte) }}

// getScratch returns a buffer of length n with unspecified contents.
func getScratch(n int) []byte {
	if n <= 0 {
		return nil
	}
	c := bits.Len(uint(n - 1))
	if v, ok := scratchPools[c].Get().(*[]byte); ok {
		b := (*v)[:n]
		*v = nil
		holders.Put(v)
		return b
	}
	return make([]byte, n, 1<<c)
}

// putScratch returns b (from getScratch) to its pool. Call it only when no
// transfer can still touch b (after the op succeeded).
func putScratch(b []byte) {
	c := cap(b)
	if c == 0 || c&(c-1) != 0 {
		return
	}
	v := holders.Get().(*[]byte)
	*v = b[:c]
	scratchPools[bits.Len(uint(c-1))].Put(v)
}
