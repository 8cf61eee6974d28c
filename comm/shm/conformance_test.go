//go:build linux

package shm

import (
	"testing"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/rendezvous"
)

// shmWorld builds n Comms through the registered "shm" backend.
var shmWorld = commtest.RegistryWorld("shm", commtest.OneStore(func() comm.Store { return rendezvous.NewMemStore() }),
	comm.Config{Token: token, Logf: func(string, ...any) {}})

func TestConformance(t *testing.T) {
	t.Setenv("GDIST_SHM_DIR", t.TempDir())
	cfg := commtest.Config{Sizes: []int{1, 2, 3, 4}}
	if testing.Short() {
		cfg.Sizes = []int{1, 2, 3}
	}
	commtest.Suite(t, shmWorld, cfg)
}

// BenchmarkSmallOps: 8 B and 4 KiB all-reduce, broadcast and send/recv
// on 2 ranks (goroutines of this process over one segment), with
// allocations (-benchmem).
func BenchmarkSmallOps(b *testing.B) {
	b.Setenv("GDIST_SHM_DIR", b.TempDir())
	commtest.BenchSmallOps(b, shmWorld, 2)
}

// TestSmallOpAllocs: a small all-reduce, broadcast, or send and recv
// allocates nothing in steady state, on any rank.
func TestSmallOpAllocs(t *testing.T) {
	t.Setenv("GDIST_SHM_DIR", t.TempDir())
	commtest.CheckSmallOpAllocs(t, shmWorld, 2)
}

// TestConformanceStaged: the whole suite with every all-reduce of ordinary
// buffers staged (algo's allreduce_staged.go: copy-in, reduce, copy-out
// through each rank's staging, no messages) in pieces of 4 KiB, so that
// even small ops take several pieces and consecutive ops of other sizes
// reuse the staging.
func TestConformanceStaged(t *testing.T) {
	t.Setenv("GDIST_SHM_DIR", t.TempDir())
	t.Setenv("GDIST_STAGED_MIN", "1")
	t.Setenv("GDIST_STAGED_BYTES", "4096")
	cfg := commtest.Config{Sizes: []int{2, 3, 4}}
	if testing.Short() {
		cfg.Sizes = []int{2, 3}
	}
	commtest.Suite(t, shmWorld, cfg)
}
