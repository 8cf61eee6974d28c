package rtc_test

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/rtc"
)

func TestMain(m *testing.M) { os.Exit(cudafake.Main(m)) }

func TestRealGPU(t *testing.T) {
	cudafake.RequireReal(t)
	if ok, why := rtc.Available(); !ok {
		t.Fatal(why)
	}
	t.Log(rtc.Info())
}

// testSource holds the kernels of these tests. block_sum and reverse need
// __syncthreads to be a real barrier: run one thread after another, their
// results are wrong.
const testSource = `
#define BLOCK 128

// Each block sums its strided share of x into out[blockIdx.x]: a tree
// reduction in shared memory, a barrier at each level.
extern "C" __global__ void block_sum(const float *__restrict__ x, float *out, int n) {
	__shared__ float s[BLOCK];
	int t = threadIdx.x;
	float v = 0;
	for (int i = blockIdx.x * BLOCK + t; i < n; i += gridDim.x * BLOCK) v += x[i];
	s[t] = v;
	__syncthreads();
	for (int w = BLOCK / 2; w > 0; w >>= 1) {
		if (t < w) s[t] += s[t + w];
		__syncthreads();
	}
	if (t == 0) out[blockIdx.x] = s[0];
}

/* Reverses each block's span of x in place through shared memory (dynamic,
   its size given at launch). */
extern "C" __global__ void reverse(float *x) {
	extern __shared__ float buf[];
	int t = threadIdx.x, base = blockIdx.x * blockDim.x;
	buf[t] = x[base + t];
	__syncthreads();
	x[base + t] = buf[blockDim.x - 1 - t];
}

// Every thread of a 3-D grid of 3-D blocks writes where it is.
extern "C" __global__ void where(int *out) {
	int bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
	int tx = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
	int nt = blockDim.x * blockDim.y * blockDim.z;
	out[bx * nt + tx] = bx * 1000 + tx;
}

// Scalars of each kind, by value.
extern "C" __global__ void scalars(double *out, int a, long long b, float c, double d, unsigned int e) {
	out[0] = a; out[1] = (double)b; out[2] = c; out[3] = d; out[4] = e;
}

// Counts with atomicAdd, and the block's count of odd threads with
// __syncthreads_count.
extern "C" __global__ void counts(int *total, int *odd) {
	atomicAdd(total, 1);
	int c = __syncthreads_count(threadIdx.x & 1);
	if (threadIdx.x == 0) odd[blockIdx.x] = c;
}

// A warp-level sum with shuffles (each warp of 32 lanes), then lane 0
// writes it.
extern "C" __global__ void warp_sum(const float *x, float *out) {
	int t = threadIdx.x;
	float v = x[blockIdx.x * blockDim.x + t];
	for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
	if ((t & 31) == 0) out[(blockIdx.x * blockDim.x + t) / 32] = v;
}

// Math functions map to the device's.
extern "C" __global__ void math_fns(const float *x, float *y, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) y[i] = expf(x[i]) + tanhf(x[i]) + logf(fabsf(x[i]) + 1.0f) + fmaxf(x[i], 0.0f) + rsqrtf(x[i] * x[i] + 1.0f);
}
`

func load(t *testing.T, dev int) *rtc.Module {
	t.Helper()
	cudafake.RequireCUDA(t)
	m, err := rtc.Load(dev, "rtc_test.cu", testSource)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func fn(t *testing.T, m *rtc.Module, name string) *rtc.Function {
	t.Helper()
	f, err := m.Function(name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A block reduction (barriers in a loop) against Go, over several blocks
// and a size that leaves some threads idle.
func TestBlockReduction(t *testing.T) {
	const dev = 0
	m := load(t, dev)
	s := devtest.Stream(t, dev)
	const n, blocks = 1000, 5
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i%17) - 8 + float32(i)/1024
	}
	dx, dout := devtest.Upload(t, dev, x), devtest.Alloc(t, dev, blocks, 4)
	if err := fn(t, m, "block_sum").Launch(s, rtc.Config{Grid: rtc.Dim(blocks), Block: rtc.Dim(128)}, dx, dout, int32(n)); err != nil {
		t.Fatal(err)
	}
	got := devtest.Floats(t, dev, dout, blocks)
	for b := 0; b < blocks; b++ {
		var want, abs float64
		for i := b * 128; i < n; i += blocks * 128 {
			for j := i; j < i+128 && j < n; j++ {
				want += float64(x[j])
				abs += math.Abs(float64(x[j]))
			}
		}
		if d := math.Abs(float64(got[b]) - want); d > 1e-6*abs {
			t.Errorf("block %d: sum %v, want %v", b, got[b], want)
		}
	}
}

// Dynamic shared memory and a barrier between writing and reading it.
func TestSharedMemoryBarrier(t *testing.T) {
	const dev = 0
	m := load(t, dev)
	s := devtest.Stream(t, dev)
	const block, blocks = 96, 3
	x := make([]float32, block*blocks)
	for i := range x {
		x[i] = float32(i)
	}
	dx := devtest.Upload(t, dev, x)
	if err := fn(t, m, "reverse").Launch(s, rtc.Config{Grid: rtc.Dim(blocks), Block: rtc.Dim(block), Shared: block * 4}, dx); err != nil {
		t.Fatal(err)
	}
	got := devtest.Floats(t, dev, dx, len(x))
	for b := 0; b < blocks; b++ {
		for i := 0; i < block; i++ {
			if want := x[b*block+block-1-i]; got[b*block+i] != want {
				t.Fatalf("block %d [%d] = %v, want %v", b, i, got[b*block+i], want)
			}
		}
	}
}

// 3-D grids and blocks: blockIdx, threadIdx, blockDim, gridDim.
func TestGridAndBlock(t *testing.T) {
	const dev = 0
	m := load(t, dev)
	s := devtest.Stream(t, dev)
	grid, block := rtc.Dim3{X: 3, Y: 2, Z: 2}, rtc.Dim3{X: 4, Y: 3, Z: 2}
	nb, nt := 12, 24
	out := devtest.Alloc(t, dev, nb*nt, 4)
	if err := fn(t, m, "where").Launch(s, rtc.Config{Grid: grid, Block: block}, out); err != nil {
		t.Fatal(err)
	}
	got := devtest.Int32s(t, dev, out, nb*nt)
	for b := 0; b < nb; b++ {
		for i := 0; i < nt; i++ {
			if got[b*nt+i] != int32(b*1000+i) {
				t.Fatalf("block %d thread %d wrote %d", b, i, got[b*nt+i])
			}
		}
	}
}

// Scalar arguments of each size arrive intact; a wrong count or size is an
// error before anything runs, naming the kernel and the argument.
func TestArguments(t *testing.T) {
	const dev = 0
	m := load(t, dev)
	s := devtest.Stream(t, dev)
	out := devtest.Alloc(t, dev, 5, 8)
	f := fn(t, m, "scalars")
	cfg := rtc.Config{Grid: rtc.Dim(1), Block: rtc.Dim(1)}
	if err := f.Launch(s, cfg, out, int32(-7), int64(1)<<40, float32(0.25), 1e300, uint32(4000000000)); err != nil {
		t.Fatal(err)
	}
	got := make([]float64, 5)
	raw := devtest.Floats(t, dev, out, 10)
	for i := range got {
		got[i] = math.Float64frombits(uint64(math.Float32bits(raw[2*i])) | uint64(math.Float32bits(raw[2*i+1]))<<32)
	}
	if want := []float64{-7, 1 << 40, 0.25, 1e300, 4000000000}; !equal(got, want) {
		t.Errorf("scalars arrived as %v, want %v", got, want)
	}
	if err := f.Launch(s, cfg, out, int32(1)); err == nil || !strings.Contains(err.Error(), "scalars") {
		t.Errorf("too few arguments: %v", err)
	}
	if err := f.Launch(s, cfg, out, 1, int64(1), float32(0), 1.0, uint32(0)); err == nil || !strings.Contains(err.Error(), "int32") {
		t.Errorf("an int argument: %v; want it refused, asking for int32 or int64", err)
	}
	if n, ok := f.Params(); ok {
		if n != 6 {
			t.Errorf("Params() = %d, want 6", n)
		}
		if err := f.Launch(s, cfg, out, int64(1), int64(1), float32(0), 1.0, uint32(0)); err == nil || !strings.Contains(err.Error(), "argument 1") {
			t.Errorf("an 8-byte argument for a 4-byte parameter: %v", err)
		}
	} else {
		t.Log("the driver cannot say the kernel's parameters (cuFuncGetParamInfo needs CUDA 12.4)")
	}
	if _, err := m.Function("nosuchkernel"); err == nil || !strings.Contains(err.Error(), "nosuchkernel") {
		t.Errorf("a missing kernel: %v", err)
	}
}

func equal(a, b []float64) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

// atomicAdd over several blocks, and __syncthreads_count.
func TestAtomicsAndBarrierCount(t *testing.T) {
	const dev = 0
	m := load(t, dev)
	s := devtest.Stream(t, dev)
	total, odd := devtest.Upload(t, dev, []int32{0}), devtest.Alloc(t, dev, 4, 4)
	if err := fn(t, m, "counts").Launch(s, rtc.Config{Grid: rtc.Dim(4), Block: rtc.Dim(65)}, total, odd); err != nil {
		t.Fatal(err)
	}
	if got := devtest.Int32s(t, dev, total, 1)[0]; got != 260 {
		t.Errorf("atomicAdd counted %d threads, want 260", got)
	}
	for b, c := range devtest.Int32s(t, dev, odd, 4) {
		if c != 32 {
			t.Errorf("block %d: __syncthreads_count = %d, want 32", b, c)
		}
	}
}

// Warp shuffles: lanes exchange values in lockstep rounds.
func TestWarpShuffle(t *testing.T) {
	const dev = 0
	m := load(t, dev)
	s := devtest.Stream(t, dev)
	const block, blocks = 64, 2
	x := make([]float32, block*blocks)
	for i := range x {
		x[i] = float32(i)
	}
	dx, out := devtest.Upload(t, dev, x), devtest.Alloc(t, dev, 4, 4)
	if err := fn(t, m, "warp_sum").Launch(s, rtc.Config{Grid: rtc.Dim(blocks), Block: rtc.Dim(block)}, dx, out); err != nil {
		t.Fatal(err)
	}
	for w, got := range devtest.Floats(t, dev, out, 4) {
		want := float32(0)
		for i := w * 32; i < w*32+32; i++ {
			want += x[i]
		}
		if got != want {
			t.Errorf("warp %d: %v, want %v", w, got, want)
		}
	}
}

// The device's math functions, against Go's to a few ulps.
func TestMathFunctions(t *testing.T) {
	const dev = 0
	m := load(t, dev)
	s := devtest.Stream(t, dev)
	x := []float32{-3, -0.5, 0, 0.25, 1, 2.5}
	dx, dy := devtest.Upload(t, dev, x), devtest.Alloc(t, dev, len(x), 4)
	if err := fn(t, m, "math_fns").Launch(s, rtc.Config{Grid: rtc.Dim(1), Block: rtc.Dim(32)}, dx, dy, int32(len(x))); err != nil {
		t.Fatal(err)
	}
	for i, got := range devtest.Floats(t, dev, dy, len(x)) {
		v := float64(x[i])
		want := math.Exp(v) + math.Tanh(v) + math.Log(math.Abs(v)+1) + math.Max(v, 0) + 1/math.Sqrt(v*v+1)
		if math.Abs(float64(got)-want) > 1e-5*math.Abs(want)+1e-6 {
			t.Errorf("x = %v: %v, want %v", v, got, want)
		}
	}
}

// A compile error is a *rtc.CompileError carrying the compiler's log,
// which names the line.
func TestCompileError(t *testing.T) {
	cudafake.RequireCUDA(t)
	_, err := rtc.Load(0, "broken.cu", "extern \"C\" __global__ void k(float *x) {\n\tx[0] = undefined_name;\n}\n")
	var ce *rtc.CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("Load of a broken kernel: %v; want a *rtc.CompileError", err)
	}
	t.Logf("%v", err)
	if !strings.Contains(ce.Log, "undefined_name") || !strings.Contains(err.Error(), "broken.cu") {
		t.Errorf("the error does not carry the log naming the fault: %v", err)
	}
}

// Compiled images and loaded modules are cached per process; with
// GDIST_KERNEL_CACHE, images also go to disk and are read back.
func TestCache(t *testing.T) {
	cudafake.RequireCUDA(t)
	dir := t.TempDir()
	t.Setenv(rtc.EnvCache, dir)
	const src = "extern \"C\" __global__ void k(float *x) { x[threadIdx.x] += 1.0f; }\n"
	a, err := rtc.Load(0, "cached.cu", src, "-DCACHE_TEST=1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := rtc.Load(0, "cached.cu", src, "-DCACHE_TEST=1")
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Error("the same source, options and device loaded twice")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(files) != 1 {
		t.Fatalf("%s holds %v, want one image", dir, files)
	}
	img, err := rtc.Compile(0, "cached.cu", src, "-DCACHE_TEST=1")
	if err != nil {
		t.Fatal(err)
	}
	if !img.FromDisk && !img.FromMemory {
		t.Error("the second compile was not served from a cache")
	}
	if img.Arch == "" || len(img.Data) == 0 {
		t.Errorf("image %+v", img)
	}
	if cuda.DeviceCount() > 1 {
		c, err := rtc.Load(1, "cached.cu", src, "-DCACHE_TEST=1")
		if err != nil {
			t.Fatal(err)
		}
		if c == a {
			t.Error("one module for two devices")
		}
	}
}

// Kernels run on the stream given, in order with its other work.
func TestRunsOnTheStream(t *testing.T) {
	cudafake.RequireFake(t)
	const dev = 1
	m := load(t, dev)
	s := devtest.Stream(t, dev)
	x := make([]float32, 128)
	x[0] = 5
	dx, out := devtest.Upload(t, dev, x), devtest.Alloc(t, dev, 1, 4)
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	ev := cudafake.NewEvent(t, dev)
	cudafake.Gate(t, false)
	defer cudafake.Gate(t, true)
	if err := s.LaunchHostFunc(cudafake.HoldFunc(t), 0); err != nil {
		t.Fatal(err)
	}
	if err := fn(t, m, "block_sum").Launch(s, rtc.Config{Grid: rtc.Dim(1), Block: rtc.Dim(128)}, dx, out, int32(128)); err != nil {
		t.Fatal(err)
	}
	if err := ev.Record(s); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if done, _ := ev.Query(); done {
		t.Fatal("the kernel ran while its stream was held")
	}
	cudafake.Gate(t, true)
	if err := ev.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if got := devtest.Floats(t, dev, out, 1)[0]; got != 5 {
		t.Fatalf("sum %v, want 5", got)
	}
}

// Loading and launching make the module's device current first: from a
// thread whose current device is 0, nothing runs on device 0.
func TestCallsSetTheDevice(t *testing.T) {
	cudafake.RequireFake(t)
	const dev = 3
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s := devtest.Stream(t, dev)
	out := devtest.Alloc(t, dev, 4, 4)
	cudafake.Malloc(t, 0, 16) // device 0 current on this thread
	cudafake.ResetContexts(t)
	if _, _, err := rtc.Arch(dev); err != nil {
		t.Fatal(err)
	}
	m, err := rtc.Load(dev, "rtc_test.cu", testSource)
	if err != nil {
		t.Fatal(err)
	}
	if err := fn(t, m, "where").Launch(s, rtc.Config{Grid: rtc.Dim(1), Block: rtc.Dim(4)}, out); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	cudafake.OnlyContexts(t, dev)
}

// The fake's emulation refuses what it cannot run as a GPU would: a host
// pointer where the kernel reads device memory.
func TestHostPointerRefused(t *testing.T) {
	cudafake.RequireFake(t)
	m := load(t, 0)
	s := devtest.Stream(t, 0)
	host := make([]float32, 128)
	err := fn(t, m, "reverse").Launch(s, rtc.Config{Grid: rtc.Dim(1), Block: rtc.Dim(128), Shared: 512},
		uintptr(unsafe.Pointer(&host[0])))
	if err == nil {
		t.Fatal("a kernel launched with a pageable host pointer")
	}
	t.Log(err)
}

// A missing NVRTC or driver is a clear error naming what was searched and
// the variable that points at it, wrapping cuda.ErrUnavailable.
func TestMissingLibraries(t *testing.T) {
	cudafake.RequireCUDA(t)
	for _, c := range []struct{ env, lib, what string }{
		{rtc.EnvNVRTC, "/nonexistent/libnvrtc.so.13", "NVRTC"},
		{rtc.EnvDriver, "/nonexistent/libcuda.so.1", "driver"},
	} {
		t.Run(c.what, func(t *testing.T) {
			devtest.UseEnv(t, rtc.Reload, c.env, c.lib)
			ok, why := rtc.Available()
			t.Logf("Available() = %v, %q", ok, why)
			if ok || !strings.Contains(why, c.lib) || !strings.Contains(why, c.env) || !strings.Contains(why, c.what) {
				t.Fatalf("Available() = %v, %q; want false naming %s, %s and %s", ok, why, c.what, c.lib, c.env)
			}
			_, err := rtc.Load(0, "k.cu", "extern \"C\" __global__ void k() {}\n")
			if !errors.Is(err, cuda.ErrUnavailable) || !strings.Contains(err.Error(), c.lib) {
				t.Fatalf("Load: %v; want an error wrapping cuda.ErrUnavailable naming %s", err, c.lib)
			}
		})
	}
}

// The search: NVIDIA's wheels (CUDA 13's, then 12's), then the names.
func TestSearchOrder(t *testing.T) {
	devtest.WheelEnv(t, "nvidia/cu13/lib/libnvrtc.so.13", "nvidia/cuda_nvrtc/lib/libnvrtc.so.12")
	got := rtc.NVRTCWheels()
	if len(got) != 2 || !strings.HasSuffix(got[0], "nvidia/cu13/lib/libnvrtc.so.13") || !strings.HasSuffix(got[1], "nvidia/cuda_nvrtc/lib/libnvrtc.so.12") {
		t.Errorf("NVRTCWheels() = %q", got)
	}
	if strings.Join(rtc.DefaultNVRTC, " ") != "libnvrtc.so.13 libnvrtc.so.12 libnvrtc.so.11.2" {
		t.Errorf("DefaultNVRTC = %q", rtc.DefaultNVRTC)
	}
	if strings.Join(rtc.DefaultDriver, " ") != "libcuda.so.1" {
		t.Errorf("DefaultDriver = %q", rtc.DefaultDriver)
	}
}
