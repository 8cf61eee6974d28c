package zero_test

import (
	"context"
	"fmt"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/flat"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/zero"
	"golang.org/x/sync/errgroup"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ZeRO-2 over a model that builds a new graph every step over a float64
// weight it keeps (WrapValues, AddGrads): the engine's optimizer runs in
// float64 on each rank's shard, and Step all-gathers the result into the
// model's own tensor. Two ranks as goroutines, each with half the batch,
// fit y = 2 x1 + x2.
func ExampleWrapValues() {
	ctx := context.Background()
	cs, _ := inproc.New(2, comm.Options{})
	ws := make([]*tensor.Dense, 2)
	var g errgroup.Group
	for _, c := range cs {
		g.Go(func() error {
			defer c.Close()
			w := tensor.New(tensor.WithShape(2, 1), tensor.WithBacking([]float64{0, 0}))
			ws[c.Rank()] = w
			e, err := zero.WrapValues(ctx, c, []flat.Value{{Name: "w", T: w}},
				zero.Options{Stage: 2, Optim: optim.Config{Name: "sgd", LR: 0.1}})
			if err != nil {
				return err
			}
			x := tensor.New(tensor.WithShape(1, 2), tensor.WithBacking([]float64{float64(c.Rank() + 1), 1}))
			target := float64(2*(c.Rank()+1) + 1)
			for step := 0; step < 1000; step++ {
				var gr *G.ExprGraph
				var wn *G.Node
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
				err := e.Backward(ctx, func() error {
					if err := vm.RunAll(); err != nil {
						return err
					}
					return e.AddGrads([]*G.Node{wn})
				})
				vm.Close()
				if err != nil {
					return err
				}
				if err := e.Step(ctx); err != nil {
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
