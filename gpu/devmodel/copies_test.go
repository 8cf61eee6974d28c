package devmodel_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/nn"
)

// Under bf16 autocast the kernels that produce a Linear's input write
// its bf16 copy as they go (LayerNorm: the gpt's attention and MLP
// inputs and the head's; GELU: the MLP's second Linear's; ReLU: the
// mlp's), and ReLU's, GELU's, a Residual's and LayerNorm's backward the
// output gradient of the Linear before them (directly or ending a
// Residual's function), and the Linear's products read it (gemm's
// Provide) instead of casting it: training is bit for bit the path that
// casts every operand (every loss and parameter over 4 steps of AdamW
// with clipping, a gpt and the mlp), with 2 R C fewer values cast a
// step for each such Linear (R rows of C values: its forward and its
// weight gradient's product). A copy must never be served stale: after
// a forward that ran without its backward (the training plan's forward
// as an evaluation, leaving the copies with the engine), an evaluation
// through the forward-only plan, which writes the training plan's
// blocks, gives the same loss as the path without copies, and training
// goes on bit for bit.
func TestBF16ProducerCopies(t *testing.T) {
	cudafake.RequireCUDA(t)
	for _, c := range []struct {
		name  string
		model func() *nn.Model
		x     func(i int) ([]float32, []int32)
		saved int64 // values a step no longer casts
	}{
		{"gpt", func() *nn.Model { return bf16GPT(t) }, func(i int) ([]float32, []int32) { return text(i, 2, bf16Shape.Context) },
			copiesSaved(bf16Shape, 2)},
		// its ReLUs feed Linears of 256 and 128 inputs (x twice) and
		// write the gradients of the Linears before (dy once)
		{"mlp", func() *nn.Model { return zoo(t, "mlp") }, func(i int) ([]float32, []int32) { return devtest.Images(i, 2, 784) }, 3 * 2 * (256 + 128)},
	} {
		t.Run(c.name, func(t *testing.T) {
			place := func(on bool) *copiesRun {
				restore := devmodel.SetProducerCopies(on)
				defer restore()
				r := &copiesRun{d: placeBF16(t, c.model(), true)}
				if !strings.Contains(r.d.Products(), "cuBLAS") {
					t.Skip(r.d.Products())
				}
				x, y := c.x(0)
				r.step(t, x, y) // the plan compiled now
				return r
			}
			with, without := place(true), place(false)
			same := func(what string) {
				t.Helper()
				a, b := devtest.Floats(t, dev, with.d.Params, with.d.N), devtest.Floats(t, dev, without.d.Params, without.d.N)
				if i, ok := bitsEqual(a, b); !ok {
					t.Fatalf("%s: parameter %d: %v with the producers' copies, %v without", what, i, a[i], b[i])
				}
				for i := range with.losses {
					if math.Float32bits(with.losses[i]) != math.Float32bits(without.losses[i]) {
						t.Fatalf("%s: step %d's loss %v with the copies, %v without", what, i, with.losses[i], without.losses[i])
					}
				}
			}
			same("step 0")
			for i := 1; i < 4; i++ {
				if i == 2 {
					// a forward without its backward, then an evaluation
					x, y := c.x(50)
					for _, r := range []*copiesRun{with, without} {
						if _, _, _, err := devmodel.EvalViaTrainingPlan(r.d, x, y); err != nil {
							t.Fatal(err)
						}
					}
					x, y = c.x(51)
					lw, nw, err := with.d.Eval(x, y)
					if err != nil {
						t.Fatal(err)
					}
					lo, no, err := without.d.Eval(x, y)
					if err != nil {
						t.Fatal(err)
					}
					if math.Float32bits(lw) != math.Float32bits(lo) || nw != no {
						t.Fatalf("evaluation after a forward without backward: loss %v (%d correct) with the copies, %v (%d) without: a stale copy read", lw, nw, lo, no)
					}
				}
				x, y := c.x(i)
				with.step(t, x, y)
				without.step(t, x, y)
				same(fmt.Sprint("step ", i))
			}
			for i := range with.casts {
				if got := without.casts[i] - with.casts[i]; got != c.saved {
					t.Errorf("step %d: %d values cast with the copies, %d without: %d saved, want %d", i, with.casts[i], without.casts[i], got, c.saved)
				}
			}
			t.Logf("%s: a step casts %d values with the producers' copies, %d without", c.name, with.casts[0], without.casts[0])
		})
	}
}

// copiesRun is a model's steps: their losses and the values each cast.
type copiesRun struct {
	d      *devmodel.Model
	losses []float32
	casts  []int64
}

func (r *copiesRun) step(t *testing.T, x []float32, y []int32) {
	t.Helper()
	before := r.d.Casts()
	l, err := r.d.Step(x, y)
	if err != nil {
		t.Fatal(err)
	}
	r.losses = append(r.losses, l)
	r.casts = append(r.casts, r.d.Casts().Sub(before).Values())
}

// copiesSaved is the values a gpt's bf16 step (batch b) no longer casts
// with the producers' bf16 copies, 2 R C for each Linear of C inputs
// whose input one writes (its forward product and its weight
// gradient's; R = b T), R C' for each of C' outputs whose output
// gradient one writes (both backward products read the one copy): each
// layer's two LayerNorms feed a Linear of D inputs (attention's
// in-projection, the MLP's first), its GELU one of 4 D (the MLP's
// second) and, backward, writes the MLP's first's output gradient (4 D);
// the Residuals' backward sums (and the last LayerNorm's backward) write
// the output gradients of the Linears that end the Residuals before
// (attention's out-projection, the MLP's second: D each); the last
// LayerNorm feeds the head: (18 L + 2) R D.
func copiesSaved(g models.GPT, b int) int64 {
	R, D := int64(b*g.Context), int64(g.Dim)
	return (18*int64(g.Layers) + 2) * R * D
}

// copiesWritten is the bf16 values the producers write in a gpt's step
// (2 bytes each): the LayerNorms' outputs ((2 L + 1) R D), the GELUs'
// (4 L R D) and their input gradients (4 L R D), the Linears' output
// gradients the Residuals and the last LayerNorm write (2 L R D).
func copiesWritten(g models.GPT, b int) int64 {
	R, D := int64(b*g.Context), int64(g.Dim)
	return (12*int64(g.Layers) + 1) * R * D
}
