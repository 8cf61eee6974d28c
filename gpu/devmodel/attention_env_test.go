package devmodel_test

import (
	"math"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

// The attention's switches read when a plan is compiled, changed after
// placing: a plan keeps the attention it was compiled with
// ($GDIST_ATTENTION: fused or not, its parameters after two steps bit
// for bit the model's that never saw the change, which those of a model
// placed with the other attention are not); a plan compiled with the heads in place, whose workspace
// holds the score gradients only, refuses to run with
// $GDIST_ATTENTION_HEADS=copy (the heads' copies would overrun it),
// naming the layer and the variable, and trains on as if the refused
// step had not run once it is unset.
func TestAttentionEnvChangedAfterPlacing(t *testing.T) {
	cudafake.RequireCUDA(t)
	g := models.GPT{Layers: 1, Dim: 16, Heads: 2, Context: 8}
	cfg := devmodel.Config{Device: dev, Batch: 2, Optim: optim.Config{Name: "adamw", LR: 3e-3}}
	place := func(t *testing.T) *devmodel.Model {
		m := gptModel(t, g, 3)
		d, err := devmodel.Place(m, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	step := func(t *testing.T, what string, d *devmodel.Model, i int) float32 {
		t.Helper()
		x, y := text(i, 2, g.Context)
		l, err := d.Step(x, y)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return l
	}
	same := func(t *testing.T, what string, a, b *devmodel.Model, i int) {
		t.Helper()
		if la, lb := step(t, what, a, i), step(t, what, b, i); math.Float32bits(la) != math.Float32bits(lb) {
			t.Fatalf("%s: step %d: loss %v; the model that never saw the change %v", what, i, la, lb)
		}
	}
	for _, v := range []string{"", "fused"} {
		t.Run("attention="+v, func(t *testing.T) {
			t.Setenv(kernels.EnvAttention, v)
			other := "fused"
			if v == "fused" {
				other = ""
			}
			train := func(d *devmodel.Model, what string) []float32 {
				for i := 0; i < 2; i++ {
					step(t, what, d, i)
				}
				return devtest.Floats(t, dev, d.Params, d.N)
			}
			changed, ref := place(t), place(t)
			want := train(ref, "the reference")
			t.Setenv(kernels.EnvAttention, other)
			if _, ok := bitsEqual(train(place(t), "placed with the other attention"), want); ok {
				t.Fatalf("the attentions %q and %q train alike here: the test cannot tell them apart", v, other)
			}
			if j, ok := bitsEqual(train(changed, "$"+kernels.EnvAttention+" changed after placing"), want); !ok {
				t.Fatalf("$%s=%q after placing with %q: parameter %d differs from the model that never saw the change", kernels.EnvAttention, other, v, j)
			}
		})
	}
	t.Run("heads", func(t *testing.T) {
		t.Setenv(kernels.EnvAttention, "")
		t.Setenv(kernels.EnvAttentionHeads, "")
		changed, ref := place(t), place(t)
		if !kernels.AttentionInPlace(devmodel.Engine(changed)) {
			t.Skip("the engine copies the heads anyway")
		}
		same(t, "before the change", changed, ref, 0)
		t.Setenv(kernels.EnvAttentionHeads, "copy")
		x, y := text(1, 2, g.Context)
		_, err := changed.Step(x, y)
		if err == nil || !strings.Contains(err.Error(), `"2.fn.1"`) || !strings.Contains(err.Error(), kernels.EnvAttentionHeads) {
			t.Fatalf("a step with the heads planned in place, now copied: %v; want an error naming the layer and $%s", err, kernels.EnvAttentionHeads)
		}
		t.Logf("refused: %v", err)
		t.Setenv(kernels.EnvAttentionHeads, "")
		for i := 1; i < 3; i++ {
			same(t, "after the refused step", changed, ref, i)
		}
		if j, ok := bitsEqual(devtest.Floats(t, dev, changed.Params, changed.N), devtest.Floats(t, dev, ref.Params, ref.N)); !ok {
			t.Fatalf("after the refused step: parameter %d differs from the model that never saw it", j)
		}
	})
}
