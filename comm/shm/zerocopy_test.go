//go:build linux

package shm

import (
	"testing"

	"github.com/gdist/gdist/comm/commtest"
)

// TestAllocConformance: all-reduce of every dtype, op and count with
// buffers from comm.Alloc on every rank (zero-copy: the traffic shows
// only the exchange) and mixed with ordinary buffers (the ordinary path),
// bit for bit equal to the all-reduce of ordinary memory.
func TestAllocConformance(t *testing.T) {
	t.Setenv("GDIST_SHM_DIR", t.TempDir())
	t.Setenv("GDIST_ZEROCOPY_MIN", "1")
	cfg := commtest.AllocConfig{Config: commtest.Config{Sizes: []int{2, 3, 4}}, ZeroCopy: true}
	if testing.Short() {
		cfg.Sizes = []int{2, 3}
	}
	commtest.AllocSuite(t, shmWorld, cfg)
}
