package ddp_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/ddp"
	"github.com/gdist/gdist/flat"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestWrapChecksShapes: a model built with other shapes on one rank (a
// transposed weight: as many elements, so the buffers alone would mix)
// fails Wrap on every rank, naming the rank and the shapes.
func TestWrapChecksShapes(t *testing.T) {
	errs := make([]error, 2)
	err := commtest.RunRanks(context.Background(), inprocWorld(t, 2), time.Minute, func(ctx context.Context, c comm.Comm) error {
		shape := []int{4, 3}
		if c.Rank() == 1 {
			shape = []int{3, 4}
		}
		var w, b *G.Node
		if err := flat.Build(func() error {
			g := G.NewGraph()
			w = G.NewMatrix(g, tensor.Float32, G.WithShape(shape...), G.WithName("w"), G.WithInit(G.Ones()))
			b = G.NewVector(g, tensor.Float32, G.WithShape(3), G.WithName("b"), G.WithInit(G.Ones()))
			_, err := G.Grad(G.Must(G.Sum(G.Must(G.Add(G.Must(G.Sum(w)), G.Must(G.Sum(b)))))), w, b)
			return err
		}); err != nil {
			return err
		}
		_, errs[c.Rank()] = ddp.Wrap(ctx, c, []*G.Node{w, b}, ddp.Options{})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for r, err := range errs {
		var ns *comm.NotSameError
		want := fmt.Sprintf(`ddp: comm: rank %d: the learnables' layout (their shapes, in order) differs between ranks: rank 1 has "0:[3 4] 1:[3] " where rank 0 has "0:[4 3] 1:[3] "`, r)
		if !errors.As(err, &ns) || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("rank %d: %v\nwant %s", r, err, want)
		}
	}
}
