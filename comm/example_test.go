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
