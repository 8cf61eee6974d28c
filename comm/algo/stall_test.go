package algo_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
)

// TestStallReport: rank 2 of 3 never arrives at a ring all-reduce over a
// transport whose small sends do not wait for their receiver. Rank 1, whose
// ctx ends first, waits for rank 0, which did arrive (rank 1 holds its
// first step) and itself waits for rank 2: the error says so, rather than
// blaming rank 0.
func TestStallReport(t *testing.T) {
	cs := algo.NewMemEagerWorld(3, comm.Options{})
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	f, err := algo.ParseAlgo("all_reduce=ring")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		tu := algo.DefaultTuning()
		tu.Force = f
		c.(*algo.Comm).SetTuning(tu)
	}
	ctx0, cancel0 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel0()
	w0, err := cs[0].AllReduce(ctx0, comm.FromSlice(make([]float32, 30)), comm.Sum)
	if err != nil {
		t.Fatal(err)
	}
	go w0.Wait(ctx0)
	ctx1, cancel1 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel1()
	err = comm.Run(ctx1)(cs[1].AllReduce(ctx1, comm.FromSlice(make([]float32, 30)), comm.Sum))
	if want := "waiting for rank 0, which did arrive at all_reduce #1"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("rank 1: %v; want it to say %q", err, want)
	}
}
