package kernels

// The launch audit: a training step of the zoo's models at the shapes the
// GPU runs measure (benchmarks/gpu/verify.sh: gpt-L12-D768-H12-T1024 at
// batch 8, mlp, cnn and cnn-bn at 32), walked layer by layer as package
// gpu/devmodel's plan runs it, with a Kernels that records every launch
// (grid, block, the bytes it must move) instead of queueing it, and
// Products that record the matrix products. No device is needed.
//
//	go test -run Audit -v ./gpu/kernels                       # the tables
//	GDIST_KERNEL_AUDIT=/tmp/audit.md go test -run Audit ./gpu/kernels
//
// It prints, per kind of layer (GDIST_DEVICE_PROFILE's kinds), each
// distinct launch: its grid x block, how often a step makes it, what it
// moves and its ideal time on an H100 SXM (bytes at 3.35 TB/s; the
// products also at the tensor cores' peak), and flags a launch of fewer
// blocks than 2 per SM that moves more than 1 MiB: such a launch leaves
// most of the GPU idle (its time "at its SMs": the ideal time scaled by
// the SMs it leaves idle, a lower bound). TestAudit fails on a flagged
// launch.

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/rtc"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/nn"
)

// The H100 SXM the audit times against.
const (
	auditSMs       = 132
	auditBandwidth = 3.35e12 // bytes/s
	auditFP32      = 67e12   // FLOP/s, dense, CUDA cores
	auditBF16      = 989e12  // FLOP/s, dense, tensor cores
	auditBig       = 1 << 20 // bytes: a launch moving more must fill the GPU
)

// auditRec is one recorded launch (or product: kernel "gemm").
type auditRec struct {
	kind, kernel string
	bwd          bool
	grid, block  rtc.Dim3
	r, w         int64
	flops        float64
	shape        string // a product's m x n x k (x batch)
}

func (r auditRec) blocks() int {
	g := r.grid
	return g.X * max(g.Y, 1) * max(g.Z, 1)
}

func (r auditRec) ideal() float64 { // seconds
	t := float64(r.r+r.w) / auditBandwidth
	if r.kernel != "gemm" { // a kernel's arithmetic (the fused attention's) at fp32's peak
		t = max(t, r.flops/auditFP32)
	}
	return t
}

// bound is a launch's time if it gets no more than the bandwidth of the
// SMs its blocks occupy (a block per SM at most): the ideal time scaled
// by the SMs left idle, a lower bound for a launch of few blocks.
func (r auditRec) bound() float64 {
	return r.ideal() * auditSMs / float64(min(r.blocks(), auditSMs))
}

func (r auditRec) flagged() bool {
	return r.kernel != "gemm" && r.r+r.w > auditBig && r.blocks() < 2*auditSMs
}

// auditor walks a model, recording.
type auditor struct {
	k    *Kernels
	recs []auditRec
	kind string
	bwd  bool
	n    int      // parameters
	back []func() // the backward work, in forward order
	// resBias is the layer (a Linear, attention) that ends a
	// Residual's function: the Residual's add takes its bias
	// (BiasAddResidual), as gpu/devmodel's plan fuses them
	resBias nn.Layer
}

func newAuditor() *auditor {
	a := &auditor{}
	a.k = &Kernels{rec: func(name string, c rtc.Config, t traffic) {
		a.recs = append(a.recs, auditRec{kind: a.kind, kernel: name, bwd: a.bwd, grid: c.Grid, block: c.Block, r: t.r, w: t.w})
	}}
	return a
}

// auditProducts records the products.
type auditProducts struct{ a *auditor }

func (p auditProducts) Device() int          { return 0 }
func (p auditProducts) Stream() *cuda.Stream { return nil }
func (p auditProducts) MatMul(ta, tb bool, m, n, k int, alpha float32, a, b uintptr, beta float32, c uintptr) error {
	return p.MatMulBatched(ta, tb, m, n, k, alpha, a, 0, 1, b, 0, 1, beta, c, 0, 1, 1)
}
func (p auditProducts) MatMulBatched(ta, tb bool, m, n, k int, alpha float32, a uintptr, lda int, sa int64,
	b uintptr, ldb int, sb int64, beta float32, c uintptr, ldc int, sc int64, batch int) error {
	nb := int64(batch)
	in := func(elems int64, stride int64) int64 { // a shared operand (stride 0) is read once
		if stride == 0 {
			return 4 * elems
		}
		return 4 * elems * nb
	}
	r := in(int64(m)*int64(k), sa) + in(int64(k)*int64(n), sb)
	w := 4 * int64(m) * int64(n) * nb
	if beta != 0 {
		r += w
	}
	shape := fmt.Sprintf("%dx%dx%d", m, n, k)
	if batch > 1 {
		shape += fmt.Sprintf(" x%d", batch)
	}
	p.a.recs = append(p.a.recs, auditRec{kind: p.a.kind, kernel: "gemm", bwd: p.a.bwd, r: r, w: w,
		flops: 2 * float64(m) * float64(n) * float64(k) * float64(batch), shape: shape})
	return nil
}

// PointerBatches and MatMulBatched2 make the audit's products those of a
// gemm.Engine through a cuBLAS with cublasGemmBatchedEx (attention reads
// the heads in place; $GDIST_ATTENTION_HEADS=copy audits the copies):
// one product of outer x inner.
func (p auditProducts) PointerBatches() bool { return true }
func (p auditProducts) MatMulBatched2(ta, tb bool, m, n, k int, alpha float32, a uintptr, lda int, sa gemm.Strides2,
	b uintptr, ldb int, sb gemm.Strides2, beta float32, c uintptr, ldc int, sc gemm.Strides2, outer, inner int) error {
	st := func(s gemm.Strides2) int64 { return s.Outer + s.Inner } // 0: shared
	return p.MatMulBatched(ta, tb, m, n, k, alpha, a, lda, st(sa), b, ldb, st(sb), beta, c, ldc, st(sc), outer*inner)
}

// aact is an activation: its shape and whether it has a gradient.
type aact struct {
	shape []int
	grad  bool
}

func (x aact) size() int {
	n := 1
	for _, v := range x.shape {
		n *= v
	}
	return n
}

const fake = uintptr(1 << 32) // every buffer's address (nothing runs)

func gradPtr(x aact) uintptr {
	if x.grad {
		return fake
	}
	return 0
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// fwd records l's forward work now and queues its backward work.
func (a *auditor) fwd(kind string, f, b func()) {
	a.kind, a.bwd = kind, false
	f()
	a.back = append(a.back, func() { a.kind, a.bwd = kind, true; b() })
}

// layer walks l as gpu/devmodel's plan compiles it.
func (a *auditor) layer(l nn.Layer, x aact) aact {
	k, h := a.k, auditProducts{a}
	n := x.size()
	switch l := l.(type) {
	case *nn.Sequential:
		for i := 0; i < len(l.Layers); i++ {
			if e, ok := l.Layers[i].(*nn.Embedding); ok && i+1 < len(l.Layers) {
				if pe, ok := l.Layers[i+1].(*nn.PositionEmbedding); ok {
					x = a.embedding(e, pe, x)
					i++
					continue
				}
			}
			if lin, ok := l.Layers[i].(*nn.Linear); ok && i+1 < len(l.Layers) && isGELU(l.Layers[i+1]) {
				x = a.linearGELU(lin, x)
				i++
				continue
			}
			x = a.layer(l.Layers[i], x)
		}
		return x
	case *nn.Residual:
		a.fwd("residual", func() {}, func() {
			if x.grad {
				must(k.Add(nil, fake, fake, fake, n))
			}
		})
		last := lastLayer(l.Fn)
		switch last.(type) {
		case *nn.Linear, *nn.CausalSelfAttention:
			a.resBias = last // its forward adds x and its bias (BiasAddResidual)
		}
		out := a.layer(l.Fn, aact{x.shape, x.grad})
		if a.resBias == nil {
			a.fwd("residual", func() { must(k.Add(nil, fake, fake, fake, n)) }, func() {})
		}
		a.resBias = nil
		return aact{out.shape, true}
	case *nn.Linear:
		rows := n / l.In
		a.n += l.In*l.Out + l.Out
		a.fwd("linear", func() {
			must(LinearForward(h, k, fake, fake, fake, a.bias(l), rows, l.In, l.Out))
			a.residual(l, rows, l.Out)
		},
			func() { must(LinearBackward(h, k, gradPtr(x), fake, fake, fake, fake, fake, rows, l.In, l.Out, true)) })
		return aact{with(x.shape, l.Out), true}
	case *nn.Conv2d:
		g := ConvGeom{N: x.shape[0], C: l.In, H: x.shape[2], W: x.shape[3], Cout: l.Out, K: l.K, Pad: l.Pad}
		ho, wo := g.Out()
		a.n += l.Out*l.In*l.K*l.K + l.Out
		a.fwd("conv2d", func() { must(Conv2dForward(h, k, fake, fake, fake, fake, fake, g)) },
			func() { must(Conv2dBackward(h, k, gradPtr(x), fake, fake, fake, fake, fake, fake, g, true)) })
		return aact{[]int{g.N, l.Out, ho, wo}, true}
	case *nn.BatchNorm:
		c := BatchNormConfig{C: l.State().C, Momentum: 0.1, Eps: 1e-5}
		inner := n / x.shape[0] / c.C
		a.n += 2 * c.C
		a.fwd("batchnorm", func() {
			must(k.BatchNormForward(nil, fake, fake, fake, fake, fake, fake, fake, fake, x.shape[0], inner, c, true))
		}, func() {
			must(k.BatchNormBackward(nil, gradPtr(x), fake, fake, fake, fake, fake, fake, x.shape[0], inner, c, true))
		})
		return aact{x.shape, true}
	case nn.ReLU, *nn.ReLU:
		return a.pointwise("relu", x, k.ReLU, k.ReLUBackward)
	case nn.GELU, *nn.GELU:
		return a.pointwise("gelu", x, k.GELU, k.GELUBackward)
	case nn.Tanh, *nn.Tanh:
		return a.pointwise("tanh", x, k.Tanh, k.TanhBackward)
	case nn.MaxPool2d, *nn.MaxPool2d:
		planes, hh, ww := x.shape[0]*x.shape[1], x.shape[2], x.shape[3]
		a.fwd("maxpool", func() { must(k.MaxPool2d(nil, fake, fake, fake, planes, hh, ww)) }, func() {
			if x.grad {
				must(k.MaxPool2dBackward(nil, fake, fake, fake, planes, hh, ww))
			}
		})
		return aact{[]int{x.shape[0], x.shape[1], hh / 2, ww / 2}, true}
	case nn.Flatten, *nn.Flatten:
		return aact{[]int{x.shape[0], n / x.shape[0]}, x.grad}
	case *nn.LayerNorm:
		rows := n / l.C
		a.n += 2 * l.C
		a.fwd("layernorm", func() { must(k.LayerNormForward(nil, fake, fake, fake, fake, fake, fake, rows, l.C, 1e-5)) },
			func() {
				must(k.LayerNormBackward(nil, gradPtr(x), fake, fake, fake, fake, fake, fake, rows, l.C, true))
			})
		return aact{x.shape, true}
	case *nn.CausalSelfAttention:
		g := AttentionGeom{N: x.shape[0], T: x.shape[1], C: l.Dim, H: l.Heads}
		rows, c := g.N*g.T, l.Dim
		a.n += 3*c*c + 3*c + c*c + c
		// the plan's one op, its parts recorded under their profile kinds
		a.kind, a.bwd = "linear", false
		must(LinearForward(h, k, fake, fake, fake, fake, rows, c, 3*c))
		a.kind = "attention"
		fused, err := g.Fused()
		must(err)
		if fused { // $GDIST_ATTENTION=fused: one kernel, its FLOPs for its ideal time
			must(k.AttentionFusedForward(nil, fake, fake, fake, g))
			a.recs[len(a.recs)-1].flops = g.fusedFLOPs(2)
		} else {
			must(AttentionForward(h, k, fake, fake, fake, fake, g))
		}
		a.kind = "linear"
		must(LinearForward(h, k, fake, fake, fake, a.bias(l), rows, c, c))
		a.residual(l, rows, c)
		a.back = append(a.back, func() {
			a.kind, a.bwd = "linear", true
			must(LinearBackward(h, k, fake, fake, fake, fake, fake, fake, rows, c, c, true))
			a.kind = "attention"
			if fused {
				must(k.AttentionFusedBackward(nil, fake, fake, fake, fake, fake, fake, g))
				a.recs[len(a.recs)-2].flops, a.recs[len(a.recs)-1].flops = g.fusedFLOPs(3), g.fusedFLOPs(4)
			} else {
				must(AttentionBackward(h, k, fake, fake, fake, fake, fake, g))
			}
			a.kind = "linear"
			must(LinearBackward(h, k, gradPtr(x), fake, fake, fake, fake, fake, rows, c, 3*c, true))
		})
		return aact{x.shape, true}
	}
	panic(fmt.Sprintf("audit: no plan for %T", l))
}

func isGELU(l nn.Layer) bool {
	switch l.(type) {
	case nn.GELU, *nn.GELU:
		return true
	}
	return false
}

// lastLayer is the layer whose output a Residual's function hands on.
func lastLayer(l nn.Layer) nn.Layer {
	if s, ok := l.(*nn.Sequential); ok && len(s.Layers) > 0 {
		return lastLayer(s.Layers[len(s.Layers)-1])
	}
	return l
}

// bias is the bias a Linear's forward adds: none where the Residual
// after it takes it.
func (a *auditor) bias(l nn.Layer) uintptr {
	if l == a.resBias {
		return 0
	}
	return fake
}

// residual records the Residual's add with l's bias after l's product,
// where the Residual takes it.
func (a *auditor) residual(l nn.Layer, rows, cols int) {
	if l != a.resBias {
		return
	}
	kind := a.kind
	a.kind = "residual"
	must(a.k.BiasAddResidual(nil, fake, fake, fake, fake, rows, cols))
	a.kind = kind
}

// linearGELU walks a Linear and the GELU after it as the plan fuses
// them: the product, then the bias and GELU in one kernel; backward
// GELU's gradient and the bias's in one kernel, then the products.
func (a *auditor) linearGELU(l *nn.Linear, x aact) aact {
	k, h := a.k, auditProducts{a}
	rows := x.size() / l.In
	a.n += l.In*l.Out + l.Out
	a.fwd("linear", func() {
		must(LinearForward(h, k, fake, fake, fake, 0, rows, l.In, l.Out))
		a.kind = "gelu"
		must(k.BiasGELU(nil, fake+256, 0, fake, fake, rows, l.Out))
	}, func() {
		a.kind = "gelu"
		must(k.BiasGELUBackward(nil, fake, 0, fake, fake, fake, fake, rows, l.Out, true))
		a.kind = "linear"
		must(LinearBackward(h, k, gradPtr(x), fake, 0, fake, fake, fake, rows, l.In, l.Out, true))
	})
	return aact{with(x.shape, l.Out), true}
}

func with(shape []int, last int) []int {
	s := append([]int(nil), shape...)
	s[len(s)-1] = last
	return s
}

func (a *auditor) pointwise(kind string, x aact, f func(*cuda.Stream, uintptr, uintptr, int) error,
	b func(*cuda.Stream, uintptr, uintptr, uintptr, int) error) aact {
	n := x.size()
	a.fwd(kind, func() { must(f(nil, fake, fake, n)) }, func() {
		if x.grad {
			must(b(nil, fake, fake, fake, n))
		}
	})
	return aact{x.shape, true}
}

func (a *auditor) embedding(e *nn.Embedding, pe *nn.PositionEmbedding, x aact) aact {
	rows := x.size()
	a.n += e.Num*e.Dim + pe.T*pe.Dim
	a.fwd("embedding", func() { must(a.k.Embedding(nil, fake, fake, fake, fake, rows, e.Num, e.Dim, pe.T)) },
		func() { must(a.k.EmbeddingBackward(nil, fake, fake, fake, fake, rows, e.Num, e.Dim, pe.T, true)) })
	return aact{append(append([]int(nil), x.shape...), e.Dim), true}
}

// auditStep records one training step of the named model at batch: the
// forward pass, the loss, the backward pass and the update (AdamW with
// clipping for gpt, as train's defaults; SGD with momentum otherwise).
func auditStep(t *testing.T, name string, batch int) []auditRec {
	net, in, err := models.Net(name)
	if err != nil {
		t.Fatal(err)
	}
	a := newAuditor()
	out := a.layer(net, aact{shape: append([]int{batch}, in...)})
	classes := out.shape[len(out.shape)-1]
	rows := out.size() / classes
	a.kind = "loss"
	must(a.k.CrossEntropy(nil, fake, fake, fake, fake, rows, classes))
	must(a.k.CrossEntropyBackward(nil, fake, fake, fake, rows, classes, 1))
	for i := len(a.back) - 1; i >= 0; i-- {
		a.back[i]()
	}
	a.kind, a.bwd = "optimizer", false
	if strings.HasPrefix(name, "gpt") {
		must(a.k.ClipGradNorm(nil, fake, a.n, 1, fake))
		must(a.k.Adam(nil, fake, fake, fake, fake, a.n, AdamConfig{LR: 3e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Decoupled: true}, 1))
	} else {
		must(a.k.SGD(nil, fake, fake, fake, a.n, SGDConfig{LR: 0.1, Momentum: 0.9}))
	}
	return a.recs
}

// auditTable writes the step's launches, the same launches of a kind
// merged (the gpt's 12 layers make each of theirs 12 times), and a
// summary by kind.
func auditTable(name string, batch int, recs []auditRec) (string, int) {
	type key struct {
		kind, kernel, shape string
		bwd                 bool
		grid, block         rtc.Dim3
		r, w                int64
	}
	type row struct {
		auditRec
		count int
	}
	var order []key
	rows := map[key]*row{}
	for _, r := range recs {
		kk := key{r.kind, r.kernel, r.shape, r.bwd, r.grid, r.block, r.r, r.w}
		if rows[kk] == nil {
			rows[kk] = &row{auditRec: r}
			order = append(order, kk)
		}
		rows[kk].count++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s, batch %d: %d launches and products per step\n\n", name, batch, len(recs))
	b.WriteString("| kind | pass | kernel | grid x block | per step | MB each | ideal us each | ideal us per step | at its SMs, us per step | flag |\n|---|---|---|---|---:|---:|---:|---:|---:|---|\n")
	flagged := 0
	type sum struct {
		kern, gemm, gemmBF16 [2]float64
		bound                float64 // the kernels at their SMs
	}
	kinds := map[string]*sum{}
	var kindOrder []string
	total := sum{}
	for _, kk := range order {
		r := rows[kk]
		pass := "fwd"
		if r.bwd {
			pass = "bwd"
		}
		if kinds[r.kind] == nil {
			kinds[r.kind] = &sum{}
			kindOrder = append(kindOrder, r.kind)
		}
		ks := kinds[r.kind]
		p := 0
		if r.bwd {
			p = 1
		}
		mb := float64(r.r+r.w) / 1e6
		if r.kernel == "gemm" {
			t32 := max(r.ideal(), r.flops/auditFP32)
			t16 := max(r.ideal()/2, r.flops/auditBF16)
			ks.gemm[p] += t32 * float64(r.count)
			ks.gemmBF16[p] += t16 * float64(r.count)
			total.gemm[p] += t32 * float64(r.count)
			total.gemmBF16[p] += t16 * float64(r.count)
			fmt.Fprintf(&b, "| %s | %s | gemm %s | cuBLAS | %d | %.1f | %.0f (fp32) / %.0f (bf16) | %.0f / %.0f | | |\n",
				r.kind, pass, r.shape, r.count, mb, t32*1e6, t16*1e6, t32*1e6*float64(r.count), t16*1e6*float64(r.count))
			continue
		}
		flag := ""
		if r.flagged() {
			flag = fmt.Sprintf("**%d blocks < %d**", r.blocks(), 2*auditSMs)
			flagged += r.count
		}
		ks.kern[p] += r.ideal() * float64(r.count)
		total.kern[p] += r.ideal() * float64(r.count)
		ks.bound += r.bound() * float64(r.count)
		total.bound += r.bound() * float64(r.count)
		g := fmt.Sprint(r.grid.X)
		if r.grid.Y > 1 {
			g += fmt.Sprintf("x%d", r.grid.Y)
		}
		bl := fmt.Sprint(r.block.X)
		if r.block.Y > 1 {
			bl += fmt.Sprintf("x%d", r.block.Y)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s x %s | %d | %.2f | %.1f | %.0f | %.0f | %s |\n",
			r.kind, pass, r.kernel, g, bl, r.count, mb, r.ideal()*1e6, r.ideal()*1e6*float64(r.count), r.bound()*1e6*float64(r.count), flag)
	}
	sort.SliceStable(kindOrder, func(i, j int) bool {
		a, c := kinds[kindOrder[i]], kinds[kindOrder[j]]
		return a.kern[0]+a.kern[1]+a.gemm[0]+a.gemm[1] > c.kern[0]+c.kern[1]+c.gemm[0]+c.gemm[1]
	})
	b.WriteString("\nIdeal device time per step by kind (ms; kernels at 3.35 TB/s, the fused attention's also at fp32's 67 TFLOP/s; products at fp32's 67 and bf16's 989 TFLOP/s or their bytes, whichever is longer):\n\n")
	b.WriteString("| kind | kernels fwd | kernels bwd | kernels at their SMs | products fwd (fp32 / bf16) | products bwd (fp32 / bf16) |\n|---|---:|---:|---:|---:|---:|\n")
	for _, kn := range append(kindOrder, "total") {
		s := kinds[kn]
		if kn == "total" {
			s = &total
		}
		fmt.Fprintf(&b, "| %s | %.3f | %.3f | %.3f | %.2f / %.3f | %.2f / %.3f |\n", kn, s.kern[0]*1e3, s.kern[1]*1e3, s.bound*1e3,
			s.gemm[0]*1e3, s.gemmBF16[0]*1e3, s.gemm[1]*1e3, s.gemmBF16[1]*1e3)
	}
	fmt.Fprintf(&b, "\nFlagged launches per step (fewer than %d blocks, moving more than 1 MiB): %d\n", 2*auditSMs, flagged)
	return b.String(), flagged
}

// TestAudit records a training step of each model the GPU runs measure
// and fails on a launch that moves more than 1 MiB with fewer than two
// blocks per SM of an H100. With -v, or GDIST_KERNEL_AUDIT=FILE, it
// writes the tables.
func TestAudit(t *testing.T) {
	var out strings.Builder
	for _, c := range []struct {
		model string
		batch int
	}{{"gpt-L12-D768-H12-T1024", 8}, {"mlp", 32}, {"cnn", 32}, {"cnn-bn", 32}} {
		recs := auditStep(t, c.model, c.batch)
		if c.model == "gpt-L12-D768-H12-T1024" {
			auditFusions(t, recs, 12)
			g := AttentionGeom{N: c.batch, T: 1024, C: 768, H: 12}
			if fused, _ := g.Fused(); fused {
				auditFused(t, recs, 12, g)
			} else {
				auditAttention(t, recs, 12, g)
			}
		}
		tab, flagged := auditTable(c.model, c.batch, recs)
		out.WriteString("### " + c.model + "\n\n" + tab + "\n")
		if flagged > 0 {
			t.Errorf("%s at batch %d: %d launches per step leave most of an H100 idle (see the table)", c.model, c.batch, flagged)
		}
	}
	if f := os.Getenv("GDIST_KERNEL_AUDIT"); f != "" {
		if err := os.WriteFile(f, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if testing.Verbose() {
		t.Log("\n" + out.String())
	}
}

// auditFusions checks a gpt step's fusions across layers (gpu/devmodel's
// fuse.go): each layer's MLP Linear and GELU as one bias + GELU kernel
// forward and one GELU + bias gradient kernel backward (no GELU, no bias
// add, no column sum of the bias's own), and each Residual's sum adding
// the bias of the Linear that ends its function (the MLP's second,
// attention's out-projection): of the bias adds only attention's
// in-projection's (q, k and v, which the attention kernels read as they
// are) and the head's are left.
func auditFusions(t *testing.T, recs []auditRec, layers int) {
	t.Helper()
	got := map[string]int{}
	for _, r := range recs {
		name := strings.TrimSuffix(r.kernel, "4")
		if name == "gd_add" && r.bwd {
			name = "gd_add (backward)"
		}
		got[name]++
	}
	for name, want := range map[string]int{"gd_bias_gelu": layers, "gd_gelu_bias_backward": layers, "gd_bias_residual": 2 * layers,
		"gd_gelu": 0, "gd_gelu_backward": 0, "gd_add": 0, "gd_add (backward)": 2 * layers, "gd_bias_add": layers + 1} {
		if got[name] != want {
			t.Errorf("fusions: %d launches of %s a step, want %d", got[name], name, want)
		}
	}
}

// auditAttention checks a gpt step's attention against the block-causal
// formulas: per layer 6 products of each block row or column (2 nb
// forward, 4 nb backward, nb = ceil(T / Tb)), 2 D Scores FLOPs each
// (Scores: the lower blocks' entries, N H T (T + Tb) / 2 where Tb divides
// T, against N H T^2 without blocks), and the causal softmax and its
// backward writing Scores values and reading each row's first i+1 (p
// and dP: twice).
func auditAttention(t *testing.T, recs []auditRec, layers int, g AttentionGeom) {
	t.Helper()
	d, tb := g.C/g.H, g.BlockSize()
	nb := (g.T + tb - 1) / tb
	var products, copies int
	var flops float64
	var smR, smW, copied int64
	for _, r := range recs {
		if r.kind != "attention" {
			continue
		}
		switch {
		case strings.HasPrefix(r.kernel, "gd_heads"):
			copies++
			copied += r.r + r.w
		case r.kernel == "gemm":
			products++
			flops += r.flops
		case strings.HasPrefix(r.kernel, "gd_causal_softmax"):
			smR += r.r
			smW += r.w
		}
	}
	rows := int64(g.N * g.H * g.T * (g.T + 1) / 2) // the entries at or left of the diagonal
	scores := int64(g.Scores())
	if want := layers * 6 * nb; products != want {
		t.Errorf("attention: %d products a step, want %d layers x 6 x %d blocks", products, layers, nb)
	}
	if want := float64(layers) * 6 * 2 * float64(d) * float64(scores); flops != want {
		t.Errorf("attention products: %.4g FLOPs a step, want 12 D Scores a layer = %.4g", flops, want)
	}
	if wantR, wantW := int64(layers)*3*4*rows, int64(layers)*2*4*scores; smR != wantR || smW != wantW {
		t.Errorf("causal softmax: %d bytes read, %d written a step, want %d and %d", smR, smW, wantR, wantW)
	}
	// the heads read in place: no copies (the copy path's 5 a layer,
	// moving 22 N T C floats: q, k, v in and out back forward, q, k, v
	// and dO in and dq, dk, dv back backward, each read and written)
	ntc := int64(g.N * g.T * g.C)
	inPlace := os.Getenv(EnvAttentionHeads) != "copy"
	if wantN, wantB := map[bool]int{true: 0, false: 5 * layers}[inPlace], map[bool]int64{true: 0, false: int64(layers) * 2 * 4 * 11 * ntc}[inPlace]; copies != wantN || copied != wantB {
		t.Errorf("attention's head copies: %d launches moving %d bytes a step, want %d moving %d (in place: %v)", copies, copied, wantN, wantB, inPlace)
	}
	t.Logf("attention's head copies: %d launches, %.1f MB a step (in place: %v)", copies, float64(copied)/1e6, inPlace)
	whole := int64(g.N * g.H * g.T * g.T)
	t.Logf("attention at %+v, blocks of %d: products %.1f GFLOP a step (%.1f without blocks), scores %d of %d",
		g, tb, flops/1e9, float64(layers)*12*float64(d)*float64(whole)/1e9, scores, whole)
}

// auditFused checks a gpt step's attention under $GDIST_ATTENTION=fused
// (TestAuditFused): per layer the fused forward and the backward's two
// kernels, nothing else (no products, no softmax, no copies), their
// arithmetic 2, 3 and 4 products of D over the N H T (T + 1) / 2 pairs
// at or below the diagonal (each kernel's ideal time is that at fp32's
// peak, their bytes' far less), their traffic Q, K, V, dO, O and the
// rows' log-sum-exp and D_i: no T x T values.
func auditFused(t *testing.T, recs []auditRec, layers int, g AttentionGeom) {
	t.Helper()
	count := map[string]int{}
	var flops, ideal float64
	var bytes int64
	for _, r := range recs {
		if r.kind != "attention" {
			continue
		}
		count[strings.TrimSuffix(r.kernel, "_d64")]++
		flops += r.flops
		ideal += r.ideal()
		bytes += r.r + r.w
	}
	want := map[string]int{"gd_attn_fused_fwd": layers, "gd_attn_fused_dq": layers, "gd_attn_fused_dkdv": layers}
	if fmt.Sprint(count) != fmt.Sprint(want) {
		t.Errorf("fused attention: launches %v a step, want %v", count, want)
	}
	if w := float64(layers) * g.fusedFLOPs(9); flops != w {
		t.Errorf("fused attention: %.4g FLOPs a step, want %.4g", flops, w)
	}
	ntc, nht := int64(g.N*g.T*g.C), int64(g.FusedKeep())
	fwd, dq, dkdv := 4*ntc+nht, 6*ntc+2*nht, 6*ntc+2*nht // qkv in, O and L out; +dO, O, L in, dQ and D out; dO, L, D in, dK and dV out
	if w := int64(layers) * 4 * (fwd + dq + dkdv); bytes != w {
		t.Errorf("fused attention: %d bytes a step, want %d (no T x T values)", bytes, w)
	}
	t.Logf("fused attention at %+v: %.1f GFLOP a step, %.1f MB, ideal %.2f ms a step at fp32's %.0f TFLOP/s", g, flops/1e9, float64(bytes)/1e6, ideal*1e3, auditFP32/1e12)
}

// TestAuditFused is TestAudit's gpt step with $GDIST_ATTENTION=fused:
// no launch leaves most of an H100 idle, and auditFused's counts.
func TestAuditFused(t *testing.T) {
	t.Setenv(EnvAttention, "fused")
	recs := auditStep(t, "gpt-L12-D768-H12-T1024", 8)
	auditFused(t, recs, 12, AttentionGeom{N: 8, T: 1024, C: 768, H: 12})
	tab, flagged := auditTable("gpt-L12-D768-H12-T1024 (GDIST_ATTENTION=fused)", 8, recs)
	if flagged > 0 {
		t.Errorf("%d launches per step leave most of an H100 idle:\n%s", flagged, tab)
	}
	if testing.Verbose() {
		t.Log("\n" + tab)
	}
}

// auditEmbeddingGrad checks the embedding weight gradient's launches
// (EmbeddingBackward's dw, accumulated as gpu/devmodel's plan runs it)
// for rows positions and a table of num x dim: per pass of the sort (one
// a byte of num - 1) a histogram, a scan and a scatter, then the sums;
// the bytes each moves: the sort the ids (or the keys and positions) and
// the blocks' digit counts, the sums dy once, the sorted keys and
// positions once and the table read and written. Nothing in
// rows x num: the old kernel read every id once per table row and 32
// values (rows num dim / 32 ids). It returns the bytes and launches.
func auditEmbeddingGrad(t *testing.T, recs []auditRec, rows, num, dim int, accumulate bool) (bytes int64, launches int) {
	t.Helper()
	passes := 0
	for v := num - 1; v > 0; v >>= 8 {
		passes++
	}
	passes = max(passes, 1)
	blocks := min((rows+255)/256, 512) // rounds of 256 rows a block past 512 blocks
	r, hist := int64(rows), int64(blocks)*256
	want := map[string][2]int64{}
	add := func(name string, rd, wr int64) {
		w := want[name]
		want[name] = [2]int64{w[0] + 4*rd, w[1] + 4*wr}
	}
	for p := range passes {
		in := r
		if p > 0 {
			in = 2 * r
		}
		add("gd_embed_hist", r, hist)
		add("gd_embed_scan", hist, hist)
		add("gd_embed_scatter", in+hist, 2*r)
	}
	nd := int64(num) * int64(dim)
	add("gd_embed_rows", r*int64(dim)+2*r, nd)
	if accumulate {
		add("gd_embed_rows", nd, 0)
	}
	got, count := map[string][2]int64{}, map[string]int{}
	for _, rec := range recs {
		if rec.kind != "embedding" || !rec.bwd || rec.kernel == "gd_pos_backward" {
			continue
		}
		g := got[rec.kernel]
		got[rec.kernel] = [2]int64{g[0] + rec.r, g[1] + rec.w}
		count[rec.kernel]++
		bytes += rec.r + rec.w
		launches++
		if rec.flagged() {
			t.Errorf("embedding gradient (%d positions, table %d x %d): %s in %d blocks moves %d bytes", rows, num, dim, rec.kernel, rec.blocks(), rec.r+rec.w)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("embedding gradient (%d positions, table %d x %d): bytes read, written %v, want %v", rows, num, dim, got, want)
	}
	if wantN := map[string]int{"gd_embed_hist": passes, "gd_embed_scan": passes, "gd_embed_scatter": passes, "gd_embed_rows": 1}; fmt.Sprint(count) != fmt.Sprint(wantN) {
		t.Errorf("embedding gradient (%d positions, table %d x %d): launches %v, want %v", rows, num, dim, count, wantN)
	}
	return bytes, launches
}

// TestAuditEmbedding: the embedding gradient's launches and bytes at the
// zoo gpt's byte vocabulary (TestAudit's GPT-2 small step at batch 8)
// and at GPT-2's vocabulary (50257) at the same batch: 4 and 7 launches,
// the bytes dy, the table and O(rows) for the sort, against the old
// kernel's id reads (rows num dim / 32 ids from L2: 0.2 GB and 40 GB).
func TestAuditEmbedding(t *testing.T) {
	const rows, dim = 8 * 1024, 768
	recs := auditStep(t, "gpt-L12-D768-H12-T1024", 8)
	b256, n256 := auditEmbeddingGrad(t, recs, rows, 256, dim, true)
	a := newAuditor()
	a.kind, a.bwd = "embedding", true
	must(a.k.EmbeddingBackward(nil, fake, fake, fake, fake, rows, 50257, dim, 1024, true))
	bGPT2, nGPT2 := auditEmbeddingGrad(t, a.recs, rows, 50257, dim, true)
	// batch 256: the sort's blocks take rounds (1024 blocks of 256 rows
	// would be 1024 x 256 counts for one block to scan): 512 blocks of 2
	a = newAuditor()
	a.kind, a.bwd = "embedding", true
	must(a.k.EmbeddingBackward(nil, fake, fake, fake, fake, 32*rows, 50257, dim, 1024, false))
	auditEmbeddingGrad(t, a.recs, 32*rows, 50257, dim, false)
	for _, r := range a.recs {
		if r.kernel == "gd_embed_hist" && r.grid.X != 512 {
			t.Errorf("embedding gradient at %d positions: the sort in %d blocks, want 512 of 2 rounds", 32*rows, r.grid.X)
		}
	}
	if n256 != 4 || nGPT2 != 7 {
		t.Errorf("embedding gradient: %d and %d launches, want 4 and 7", n256, nGPT2)
	}
	for _, c := range []struct {
		num   int
		bytes int64
	}{{256, b256}, {50257, bGPT2}} {
		old := 4 * float64(rows) * float64(c.num) * dim / 32
		t.Logf("embedding gradient, %d positions, table %d x %d: %.1f MB, ideal %.1f us at an H100's bandwidth (the old kernel's id reads alone: %.2f GB)",
			rows, c.num, dim, float64(c.bytes)/1e6, float64(c.bytes)/auditBandwidth*1e6, old/1e9)
	}
}
