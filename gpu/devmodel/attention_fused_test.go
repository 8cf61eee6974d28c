package devmodel_test

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/kernels"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
)

// fusedGPT is a small gpt (2 layers, dimension 16, 2 heads of 8) of
// context t.
func fusedGPT(t *testing.T, ctx int) (*nn.Model, models.GPT) {
	t.Helper()
	shape := models.GPT{Layers: 2, Dim: 16, Heads: 2, Context: ctx}
	m := gptModel(t, shape, 3)
	return m, shape
}

// With $GDIST_ATTENTION=fused a gpt trains on the device as on the CPU
// path within TestGPTMatchesCPU's tolerances (AdamW with clipping, train's
// gpt defaults, 6 steps: every loss within 2e-5 relative to max(1,
// loss), parameters within lr = 3e-3), at context 8 and 70 (the fused
// kernels' 64-row tiles and their edge); and as the default attention
// on the device: every step's loss within 2e-5 of it, the parameters
// within 3e-3. The fused plan's peak memory is below the default's by at
// least the probabilities it no longer keeps (layers x N H T^2 floats,
// less the N H T it keeps instead) and the workspace it no longer needs
// (dS's N H T^2 with the heads in place, the least the default takes,
// less N H T): no T x T buffer is reserved.
func TestFusedAttentionFollowsCPU(t *testing.T) {
	cudafake.RequireCUDA(t)
	for _, ctx := range []int{8, 70} {
		t.Run(fmt.Sprintf("T%d", ctx), func(t *testing.T) {
			cfg := devmodel.Config{Device: dev, Batch: 2, Optim: optim.Config{Name: "adamw", LR: 3e-3, WeightDecay: 0.01}, ClipGrad: 1}
			data := func(i int) ([]float32, []int32) { return text(i, 2, ctx) }
			os.Unsetenv(kernels.EnvAttention)
			ref, shape := fusedGPT(t, ctx)
			dd, err := devmodel.Place(ref, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer dd.Close()
			var want []float32
			for i := 0; i < 6; i++ {
				x, y := data(i)
				l, err := dd.Step(x, y)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, l)
			}
			if err := dd.CopyToHost(); err != nil {
				t.Fatal(err)
			}

			t.Setenv(kernels.EnvAttention, "fused")
			cpu, _ := fusedGPT(t, ctx)
			gpu, _ := fusedGPT(t, ctx)
			d := follow(t, cpu, gpu, cfg, 6, data, 2e-5, 3e-3)
			m2, _ := fusedGPT(t, ctx)
			d2, err := devmodel.Place(m2, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer d2.Close()
			for i := 0; i < 6; i++ {
				x, y := data(i)
				got, err := d2.Step(x, y)
				if err != nil {
					t.Fatal(err)
				}
				if diff := math.Abs(float64(got) - float64(want[i])); !(diff <= 2e-5*math.Max(1, math.Abs(float64(want[i])))) {
					t.Errorf("step %d: loss %v fused, %v by the default attention", i, got, want[i])
				}
			}
			if err := d2.CopyToHost(); err != nil {
				t.Fatal(err)
			}
			if w, at := worst(m2.Flat.Value, ref.Flat.Value, 1); !(w <= 3e-3) {
				t.Errorf("parameter %d: %v fused, %v by the default attention", at, m2.Flat.Value[at], ref.Flat.Value[at])
			} else {
				t.Logf("fused against the default attention: parameters within %.3g after 6 steps", w)
			}
			g := kernels.AttentionGeom{N: 2, T: ctx, C: shape.Dim, H: shape.Heads}
			saved := int64(4 * (shape.Layers*(g.Probs()-g.FusedKeep()) + g.InPlaceWorkspace() - g.FusedWorkspace()))
			t.Logf("peak device memory: %d bytes fused, %d by default (%d less; P and the workspace: %d)", d.PeakBytes(), dd.PeakBytes(), dd.PeakBytes()-d.PeakBytes(), saved)
			if !(dd.PeakBytes()-d.PeakBytes() >= saved) {
				t.Errorf("peak %d bytes fused, %d by default: want at least %d less (%d layers' N H T^2 - N H T floats, and N H T^2 - N H T of workspace)",
					d.PeakBytes(), dd.PeakBytes(), saved, shape.Layers)
			}
		})
	}
}

// Under TF32 and bf16 autocast the fused attention computes in fp32
// from the fp32 Q, K and V (more accurate than autocast needs): a gpt's
// first loss and every gradient are within TestPrecisionFollowsCPU's
// tolerances of the CPU's fp32 path (TF32: 1e-4 relative to max(1,
// loss), 2e-3 of each tensor's largest gradient; bf16: 1e-3 and 2e-2)
// and of the default attention's at that precision.
func TestFusedAttentionPrecisions(t *testing.T) {
	cudafake.RequireCUDA(t)
	t.Setenv(gemm.EnvAutocastCache, "1")
	for _, c := range []struct {
		prec             gemm.Precision
		lossTol, gradTol float64
	}{{gemm.TF32, 1e-4, 2e-3}, {gemm.BF16, 1e-3, 2e-2}} {
		t.Run(string(c.prec), func(t *testing.T) {
			cfg := devmodel.Config{Device: dev, Batch: 2, Precision: c.prec, Optim: optim.Config{Name: "sgd", LR: 0.1}}
			x, y := text(0, 2, 70)
			first := func(env string) (float32, []float32, *nn.Model) {
				t.Setenv(kernels.EnvAttention, env)
				m, _ := fusedGPT(t, 70)
				d, err := devmodel.Place(m, cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				l, err := d.ForwardBackward(x, y)
				if err != nil {
					t.Fatal(err)
				}
				g := make([]float32, d.N)
				if err := d.GradsToHost(g); err != nil {
					t.Fatal(err)
				}
				return l, g, m
			}
			lf, gf, m := first("fused")
			ld, gd, _ := first("")
			cpu, _ := fusedGPT(t, 70)
			lc := newCPUTrainer(t, cpu, 2, cfg.Optim, 0).backward(t, x, y)
			for what, ref := range map[string]struct {
				l float32
				g []float32
			}{"CPU fp32": {lc, cpu.Flat.Grad}, "default " + string(c.prec): {ld, gd}} {
				if diff := math.Abs(float64(lf) - float64(ref.l)); !(diff <= c.lossTol*math.Max(1, math.Abs(float64(ref.l)))) {
					t.Errorf("loss %v fused, %v %s", lf, ref.l, what)
				}
				worstG := 0.0
				for _, p := range m.Params {
					rg, fg := ref.g[p.Offset:p.Offset+p.Size], gf[p.Offset:p.Offset+p.Size]
					w, at := worstOfLargest(fg, rg)
					worstG = math.Max(worstG, w)
					if !(w <= c.gradTol) {
						t.Errorf("%s: gradient [%d] %v fused, %v %s", p.Name, at, fg[at], rg[at], what)
					}
				}
				t.Logf("against %s: loss %.7f vs %.7f, gradients within %.2g of each tensor's largest", what, lf, ref.l, worstG)
			}
		})
	}
}

// A bad $GDIST_ATTENTION, and heads wider than the fused kernels take,
// are refused when the model is placed, naming the layer and the
// variable.
func TestFusedAttentionRefused(t *testing.T) {
	cudafake.RequireCUDA(t)
	cfg := devmodel.Config{Device: dev, Batch: 2, Optim: optim.Config{Name: "sgd", LR: 0.1}}
	t.Setenv(kernels.EnvAttention, "flash")
	m, _ := fusedGPT(t, 8)
	if _, err := devmodel.Place(m, cfg); err == nil || !strings.Contains(err.Error(), kernels.EnvAttention) || !strings.Contains(err.Error(), "attention") {
		t.Errorf("$%s=flash: %v", kernels.EnvAttention, err)
	}
	t.Setenv(kernels.EnvAttention, "fused")
	wide, err := models.NewGPT("wide", models.GPT{Layers: 1, Dim: 256, Heads: 1, Context: 4}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := devmodel.Place(wide, cfg); err == nil || !strings.Contains(err.Error(), "up to 128") {
		t.Errorf("heads of 256: %v", err)
	}
}

// At GPT-2 small's shape and batch 8 (MemoryPlan: the plan laid out as
// on a GPU, no device needed) the fused attention's plan holds no
// buffer of T x T scores (the default's P and dS are N H T^2 floats
// each, 402.7 MB) and its peak is lower by at least 12 layers' P and
// dS's workspace less the log-sum-exp rows and D_i it keeps instead:
// 4 (13 (N H T^2 - N H T)) bytes = 5.23 GB, at fp32 and bf16.
func TestFusedAttentionMemoryPlan(t *testing.T) {
	const batch = 8
	m, err := models.New("gpt-L12-D768-H12-T1024", 1)
	if err != nil {
		t.Fatal(err)
	}
	g := kernels.AttentionGeom{N: batch, T: 1024, C: 768, H: 12}
	tt := int64(4 * g.Probs())
	for _, prec := range []gemm.Precision{gemm.FP32, gemm.BF16} {
		cfg := devmodel.Config{Precision: prec, Optim: optim.Config{Name: "adamw", LR: 3e-3, WeightDecay: 0.01}, ClipGrad: 1}
		plan := func(env string) (devmodel.MemoryBreakdown, int) {
			t.Setenv(kernels.EnvAttention, env)
			b, err := devmodel.MemoryPlan(m, batch, cfg)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, x := range b.Buffers {
				if x.Bytes >= tt {
					n++
				}
			}
			return b, n
		}
		def, defTT := plan("")
		fused, fusedTT := plan("fused")
		saved := int64(4 * 13 * (g.Probs() - g.FusedKeep()))
		t.Logf("%s: peak %.2f GB by default (%d buffers of T x T scores), %.2f GB fused (%d): %.2f GB less (at least %.2f)",
			prec, float64(def.Peak)/1e9, defTT, float64(fused.Peak)/1e9, fusedTT, float64(def.Peak-fused.Peak)/1e9, float64(saved)/1e9)
		if fusedTT != 0 || defTT < 12 {
			t.Errorf("%s: %d buffers of N H T^2 floats fused, %d by default: want none fused (and P's 12 by default)", prec, fusedTT, defTT)
		}
		if !(def.Peak-fused.Peak >= saved) {
			t.Errorf("%s: peak %d bytes fused, %d by default: want at least %d less", prec, fused.Peak, def.Peak, saved)
		}
	}
}
