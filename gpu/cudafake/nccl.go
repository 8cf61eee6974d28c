package cudafake

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/rendezvous"
)

// NCCLRanks makes n Comms of the nccl backend (the caller imports
// comm/nccl, which registers it), ranks of this process as goroutines:
// rank r on device first+r, all meeting through a rendezvous store of
// their own. t fails if one cannot be made; they are closed when t ends.
// Call it from t's goroutine.
func NCCLRanks(t testing.TB, n, first int) []comm.Comm {
	t.Helper()
	token := []byte("cudafake-nccl")
	srv, err := rendezvous.NewServer("127.0.0.1:0", token, func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := make([]comm.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range cs {
		wg.Go(func() {
			st, err := rendezvous.Dial(ctx, srv.Addr(), token)
			if err == nil {
				cs[r], err = comm.New(ctx, "nccl", comm.Config{Rank: r, Size: n, LocalRank: first + r, LocalSize: first + n, Store: st, Job: t.Name()})
			}
			errs[r] = err
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
			t.Fatalf("nccl rank %d of %d (cuda:%d): %v", r, n, first+r, err)
		}
	}
	return cs
}
