package zero_test

import (
	"context"
	"fmt"
	"math"
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

// TestSharedBuffersPlain: stage 2 over a plain gorgonia model on shm keeps
// the full gradient buffer in shared memory too, so each bucket's reduce
// to its owner is zero-copy (the backward sends only the 32-byte
// exchanges, no gradients), and trains bit for bit as with ordinary
// buffers.
func TestSharedBuffersPlain(t *testing.T) {
	const n = 1 << 16 // 256 KiB of parameters: two buckets of 128 KiB, GDIST_ZEROCOPY_MIN
	run := func(ordinary bool) []float32 {
		var out []float32
		err := commtest.RunRanks(context.Background(), shmWorld(t, 2), 2*time.Minute, func(ctx context.Context, c comm.Comm) error {
			coef := make([]float32, n)
			for i := range coef {
				coef[i] = float32(i%7+c.Rank()) * 0.25
			}
			var gr *G.ExprGraph
			var w *G.Node
			if err := flat.Build(func() error {
				gr = G.NewGraph()
				w = G.NewVector(gr, tensor.Float32, G.WithShape(n), G.WithName("w"), G.WithInit(G.Ones()))
				k := G.NewConstant(tensor.New(tensor.WithShape(n), tensor.WithBacking(coef)))
				loss := G.Must(G.Sum(G.Must(G.Square(G.Must(G.Sub(G.Must(G.HadamardProd(k, w)), G.NewConstant(float32(1))))))))
				_, err := G.Grad(loss, w)
				return err
			}); err != nil {
				return err
			}
			e, err := zero.Wrap(ctx, c, []*G.Node{w}, zero.Options{Stage: 2, OrdinaryBuffers: ordinary, Optim: optim.Config{Name: "sgd", LR: 0.01}})
			if err != nil {
				return err
			}
			defer e.Close()
			if e.SharedBuffers() == ordinary {
				return fmt.Errorf("SharedBuffers() = %v with OrdinaryBuffers %v", e.SharedBuffers(), ordinary)
			}
			vm := G.NewTapeMachine(gr, G.BindDualValues(w))
			defer vm.Close()
			tc := c.(comm.TrafficCounter)
			for step := 0; step < 3; step++ {
				sent0, _ := tc.Traffic()
				if err := e.Backward(ctx, vm.RunAll); err != nil {
					return err
				}
				if sent, _ := tc.Traffic(); !ordinary && sent-sent0 > 1024 {
					return fmt.Errorf("step %d: the backward sent %d bytes: the buckets' reduces were not zero-copy", step, sent-sent0)
				}
				vm.Reset()
				if err := e.Step(ctx); err != nil {
					return err
				}
			}
			if c.Rank() == 0 {
				out = append([]float32(nil), w.Value().Data().([]float32)...)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	got, want := run(false), run(true)
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("parameter %d is %v with shared buffers, %v without", i, got[i], want[i])
		}
	}
}

// TestSharedBuckets: stage 2 over an nn model takes its transient bucket
// buffers from shared memory (a pool), and stage 3 its gathered
// parameters and the gradients it reduce-scatters, so every collective
// of 128 KiB or more is zero-copy: over the whole run rank 1 sends the
// 32-byte exchanges and the small tensors, under 2% of what it sends with
// ordinary buffers;
// the parameters are bit for bit the same.
func TestSharedBuckets(t *testing.T) {
	for _, stage := range []int{2, 3} {
		t.Run(fmt.Sprintf("stage%d", stage), func(t *testing.T) {
			sent := func(ordinary bool) ([]float32, int64) {
				cs := shmWorld(t, 2)
				got := trainOn(t, cs, stage, zero.Options{OrdinaryBuffers: ordinary}, func(*zero.Engine) error { return nil })
				s, _ := cs[1].(comm.TrafficCounter).Traffic()
				return got, s
			}
			got, shared := sent(false)
			want, ordinary := sent(true)
			// Collectives under GDIST_ZEROCOPY_MIN (128 KiB: stage 3's
			// gathers of the small tensors) take the ordinary path.
			if shared*50 > ordinary || ordinary < 1<<20 {
				t.Fatalf("rank 1 sent %d bytes with shared buffers, %d with ordinary ones: want under 2%% of the latter, and it over 1 MiB", shared, ordinary)
			}
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("parameter %d is %v with shared buffers, %v with ordinary ones", i, got[i], want[i])
				}
			}
		})
	}
}
