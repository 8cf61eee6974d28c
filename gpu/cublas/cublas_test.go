package cublas_test

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/gpu/cublas"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/internal/devtest"
)

func TestMain(m *testing.M) { os.Exit(cudafake.Main(m)) }

func TestRealGPU(t *testing.T) {
	cudafake.RequireReal(t)
	if ok, why := cublas.Available(); !ok {
		t.Fatal(why)
	}
	t.Log(cublas.Info())
}

// handle makes a handle on dev whose work goes on a new blocking stream.
func handle(t *testing.T, dev int) (*cublas.Handle, *cuda.Stream) {
	t.Helper()
	cudafake.RequireCUDA(t)
	s := devtest.Stream(t, dev)
	h, err := cublas.New(dev, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Error(err)
		}
	})
	return h, s
}

// fill returns n values of a function of (seed, index) in [-1, 1), with
// mantissas that use all 24 bits.
func fill(seed, n int) []float32 {
	v := make([]float32, n)
	x := uint32(seed)*2654435761 + 12345
	for i := range v {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		v[i] = float32(x%(1<<24))/(1<<23) - 1
	}
	return v
}

// refGemm is C = alpha op(A) op(B) + beta C for column-major matrices, in
// float64, with the bound on its rounding error: for each element,
// |alpha| sum_p |a_ip b_pj| + |beta c_ij|.
func refGemm(ta, tb cublas.Op, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int,
	beta float32, c []float32, ldc int) (want, bound []float64) {
	want, bound = make([]float64, len(c)), make([]float64, len(c))
	at := func(i, p int) float64 {
		if ta == cublas.Trans {
			return float64(a[p+i*lda])
		}
		return float64(a[i+p*lda])
	}
	bt := func(p, j int) float64 {
		if tb == cublas.Trans {
			return float64(b[j+p*ldb])
		}
		return float64(b[p+j*ldb])
	}
	for i := range c {
		want[i] = float64(c[i])
	}
	for j := 0; j < n; j++ {
		for i := 0; i < m; i++ {
			var s, abs float64
			for p := 0; p < k; p++ {
				s += at(i, p) * bt(p, j)
				abs += math.Abs(at(i, p) * bt(p, j))
			}
			old := float64(c[i+j*ldc])
			if beta == 0 {
				old = 0 // cuBLAS does not read C when beta is 0
			}
			want[i+j*ldc] = float64(alpha)*s + float64(beta)*old
			bound[i+j*ldc] = math.Abs(float64(alpha))*abs + math.Abs(float64(beta)*old)
		}
	}
	return want, bound
}

// fp32Tol is the relative error allowed of an fp32 GEMM against float64:
// each product and sum rounds once (2^-24 each), over k terms summed in
// any order (cuBLAS splits k), with room for k up to a few thousand.
const fp32Tol = 2e-6

func check(t *testing.T, what string, got []float32, want, bound []float64, tol float64) {
	t.Helper()
	bad := 0
	for i := range got {
		if d := math.Abs(float64(got[i]) - want[i]); d > tol*bound[i]+1e-30 || math.IsNaN(float64(got[i])) {
			if bad++; bad <= 5 {
				t.Errorf("%s: [%d] = %v, want %v (diff %.3g, allowed %.3g)", what, i, got[i], want[i], d, tol*bound[i])
			}
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d of %d elements wrong", what, bad, len(got))
	}
}

var sizes = [][3]int{{1, 1, 1}, {7, 13, 5}, {129, 65, 33}}

// Sgemm at odd sizes with both transposes, leading dimensions larger than
// the rows (the padding must stay untouched), alpha and beta not 0 or 1.
func TestSgemm(t *testing.T) {
	const dev = 0
	h, s := handle(t, dev)
	for _, sz := range sizes {
		m, n, k := sz[0], sz[1], sz[2]
		for _, ta := range []cublas.Op{cublas.NoTrans, cublas.Trans} {
			for _, tb := range []cublas.Op{cublas.NoTrans, cublas.Trans} {
				name := fmt.Sprintf("%dx%dx%d/%v%v", m, n, k, ta, tb)
				ar, ac, br, bc := operandShapes(m, n, k, ta, tb)
				lda, ldb, ldc := ar+3, br+1, m+2
				a, b, c := fill(1, lda*ac), fill(2, ldb*bc), fill(3, ldc*n)
				da, db, dc := devtest.Upload(t, dev, a), devtest.Upload(t, dev, b), devtest.Upload(t, dev, c)
				const alpha, beta = 1.5, -0.75
				if err := h.Sgemm(ta, tb, m, n, k, alpha, da, lda, db, ldb, beta, dc, ldc); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if err := s.Synchronize(); err != nil {
					t.Fatal(err)
				}
				got := devtest.Floats(t, dev, dc, len(c))
				want, bound := refGemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
				check(t, name, got, want, bound, fp32Tol)
				for j := 0; j < n; j++ {
					for i := m; i < ldc; i++ {
						if got[i+j*ldc] != c[i+j*ldc] {
							t.Fatalf("%s: the padding C[%d,%d] changed", name, i, j)
						}
					}
				}
			}
		}
	}
}

// MatMul is the row-major product of our [rows, cols] tensors, against a Go
// loop, for every transpose, at the same sizes.
func TestMatMulRowMajor(t *testing.T) {
	const dev = 0
	h, _ := handle(t, dev)
	for _, sz := range sizes {
		m, n, k := sz[0], sz[1], sz[2]
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				name := fmt.Sprintf("%dx%dx%d/ta=%v,tb=%v", m, n, k, ta, tb)
				a, b, c := fill(4, m*k), fill(5, k*n), fill(6, m*n)
				aAt := func(i, p int) float32 { // op(A) is [m, k]
					if ta {
						return a[p*m+i] // A is [k, m]
					}
					return a[i*k+p]
				}
				bAt := func(p, j int) float32 { // op(B) is [k, n]
					if tb {
						return b[j*k+p] // B is [n, k]
					}
					return b[p*n+j]
				}
				want, bound := make([]float64, m*n), make([]float64, m*n)
				for i := 0; i < m; i++ {
					for j := 0; j < n; j++ {
						var s, abs float64
						for p := 0; p < k; p++ {
							s += float64(aAt(i, p)) * float64(bAt(p, j))
							abs += math.Abs(float64(aAt(i, p)) * float64(bAt(p, j)))
						}
						want[i*n+j] = 2*s + 0.5*float64(c[i*n+j])
						bound[i*n+j] = 2*abs + 0.5*math.Abs(float64(c[i*n+j]))
					}
				}
				da, db, dc := devtest.Upload(t, dev, a), devtest.Upload(t, dev, b), devtest.Upload(t, dev, c)
				if err := h.MatMul(ta, tb, m, n, k, 2, da, db, 0.5, dc); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				check(t, name, devtest.Floats(t, dev, dc, m*n), want, bound, fp32Tol)
			}
		}
	}
}

// With beta 0, C is written without being read (cuBLAS's rule): NaNs in
// it do not survive. With k 0, C becomes beta C.
func TestBetaZeroAndEmpty(t *testing.T) {
	const dev = 0
	h, _ := handle(t, dev)
	nan := float32(math.NaN())
	c := []float32{nan, nan, nan, nan}
	a, b := []float32{1, 2}, []float32{3, 4}
	da, db, dc := devtest.Upload(t, dev, a), devtest.Upload(t, dev, b), devtest.Upload(t, dev, c)
	if err := h.MatMul(false, false, 2, 2, 1, 1, da, db, 0, dc); err != nil {
		t.Fatal(err)
	}
	if got, want := devtest.Floats(t, dev, dc, 4), []float32{3, 4, 6, 8}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("beta 0 over NaNs: %v, want %v", got, want)
	}
	if err := h.MatMul(false, false, 2, 2, 0, 1, da, db, 2, dc); err != nil {
		t.Fatal(err)
	}
	if got, want := devtest.Floats(t, dev, dc, 4), []float32{6, 8, 12, 16}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("k 0, beta 2: %v, want %v", got, want)
	}
	if err := h.MatMul(false, false, 0, 2, 3, 1, da, db, 0, dc); err != nil {
		t.Errorf("m 0: %v", err)
	}
}

// Bad arguments are cuBLAS's CUBLAS_STATUS_INVALID_VALUE, returned at once
// as a *cublas.Error naming the call.
func TestInvalidArguments(t *testing.T) {
	const dev = 0
	h, _ := handle(t, dev)
	d := devtest.Alloc(t, dev, 64, 4)
	for _, c := range []struct {
		name string
		err  error
	}{
		{"lda < m", h.Sgemm(cublas.NoTrans, cublas.NoTrans, 4, 4, 4, 1, d, 3, d, 4, 0, d, 4)},
		{"ldc < m", h.Sgemm(cublas.NoTrans, cublas.NoTrans, 4, 4, 4, 1, d, 4, d, 4, 0, d, 3)},
		{"m < 0", h.Sgemm(cublas.NoTrans, cublas.NoTrans, -1, 4, 4, 1, d, 4, d, 4, 0, d, 4)},
	} {
		var e *cublas.Error
		if !errors.As(c.err, &e) || e.Status != cublas.StatusInvalidValue || !strings.Contains(e.Error(), "cublasSgemm") {
			t.Errorf("%s: %v; want a *cublas.Error with CUBLAS_STATUS_INVALID_VALUE", c.name, c.err)
		}
	}
	if err := h.MatMul(false, false, 1<<31, 1, 1, 1, d, d, 0, d); err == nil || !strings.Contains(err.Error(), "int32") {
		t.Errorf("a size over int32: %v", err)
	}
}

// TF32 (PyTorch's allow_tf32, set_float32_matmul_precision("high")) is off
// by default: fp32 products are exact to fp32 rounding. With it on, the
// inputs keep 10 bits of mantissa: the result moves by up to ~1e-3
// relative. The fake rounds the inputs to TF32 always; a GPU does when
// cuBLAS picks a tensor-core kernel.
func TestTF32(t *testing.T) {
	const dev = 0
	h, _ := handle(t, dev)
	if h.Math() != cublas.DefaultMath {
		t.Fatalf("a new handle's math mode is %v, want the default (no TF32)", h.Math())
	}
	const m, n, k = 64, 64, 64
	a, b := fill(7, m*k), fill(8, k*n)
	da, db, dc := devtest.Upload(t, dev, a), devtest.Upload(t, dev, b), devtest.Alloc(t, dev, m*n, 4)
	want, bound := refGemm(cublas.NoTrans, cublas.NoTrans, m, n, k, 1, a, m, b, k, 0, make([]float32, m*n), m)
	run := func() []float32 {
		if err := h.Sgemm(cublas.NoTrans, cublas.NoTrans, m, n, k, 1, da, m, db, k, 0, dc, m); err != nil {
			t.Fatal(err)
		}
		return devtest.Floats(t, dev, dc, m*n)
	}
	fp32 := run()
	check(t, "default math", fp32, want, bound, fp32Tol)
	if err := h.SetMath(cublas.TF32); err != nil {
		t.Fatal(err)
	}
	tf32 := run()
	check(t, "TF32", tf32, want, bound, 2e-3)
	differ := 0
	for i := range fp32 {
		if fp32[i] != tf32[i] {
			differ++
		}
	}
	t.Logf("TF32 changed %d of %d results", differ, len(fp32))
	if cudafake.Mode() == "fake" && differ == 0 {
		t.Error("TF32 changed no result")
	}
	if p, err := cublas.Float32MatmulPrecision("highest"); err != nil || p != cublas.DefaultMath {
		t.Errorf(`Float32MatmulPrecision("highest") = %v, %v`, p, err)
	}
	if p, err := cublas.Float32MatmulPrecision("high"); err != nil || p != cublas.TF32 {
		t.Errorf(`Float32MatmulPrecision("high") = %v, %v`, p, err)
	}
	if _, err := cublas.Float32MatmulPrecision("fast"); err == nil {
		t.Error(`Float32MatmulPrecision("fast") accepted`)
	}
}

// bf16 rounds a float32 to bfloat16 (round to nearest even), as its bits.
func bf16(x float32) uint16 {
	b := math.Float32bits(x)
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// roundBF16 rounds v to bfloat16 in place (the float32 each bfloat16
// stands for) and returns the bfloat16s.
func roundBF16(v []float32) []uint16 {
	out := make([]uint16, len(v))
	for i := range v {
		out[i] = bf16(v[i])
		v[i] = math.Float32frombits(uint32(out[i]) << 16)
	}
	return out
}

// GemmEx with bfloat16 inputs and float32 output, fp32 accumulation: the
// result is the product of the rounded inputs to fp32 rounding.
func TestGemmExBF16(t *testing.T) {
	const dev = 0
	h, _ := handle(t, dev)
	const m, n, k = 33, 17, 40
	a, b := fill(9, m*k), fill(10, k*n)
	a16, b16 := roundBF16(a), roundBF16(b)
	da, db, dc := devtest.Upload(t, dev, a16), devtest.Upload(t, dev, b16), devtest.Alloc(t, dev, m*n, 4)
	err := h.GemmEx(cublas.NoTrans, cublas.NoTrans, m, n, k, 1,
		cublas.Matrix{Ptr: da, Type: cublas.BF16, LD: m}, cublas.Matrix{Ptr: db, Type: cublas.BF16, LD: k},
		0, cublas.Matrix{Ptr: dc, Type: cublas.F32, LD: m}, cublas.Compute32F)
	if err != nil {
		t.Fatal(err)
	}
	want, bound := refGemm(cublas.NoTrans, cublas.NoTrans, m, n, k, 1, a, m, b, k, 0, make([]float32, m*n), m)
	check(t, "bf16 GemmEx", devtest.Floats(t, dev, dc, m*n), want, bound, fp32Tol)
}

// The GEMM runs on the handle's stream, in order: while the stream is held
// (as by an NCCL kernel waiting for a peer), the product is not done.
func TestRunsOnTheStream(t *testing.T) {
	cudafake.RequireFake(t)
	const dev = 1
	h, s := handle(t, dev)
	a := []float32{2}
	da, dc := devtest.Upload(t, dev, a), devtest.Upload(t, dev, []float32{0})
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	ev := cudafake.NewEvent(t, dev)
	cudafake.Gate(t, false)
	defer cudafake.Gate(t, true)
	if err := s.LaunchHostFunc(cudafake.HoldFunc(t), 0); err != nil {
		t.Fatal(err)
	}
	if err := h.MatMul(false, false, 1, 1, 1, 1, da, da, 0, dc); err != nil {
		t.Fatal(err)
	}
	if err := ev.Record(s); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if done, err := ev.Query(); err != nil || done {
		t.Fatalf("the product finished while its stream was held (done %v, %v)", done, err)
	}
	cudafake.Gate(t, true)
	if err := ev.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if got := devtest.Floats(t, dev, dc, 1); got[0] != 4 {
		t.Fatalf("2*2 = %v", got[0])
	}
}

// Every call makes the handle's device current first (as gpu/cuda's do):
// from a thread whose current device is 0, nothing runs on device 0.
func TestCallsSetTheDevice(t *testing.T) {
	cudafake.RequireFake(t)
	const dev = 3
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	h, _ := handle(t, dev)
	d := devtest.Upload(t, dev, []float32{1, 2, 3, 4})
	p0, err := cuda.Malloc(0, 16) // this thread's device is now 0
	if err != nil {
		t.Fatal(err)
	}
	defer cuda.Free(0, p0)
	cudafake.ResetContexts(t)
	if err := h.SetMath(cublas.TF32); err != nil {
		t.Fatal(err)
	}
	if err := h.MatMul(false, false, 2, 2, 2, 1, d, d, 0, d); err != nil {
		t.Fatal(err)
	}
	h2, err := cublas.New(dev, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := h2.Close(); err != nil {
		t.Fatal(err)
	}
	cudafake.OnlyContexts(t, dev)
}

// A handle's stream must be on its device.
func TestStreamOfAnotherDevice(t *testing.T) {
	cudafake.RequireCUDA(t)
	if cuda.DeviceCount() < 2 {
		t.Skip("needs two devices (a stream of device 1); this machine has one")
	}
	s := devtest.Stream(t, 1)
	if h, err := cublas.New(0, s); err == nil {
		h.Close()
		t.Fatal("a handle on device 0 with a stream of device 1")
	}
}

// A missing cuBLAS is a clear error that names what was searched, as
// cuda.Available's reason does, and wraps cuda.ErrUnavailable.
func TestMissingLibrary(t *testing.T) {
	cudafake.RequireCUDA(t)
	const lib = "/nonexistent/libcublas.so.13"
	devtest.UseEnv(t, cublas.Reload, cublas.EnvLibrary, lib)
	ok, why := cublas.Available()
	t.Logf("Available() = %v, %q", ok, why)
	if ok || !strings.Contains(why, lib) || !strings.Contains(why, cublas.EnvLibrary) {
		t.Fatalf("Available() = %v, %q; want false naming %s and %s", ok, why, lib, cublas.EnvLibrary)
	}
	if !strings.Contains(why, "cuBLAS") {
		t.Errorf("the reason does not say what was missing: %q", why)
	}
	_, err := cublas.New(0, nil)
	if !errors.Is(err, cuda.ErrUnavailable) || !strings.Contains(err.Error(), lib) {
		t.Fatalf("New without cuBLAS: %v; want an error wrapping cuda.ErrUnavailable naming %s", err, lib)
	}
}

// With nothing set, the search lists NVIDIA's wheels (CUDA 13's, then
// 12's) in the Python environments, then the names, each library tried
// named in the reason.
func TestSearchOrder(t *testing.T) {
	root, want := devtest.WheelEnv(t, "nvidia/cu13/lib/libcublas.so.13", "nvidia/cublas/lib/libcublas.so.12")
	got := cublas.WheelLibraries()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("WheelLibraries() = %q, want %q", got, want)
	}
	if fmt.Sprint(cublas.DefaultLibraries) != "[libcublas.so.13 libcublas.so.12 libcublas.so.11]" {
		t.Errorf("DefaultLibraries = %q", cublas.DefaultLibraries)
	}
	cudafake.RequireFake(t)
	// Both wheel files are not libraries: the fake, named last, is not
	// reached by name, so point the names at nothing and check the reason.
	devtest.UseEnv(t, cublas.Reload, cublas.EnvLibrary, "", "VIRTUAL_ENV", root)
	if ok, why := cublas.Available(); ok {
		path, _ := cublas.Loaded()
		t.Logf("a system cuBLAS loaded: %s", path)
	} else {
		for _, w := range want {
			if !strings.Contains(why, w) {
				t.Errorf("the reason does not name %s: %q", w, why)
			}
		}
	}
}

// The wheel's library is found in the environment of a python3 on PATH.
func TestFindsWheel(t *testing.T) {
	cudafake.RequireFake(t)
	root := t.TempDir()
	link := filepath.Join(root, "lib", "python3.12", "site-packages", "nvidia/cu13/lib/libcublas.so.13")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(cudafake.Path(), link); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "python3"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	devtest.UseEnv(t, cublas.Reload, cublas.EnvLibrary, "", "VIRTUAL_ENV", "", "CONDA_PREFIX", "",
		"PATH", filepath.Join(root, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	if path, _ := cublas.Loaded(); path != link {
		_, why := cublas.Available()
		t.Fatalf("loaded %q (%s), want %s", path, why, link)
	}
}

// operandShapes are the rows and columns of A and B as stored (column-major)
// for C (m x n) = op(A) (m x k) op(B) (k x n).
func operandShapes(m, n, k int, ta, tb cublas.Op) (ar, ac, br, bc int) {
	ar, ac, br, bc = m, k, k, n
	if ta == cublas.Trans {
		ar, ac = k, m
	}
	if tb == cublas.Trans {
		br, bc = n, k
	}
	return
}
