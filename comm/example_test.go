package comm_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/inproc"
)

// Four ranks (goroutines here; processes with the tcp backend) average a
// gradient and gather a value from each rank.
func Example() {
	ctx := context.Background()
	comms, err := inproc.New(4, comm.Options{})
	if err != nil {
		panic(err)
	}
	var wg sync.WaitGroup
	results := make([]string, 4)
	for _, c := range comms {
		wg.Add(1)
		go func(c comm.Comm) {
			defer wg.Done()
			defer c.Close()
			grad := []float32{float32(c.Rank()), 1}
			w, err := c.AllReduce(ctx, comm.FromSlice(grad), comm.Avg)
			if err != nil {
				panic(err)
			}
			// ... overlap other work here ...
			if err := w.Wait(ctx); err != nil {
				panic(err)
			}
			ranks := make([]int64, c.Size())
			if err := comm.Run(ctx)(c.AllGather(ctx, comm.FromSlice(ranks), comm.FromSlice([]int64{int64(c.Rank() * 10)}))); err != nil {
				panic(err)
			}
			results[c.Rank()] = fmt.Sprint(grad, ranks)
		}(c)
	}
	wg.Wait()
	fmt.Println(results[0])
	fmt.Println(results[3])
	// Output:
	// [1.5 1] [0 10 20 30]
	// [1.5 1] [0 10 20 30]
}

// What a rank moved, per transport: an all-reduce of n bytes over p ranks
// moves 2n(p-1)/p per rank, whether as messages (here) or, on shared
// buffers over shm, as zero-copy reads and writes of the peers' buffers.
func ExampleMovedCounter() {
	ctx := context.Background()
	comms, err := inproc.New(2, comm.Options{})
	if err != nil {
		panic(err)
	}
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func(c comm.Comm) {
			defer wg.Done()
			grad := make([]float32, 1024) // 4 KiB
			if err := comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(grad), comm.Sum)); err != nil {
				panic(err)
			}
		}(c)
	}
	wg.Wait()
	mc, ok := comms[0].(comm.MovedCounter)
	if !ok {
		panic("not counted")
	}
	for _, m := range mc.Moved() {
		fmt.Printf("%s: moved %d bytes\n", m.Transport, m.Bytes())
	}
	fmt.Println("in all:", comm.MovedBytes(mc.Moved()))
	for _, c := range comms {
		c.Close()
	}
	// Output:
	// inproc: moved 4096 bytes
	// in all: 4096
}
