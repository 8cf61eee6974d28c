package launch_test

import (
	"context"
	"fmt"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/launch"
)

// A program's main: `prog -nproc 2` starts 2 processes of prog that join
// as ranks; `mpirun -np 2 prog` or `torchrun --no-python
// --nproc-per-node 2 prog` start them instead.
func ExampleMain() {
	launch.Main(func(ctx context.Context, c comm.Comm) error {
		grad := []float32{float32(c.Rank())}
		return comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(grad), comm.Avg))
	})
}

// Ranks as goroutines (Backend inproc), as a test runs them; the same
// call with Backend "tcp" (or "auto") starts NProc processes, or joins
// the job a launcher started.
func ExampleRanks() {
	err := launch.Ranks(context.Background(), launch.Job{NProc: 2, Backend: "inproc"}, func(ctx context.Context, c comm.Comm) error {
		v := []float32{float32(c.Rank() + 1)}
		if err := comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(v), comm.Sum)); err != nil {
			return err
		}
		if c.Rank() == 0 {
			fmt.Println("sum over", c.Size(), "ranks:", v[0])
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: sum over 2 ranks: 3
}
