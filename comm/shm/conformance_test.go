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
