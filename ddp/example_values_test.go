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

// A model that builds a new graph every step (a LispMachine) over a
// float64 weight it keeps: WrapValues takes the tensor once; each step's
// gradients go to AddGrads. Two ranks as goroutines, each with its own
// half of the batch, fit y = 2 x1 + x2.
func ExampleWrapValues() {
	ctx := context.Background()
	cs, _ := inproc.New(2, comm.Options{})
	ws := make([]*tensor.Dense, 2)
	var g errgroup.Group
	for _, c := range cs {
		g.Go(func() error {
			defer c.Close()
			w := tensor.New(tensor.WithShape(2, 1), tensor.WithBacking([]float64{0, 0})) // the model's weight
			ws[c.Rank()] = w
			d, err := ddp.WrapValues(ctx, c, []flat.Value{{Name: "w", T: w}}, ddp.Options{})
			if err != nil {
				return err
			}
			solver := G.NewVanillaSolver(G.WithLearnRate(0.1))
			x := tensor.New(tensor.WithShape(1, 2), tensor.WithBacking([]float64{float64(c.Rank() + 1), 1}))
			target := float64(2*(c.Rank()+1) + 1)
			for step := 0; step < 1000; step++ {
				var gr *G.ExprGraph
				var wn *G.Node
				// A new graph over the same tensor (ranks as goroutines
				// build one at a time).
				if err := flat.Build(func() error {
					gr = G.NewGraph()
					wn = G.NewMatrix(gr, tensor.Float64, G.WithShape(2, 1), G.WithName("w"), G.WithValue(w))
					xn := G.NewMatrix(gr, tensor.Float64, G.WithShape(1, 2), G.WithValue(x))
					_, err := G.Square(G.Must(G.Sub(G.Must(G.Sum(G.Must(G.Mul(xn, wn)))), G.NewConstant(target))))
					return err
				}); err != nil {
					return err
				}
				vm := G.NewLispMachine(gr)
				err := d.Backward(ctx, func() error {
					if err := vm.RunAll(); err != nil { // forward and backward
						return err
					}
					return d.AddGrads([]*G.Node{wn}) // this step's gradients, averaged over ranks
				})
				vm.Close()
				if err != nil {
					return err
				}
				if err := solver.Step(d.ValueGrads()); err != nil { // updates w in place
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("rank 0: w = %.3f\nrank 1: w = %.3f\n", ws[0].Data(), ws[1].Data())
	// Output:
	// rank 0: w = [2.000 1.000]
	// rank 1: w = [2.000 1.000]
}
