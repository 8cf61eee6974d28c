package gemm_test

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/gdist/gdist/gpu/cublas"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
)

func TestMain(m *testing.M) {
	// the tests choose the cast and the cache themselves
	os.Unsetenv(gemm.EnvBF16Cast)
	os.Unsetenv(gemm.EnvAutocastCache)
	os.Exit(cudafake.Main(m))
}

const dev = 0

// The engine is what the layers take.
var _ kernels.Products = (*gemm.Engine)(nil)

func engine(t *testing.T, cfg gemm.Config) *gemm.Engine {
	t.Helper()
	cudafake.RequireCUDA(t)
	e, err := gemm.New(dev, devtest.Stream(t, dev), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// problem is one batched row-major product C_i = alpha op(A_i) op(B_i) +
// beta C_i with padded rows and gaps between the products.
type problem struct {
	ta, tb        bool
	m, n, k       int
	lda, ldb, ldc int
	sa, sb, sc    int64
	batch         int
	alpha, beta   float32
}

func (p problem) String() string {
	return fmt.Sprintf("%dx%dx%d ta=%v tb=%v batch %d", p.m, p.n, p.k, p.ta, p.tb, p.batch)
}

func problems() []problem {
	var ps []problem
	for _, sz := range [][3]int{{1, 1, 1}, {7, 13, 5}, {33, 17, 40}, {70, 130, 37}} {
		m, n, k := sz[0], sz[1], sz[2]
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				lda, ldb := k+1, n+2
				br := k
				if ta {
					lda = m + 1
				}
				if tb {
					ldb, br = k+2, n
				}
				ldc := n + 3
				ps = append(ps, problem{ta, tb, m, n, k, lda, ldb, ldc, 0, int64(br*ldb + 5), int64(m*ldc + 7), 3, -1.25, 0.5})
				ps = append(ps, problem{ta, tb, m, n, k, lda, ldb, ldc, 0, 0, 0, 1, 1, 0})
			}
		}
	}
	return ps
}

func bf16(x float32) float32 {
	b := math.Float32bits(x)
	if b&0x7fffffff > 0x7f800000 {
		return x
	}
	return math.Float32frombits((b + 0x7fff + (b>>16)&1) &^ 0xffff)
}

// run computes p on e over inputs that are functions of the seed and
// returns the device's C, the float64 reference of the inputs rounded by
// round, and each element's bound (the sum of its terms' magnitudes).
func run(t *testing.T, e *gemm.Engine, p problem, round func(float32) float32) (got []float32, want, mag []float64) {
	t.Helper()
	ar, ac := p.m, p.k
	if p.ta {
		ar, ac = p.k, p.m
	}
	br, bc := p.k, p.n
	if p.tb {
		br, bc = p.n, p.k
	}
	na := int64(p.batch-1)*p.sa + int64((ar-1)*p.lda+ac)
	nb := int64(p.batch-1)*p.sb + int64((br-1)*p.ldb+bc)
	nc := int64(p.batch-1)*p.sc + int64((p.m-1)*p.ldc+p.n)
	a, b, c := devtest.Vals(1, int(na), 1), devtest.Vals(2, int(nb), 1), devtest.Vals(3, int(nc), 1)
	da, db, dc := devtest.Upload(t, dev, a), devtest.Upload(t, dev, b), devtest.Upload(t, dev, c)
	if err := e.MatMulBatched(p.ta, p.tb, p.m, p.n, p.k, p.alpha, da, p.lda, p.sa, db, p.ldb, p.sb, p.beta, dc, p.ldc, p.sc, p.batch); err != nil {
		t.Fatalf("%v: %v", p, err)
	}
	if err := e.Stream().Synchronize(); err != nil {
		t.Fatal(err)
	}
	got = devtest.Floats(t, dev, dc, int(nc))
	want, mag = make([]float64, nc), make([]float64, nc)
	for i := range c {
		want[i] = float64(c[i]) // untouched outside the products
	}
	for z := 0; z < p.batch; z++ {
		A, B, C := a[int64(z)*p.sa:], b[int64(z)*p.sb:], c[int64(z)*p.sc:]
		for i := 0; i < p.m; i++ {
			for j := 0; j < p.n; j++ {
				var s, abs float64
				for q := 0; q < p.k; q++ {
					ia, ib := i*p.lda+q, q*p.ldb+j
					if p.ta {
						ia = q*p.lda + i
					}
					if p.tb {
						ib = j*p.ldb + q
					}
					x, y := A[ia], B[ib]
					v := float64(round(x)) * float64(round(y))
					s += v
					abs += math.Abs(v)
				}
				at := int64(z)*p.sc + int64(i*p.ldc+j)
				old := 0.0
				if p.beta != 0 {
					old = float64(p.beta) * float64(C[i*p.ldc+j])
				}
				want[at] = float64(p.alpha)*s + old
				mag[at] = math.Abs(float64(p.alpha))*abs + math.Abs(old)
			}
		}
	}
	return got, want, mag
}

func within(t *testing.T, what string, got []float32, want, mag []float64, tol func(i int) float64) (worst float64) {
	t.Helper()
	bad := 0
	for i := range got {
		d := math.Abs(float64(got[i]) - want[i])
		allowed := tol(i) * mag[i]
		if mag[i] == 0 {
			allowed = 0
		}
		if allowed > 0 {
			worst = math.Max(worst, d/allowed)
		}
		if !(d <= allowed) {
			if bad++; bad <= 5 {
				t.Errorf("%s: [%d] = %v, want %v (difference %.3g, allowed %.3g)", what, i, got[i], want[i], d, allowed)
			}
		}
	}
	return worst
}

func identity(x float32) float32 { return x }

// gdist's tiled kernel (used where cuBLAS is absent) computes every
// product the layers ask for, fp32: within kernels.GemmTol(k) of the
// float64 product relative to the sum of the terms' magnitudes, padding
// and the gaps between products untouched, beta 0 not reading C.
func TestTiled(t *testing.T) {
	e := engine(t, gemm.Config{Tiled: true})
	if e.CUBLAS() || !strings.Contains(e.Backend(), "tiled") {
		t.Fatalf("backend %s", e.Backend())
	}
	for _, p := range problems() {
		got, want, mag := run(t, e, p, identity)
		w := within(t, p.String(), got, want, mag, func(int) float64 { return kernels.GemmTol(p.k) })
		t.Logf("%v: worst %.2g of GemmTol", p, w)
	}
}

// bf16 autocast, through cuBLAS (GemmEx, GemmStridedBatchedEx on bf16
// copies of the operands) and through the tiled kernel: each element is
// the fp32 sum of the bf16-rounded inputs' products (within GemmTol(k) of
// its float64 value), so within BF16Tol + GemmTol(k) of the fp32 inputs'
// product; and not the fp32 product (the rounding is applied).
func TestBF16(t *testing.T) {
	for _, tiled := range []bool{false, true} {
		t.Run(fmt.Sprintf("tiled=%v", tiled), func(t *testing.T) {
			e := engine(t, gemm.Config{Precision: gemm.BF16, Tiled: tiled})
			if e.CUBLAS() == tiled {
				t.Fatalf("backend %s", e.Backend())
			}
			differs := false
			for _, p := range problems() {
				got, want, mag := run(t, e, p, bf16)
				within(t, p.String()+" (bf16 inputs)", got, want, mag, func(int) float64 { return kernels.GemmTol(p.k) })
				_, want32, mag32 := run(t, e, p, identity)
				within(t, p.String()+" (fp32 inputs)", got, want32, mag32, func(int) float64 { return gemm.BF16Tol + kernels.GemmTol(p.k) })
				for i := range got {
					if math.Abs(float64(got[i])-want32[i]) > 4*kernels.GemmTol(p.k)*mag32[i] {
						differs = true
					}
				}
			}
			if !differs {
				t.Error("every product equals the fp32 one: the inputs were not rounded to bf16")
			}
		})
	}
}

// TF32 (cuBLAS's CUBLAS_TF32_TENSOR_OP_MATH): within TF32Tol + GemmTol(k)
// of the fp32 inputs' product; the fake rounds the inputs (to 10 bits,
// ties away, as the tensor cores' cvt.rna), so there it is not the fp32
// product.
func TestTF32(t *testing.T) {
	e := engine(t, gemm.Config{Precision: gemm.TF32})
	if !e.CUBLAS() {
		t.Skip(e.Backend())
	}
	if m := e.Precision(); m != gemm.TF32 {
		t.Fatal(m)
	}
	differs := false
	for _, p := range problems() {
		got, want, mag := run(t, e, p, identity)
		within(t, p.String(), got, want, mag, func(int) float64 { return gemm.TF32Tol + kernels.GemmTol(p.k) })
		for i := range got {
			if math.Abs(float64(got[i])-want[i]) > 4*kernels.GemmTol(p.k)*mag[i] {
				differs = true
			}
		}
	}
	if !differs && cudafake.Mode() == "fake" {
		t.Error("every product equals the fp32 one: TF32 was not applied")
	}
}

// Without cuBLAS ($GDIST_CUBLAS_PATH naming no library) the engine uses
// the tiled kernel and says why; the products are right.
func TestNoCUBLAS(t *testing.T) {
	cudafake.RequireCUDA(t)
	devtest.UseEnv(t, cublas.Reload, cublas.EnvLibrary, "/nonexistent/libcublas.so.13")
	e := engine(t, gemm.Config{})
	if e.CUBLAS() {
		t.Fatalf("cuBLAS loaded from nowhere: %s", e.Backend())
	}
	if b := e.Backend(); !strings.Contains(b, "tiled") || !strings.Contains(b, "/nonexistent/libcublas.so.13") {
		t.Errorf("backend %q does not say the tiled kernel and the library tried", b)
	}
	p := problems()[4]
	got, want, mag := run(t, e, p, identity)
	within(t, p.String(), got, want, mag, func(int) float64 { return kernels.GemmTol(p.k) })
}

// Bad arguments are refused at once, naming the problem; so is a
// precision PyTorch has no name for.
func TestInvalid(t *testing.T) {
	if _, err := gemm.ParsePrecision("fp16"); err == nil || !strings.Contains(err.Error(), "bf16") {
		t.Errorf("fp16: %v", err)
	}
	for _, s := range []string{"", "fp32", "tf32", "bf16"} {
		if _, err := gemm.ParsePrecision(s); err != nil {
			t.Error(err)
		}
	}
	e := engine(t, gemm.Config{Tiled: true})
	d := devtest.Alloc(t, dev, 64, 4)
	for what, err := range map[string]error{
		"negative stride": e.MatMulBatched(false, false, 2, 2, 2, 1, d, 2, -4, d, 2, 0, 0, d, 2, 4, 2),
		"overlapping C":   e.MatMulBatched(false, false, 4, 4, 2, 1, d, 2, 0, d, 4, 0, 0, d+128, 4, 8, 2),
		"short rows":      e.MatMulBatched(false, false, 4, 4, 3, 1, d, 2, 0, d, 4, 0, 0, d+128, 4, 0, 1),
	} {
		if err == nil {
			t.Errorf("%s: accepted", what)
		}
	}
}

func bytes(v []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// TestRealNVRTC compiles gemm.cu with the real NVRTC where one is
// installed (no GPU needed): what the fake runs is CUDA C++ that NVRTC
// accepts, for sm_80 and sm_90.
func TestRealNVRTC(t *testing.T) {
	c, lib := devtest.RealNVRTC(t)
	major, minor := c.Version()
	for _, cc := range [][2]int{{8, 0}, {9, 0}} {
		arch := c.Target(cc[0], cc[1])
		img, err := c.Compile("gdist_gemm.cu", gemm.Source, arch)
		if err != nil {
			t.Fatalf("NVRTC %d.%d (%s), %s: %v", major, minor, lib, arch, err)
		}
		t.Logf("NVRTC %d.%d: gdist_gemm.cu for %s: %d bytes %s", major, minor, arch, len(img.Data), img.Log)
	}
}

// KeepNext (bf16 through cuBLAS): a Linear's backward products dW = x^T
// dy and dx = dy W^T with dy kept cast between them give the same bits as
// without, cast dy once; a kept copy serves only the next product (dy
// rewritten after it is cast afresh), and a product that does not read
// the named operand keeps nothing.
func TestKeepNext(t *testing.T) {
	const rows, in, out = 9, 7, 12
	x, dy, w := devtest.Vals(40, rows*in, 1), devtest.Vals(41, rows*out, 1), devtest.Vals(42, in*out, 1)
	run := func(e *gemm.Engine, keep bool) (dw, dx []float32) {
		dX, dDY, dW := devtest.Upload(t, dev, x), devtest.Upload(t, dev, dy), devtest.Upload(t, dev, w)
		gw, gx := devtest.Alloc(t, dev, in*out, 4), devtest.Alloc(t, dev, rows*in, 4)
		if keep {
			e.KeepNext(dDY)
		}
		if err := e.MatMul(true, false, in, out, rows, 1, dX, dDY, 0, gw); err != nil {
			t.Fatal(err)
		}
		if err := e.MatMul(false, true, rows, in, out, 1, dDY, dW, 0, gx); err != nil {
			t.Fatal(err)
		}
		// dy rewritten: the next product casts it afresh
		devtest.Put(t, dev, dDY, make([]float32, rows*out))
		g3 := devtest.Alloc(t, dev, rows*in, 4)
		if err := e.MatMul(false, true, rows, in, out, 1, dDY, dW, 0, g3); err != nil {
			t.Fatal(err)
		}
		if err := e.Stream().Synchronize(); err != nil {
			t.Fatal(err)
		}
		for i, v := range devtest.Floats(t, dev, g3, rows*in) {
			if v != 0 {
				t.Fatalf("keep=%v: product of the rewritten (zero) dy [%d] = %v: a stale copy was used", keep, i, v)
			}
		}
		return devtest.Floats(t, dev, gw, in*out), devtest.Floats(t, dev, gx, rows*in)
	}
	plain := engine(t, gemm.Config{Precision: gemm.BF16})
	kept := engine(t, gemm.Config{Precision: gemm.BF16})
	if !kept.CUBLAS() {
		t.Skip(kept.Backend())
	}
	w0, x0 := run(plain, false)
	c0 := plain.Casts()
	w1, x1 := run(kept, true)
	c1 := kept.Casts()
	for i := range w0 {
		if math.Float32bits(w0[i]) != math.Float32bits(w1[i]) {
			t.Fatalf("dW[%d]: %v kept, %v not", i, w1[i], w0[i])
		}
	}
	for i := range x0 {
		if math.Float32bits(x0[i]) != math.Float32bits(x1[i]) {
			t.Fatalf("dx[%d]: %v kept, %v not", i, x1[i], x0[i])
		}
	}
	if c0-c1 != rows*out {
		t.Errorf("values cast: %d without KeepNext, %d with; want %d fewer", c0, c1, rows*out)
	}
	// named, but the next product does not read it: nothing kept
	e := engine(t, gemm.Config{Precision: gemm.BF16})
	a, b, c := devtest.Upload(t, dev, x), devtest.Upload(t, dev, w), devtest.Alloc(t, dev, rows*out, 4)
	e.KeepNext(c)
	if err := e.MatMul(false, false, rows, out, in, 1, a, b, 0, c); err != nil {
		t.Fatal(err)
	}
	before := e.Casts()
	if err := e.MatMul(false, false, rows, out, in, 1, a, b, 0, c); err != nil {
		t.Fatal(err)
	}
	if e.Casts()-before != rows*in+in*out {
		t.Errorf("a product after an unused KeepNext cast %d values, want %d", e.Casts()-before, rows*in+in*out)
	}
}
