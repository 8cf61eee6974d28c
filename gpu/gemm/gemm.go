package gemm

import (
	_ "embed"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/gdist/gdist/gpu/cublas"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/rtc"
)

// Source is the CUDA C++ of the tiled GEMM and the bf16 cast, compiled at
// run time by NVRTC (gpu/rtc): BF16Header, then gemm.cu.
var Source = BF16Header + "\n#line 1 \"gemm.cu\"\n" + gemmCU

// BF16Header is the CUDA C++ of the cast of a float to bf16 (bf16.cuh's
// bf16_bits): the engine's casts, and gpu/kernels' kernels that write
// the bf16 copies given by Provide, compile the one definition.
//
//go:embed bf16.cuh
var BF16Header string

//go:embed gemm.cu
var gemmCU string

// Tile is the side of the tiled kernel's blocks of threads, TileC that
// of the tile of C a block computes: each thread 4 x 4 of its elements.
const (
	Tile  = 16
	TileC = 64
)

// Precision is how fp32 matrix products are computed, by PyTorch's names.
type Precision string

// The precisions.
const (
	// FP32: fp32 products (PyTorch's default:
	// torch.backends.cuda.matmul.allow_tf32 = False).
	FP32 Precision = "fp32"
	// TF32: cuBLAS may round the inputs to TF32 (10 mantissa bits) on
	// tensor cores, accumulating in fp32 (allow_tf32 = True,
	// torch.set_float32_matmul_precision("high"): the handle's math mode
	// CUBLAS_TF32_TENSOR_OP_MATH). Our tiled kernel computes fp32, which
	// TF32 permits.
	TF32 Precision = "tf32"
	// BF16: autocast to bfloat16 (torch.autocast(dtype=torch.bfloat16))
	// for the products: their inputs cast to bf16 (round to nearest
	// even), the products accumulated in fp32 and written as fp32
	// (cublasGemmEx and cublasGemmStridedBatchedEx with CUDA_R_16BF
	// inputs, CUBLAS_COMPUTE_32F); parameters, gradients, optimizer
	// state, reductions, softmax, normalizations and the loss stay fp32.
	BF16 Precision = "bf16"
)

// Precisions lists the precisions, the default first.
var Precisions = []Precision{FP32, TF32, BF16}

// ParsePrecision checks a precision's name ("" is FP32).
func ParsePrecision(s string) (Precision, error) {
	switch Precision(s) {
	case "", FP32:
		return FP32, nil
	case TF32, BF16:
		return Precision(s), nil
	}
	return "", fmt.Errorf("gemm: precision %q: want fp32, tf32 or bf16 (PyTorch's fp32 default, allow_tf32, autocast to bfloat16)", s)
}

// Tolerances of a product's element against the float64 product of the
// fp32 inputs, relative to the sum of the magnitudes of its k terms (plus
// GemmTol(k) for the fp32 sum, see kernels.GemmTol): rounding both inputs
// to p bits of precision moves each term by at most 2^(1-p) of its
// magnitude (2 u, u = 2^-p).
const (
	// TF32Tol: 11 bits (10 stored), 2^-10.
	TF32Tol = 0x1p-10
	// BF16Tol: 8 bits (7 stored), 2^-7.
	BF16Tol = 0x1p-7
)

// Config chooses an Engine's precision and backend.
type Config struct {
	Precision Precision // "" is FP32
	// Tiled uses gdist's tiled kernel even where cuBLAS loads (tests,
	// comparisons); without cuBLAS it is used anyway.
	Tiled bool
	// NoWeightCache turns the bf16 weight cache off (PyTorch's
	// torch.autocast(cache_enabled=False)): every product casts every
	// operand it reads. $GDIST_AUTOCAST_CACHE=0 (EnvAutocastCache) does
	// the same for every engine.
	NoWeightCache bool
	// BF16Cast is where bf16 autocast's operands are rounded to bf16
	// ("" is $GDIST_BF16_CAST, EnvBF16Cast, or else CastKernel): see
	// BF16Cast (cast.go).
	BF16Cast BF16Cast
}

// Engine computes the layers' matrix products on one device, queued on
// one stream, in its precision: through cuBLAS when it loads
// (gpu/cublas), else through gdist's shared-memory tiled kernel (slower,
// correct; Backend says which and why). It satisfies kernels.Products.
// Its methods are safe for concurrent use (they serialize); the
// operands must stay allocated until the stream has done the products.
type Engine struct {
	dev  int
	s    *cuda.Stream
	prec Precision
	h    *cublas.Handle // nil: the tiled kernel
	why  string         // why the tiled kernel
	// castIn: bf16 through cuBLAS rounds the fp32 operands inside the
	// product (CUBLAS_COMPUTE_32F_FAST_16BF), no casts (BF16Cast)
	castIn bool

	gemm, cast, cast4, cast2d, cast2d4 *rtc.Function

	mu      sync.Mutex
	scratch uintptr // bf16 copies of the operands (cuBLAS with BF16)
	cap     int     // its bytes

	keepNext uintptr // KeepNext's operand
	held     kept    // the bf16 copy kept for the next product
	keepBuf  uintptr // where it is kept
	keepCap  int     // its bytes

	w     weights   // the registered parameters and their bf16 copy (cache.go)
	holds []hold    // the regions held (Hold, hold.go)
	slots []slot    // their bf16 copies' buffers, kept across Release
	given []hold    // caller-made bf16 copies (Provide, provide.go)
	stats CastStats // values cast so far
	ptrs  ptrCache  // MatMulBatched2's pointer arrays (batched2.go)
}

// kept is the operand whose bf16 copy (its cast layout) is in keepBuf.
type kept struct{ op operand }

// New makes an engine on device whose products go on s (a stream of
// device). Without cuBLAS (cuda.ErrUnavailable from gpu/cublas: no
// library found, or $GDIST_CUBLAS_PATH naming none) it uses the tiled
// kernel; any other failure is returned.
func New(device int, s *cuda.Stream, cfg Config) (*Engine, error) {
	p, err := ParsePrecision(string(cfg.Precision))
	if err != nil {
		return nil, err
	}
	if s != nil && s.Device() != device {
		return nil, fmt.Errorf("gemm: an engine on cuda:%d with a stream of cuda:%d", device, s.Device())
	}
	e := &Engine{dev: device, s: s, prec: p}
	off, err := cacheOff()
	if err != nil {
		return nil, err
	}
	e.w.off = cfg.NoWeightCache || off
	if e.castIn, err = castInCUBLAS(cfg.BF16Cast); err != nil {
		return nil, err
	}
	m, err := rtc.Load(device, "gdist_gemm.cu", Source)
	if err != nil {
		return nil, err
	}
	if e.gemm, err = m.Function("gd_gemm"); err != nil {
		return nil, err
	}
	if e.cast, err = m.Function("gd_to_bf16"); err != nil {
		return nil, err
	}
	if e.cast4, err = m.Function("gd_to_bf16x4"); err != nil {
		return nil, err
	}
	if e.cast2d, err = m.Function("gd_to_bf16_2d"); err != nil {
		return nil, err
	}
	if e.cast2d4, err = m.Function("gd_to_bf16_2dx4"); err != nil {
		return nil, err
	}
	if cfg.Tiled {
		e.why = "asked for (Config.Tiled)"
		return e, nil
	}
	h, err := cublas.New(device, s)
	if errors.Is(err, cuda.ErrUnavailable) {
		_, reason := cublas.Available()
		e.why = "no cuBLAS: " + reason
		return e, nil
	}
	if err != nil {
		return nil, err
	}
	if p == TF32 {
		if err := h.SetMath(cublas.TF32); err != nil {
			h.Close()
			return nil, err
		}
	}
	e.h = h
	return e, nil
}

// Device is the engine's device.
func (e *Engine) Device() int { return e.dev }

// Precision is the engine's precision.
func (e *Engine) Precision() Precision { return e.prec }

// CUBLAS reports whether the products go through cuBLAS.
func (e *Engine) CUBLAS() bool { return e.h != nil }

// Backend says in one line what computes the products: cuBLAS (its
// version and path) or the tiled kernel and why.
func (e *Engine) Backend() string {
	if e.h != nil {
		return cublas.Info()
	}
	return "gdist's tiled GEMM kernel (" + e.why + ")"
}

// ScratchBytes is the device memory the engine holds for bf16 copies of
// operands (cuBLAS at BF16): the scratch that grows to the largest
// product's operands in the first step and stays, and the weight cache
// (2 bytes a registered parameter, from the first product that reads
// one; see Weights); and, in any precision, MatMulBatched2's pointer
// arrays (PointerArrayBytes).
func (e *Engine) ScratchBytes() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.cap + e.keepCap + e.w.cap + e.ptrs.bytes
	for _, sl := range e.slots {
		n += sl.cap
	}
	return n
}

// Casts is the number of values cast to bf16 so far (bf16 autocast):
// CastStats().Values().
func (e *Engine) Casts() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats.Values()
}

// CastStats counts the engine's casts to bf16 since New, by kind.
func (e *Engine) CastStats() CastStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats
}

// KeepNext asks the engine to keep the bf16 copy of the operand at ptr
// that the next product casts, for the one product after it that reads
// the same span, which then casts it no more (bf16 autocast through
// cuBLAS; otherwise nothing). The caller promises that nothing writes
// those values between the two products. kernels.LinearBackward uses it
// for dy, which both of its products read.
func (e *Engine) KeepNext(ptr uintptr) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.keepNext = ptr
}

// Close releases the cuBLAS handle and the scratch (after the stream's
// work is done).
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var err error
	bufs := []*uintptr{&e.scratch, &e.keepBuf, &e.w.buf}
	for i := range e.slots {
		bufs = append(bufs, &e.slots[i].buf)
	}
	if e.s != nil && (e.scratch != 0 || e.keepBuf != 0 || e.w.buf != 0 || len(e.slots) > 0 || len(e.ptrs.chunks) > 0) {
		e.s.Synchronize() // the queued products done with the buffers below
	}
	err = e.ptrs.free(e.dev)
	for _, p := range bufs {
		if *p != 0 {
			if ferr := cuda.Free(e.dev, *p); err == nil {
				err = ferr
			}
			*p = 0
		}
	}
	e.cap, e.keepCap, e.held = 0, 0, kept{}
	e.w.cap, e.w.valid = 0, nil
	e.holds, e.slots, e.given = nil, nil, nil
	if e.h != nil {
		if cerr := e.h.Close(); err == nil {
			err = cerr
		}
		e.h = nil
	}
	return err
}

// MatMul is the product of dense row-major matrices (cublas.Handle's
// MatMul): C [m, n] = alpha op(A) op(B) + beta C, A stored [m, k] ([k, m]
// with ta), B stored [k, n] ([n, k] with tb).
func (e *Engine) MatMul(ta, tb bool, m, n, k int, alpha float32, a, b uintptr, beta float32, c uintptr) error {
	lda, ldb := k, n
	if ta {
		lda = m
	}
	if tb {
		ldb = k
	}
	return e.MatMulBatched(ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, n, 0, 1)
}

// MatMulBatched is MatMul over batch products of row-major matrices with
// rows lda, ldb, ldc elements apart, product i's at a + i sa, b + i sb, c
// + i sc (elements; 0 shares a matrix): cublas.Handle's MatMulBatched.
func (e *Engine) MatMulBatched(ta, tb bool, m, n, k int, alpha float32, a uintptr, lda int, sa int64,
	b uintptr, ldb int, sb int64, beta float32, c uintptr, ldc int, sc int64, batch int) error {
	if err := check(ta, tb, m, n, k, lda, ldb, ldc, sa, sb, sc, batch); err != nil {
		return err
	}
	if m == 0 || n == 0 || batch == 0 {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	keep, prev := e.keepNext, e.held // KeepNext's: for this product and the next only
	e.keepNext, e.held = 0, kept{}
	if err := e.heldWritten(c, span(m, n, ldc, sc, batch)); err != nil {
		return err
	}
	if e.h == nil {
		return e.tiled(ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch)
	}
	if e.prec == BF16 && e.castIn {
		// cuBLAS rounds the fp32 operands to bf16 as it reads them
		A := cublas.Matrix{Ptr: a, Type: cublas.F32, LD: max(lda, 1)}
		B := cublas.Matrix{Ptr: b, Type: cublas.F32, LD: max(ldb, 1)}
		C := cublas.Matrix{Ptr: c, Type: cublas.F32, LD: max(ldc, 1)}
		return e.gemmEx(ta, tb, m, n, k, alpha, A, sa, B, sb, beta, C, sc, batch, cublas.Compute32FFast16BF)
	}
	if e.prec != BF16 {
		if batch == 1 {
			return e.h.Sgemm(op(tb), op(ta), n, m, k, alpha, b, max(ldb, 1), a, max(lda, 1), beta, c, max(ldc, 1))
		}
		return e.h.SgemmStridedBatched(op(tb), op(ta), n, m, k, alpha, b, max(ldb, 1), sb, a, max(lda, 1), sa, beta, c, max(ldc, 1), sc, batch)
	}
	// bf16 autocast: each operand in bf16, from the weight cache (a
	// registered parameter), a held region (Hold), keepBuf (KeepNext's
	// operand of the product before), or cast into keepBuf (KeepNext's
	// now) or the scratch. A copy in the cache or a held region has the
	// operand's layout; a cast one is compact (only the values the
	// product reads) where the operand has gaps (a block of a larger
	// matrix), else the operand's span.
	A, B := newOperand(a, ta, m, k, lda, sa, batch), newOperand(b, tb, k, n, ldb, sb, batch)
	if k == 0 {
		A, B = operand{}, operand{}
	}
	na, nb := A.n(), B.n()
	wa, wb := e.w.holds(a, A.span()), e.w.holds(b, B.span())
	ha, hb := uintptr(0), uintptr(0)
	if !wa {
		ha = e.heldAt(A)
	}
	if !wb {
		hb = e.heldAt(B)
	}
	reuseA := !wa && ha == 0 && na > 0 && prev.op == A
	reuseB := !wb && hb == 0 && nb > 0 && prev.op == B
	keepA := !wa && ha == 0 && !reuseA && !reuseB && keep != 0 && keep == a && na > 0
	keepB := !wb && hb == 0 && !reuseA && !reuseB && !keepA && keep != 0 && keep == b && nb > 0
	switch {
	case reuseA && keep == a, reuseB && keep == b:
		e.held = prev // kept again, still unwritten (the caller's promise)
	case keepA:
		e.held = kept{A}
	case keepB:
		e.held = kept{B}
	}
	if keepA || keepB {
		if err := e.growKeep(2 * int(e.held.op.n())); err != nil {
			e.held = kept{}
			return err
		}
	}
	sharedB := reuseA && A == B // B is A, kept
	var sna, snb int64          // values each casts into the scratch
	if !wa && ha == 0 && !reuseA && !keepA {
		sna = na
	}
	if !wb && hb == 0 && !reuseB && !keepB && !sharedB {
		snb = nb
	}
	// B's copy starts on a 256-byte boundary of the scratch, as A's
	// does: cuBLAS's tensor-core kernels want aligned operands
	bOff := (2*sna + 255) &^ 255
	if err := e.grow(int(bOff + 2*snb)); err != nil {
		return err
	}
	if wa || wb {
		if err := e.w.alloc(e); err != nil {
			return err
		}
	}
	// the bf16 copies and their layouts
	a, ldA, sA, err := e.bf16(a, A, wa, ha, reuseA, keepA, e.scratch, lda, sa)
	if err != nil {
		return err
	}
	b, ldB, sB, err := e.bf16(b, B, wb, hb, reuseB || sharedB, keepB, e.scratch+uintptr(bOff), ldb, sb)
	if err != nil {
		return err
	}
	// a product that writes registered parameters makes their copies stale
	e.w.written(c, span(m, n, ldc, sc, batch))
	A16 := cublas.Matrix{Ptr: a, Type: cublas.BF16, LD: max(ldA, 1)}
	B16 := cublas.Matrix{Ptr: b, Type: cublas.BF16, LD: max(ldB, 1)}
	C := cublas.Matrix{Ptr: c, Type: cublas.F32, LD: max(ldc, 1)}
	return e.gemmEx(ta, tb, m, n, k, alpha, A16, sA, B16, sB, beta, C, sc, batch, cublas.Compute32F)
}

// gemmEx is cuBLAS's GemmEx (batch 1) or GemmStridedBatchedEx for the
// row-major product C = alpha op(A) op(B) + beta C (column-major
// C^T = op(B)^T op(A)^T: the operands swapped).
func (e *Engine) gemmEx(ta, tb bool, m, n, k int, alpha float32, A cublas.Matrix, sa int64, B cublas.Matrix, sb int64,
	beta float32, C cublas.Matrix, sc int64, batch int, compute cublas.ComputeType) error {
	if batch == 1 {
		return e.h.GemmEx(op(tb), op(ta), n, m, k, alpha, B, A, beta, C, compute)
	}
	return e.h.GemmStridedBatchedEx(op(tb), op(ta), n, m, k, alpha, B, sb, A, sa, beta, C, sc, batch, compute)
}

// bf16 is where a bf16 product reads its operand X (at x, rows
// ld and matrices stride apart) and that copy's layout: the registered
// parameters' cached copy (cached: cast now if stale), a held region
// (held), keepBuf as the product before left it (reuse), or X cast now
// into keepBuf (keep, KeepNext's) or at scratch. The cache and a held
// region have X's layout; a cast copy its compact one (layout16).
func (e *Engine) bf16(x uintptr, X operand, cached bool, held uintptr, reuse, keep bool, scratch uintptr, ld int, stride int64) (uintptr, int, int64, error) {
	switch {
	case cached:
		// the cache's copy has X's layout: the product reads X's whole
		// span from it (not only X.n(), a compact cast's count, where X
		// is a block of a wider matrix)
		x16 := e.w.at(x)
		if err := e.w.cast(e, x, X.span()); err != nil {
			return 0, 0, 0, err
		}
		return x16, ld, stride, nil
	case held != 0:
		return held, ld, stride, nil
	case reuse:
	case keep:
		if err := e.cast16(e.keepBuf, X, &e.stats.Operands); err != nil {
			return 0, 0, 0, err
		}
	default:
		if err := e.cast16(scratch, X, &e.stats.Operands); err != nil {
			return 0, 0, 0, err
		}
		ld, stride = X.layout16(ld, stride)
		return scratch, ld, stride, nil
	}
	ld, stride = X.layout16(ld, stride)
	return e.keepBuf, ld, stride, nil
}

// operand is a product's operand as stored: batch matrices stride
// values apart from ptr (one matrix, stride 0, where the product shares
// it or is one), each rows rows of cols values, rows ld values apart.
type operand struct {
	ptr        uintptr
	rows, cols int
	ld         int
	stride     int64
	batch      int
}

// newOperand is op(X) [r, c] of a batched product as stored.
func newOperand(p uintptr, t bool, r, c, ld int, stride int64, batch int) operand {
	rows, cols := rowsCols(t, r, c)
	if stride == 0 || batch <= 1 {
		stride, batch = 0, 1
	}
	return operand{p, rows, cols, ld, stride, batch}
}

// span is the values from the first matrix's start to the last's end.
func (x operand) span() int64 { return span(x.rows, x.cols, x.ld, x.stride, x.batch) }

// values is the values the product reads.
func (x operand) values() int64 { return int64(x.batch) * int64(x.rows) * int64(x.cols) }

// compact is whether the operand's cast copy is compact (rows of cols,
// matrices rows cols apart): where its span has gaps (a block of a
// larger matrix, padded rows) and so more values than it reads.
func (x operand) compact() bool { return x.values() < x.span() }

// n is the values a cast of the operand casts.
func (x operand) n() int64 {
	if x.compact() {
		return x.values()
	}
	return x.span()
}

// layout16 is the leading dimension and stride of the operand's cast
// copy (ld and stride: the product's).
func (x operand) layout16(ld int, stride int64) (int, int64) {
	if !x.compact() {
		return ld, stride
	}
	if stride != 0 {
		stride = int64(x.rows) * int64(x.cols)
	}
	return x.cols, stride
}

// cast16 queues the cast of the operand x into dst (its cast layout),
// counting the values in *count.
func (e *Engine) cast16(dst uintptr, x operand, count *int64) error {
	if !x.compact() {
		return e.toBF16(dst, x.ptr, x.span(), count)
	}
	return e.toBF16Strided(dst, x, x.cols, int64(x.rows)*int64(x.cols), count)
}

func op(t bool) cublas.Op {
	if t {
		return cublas.Trans
	}
	return cublas.NoTrans
}

// rowsCols is the stored shape of op(X) [r, c]: [c, r] when transposed.
func rowsCols(t bool, r, c int) (int, int) {
	if t {
		return c, r
	}
	return r, c
}

// span is the elements from a batch's first matrix's start to its last's
// end: rows of ld, the last row cols long.
func span(rows, cols, ld int, stride int64, batch int) int64 {
	if rows == 0 || cols == 0 {
		return 0
	}
	return int64(batch-1)*stride + int64(rows-1)*int64(ld) + int64(cols)
}

func check(ta, tb bool, m, n, k, lda, ldb, ldc int, sa, sb, sc int64, batch int) error {
	for _, v := range []struct {
		name string
		v    int
	}{{"m", m}, {"n", n}, {"k", k}, {"lda", lda}, {"ldb", ldb}, {"ldc", ldc}, {"batch", batch}} {
		if v.v < 0 || v.v > math.MaxInt32 {
			return fmt.Errorf("gemm: %s = %d (want 0 to %d)", v.name, v.v, math.MaxInt32)
		}
	}
	if sa < 0 || sb < 0 || sc < 0 {
		return fmt.Errorf("gemm: negative strides (A %d, B %d, C %d)", sa, sb, sc)
	}
	_, ac := rowsCols(ta, m, k)
	_, bc := rowsCols(tb, k, n)
	if (k > 0 && (lda < ac || ldb < bc)) || ldc < n {
		return fmt.Errorf("gemm: row lengths lda %d, ldb %d, ldc %d shorter than the rows (%d, %d, %d)", lda, ldb, ldc, ac, bc, n)
	}
	if batch > 1 && m > 0 && n > 0 && sc < int64(m-1)*int64(ldc)+int64(n) {
		return fmt.Errorf("gemm: the %d products' C matrices (%d x %d, ldc %d) overlap at stride %d", batch, m, n, ldc, sc)
	}
	return nil
}

// grow makes the scratch at least n bytes (freeing the old once the
// stream is done with it).
func (e *Engine) grow(n int) error {
	if err := e.regrow(&e.scratch, &e.cap, n); err != nil {
		return fmt.Errorf("gemm: %d bytes of bf16 scratch: %w", n, err)
	}
	return nil
}

// regrow makes the device buffer *p, of *c bytes, at least n bytes: the
// old one (its contents lost) freed once the stream is done with it.
// The scratch, keepBuf, the held regions' slots and the weight cache
// grow so.
func (e *Engine) regrow(p *uintptr, c *int, n int) error {
	if n <= *c {
		return nil
	}
	if *p != 0 {
		if e.s != nil {
			if err := e.s.Synchronize(); err != nil {
				return err
			}
		}
		if err := cuda.Free(e.dev, *p); err != nil {
			return err
		}
		*p, *c = 0, 0
	}
	q, err := cuda.Malloc(e.dev, n)
	if err != nil {
		return err
	}
	*p, *c = q, n
	return nil
}

// growKeep makes keepBuf at least n bytes (nothing is held in it: the
// caller sets held after).
func (e *Engine) growKeep(n int) error {
	if err := e.regrow(&e.keepBuf, &e.keepCap, n); err != nil {
		return fmt.Errorf("gemm: %d bytes of bf16 scratch for KeepNext's operand: %w", n, err)
	}
	return nil
}

// toBF16 queues the cast of n values at src into dst, counting them in
// *count.
func (e *Engine) toBF16(dst, src uintptr, n int64, count *int64) error {
	if n == 0 {
		return nil
	}
	*count += n
	if src%16 == 0 && dst%8 == 0 && n >= 4 {
		blocks := min((n/4+255)/256, 1024)
		return e.cast4.Launch(e.s, rtc.Config{Grid: rtc.Dim(int(blocks)), Block: rtc.Dim(256)}, dst, src, n)
	}
	blocks := min((n+255)/256, 1024)
	return e.cast.Launch(e.s, rtc.Config{Grid: rtc.Dim(int(blocks)), Block: rtc.Dim(256)}, dst, src, n)
}

// toBF16Strided queues the cast of operand x's values into dst, rows
// dld apart and matrices dstride apart, counting them in *count: one
// launch, its rows along the grid's y.
func (e *Engine) toBF16Strided(dst uintptr, x operand, dld int, dstride int64, count *int64) error {
	if x.rows == 0 || x.cols == 0 {
		return nil
	}
	if x.cols == x.ld && dld == x.ld && (x.batch == 1 || (x.stride == int64(x.rows*x.ld) && dstride == x.stride)) {
		return e.toBF16(dst, x.ptr, x.values(), count) // dense: one run
	}
	*count += x.values()
	f, v := e.cast2d, 1
	if x.ptr%16 == 0 && dst%8 == 0 && x.cols%4 == 0 && x.ld%4 == 0 && x.stride%4 == 0 && dld%4 == 0 && dstride%4 == 0 {
		f, v = e.cast2d4, 4
	}
	// tpr threads a row (a power of two, up to 256, at least a row's
	// values or 256), 256 / tpr rows a block
	tpr := 1
	for tpr < 256 && tpr < x.cols/v {
		tpr *= 2
	}
	rpb := 256 / tpr
	rows := x.batch * x.rows
	cfg := rtc.Config{Grid: rtc.Dim3{X: min((x.cols/v+tpr-1)/tpr, 64), Y: min((rows+rpb-1)/rpb, 65535), Z: 1}, Block: rtc.Dim(256)}
	return f.Launch(e.s, cfg, dst, x.ptr, int32(x.rows), int32(x.cols), int64(x.ld), x.stride, int32(x.batch), int64(dld), dstride, int32(tpr))
}

func (e *Engine) tiled(ta, tb bool, m, n, k int, alpha float32, a uintptr, lda int, sa int64,
	b uintptr, ldb int, sb int64, beta float32, c uintptr, ldc int, sc int64, batch int) error {
	if k == 0 || alpha == 0 {
		k = 0 // A and B are not read (cuBLAS's rule)
	}
	cfg := rtc.Config{
		Grid:  rtc.Dim3{X: (n + TileC - 1) / TileC, Y: (m + TileC - 1) / TileC, Z: min(batch, 65535)},
		Block: rtc.Dim3{X: Tile, Y: Tile, Z: 1},
	}
	return e.gemm.Launch(e.s, cfg, b32(ta), b32(tb), int32(m), int32(n), int32(k), alpha, a, int32(lda), sa,
		b, int32(ldb), sb, beta, c, int32(ldc), sc, int32(batch), b32(e.prec == BF16))
}

func b32(v bool) int32 {
	if v {
		return 1
	}
	return 0
}

// Stream is the stream the products are queued on.
func (e *Engine) Stream() *cuda.Stream { return e.s }
