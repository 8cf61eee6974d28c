package zero_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/flat"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/zero"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestWrapChecksShapes: a model built with other shapes on one rank (a
// transposed weight: as many elements) fails Wrap on every rank, naming
// the rank and the shapes, for stages 1 and 2.
func TestWrapChecksShapes(t *testing.T) {
	for _, stage := range []int{1, 2} {
		errs := make([]error, 2)
		err := commtest.RunRanks(context.Background(), world(t, 2), time.Minute, func(ctx context.Context, c comm.Comm) error {
			shape := []int{4, 3}
			if c.Rank() == 1 {
				shape = []int{3, 4}
			}
			var w *G.Node
			if err := flat.Build(func() error {
				g := G.NewGraph()
				w = G.NewMatrix(g, tensor.Float32, G.WithShape(shape...), G.WithName("w"), G.WithInit(G.Ones()))
				_, err := G.Grad(G.Must(G.Sum(w)), w)
				return err
			}); err != nil {
				return err
			}
			_, errs[c.Rank()] = zero.Wrap(ctx, c, []*G.Node{w}, zero.Options{Stage: stage, Optim: optim.Config{Name: "sgd", LR: 0.1}})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for r, err := range errs {
			var ns *comm.NotSameError
			want := fmt.Sprintf(`zero: comm: rank %d: the learnables' layout (their shapes, in order) differs between ranks: rank 1 has "0:[3 4] " where rank 0 has "0:[4 3] "`, r)
			if !errors.As(err, &ns) || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("stage %d, rank %d: %v\nwant %s", stage, r, err, want)
			}
		}
	}
}
