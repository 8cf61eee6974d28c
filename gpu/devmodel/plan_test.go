package devmodel_test

import (
	"math"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cublas"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
	G "gorgonia.org/gorgonia"
)

// sigmoid is a user's layer type: no device kernels.
type sigmoid struct{}

func (sigmoid) Params() []nn.Param                            { return nil }
func (sigmoid) Fwd(b *nn.Builder, x *G.Node) (*G.Node, error) { return G.Sigmoid(x) }

// seqs is batch i of (batch, T, in) inputs and T labels of classes each
// (a function of the position and the first input: learnable).
func seqs(i, batch, t, in, classes int) ([]float32, []int32) {
	x, y := make([]float32, batch*t*in), make([]int32, batch*t)
	for j := range x {
		x[j] = float32((j*37+i*11)%29)/14 - 1
	}
	for j := range y {
		c := 2 * (j % t)
		if x[j*in] > 0 {
			c++
		}
		y[j] = int32(c % classes)
	}
	return x, y
}

// A user's layer composed of nn layers, Tanh and a PositionEmbedding on
// its own (not after an Embedding) among them, places and follows the CPU
// path (SGD; losses within 2e-5 relative to max(1, loss), parameters
// within 2e-5: the zoo's tolerances; Tanh's kernel is within
// kernels.TanhTol of nn's).
func TestTanhPositionMatchesCPU(t *testing.T) {
	const batch = 3
	cfg := devmodel.Config{Device: dev, Batch: batch, Optim: optim.Config{Name: "sgd", LR: 0.1, Momentum: 0.9}}
	follow(t, tanhPos(t), tanhPos(t), cfg, 8, func(i int) ([]float32, []int32) { return tanhData(i, batch) }, 2e-5, 2e-5)
}

// tanhPos is a user's model: Linear, a PositionEmbedding on its own,
// Tanh, LayerNorm and two Residual blocks of LayerNorm, Linear and Tanh,
// over (T 4, 6) inputs, 5 classes per position; tanhData its batches.
func tanhPos(t *testing.T) *nn.Model {
	const tt, in, dim, classes = 4, 6, 8, 5
	block := func() nn.Layer {
		return &nn.Residual{Fn: nn.Seq(&nn.LayerNorm{C: dim}, &nn.Linear{In: dim, Out: dim}, nn.Tanh{})}
	}
	m, err := nn.New("tanh-pos", nn.Seq(&nn.Linear{In: in, Out: dim}, &nn.PositionEmbedding{T: tt, Dim: dim, Std: 0.5},
		&nn.Tanh{}, &nn.LayerNorm{C: dim}, block(), block(), &nn.Linear{In: dim, Out: classes}), []int{tt, in}, 6)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func tanhData(i, batch int) ([]float32, []int32) { return seqs(i, batch, 4, 6, 5) }

// The matrix products' precisions (Config.Precision, PyTorch's names):
// from the same weights and batch as the CPU's fp32 path, the loss of a
// step at tf32 and at bf16 autocast is within lossTol of the CPU's
// (relative to max(1, loss)) and every gradient within gradTol of the
// largest of its tensor on the CPU path (TF32: 1e-4 and 2e-3; bf16: 1e-3
// and 2e-2: a product's inputs keep 11 and 8 bits) for the smooth models
// (gpt, GELU; a Tanh model); the mlp's gradients are not compared (a
// ReLU whose input is within rounding of 0 changes side, and with it a
// whole row of its layer's gradient); trained 8 steps (6 for the gpt),
// the last loss is within 5% of the CPU's. Whole
// trajectories are not compared value by value: rounding the products'
// inputs moves a step's update by up to that tolerance, and training at
// a high learning rate grows such differences. A bf16 step is not the
// fp32 one (the inputs are rounded); an unknown precision is refused.
func TestPrecisionFollowsCPU(t *testing.T) {
	cudafake.RequireCUDA(t)
	shape := models.GPT{Layers: 1, Dim: 16, Heads: 2, Context: 8}
	gpt := func() *nn.Model {
		return gptModel(t, shape, 3)
	}
	type model struct {
		name  string
		kink  bool // ReLUs: no gradient comparison
		mk    func() *nn.Model
		batch int
		lr    float64
		steps int
		data  func(i int) ([]float32, []int32)
	}
	ms := []model{
		{"mlp", true, func() *nn.Model { return zoo(t, "mlp") }, 8, 0.1, 8, func(i int) ([]float32, []int32) { return devtest.Images(i, 8, 784) }},
		{"gpt", false, gpt, 2, 0.3, 6, func(i int) ([]float32, []int32) { return text(i, 2, shape.Context) }},
		{"tanh", false, func() *nn.Model { return tanhPos(t) }, 3, 0.1, 8, func(i int) ([]float32, []int32) { return tanhData(i, 3) }},
	}
	for _, c := range []struct {
		prec             gemm.Precision
		lossTol, gradTol float64
	}{{gemm.TF32, 1e-4, 2e-3}, {gemm.BF16, 1e-3, 2e-2}} {
		for _, m := range ms {
			t.Run(string(c.prec)+"/"+m.name, func(t *testing.T) {
				cfg := devmodel.Config{Device: dev, Batch: m.batch, Precision: c.prec, Optim: optim.Config{Name: "sgd", LR: m.lr, Momentum: 0.9}}
				cpu := m.mk()
				d, err := devmodel.Place(m.mk(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				if p := d.Products(); !strings.Contains(p, string(c.prec)) {
					t.Errorf("products %q do not say %s", p, c.prec)
				}
				ref := newCPUTrainer(t, cpu, m.batch, cfg.Optim, 0)
				grads := make([]float32, d.N)
				var want, got float32
				for i := 0; i < m.steps; i++ {
					x, y := m.data(i)
					want = ref.backward(t, x, y)
					if got, err = d.ForwardBackward(x, y); err != nil {
						t.Fatal(err)
					}
					if i == 0 { // from the same weights
						if err := d.GradsToHost(grads); err != nil {
							t.Fatal(err)
						}
						ld := math.Abs(float64(got) - float64(want))
						worstG := 0.0
						for _, p := range cpu.Params {
							if m.kink {
								break
							}
							cg, dg := cpu.Flat.Grad[p.Offset:p.Offset+p.Size], grads[p.Offset:p.Offset+p.Size]
							w, at := worstOfLargest(dg, cg)
							worstG = math.Max(worstG, w)
							if !(w <= c.gradTol) {
								t.Errorf("%s: gradient [%d] %v, CPU %v (%.3g of the tensor's largest)", p.Name, at, dg[at], cg[at], w)
							}
						}
						if m.kink {
							t.Logf("first step: loss CPU %.7f, device %.7f (difference %.2g)", want, got, ld)
						} else {
							t.Logf("first step: loss CPU %.7f, device %.7f (difference %.2g); gradients within %.2g of each tensor's largest", want, got, ld, worstG)
						}
						if !(ld <= c.lossTol*math.Max(1, math.Abs(float64(want)))) {
							t.Errorf("first loss %v, CPU %v", got, want)
						}
					}
					ref.update()
					if err := d.Update(); err != nil {
						t.Fatal(err)
					}
					if err := d.ZeroGrad(); err != nil {
						t.Fatal(err)
					}
				}
				t.Logf("after %d steps: loss CPU %.5f, device %.5f", m.steps, want, got)
				if !(math.Abs(float64(got)-float64(want)) <= 0.05*float64(want)) {
					t.Errorf("after %d steps: loss %v, CPU %v", m.steps, got, want)
				}
			})
		}
	}
	// bf16 is applied: the first loss is not fp32's
	losses := map[gemm.Precision]float32{}
	for _, p := range []gemm.Precision{gemm.FP32, gemm.BF16} {
		d, err := devmodel.Place(zoo(t, "mlp"), devmodel.Config{Device: dev, Batch: 8, Precision: p, Optim: optim.Config{Name: "sgd", LR: 0.1}})
		if err != nil {
			t.Fatal(err)
		}
		x, y := devtest.Images(0, 8, 784)
		if losses[p], err = d.ForwardBackward(x, y); err != nil {
			t.Fatal(err)
		}
		d.Close()
	}
	t.Logf("first loss: fp32 %.7f, bf16 %.7f", losses[gemm.FP32], losses[gemm.BF16])
	if losses[gemm.FP32] == losses[gemm.BF16] {
		t.Error("bf16's loss is fp32's: the products' inputs were not rounded")
	}
	if _, err := devmodel.Place(zoo(t, "mlp"), devmodel.Config{Device: dev, Batch: 8, Precision: "fp16", Optim: optim.Config{Name: "sgd", LR: 0.1}}); err == nil || !strings.Contains(err.Error(), "fp16") {
		t.Errorf("precision fp16: %v", err)
	}
}

// Without cuBLAS ($GDIST_CUBLAS_PATH naming no library) the products go
// through gdist's tiled kernel and the mlp and cnn train as on the CPU
// path within the fp32 tolerances of TestZooMatchesCPU (2e-5).
func TestTiledMatchesCPU(t *testing.T) {
	cudafake.RequireCUDA(t)
	devtest.UseEnv(t, cublas.Reload, cublas.EnvLibrary, "/nonexistent/libcublas.so.13")
	for _, name := range []string{"mlp", "cnn"} {
		t.Run(name, func(t *testing.T) {
			cfg := devmodel.Config{Device: dev, Batch: 8, Optim: optim.Config{Name: "sgd", LR: 0.1, Momentum: 0.9, WeightDecay: 1e-4}}
			d := follow(t, zoo(t, name), zoo(t, name), cfg, 8, func(i int) ([]float32, []int32) { return devtest.Images(i, 8, 784) }, 2e-5, 2e-5)
			if p := d.Products(); !strings.Contains(p, "tiled") {
				t.Errorf("products: %s; want the tiled kernel", p)
			}
		})
	}
}

// Under bf16 autocast the products' bf16 copies of their operands count
// in PeakBytes: more than fp32's peak, by at most the two largest
// operands' bf16 bytes of the mlp (784 x 256 and 8 x 784 values), a
// layer's output gradient kept between its two backward products (at
// most 8 x 256), the weight cache (2 bytes a parameter, gpu/gemm) and
// the ReLUs' bf16 copies of their outputs and input gradients (2 x 8 x
// (256 + 128), the plan's).
func TestPeakCountsBF16Scratch(t *testing.T) {
	cudafake.RequireCUDA(t)
	peaks, n := map[gemm.Precision]int64{}, 0
	for _, p := range []gemm.Precision{gemm.FP32, gemm.BF16} {
		d, err := devmodel.Place(zoo(t, "mlp"), devmodel.Config{Device: dev, Batch: 8, Precision: p, Optim: optim.Config{Name: "sgd", LR: 0.1}})
		if err != nil {
			t.Fatal(err)
		}
		x, y := devtest.Images(0, 8, 784)
		if _, err := d.Step(x, y); err != nil {
			t.Fatal(err)
		}
		peaks[p], n = d.PeakBytes(), d.N
		d.Close()
	}
	extra := peaks[gemm.BF16] - peaks[gemm.FP32]
	t.Logf("peak: fp32 %d bytes, bf16 %d (+%d)", peaks[gemm.FP32], peaks[gemm.BF16], extra)
	if most := int64(2 * (784*256 + 8*784 + 8*256 + n + 2*8*(256+128))); extra <= 0 || extra > most {
		t.Errorf("bf16's peak is %d bytes above fp32's; want the scratch, 1 to %d bytes", extra, most)
	}
}
