package main

import (
	"context"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/nccl"
	"github.com/gdist/gdist/comm/rendezvous"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
)

// Issue 17, item 2 in commbench: the checked run of avg over NCCL accepts
// NCCL's rule (inputs pre-multiplied by fl(1/n)), which differs from the
// host backends' fl(sum)/n in the last bits at n = 3. The ranks are
// goroutines on the fake NCCL (which connects the ranks of one process).
func TestAvgCheckNCCL(t *testing.T) {
	lib, err := cudafake.Build()
	if err != nil {
		t.Skipf("no fake CUDA: %v", err)
	}
	t.Setenv(cuda.EnvLibrary, lib)
	t.Setenv(nccl.EnvLibrary, lib)
	t.Setenv("FAKE_CUDA_DEVICES", "3")
	cuda.Reload()
	nccl.Reload()
	t.Cleanup(func() { cuda.Reload(); nccl.Reload() })
	if ok, why := nccl.Usable(); !ok {
		t.Skipf("the fake NCCL does not load: %s", why)
	}
	const n = 3
	token := []byte("commbench-avg")
	srv, err := rendezvous.NewServer("127.0.0.1:0", token, func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := make([]comm.Comm, n)
	errs := make(chan error, n)
	for r := range cs {
		go func() {
			st, err := rendezvous.Dial(ctx, srv.Addr(), token)
			if err != nil {
				errs <- err
				return
			}
			t.Cleanup(func() { st.Close() })
			cs[r], err = comm.New(ctx, "nccl", comm.Config{Rank: r, Size: n, LocalRank: r, LocalSize: n, Store: st, Job: "avg"})
			errs <- err
		}()
	}
	for range cs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	for _, op := range []string{"all_reduce", "reduce", "reduce_scatter"} {
		cfg := config{backend: "nccl", dtype: comm.Float32, redop: comm.Avg}
		cases := make([]opCase, n)
		for r, c := range cs {
			cases[r] = newCase(c, cfg, op, 3*4096)
			cases[r].fill()
		}
		for r := range cs {
			go func() { errs <- cases[r].run(ctx) }()
		}
		for range cs {
			if err := <-errs; err != nil {
				t.Fatalf("%s: %v", op, err)
			}
		}
		for r := range cs {
			if err := cases[r].check(); err != nil {
				t.Errorf("%s avg over nccl, rank %d: the check refuses NCCL's result: %v", op, r, err)
			}
		}
	}
}
