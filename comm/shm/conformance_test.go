//go:build linux

package shm

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/rendezvous"
)

// shmWorld builds n Comms through the registered "shm" backend, all in
// this process, with their segment in a test directory.
func shmWorld(t testing.TB, n int) []comm.Comm {
	store := rendezvous.NewMemStore()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs := make([]comm.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			cs[r], errs[r] = comm.New(ctx, "shm", comm.Config{
				Rank: r, Size: n, Store: store, Token: token, Job: t.Name(),
				Logf: func(string, ...any) {},
			})
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range cs {
			if c != nil {
				c.Close()
			}
		}
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return cs
}

func TestConformance(t *testing.T) {
	t.Setenv("GDIST_SHM_DIR", t.TempDir())
	cfg := commtest.Config{Sizes: []int{1, 2, 3, 4}}
	if testing.Short() {
		cfg.Sizes = []int{1, 2, 3}
	}
	commtest.Suite(t, shmWorld, cfg)
}
