package kernels

import (
	"fmt"
	"sync"

	"github.com/gdist/gdist/gpu/cuda"
)

// Device scratch that Kernels keeps per stream for the work that needs
// more than its caller's buffers: the first stage of the two-stage
// reductions (partial sums) and the embedding gradient's order of rows.
// A stream's scratch is allocated at its first such launch (scratchMin
// bytes, or more), grown when a launch needs more (a new block of twice
// the size; the old one is left allocated until Close, since freeing
// would wait for the whole device), and held until Close. A launch that
// uses it holds the stream's lock from its first stage to its last, so
// that work queued on one stream by several goroutines does not
// interleave inside it; the stream's order does the rest.

// scratchMin is the first allocation: enough for every column sum
// (colSplit's partial sums, two arrays of at most 65536 float32s).
const scratchMin = 512 << 10

type scratches struct {
	mu sync.Mutex
	m  map[*cuda.Stream]*scratch
}

type scratch struct {
	mu  sync.Mutex
	ptr uintptr
	n   int
	old []uintptr // blocks outgrown, freed by Close
}

// withScratch calls f with at least n bytes of s's scratch, holding s's
// lock while f queues its work.
func (k *Kernels) withScratch(s *cuda.Stream, n int, f func(ws uintptr) error) error {
	if k.rec != nil {
		return f(1 << 40) // the audit: nothing runs
	}
	k.scr.mu.Lock()
	if k.scr.m == nil {
		k.scr.m = map[*cuda.Stream]*scratch{}
	}
	sc := k.scr.m[s]
	if sc == nil {
		sc = &scratch{}
		k.scr.m[s] = sc
	}
	k.scr.mu.Unlock()
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.n < n {
		size := max(n, 2*sc.n, scratchMin)
		p, err := cuda.Malloc(k.dev, size)
		if err != nil {
			return fmt.Errorf("kernels: %d bytes of scratch for a two-stage sum: %w", size, err)
		}
		if sc.ptr != 0 {
			sc.old = append(sc.old, sc.ptr)
		}
		sc.ptr, sc.n = p, size
	}
	return f(sc.ptr)
}

// Close frees the device scratch the kernels hold (scratch.go): call it
// once the work queued through them is done (their streams synchronized),
// as the Model that loaded them closes. The Kernels stay usable: a later
// launch that needs scratch allocates it again.
func (k *Kernels) Close() error {
	k.scr.mu.Lock()
	defer k.scr.mu.Unlock()
	var err error
	for _, sc := range k.scr.m {
		sc.mu.Lock()
		for _, p := range append(sc.old, sc.ptr) {
			if p == 0 {
				continue
			}
			if ferr := cuda.Free(k.dev, p); ferr != nil && err == nil {
				err = fmt.Errorf("kernels: Close: %w", ferr)
			}
		}
		sc.ptr, sc.n, sc.old = 0, 0, nil
		sc.mu.Unlock()
	}
	return err
}
