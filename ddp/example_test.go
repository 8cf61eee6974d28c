package ddp_test

import (
	"context"
	"fmt"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/ddp"
	"github.com/gdist/gdist/flat"
	"golang.org/x/sync/errgroup"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// A plain gorgonia model (least squares, y = x w) made data parallel with
// Wrap: two ranks as goroutines, each with its own half of the batch.
func Example() {
	ctx := context.Background()
	cs, _ := inproc.New(2, comm.Options{})
	ws := make([][]float32, 2)
	var g errgroup.Group
	for _, c := range cs {
		g.Go(func() error {
			defer c.Close()
			var gr *G.ExprGraph
			var x, w, loss *G.Node
			// Ranks as goroutines build their graphs one at a time.
			err := flat.Build(func() error {
				gr = G.NewGraph()
				// Rank r's half of the batch: x = [r+1, 1], target 2(r+1) + 1.
				x = G.NewMatrix(gr, tensor.Float32, G.WithShape(1, 2), G.WithName("x"),
					G.WithValue(tensor.New(tensor.WithShape(1, 2), tensor.WithBacking([]float32{float32(c.Rank() + 1), 1}))))
				w = G.NewMatrix(gr, tensor.Float32, G.WithShape(2, 1), G.WithName("w"), G.WithInit(G.Zeroes()))
				tw, err := ddp.Tap(w) // optional: overlap the reduction with backward
				if err != nil {
					return err
				}
				target := G.NewConstant(float32(2*(c.Rank()+1) + 1))
				loss = G.Must(G.Square(G.Must(G.Sub(G.Must(G.Sum(G.Must(G.Mul(x, tw)))), target))))
				_, err = G.Grad(loss, w)
				return err
			})
			if err != nil {
				return err
			}
			d, err := ddp.Wrap(ctx, c, []*G.Node{w}, ddp.Options{})
			if err != nil {
				return err
			}
			vm := G.NewTapeMachine(gr, G.BindDualValues(w))
			defer vm.Close()
			solver := G.NewVanillaSolver(G.WithLearnRate(0.1))
			for step := 0; step < 1000; step++ {
				if err := d.Backward(ctx, vm.RunAll); err != nil { // gradients averaged over ranks
					return err
				}
				vm.Reset()
				if err := solver.Step(G.NodesToValueGrads([]*G.Node{w})); err != nil {
					return err
				}
			}
			ws[c.Rank()] = append([]float32(nil), w.Value().Data().([]float32)...)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		fmt.Println(err)
		return
	}
	// Both ranks fitted y = 2 x1 + 1 x2 over the whole batch.
	fmt.Printf("rank 0: w = [%.3f %.3f]\nrank 1: w = [%.3f %.3f]\n", ws[0][0], ws[0][1], ws[1][0], ws[1][1])
	// Output:
	// rank 0: w = [2.000 1.000]
	// rank 1: w = [2.000 1.000]
}
