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

// ZeRO stage 2 on a plain gorgonia model: 3 ranks each keep a third of the
// optimizer state (Adam) and of the reduced gradients.
func Example() {
	ctx := context.Background()
	cs, _ := inproc.New(3, comm.Options{})
	got := make([]string, 3)
	g := errgroup.Group{}
	for _, c := range cs {
		g.Go(func() (err error) {
			defer c.Close()
			// Each rank sees one sample of the global batch: a + b = 3, a - b = 1, 2a = 4.
			rows := [][3]float32{{1, 1, 3}, {1, -1, 1}, {2, 0, 4}}[c.Rank()]
			var gr *G.ExprGraph
			var ab, loss *G.Node
			if err := flat.Build(func() error {
				gr = G.NewGraph()
				ab = G.NewVector(gr, tensor.Float32, G.WithShape(2), G.WithName("ab"), G.WithInit(G.Zeroes()))
				coef := G.NewConstant(tensor.New(tensor.WithShape(2), tensor.WithBacking(rows[:2])))
				loss = G.Must(G.Square(G.Must(G.Sub(G.Must(G.Sum(G.Must(G.HadamardProd(coef, ab)))), G.NewConstant(rows[2])))))
				_, err := G.Grad(loss, ab)
				return err
			}); err != nil {
				return err
			}
			e, err := zero.Wrap(ctx, c, []*G.Node{ab}, zero.Options{Stage: 2, Optim: optim.Config{Name: "adam", LR: 0.05}})
			if err != nil {
				return err
			}
			vm := G.NewTapeMachine(gr, G.BindDualValues(ab))
			defer vm.Close()
			for step := 0; step < 400; step++ {
				if err := e.Backward(ctx, vm.RunAll); err != nil { // reduce each bucket to its owner
					return err
				}
				vm.Reset()
				if err := e.Step(ctx); err != nil { // update the shard, gather the parameters
					return err
				}
			}
			v := ab.Value().Data().([]float32)
			got[c.Rank()] = fmt.Sprintf("rank %d: a = %.2f, b = %.2f", c.Rank(), v[0], v[1])
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range got {
		fmt.Println(s)
	}
	// Output:
	// rank 0: a = 2.00, b = 1.00
	// rank 1: a = 2.00, b = 1.00
	// rank 2: a = 2.00, b = 1.00
}
