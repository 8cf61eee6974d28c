package commtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
)

// RegistryWorld returns a World that builds n Comms of a registered
// backend through comm.New, one goroutine per rank as separate processes
// would: rank r gets base with Rank r, Size n, LocalRank r and LocalSize n
// (one host), Job the test's name and Store stores(t, n)[r]. The Comms
// are closed when the test ends.
func RegistryWorld(backend string, stores func(t testing.TB, n int) []comm.Store, base comm.Config) World {
	return func(t testing.TB, n int) []comm.Comm {
		t.Helper()
		ss := stores(t, n)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cs := make([]comm.Comm, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			cfg := base
			cfg.Rank, cfg.Size, cfg.LocalRank, cfg.LocalSize = r, n, r, n
			cfg.Job, cfg.Store = t.Name(), ss[r]
			wg.Go(func() { cs[r], errs[r] = comm.New(ctx, backend, cfg) })
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
				t.Fatalf("%s rank %d of %d: %v", backend, r, n, err)
			}
		}
		return cs
	}
}

// OneStore is a stores function for RegistryWorld: every rank uses one
// store that newStore makes.
func OneStore(newStore func() comm.Store) func(t testing.TB, n int) []comm.Store {
	return func(t testing.TB, n int) []comm.Store {
		s := newStore()
		out := make([]comm.Store, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
}
