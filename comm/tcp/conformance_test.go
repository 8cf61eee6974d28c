package tcp

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/rendezvous"
)

// tcpWorld builds n Comms through the registered "tcp" backend.
func tcpWorld(t testing.TB, n int) []comm.Comm {
	store := rendezvous.NewMemStore()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs := make([]comm.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			cs[r], errs[r] = comm.New(ctx, "tcp", comm.Config{
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
	// World sizes up to 4 (every rank is a full mesh of sockets in this
	// one process); in -short mode (the -race run) fewer, and the suite
	// shrinks its large count.
	cfg := commtest.Config{Sizes: []int{1, 2, 3, 4}}
	if testing.Short() {
		cfg.Sizes = []int{1, 3}
	}
	commtest.Suite(t, tcpWorld, cfg)
}
