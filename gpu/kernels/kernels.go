package kernels

import (
	_ "embed"
	"fmt"
	"strings"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/rtc"
)

// ElementwiseSource and ReduceSource are the kernels' CUDA C++, compiled
// at run time by NVRTC (gpu/rtc). Element-wise kernels and reductions are
// two programs so that the fake CUDA runs the former without fibers.
//
// The layers' programs, compiled with --fmad=false (each float operation
// rounded on its own, as Go computes): ConvSource (im2col, col2im,
// pooling) and PointwiseSource hold element-wise kernels (no thread talks
// to another), RowsSource the reductions over rows and channels.
//
// Each is whole: the device functions several programs share (block.cuh:
// the block reductions; embed.cuh: an embedding's row; gpu/gemm's
// bf16.cuh, gemm.BF16Header: its bf16 rounding, for the producers' bf16
// copies) stand before its own file's text, which a #line directive
// names for NVRTC's messages.
var (
	ElementwiseSource = withHeaders("elementwise.cu", elementwiseCU, bf16CUH)
	ReduceSource      = withHeaders("reduce.cu", reduceCU, blockCUH)
	ConvSource        = convCU
	PointwiseSource   = withHeaders("pointwise.cu", pointwiseCU, embedCUH, bf16CUH)
	RowsSource        = withHeaders("rows.cu", rowsCU, blockCUH, embedCUH, bf16CUH)
)

var (
	//go:embed elementwise.cu
	elementwiseCU string
	//go:embed reduce.cu
	reduceCU string
	//go:embed conv.cu
	convCU string
	//go:embed pointwise.cu
	pointwiseCU string
	//go:embed rows.cu
	rowsCU string
	//go:embed block.cuh
	blockCUH string
	//go:embed embed.cuh
	embedCUH string
	// gpu/gemm's bf16 cast (bf16.cuh there): one definition
	bf16CUH = gemm.BF16Header
)

// withHeaders is src (the file name) after the headers.
func withHeaders(name, src string, headers ...string) string {
	var b strings.Builder
	for _, h := range headers {
		b.WriteString(h)
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "#line 1 %q\n", name)
	b.WriteString(src)
	return b.String()
}

// Program is one of the kernels' programs: its name for NVRTC, its
// source and the options it is compiled with.
type Program struct {
	Name, Source string
	Options      []string
	kernels      []string // the extern "C" kernels in it
}

// Programs are every program Load compiles, in order.
func Programs() []Program {
	block := fmt.Sprintf("-DBLOCK=%d", Block)
	return []Program{
		{"gdist_elementwise.cu", ElementwiseSource, nil, []string{"gd_bias_add", "gd_bias_add4", "gd_relu", "gd_relu_backward", "gd_sgd"}},
		{"gdist_reduce.cu", ReduceSource, []string{block}, []string{"gd_xent_rows", "gd_mean", "gd_xent_backward", "gd_argmax_hits", "gd_count"}},
		{"gdist_conv.cu", ConvSource, []string{"--fmad=false"},
			[]string{"gd_im2col", "gd_col2im", "gd_nchw_to_cnhw", "gd_channel_bias", "gd_maxpool2x2", "gd_maxpool2x2_backward"}},
		{"gdist_pointwise.cu", PointwiseSource, []string{"--fmad=false"}, pointwiseKernels},
		{"gdist_rows.cu", RowsSource, []string{"--fmad=false", block, fmt.Sprintf("-DEMBED_RADIX_BITS=%d", embedRadixBits)}, rowsKernels},
		fusedProgram(), // attention_fused.go
	}
}

// Block is the number of threads of the reductions' blocks (BLOCK in
// reduce.cu).
const Block = 256

// maxGrid caps the blocks of an element-wise launch: grid-stride loops
// cover the rest (about 8 blocks of 256 threads per SM of an H100).
const maxGrid = 1024

// Kernels are the kernels loaded on one device. Every method queues work on
// the stream given (nil: the legacy default stream) and returns at once
// (the first two-stage sum on a stream first allocates its scratch:
// scratch.go);
// buffers are device addresses of float32 (labels: int32) that must stay
// allocated until the stream has done the work. Sizes are checked before
// anything is queued. Kernels is safe for concurrent use.
type Kernels struct {
	dev int
	fns map[string]*rtc.Function // the kernels by name
	// rec, when set, takes every launch instead of the device (the
	// audit: audit_test.go); nothing is queued then.
	rec func(name string, c rtc.Config, t traffic)
	scr scratches // per stream (scratch.go)
}

// Load compiles (once per process, see gpu/rtc) and loads the kernels on
// device.
func Load(device int) (*Kernels, error) {
	progs := Programs()
	mods := make([]*rtc.Module, len(progs))
	k := &Kernels{dev: device, fns: map[string]*rtc.Function{}}
	for i, p := range progs {
		m, err := rtc.Load(device, p.Name, p.Source, p.Options...)
		if err != nil {
			return nil, err
		}
		mods[i] = m
		for _, name := range p.kernels {
			if k.fns[name], err = m.Function(name); err != nil {
				return nil, err
			}
		}
	}
	return k, nil
}

// Device is the kernels' device.
func (k *Kernels) Device() int { return k.dev }

// traffic is the bytes a launch reads and writes in device memory, each
// tensor counted once (what an ideal kernel moves): the audit's measure.
type traffic struct{ r, w int64 }

// rw is the traffic of reading r and writing w float32s.
func rw(r, w int64) traffic { return traffic{4 * r, 4 * w} }

// launch queues the kernel name; t is what it moves (for the audit).
func (k *Kernels) launch(name string, s *cuda.Stream, c rtc.Config, t traffic, args ...any) error {
	if k.rec != nil {
		k.rec(name, c, t)
		return nil
	}
	f := k.fns[name]
	if f == nil {
		return fmt.Errorf("kernels: no kernel %s", name)
	}
	return f.Launch(s, c, args...)
}

// grid64 is grid for a 64-bit count.
func grid64(n int64) rtc.Config {
	b := (n + 255) / 256
	return rtc.Config{Grid: rtc.Dim(int(min(max(b, 1), maxGrid))), Block: rtc.Dim(256)}
}

func sizeErr(op string, kv ...any) error {
	for i := 0; i < len(kv); i += 2 {
		v := kv[i+1].(int)
		if v < 0 || v > 1<<31-1 {
			return fmt.Errorf("kernels: %s: %s = %d (want 0 to %d)", op, kv[i], v, 1<<31-1)
		}
	}
	return nil
}

// rowGrid launches blocks over rows (grid y, each block striding over
// the rows past the grid's) and each row's n values (x threads, v values
// a thread): no division per element. At most rowBlocks blocks (about 31
// per SM of an H100: four waves of resident blocks), so that a block
// does several rows' work rather than a few values.
func rowGrid(rows, n, v int) rtc.Config {
	per := (n + v - 1) / v
	bx := min(256, max(32, (per+31)/32*32))
	gx := max(1, (per+bx-1)/bx)
	return rtc.Config{Grid: rtc.Dim3{X: gx, Y: min(max(rows, 1), 65535, max(1, rowBlocks/gx)), Z: 1}, Block: rtc.Dim(bx)}
}

// rowBlocks caps rowGrid's blocks.
const rowBlocks = 4096

// aligned4 reports whether float4 accesses fit: every address 16-byte
// aligned and every count (of float32s) a multiple of 4.
func aligned4(ptrs []uintptr, counts ...int) bool {
	for _, p := range ptrs {
		if p%16 != 0 {
			return false
		}
	}
	for _, c := range counts {
		if c%4 != 0 {
			return false
		}
	}
	return true
}

func grid(n int) rtc.Config {
	b := (n + 255) / 256
	return rtc.Config{Grid: rtc.Dim(min(max(b, 1), maxGrid)), Block: rtc.Dim(256)}
}

// BiasAdd adds bias [cols] to every row of y [rows, cols] (in place): one
// float32 add per element, bit for bit the CPU's.
func (k *Kernels) BiasAdd(s *cuda.Stream, y, bias uintptr, rows, cols int) error {
	if err := sizeErr("BiasAdd", "rows", rows, "cols", cols); err != nil {
		return err
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	name, v := "gd_bias_add", 1
	if aligned4([]uintptr{y, bias}, cols) {
		name, v = "gd_bias_add4", 4
	}
	n := int64(rows) * int64(cols)
	return k.launch(name, s, rowGrid(rows, cols, v), rw(n+int64(cols), n), y, bias, int32(rows), int32(cols))
}

// BiasGrad sets dbias [cols] to the column sums of dy [rows, cols] (with
// accumulate, adds them to it): a Linear layer's bias gradient. Each sum
// is in float32, in a fixed order (colSums: chunks of rows, each summed
// by 8 lanes taking every 8th row, then the chunks in order): the same
// bits every run, within SumTol of the exact sum, relative to the sum of
// magnitudes.
func (k *Kernels) BiasGrad(s *cuda.Stream, dbias, dy uintptr, rows, cols int, accumulate bool) error {
	if err := sizeErr("BiasGrad", "rows", rows, "cols", cols); err != nil {
		return err
	}
	if cols == 0 {
		return nil
	}
	return k.colSums(s, dbias, 0, dy, 0, rows, cols, accumulate)
}

// colTarget is the blocks a column sum aims at: about 8 of 256 threads
// on each SM of an H100 (132).
const colTarget = 1024

// colSplit is how colSums splits rows: parts chunks of per rows (a
// multiple of 8, at least 64), so that the blocks of 32 columns times the
// chunks reach colTarget where the rows allow. With more than one part,
// parts <= ceil(colTarget / blocks of columns), so parts x cols <=
// colTarget x 32 + cols <= 65536: two such arrays fit scratchMin.
func colSplit(rows, cols int) (parts, per int) {
	if rows <= 64 {
		return 1, 64
	}
	gx := (cols + 31) / 32
	parts = max(1, min((colTarget+gx-1)/gx, (rows+63)/64))
	per = ((rows+parts-1)/parts + 7) &^ 7
	return (rows + per - 1) / per, per
}

// colSums sets out [cols] (0: skipped) to the column sums of a [rows,
// cols], or of the products a b when b is not 0, and out2 (0: skipped)
// to those of a alone (with accumulate adds them): blocks of 32 columns
// by 8 row lanes over chunks of rows (colSplit), each lane summing every
// 8th row of its chunk in order and the 8 lanes' sums added in order
// (gd_col_partial), then each column's chunks added in order
// (gd_col_finish; one chunk: written directly). No atomics: the same
// bits every run.
func (k *Kernels) colSums(s *cuda.Stream, out, out2, a, b uintptr, rows, cols int, accumulate bool) error {
	if b == 0 {
		out2 = 0 // sums of a alone: out
	}
	parts, per := colSplit(rows, cols)
	gx := (cols + 31) / 32
	in := int64(rows) * int64(cols)
	if b != 0 {
		in *= 2
	}
	cfg := rtc.Config{Grid: rtc.Dim3{X: gx, Y: parts, Z: 1}, Block: rtc.Dim3{X: 32, Y: 8, Z: 1}}
	if parts == 1 {
		return k.launch("gd_col_partial", s, cfg, rw(in, 2*int64(cols)), out, out2, a, b, int32(rows), int32(cols), int32(per), b32(accumulate))
	}
	pc := int64(parts) * int64(cols)
	return k.withScratch(s, int(8*pc), func(ws uintptr) error {
		p1, p2 := ws, ws+uintptr(4*pc)
		if out == 0 {
			p1 = 0
		}
		if out2 == 0 {
			p2 = 0
		}
		if err := k.launch("gd_col_partial", s, cfg, rw(in, 2*pc), p1, p2, a, b, int32(rows), int32(cols), int32(per), int32(0)); err != nil {
			return err
		}
		return k.launch("gd_col_finish", s, grid(cols), rw(2*pc, 2*int64(cols)), out, out2, p1, p2, int32(parts), int32(cols), b32(accumulate))
	})
}

// ReLU sets y = max(x, 0) over n elements (0 for NaN); y may be x.
func (k *Kernels) ReLU(s *cuda.Stream, y, x uintptr, n int) error {
	return k.ReLUBF16(s, y, 0, x, n)
}

// ReLUBF16 is ReLU that also writes y's bf16 copy into y16 (n values of
// 2 bytes; 0: none) as it goes, as GELUBF16.
func (k *Kernels) ReLUBF16(s *cuda.Stream, y, y16, x uintptr, n int) error {
	if err := sizeErr("ReLU", "n", n); err != nil || n == 0 {
		return err
	}
	t := rw(int64(n), int64(n))
	if y16 != 0 {
		t.w += 2 * int64(n)
	}
	return k.launch("gd_relu", s, grid(n), t, y, x, int64(n), y16)
}

// ReLUBackward sets dx = dy where ReLU's output y is positive, else 0; dx
// may be dy.
func (k *Kernels) ReLUBackward(s *cuda.Stream, dx, dy, y uintptr, n int) error {
	return k.ReLUBackwardBF16(s, dx, 0, dy, y, n)
}

// ReLUBackwardBF16 is ReLUBackward that also writes dx's bf16 copy into
// dx16 (n values of 2 bytes; 0: none) as it goes, the same bits
// gpu/gemm's cast gives: for gemm.Engine.Provide, where dx is the output
// gradient of the Linear before (both its backward products read it).
func (k *Kernels) ReLUBackwardBF16(s *cuda.Stream, dx, dx16, dy, y uintptr, n int) error {
	if err := sizeErr("ReLUBackward", "n", n); err != nil || n == 0 {
		return err
	}
	t := rw(2*int64(n), int64(n))
	if dx16 != 0 {
		t.w += 2 * int64(n)
	}
	return k.launch("gd_relu_backward", s, grid(n), t, dx, dy, y, int64(n), dx16)
}

// CrossEntropy sets loss (one float32) to the mean softmax cross-entropy
// of logits [rows, classes] against labels [rows] (int32 in [0, classes);
// another label makes the loss NaN); rowLoss [rows] is scratch (it holds
// each row's loss). Float32 throughout, as PyTorch's: within
// CrossEntropyTol of the float64 value.
func (k *Kernels) CrossEntropy(s *cuda.Stream, loss, rowLoss, logits, labels uintptr, rows, classes int) error {
	if err := sizeErr("CrossEntropy", "rows", rows, "classes", classes); err != nil {
		return err
	}
	if rows == 0 || classes == 0 {
		return fmt.Errorf("kernels: CrossEntropy of %d rows of %d classes", rows, classes)
	}
	if err := k.launch("gd_xent_rows", s, rtc.Config{Grid: rtc.Dim(rows), Block: rtc.Dim(Block)}, rw(int64(rows)*int64(classes)+int64(rows), int64(rows)), rowLoss, logits, labels, int32(classes)); err != nil {
		return err
	}
	return k.launch("gd_mean", s, rtc.Config{Grid: rtc.Dim(1), Block: rtc.Dim(Block)}, rw(int64(rows), 1), loss, rowLoss, int32(rows))
}

// CountCorrect sets correct (one int32) to the number of rows of logits
// [rows, classes] whose prediction is their label (int32 [rows]): the
// first index of the row's largest logit, as train's evaluation takes it
// (NaNs passed over, but a row whose first logit is NaN predicts class
// 0). hits [rows] (int32) is scratch; it may be CrossEntropy's rowLoss
// once that has been used. Exact: comparisons only.
func (k *Kernels) CountCorrect(s *cuda.Stream, correct, hits, logits, labels uintptr, rows, classes int) error {
	if err := sizeErr("CountCorrect", "rows", rows, "classes", classes); err != nil {
		return err
	}
	if rows == 0 || classes == 0 {
		return fmt.Errorf("kernels: CountCorrect of %d rows of %d classes", rows, classes)
	}
	if err := k.launch("gd_argmax_hits", s, rtc.Config{Grid: rtc.Dim(rows), Block: rtc.Dim(Block)}, rw(int64(rows)*int64(classes)+int64(rows), int64(rows)), hits, logits, labels, int32(classes)); err != nil {
		return err
	}
	return k.launch("gd_count", s, rtc.Config{Grid: rtc.Dim(1), Block: rtc.Dim(Block)}, rw(int64(rows), 1), correct, hits, int32(rows))
}

// CrossEntropyBackward sets dlogits [rows, classes] to the gradient of the
// cross-entropy: (softmax(logits) - onehot(labels)) * scale, with scale =
// dloss / rows for the mean loss (1/rows when the loss is what is
// minimized). dlogits may be logits.
func (k *Kernels) CrossEntropyBackward(s *cuda.Stream, dlogits, logits, labels uintptr, rows, classes int, scale float32) error {
	if err := sizeErr("CrossEntropyBackward", "rows", rows, "classes", classes); err != nil {
		return err
	}
	if rows == 0 || classes == 0 {
		return nil
	}
	return k.launch("gd_xent_backward", s, rtc.Config{Grid: rtc.Dim(rows), Block: rtc.Dim(Block)}, rw(int64(rows)*int64(classes)+int64(rows), int64(rows)*int64(classes)), dlogits, logits, labels, int32(classes), scale)
}

// SGDConfig is torch.optim.SGD's: learning rate, momentum (0: none) and
// weight decay (L2, added to the gradient).
type SGDConfig struct {
	LR, Momentum, WeightDecay float32
}

// sgdIO is what SGD moves: params and grads (and the momentum) read,
// params (and the momentum) written.
func sgdIO(n int, mom bool) traffic {
	if mom {
		return rw(3*int64(n), 2*int64(n))
	}
	return rw(2*int64(n), int64(n))
}

// SGD updates params [n] from grads [n] as torch.optim.SGD and package
// optim do (dampening 0, no Nesterov): d = g + wd p; with momentum, buf =
// mu buf + d and d = buf; p -= lr d. momentum is the buffer [n] (zeroed
// before the first step, as PyTorch's starts; 0 when c.Momentum is 0).
// Each operation is rounded on its own: bit for bit optim.SGD's result.
func (k *Kernels) SGD(s *cuda.Stream, params, grads, momentum uintptr, n int, c SGDConfig) error {
	if err := sizeErr("SGD", "n", n); err != nil || n == 0 {
		return err
	}
	if c.Momentum != 0 && momentum == 0 {
		return fmt.Errorf("kernels: SGD with momentum %v and no momentum buffer", c.Momentum)
	}
	if c.Momentum == 0 {
		momentum = 0
	}
	return k.launch("gd_sgd", s, grid(n), sgdIO(n, momentum != 0), params, grads, momentum, int64(n), c.LR, c.Momentum, c.WeightDecay)
}

// LinearForward is nn's Linear on the device: y [rows, out] = x [rows, in]
// W [in, out] + b [out] (nn stores the weight [in, out], PyTorch's
// transposed), with cuBLAS on h's stream and the bias added there (b 0:
// none). h and k must be of one device.
func LinearForward(h Products, k *Kernels, y, x, w, b uintptr, rows, in, out int) error {
	if err := sameDevice(h, k); err != nil {
		return err
	}
	if err := h.MatMul(false, false, rows, out, in, 1, x, w, 0, y); err != nil {
		return err
	}
	if b == 0 {
		return nil
	}
	return k.BiasAdd(h.Stream(), y, b, rows, out)
}

// LinearBackward is Linear's backward from dy [rows, out]: dW [in, out] =
// x^T dy, db [out] = the column sums of dy, dx [rows, in] = dy W^T; with
// accumulate, dW and db are added to (as gradients accumulate over
// micro-batches), else overwritten. dx 0 skips the input's gradient (the
// network's first layer), db 0 the bias's. On h's stream.
func LinearBackward(h Products, k *Kernels, dx, dw, db, x, w, dy uintptr, rows, in, out int, accumulate bool) error {
	if err := sameDevice(h, k); err != nil {
		return err
	}
	beta := betaOf(accumulate)
	if dx != 0 {
		keepNext(h, dy) // both products read dy: cast it once (bf16)
	}
	if err := h.MatMul(true, false, in, out, rows, 1, x, dy, beta, dw); err != nil {
		return err
	}
	if db != 0 {
		if err := k.BiasGrad(h.Stream(), db, dy, rows, out, accumulate); err != nil {
			return err
		}
	}
	if dx == 0 {
		return nil
	}
	return h.MatMul(false, true, rows, in, out, 1, dy, w, 0, dx)
}

// keeper is a Products that can keep an operand's converted copy from
// one product for the next (gemm.Engine under bf16 autocast).
type keeper interface{ KeepNext(ptr uintptr) }

// keepNext asks h, if it can, to keep the next product's converted copy
// of the operand at p for the product after it (which reads the same
// values: nothing may write them in between).
func keepNext(h Products, p uintptr) {
	if kh, ok := h.(keeper); ok {
		kh.KeepNext(p)
	}
}

// Products computes the layers' matrix products on one device, queued in
// order on one stream: a *cublas.Handle (fp32), or a *gemm.Engine
// (cuBLAS, or gdist's tiled kernel where cuBLAS is absent, in fp32, TF32
// or bf16 autocast). MatMul and MatMulBatched are cublas.Handle's
// row-major products; the layers use both transposes and strided
// batches.
type Products interface {
	Device() int
	Stream() *cuda.Stream // where the products are queued (the layers' kernels go there too)
	MatMul(ta, tb bool, m, n, k int, alpha float32, a, b uintptr, beta float32, c uintptr) error
	MatMulBatched(ta, tb bool, m, n, k int, alpha float32, a uintptr, lda int, sa int64,
		b uintptr, ldb int, sb int64, beta float32, c uintptr, ldc int, sc int64, batch int) error
}
