package devmodel_test

import (
	"math"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/kernels"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

// With $GDIST_ATTENTION=fused evaluation runs the fused attention
// forward too (evalplan.go's attentionEval), at context 70 (the fused
// kernels' 64-row tiles and their edge), on weights trained 4 steps
// (AdamW at 3e-2: attention far from uniform), at
// the placed batch, 4 times it, 16 times it plus 3 (in passes) and 1:
//   - bit for bit on the fake (sameEval) what the fused training plan's
//     forward computes for the batch;
//   - the loss within evalTol (2e-5 relative to max(1, loss), the fused
//     path's tolerance in TestFusedAttentionFollowsCPU) of the default
//     attention's evaluation of the same weights and of the CPU's
//     (cpuEval), the count of correct predictions the same but for near
//     ties.
func TestEvalFusedAttention(t *testing.T) {
	cudafake.RequireCUDA(t)
	const ctx, batch = 70, 2
	cfg := devmodel.Config{Device: dev, Batch: batch, Optim: optim.Config{Name: "adamw", LR: 3e-2, WeightDecay: 0.01}, ClipGrad: 1}
	t.Setenv(kernels.EnvAttention, "")
	m, _ := fusedGPT(t, ctx)
	def, err := devmodel.Place(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer def.Close()
	for i := 0; i < 4; i++ {
		x, y := text(i, batch, ctx)
		if _, err := def.Step(x, y); err != nil {
			t.Fatal(err)
		}
	}
	if err := def.CopyToHost(); err != nil { // m holds the trained weights
		t.Fatal(err)
	}
	sizes := []int{batch, 4 * batch, 16*batch + 3, 1}
	type result struct {
		loss    float32
		correct int
	}
	want := map[int]result{}
	for j, n := range sizes {
		x, y := text(100+j, n, ctx)
		l, c, err := def.Eval(x, y)
		if err != nil {
			t.Fatal(err)
		}
		want[n] = result{l, c}
	}

	t.Setenv(kernels.EnvAttention, "fused")
	fused, err := devmodel.Place(m, cfg) // the same weights, fused
	if err != nil {
		t.Fatal(err)
	}
	defer fused.Close()
	for j, n := range sizes {
		x, y := text(100+j, n, ctx)
		sameEval(t, fused, x, y)
		loss, correct, err := fused.Eval(x, y)
		if err != nil {
			t.Fatal(err)
		}
		cpu, cpuCorrect, ties := cpuEval(t, m, batch, x, y)
		t.Logf("batch of %d (%d samples a pass): loss fused %.7f, default %.7f, CPU %.7f; correct %d, %d, %d (%d near ties)",
			n, devmodel.EvalPass(fused, n), loss, want[n].loss, cpu, correct, want[n].correct, cpuCorrect, ties)
		for what, ref := range map[string]result{"the default attention": want[n], "the CPU": {float32(cpu), cpuCorrect}} {
			if diff := math.Abs(float64(loss) - float64(ref.loss)); !(diff <= evalTol*math.Max(1, math.Abs(float64(ref.loss)))) {
				t.Errorf("batch of %d: loss %v fused, %v by %s", n, loss, ref.loss, what)
			}
			if d := correct - ref.correct; d > ties || -d > ties {
				t.Errorf("batch of %d: %d correct fused, %d by %s (%d near ties)", n, correct, ref.correct, what, ties)
			}
		}
	}
}

// A forward-only plan's arena (EvalLayoutBytes: one pass, nothing
// borrowed, laid out as on a GPU, no device needed) at GPT-2 small's
// shape: the fused attention takes 4 T C + H T floats of scratch a
// sequence, the default 11 T C + 2 H T^2 (evalplan.go's
// attentionEval). At one sample a pass, where the attention layer is
// the plan's peak either way, the fused plan is smaller by exactly
// that difference, 4 (7 T C + 2 H T^2 - H T) bytes = 122.6 MB (144.7 ->
// 22.1 MB); at batch 8 in one pass by less (210.9 -> 176.3 MB: the
// MLP's 4 T C floats a sample are the fused plan's peak), never more
// than the default's.
func TestEvalFusedAttentionPeak(t *testing.T) {
	m, err := models.New("gpt-L12-D768-H12-T1024", 1)
	if err != nil {
		t.Fatal(err)
	}
	layout := func(env string, batch int) int {
		t.Setenv(kernels.EnvAttention, env)
		n, err := devmodel.EvalLayoutBytes(m, batch)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, batch := range []int{1, 2, 8} {
		def, fused := layout("", batch), layout("fused", batch)
		g := kernels.AttentionGeom{N: batch, T: 1024, C: 768, H: 12}
		saved := 4 * (devmodel.EvalAttentionScratch(g, 1, false) - devmodel.EvalAttentionScratch(g, 1, true))
		t.Logf("batch %d: evaluation arena %.1f MB by default, %.1f MB fused (%.1f MB less; one sequence's attention scratch %.1f MB less)",
			batch, float64(def)/1e6, float64(fused)/1e6, float64(def-fused)/1e6, float64(saved)/1e6)
		if fused > def {
			t.Errorf("batch %d: %d bytes fused, %d by default", batch, fused, def)
		}
		if batch == 1 && def-fused != saved {
			t.Errorf("batch 1: %d bytes fused, %d by default: want %d less (4 (7 T C + 2 H T^2 - H T))", fused, def, saved)
		}
	}
}
