package syncbn_test

import (
	"context"
	"fmt"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/syncbn"
	"golang.org/x/sync/errgroup"
)

// Two ranks (goroutines) each run a batch of 2 through a model with batch
// norm converted to SyncBatchNorm: the statistics are those of all 4
// samples, so both ranks end with the same running mean.
func Example() {
	cs, _ := inproc.New(2, comm.Options{})
	means := make([][]float32, 2)
	var g errgroup.Group
	for r, c := range cs {
		g.Go(func() error {
			defer c.Close()
			ctx := context.Background()
			m, err := nn.New("bn", nn.Seq(&nn.Linear{In: 3, Out: 2}, nn.BatchNorm1d(2)), []int{3}, 1)
			if err != nil {
				return err
			}
			s, err := syncbn.Convert(ctx, m, c)
			if err != nil {
				return err
			}
			defer s.Close()
			gr, err := m.NewGraph(2, true)
			if err != nil {
				return err
			}
			x := []float32{1, 2, 3, 4, 5, 6}
			for i := range x {
				x[i] *= float32(1 + 3*r) // the ranks see different data
			}
			if _, err := gr.Step(ctx, x, []int32{0, 1}); err != nil {
				return err
			}
			means[r] = m.BNs[0].RunningMean
			fmt.Printf("rank %d: %d layer(s) synchronised\n", r, s.Layers)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		panic(err)
	}
	fmt.Println("same running mean on both ranks:", fmt.Sprint(means[0]) == fmt.Sprint(means[1]))
	// Unordered output:
	// rank 0: 1 layer(s) synchronised
	// rank 1: 1 layer(s) synchronised
	// same running mean on both ranks: true
}
