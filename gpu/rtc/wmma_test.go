package rtc_test

import (
	_ "embed"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/rtc"
)

// wmmaSource is the warp matrix test kernels: products of 64 x 64 tiles
// by nvcuda::wmma (#include <mma.h>), bf16 and half inputs, float
// accumulators.
//
//go:embed testdata/wmma_gemm.cu
var wmmaSource string

// loadWMMA compiles and loads wmmaSource on device 0, on a GPU of compute
// capability 8.0 or later (bf16 tensor cores) or on the fake.
func loadWMMA(t *testing.T) *rtc.Module {
	t.Helper()
	cudafake.RequireCUDA(t)
	if major, minor, err := rtc.Arch(0); err != nil {
		t.Fatal(err)
	} else if major < 8 {
		t.Skipf("cuda:0 has compute capability %d.%d: bf16 wmma needs 8.0", major, minor)
	}
	m, err := rtc.Load(0, "wmma_gemm.cu", wmmaSource)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// wmmaInputs is n values as 16-bit floats (bf16 when bf is set, else
// half) with full significands (random bits) and magnitudes from 2^-4 to
// 2^2 of either sign, and their values.
func wmmaInputs(seed, n int, bf bool) ([]uint16, []float32) {
	bits, vals := make([]uint16, n), make([]float32, n)
	x := uint32(seed)*2654435761 + 1
	for i := range bits {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		sign, e := uint16(x>>31)<<15, int(x>>8%7)-4 // exponent -4 .. 2
		if bf {
			bits[i] = sign | uint16(127+e)<<7 | uint16(x&0x7f)
			vals[i] = math.Float32frombits(uint32(bits[i]) << 16)
		} else {
			m := x & 0x3ff
			bits[i] = sign | uint16(15+e)<<10 | uint16(m)
			v := float32(math.Ldexp(float64(1024+m), e-10))
			if sign != 0 {
				v = -v
			}
			vals[i] = v
		}
	}
	return bits, vals
}

// TestWMMAGEMM multiplies by wmma (a 64 x 64 tile a block, 4 warps, B
// through shared memory, barriers between): on a GPU its tensor cores, on
// the fake its emulation (gpu/rtc's package comment). Each element of D =
// A B + C is checked against float64 within the bound of any order of
// summation in fp32 whose additions each err by at most 2 ulps (rounding
// or truncation, as tensor cores do): |d - exact| <= K 2^-22 (|c| +
// sum |a b|), the products being exact (bf16 and half significands of 8
// and 11 bits: 22 bits fit a float's 24). On the fake the result is also
// bit for bit the emulation's stated order, d = c + a0 b0 + a1 b1 + ...
// summed one product at a time (rounded to nearest); on a GPU the test logs
// how many elements match that order.
func TestWMMAGEMM(t *testing.T) {
	mod := loadWMMA(t)
	s := devtest.Stream(t, 0)
	for _, c := range []struct {
		kernel  string
		bf      bool
		m, n, k int
		bcol    bool // B column-major (else row-major)
		withC   bool
	}{
		{"wmma_gemm_bf16", true, 64, 64, 64, true, false},
		{"wmma_gemm_bf16", true, 128, 64, 32, true, true},
		{"wmma_gemm_half", false, 64, 128, 48, false, true},
	} {
		t.Run(fmt.Sprintf("%s_%dx%dx%d_c%v", c.kernel, c.m, c.n, c.k, c.withC), func(t *testing.T) {
			ab, av := wmmaInputs(1, c.m*c.k, c.bf)
			bb, bv := wmmaInputs(2, c.k*c.n, c.bf)
			cv := make([]float32, c.m*c.n) // column-major
			if c.withC {
				_, cv = wmmaInputs(3, c.m*c.n, true)
				for i := range cv {
					cv[i] *= 8
				}
			}
			da, db, dd := devtest.Upload(t, 0, ab), devtest.Upload(t, 0, bb), devtest.Alloc(t, 0, c.m*c.n, 4)
			dc := uintptr(0)
			if c.withC {
				dc = devtest.Upload(t, 0, cv)
			}
			err := fn(t, mod, c.kernel).Launch(s, rtc.Config{Grid: rtc.Dim3{X: c.n / 64, Y: c.m / 64}, Block: rtc.Dim(128)},
				da, db, dc, dd, int32(c.m), int32(c.n), int32(c.k))
			if err != nil {
				t.Fatal(err)
			}
			got := devtest.Floats(t, 0, dd, c.m*c.n)
			b := func(p, j int) float32 { // B's row p, column j
				if c.bcol {
					return bv[j*c.k+p]
				}
				return bv[p*c.n+j]
			}
			same, worst := 0, 0.0
			for i := 0; i < c.m; i++ {
				for j := 0; j < c.n; j++ {
					c0 := cv[j*c.m+i]
					model, exact, abs := c0, float64(c0), math.Abs(float64(c0))
					for p := 0; p < c.k; p++ {
						prod := float32(av[i*c.k+p] * b(p, j))
						model += prod
						exact += float64(av[i*c.k+p]) * float64(b(p, j))
						abs += math.Abs(float64(prod))
					}
					d := got[i*c.n+j]
					bound := float64(c.k) * 0x1p-22 * abs
					if e := math.Abs(float64(d) - exact); e > bound {
						t.Fatalf("D[%d][%d] = %v, float64 %v: error %.3g over the bound %.3g", i, j, d, exact, e, bound)
					} else if bound > 0 {
						worst = max(worst, e/bound)
					}
					if math.Float32bits(d) == math.Float32bits(model) {
						same++
					} else if cudafake.Mode() == "fake" {
						t.Fatalf("D[%d][%d] = %v (%#08x), the emulation's order gives %v (%#08x)", i, j, d,
							math.Float32bits(d), model, math.Float32bits(model))
					}
				}
			}
			t.Logf("%s: error at most %.3f of the bound; %d of %d elements bit for bit the fake's order of summation",
				cudafake.Mode(), worst, same, c.m*c.n)
		})
	}
}

// TestWMMAMisuse: on the fake, a warp matrix call that not every lane of
// the warp makes (a divergent call: undefined on a GPU), one in a warp of
// fewer than 32 threads, or one from a pointer that is not 32-byte
// aligned fails the launch, saying why; the same kernels used right run.
func TestWMMAMisuse(t *testing.T) {
	cudafake.RequireFake(t)
	mod := loadWMMA(t)
	s := devtest.Stream(t, 0)
	a := devtest.Upload(t, 0, make([]uint16, 16*16+64))
	d := devtest.Alloc(t, 0, 16*16, 4)
	for _, c := range []struct {
		kernel   string
		block    int
		arg, ret int32
		want     string // "": it runs
	}{
		{"wmma_diverge", 64, 32, 0, ""},
		{"wmma_diverge", 64, 16, 0, "load_matrix_sync (lane 0 of warp 0): lane 16 is not making the same call"},
		{"wmma_diverge", 64, 16, 1, "lanes 0xffff0000 of warp 0 did not call it"},
		{"wmma_diverge", 48, 32, 0, "full warps of 32 threads"},
		{"wmma_offset", 32, 16, 0, ""},
		{"wmma_offset", 32, 8, 0, "16 bytes past a 32-byte boundary"},
	} {
		err := fn(t, mod, c.kernel).Launch(s, rtc.Config{Grid: rtc.Dim(1), Block: rtc.Dim(c.block)}, a, d, c.arg, c.ret)
		if err != nil {
			t.Fatal(err)
		}
		serr := s.Synchronize()
		why := cudafake.KernelFailure(t)
		if c.want == "" {
			if serr != nil || why != "" {
				t.Errorf("%s, block %d, %d %d: %v (%s); want it to run", c.kernel, c.block, c.arg, c.ret, serr, why)
			}
			continue
		}
		if serr == nil || !strings.Contains(why, c.want) || !strings.Contains(why, c.kernel) {
			t.Errorf("%s, block %d, %d %d: synchronize %v, failure %q; want a failed launch saying %q", c.kernel, c.block, c.arg, c.ret, serr, why, c.want)
		}
	}
}

// TestWMMARealNVRTC compiles the warp matrix test kernels with the real
// NVRTC where one is installed (no GPU needed), for sm_80 and sm_90, the
// CUDA include directory found for it (Compiler.Include) on its path, and
// checks with ptxas's report (--ptxas-options=-v) that no kernel spills
// registers.
func TestWMMARealNVRTC(t *testing.T) {
	c, lib := devtest.RealNVRTC(t)
	major, minor := c.Version()
	inc, note := c.Include()
	if inc == nil {
		t.Fatalf("NVRTC %d.%d (%s): %s", major, minor, lib, note)
	}
	t.Logf("NVRTC %d.%d (%s), CUDA headers %v %s", major, minor, lib, inc, note)
	for _, cc := range [][2]int{{8, 0}, {9, 0}} {
		arch := c.Target(cc[0], cc[1])
		var opts []string
		if strings.HasPrefix(arch, "sm_") {
			opts = []string{"--ptxas-options=-v"}
		}
		img, err := c.Compile("wmma_gemm.cu", wmmaSource, arch, opts...)
		if err != nil {
			t.Fatalf("NVRTC %d.%d, %s: %v", major, minor, arch, err)
		}
		if opts == nil {
			t.Logf("%s: PTX (NVRTC %d.%d makes no cubin for it): no ptxas report", arch, major, minor)
			continue
		}
		entries, clean := strings.Count(img.Log, "Compiling entry function"), strings.Count(img.Log, "0 bytes spill stores, 0 bytes spill loads")
		if entries != 5 || clean != entries {
			t.Errorf("%s: %d kernels compiled, %d without spills; want 5 and 5:\n%s", arch, entries, clean, img.Log)
		}
		t.Logf("%s: %d bytes\n%s", arch, len(img.Data), strings.TrimSpace(img.Log))
	}
}

// TestWMMAConversions converts floats to bf16 and half and back
// (cuda_bf16.h's and cuda_fp16.h's __float2bfloat16, __float2half,
// __bfloat162float, __half2float: on a GPU its own, on the fake the
// emulation) against a reference that looks each value up among all
// 16-bit values (nearest, ties to the even one, past the largest finite
// one to infinity): ties, subnormals of each format and of float,
// overflow, signed zeros; a NaN only needs to stay a NaN (a GPU writes
// 0x7fff, the fake keeps the float's payload).
func TestWMMAConversions(t *testing.T) {
	mod := loadWMMA(t)
	s := devtest.Stream(t, 0)
	x := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 1 + 0x1p-8, 1 + 3*0x1p-8, 1 + 0x1p-11, 1 + 3*0x1p-11, 1 + 0x1p-12,
		65504, 65519.996, 65520, -65520, 70000, 0x1p-14, 0x1p-24, 0x1p-25, 3 * 0x1p-25, 0x1p-26, 0x1.8p-24, 6.0975552e-05,
		0x1p-126, 0x1p-127, 0x1p-133, 0x1p-134, 0x1.8p-133, 1e-45, math.MaxFloat32, -3.3961776e38, 3.3961775e38,
		3.3895314e38, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 0.1, -2.7182817, 3.1415927}
	_, r := wmmaInputs(9, 64, true)
	for i, v := range r {
		x = append(x, v*float32(math.Ldexp(1.0000123, i%40-20)))
	}
	n := len(x)
	dx := devtest.Upload(t, 0, x)
	dbf, dh, dbfx, dhx := devtest.Alloc(t, 0, n+1, 2), devtest.Alloc(t, 0, n+1, 2), devtest.Alloc(t, 0, n, 4), devtest.Alloc(t, 0, n, 4)
	if err := fn(t, mod, "wmma_convert").Launch(s, rtc.Config{Grid: rtc.Dim(1), Block: rtc.Dim(256)}, dx, dbf, dh, dbfx, dhx, int32(n)); err != nil {
		t.Fatal(err)
	}
	bfx, hx := devtest.Floats(t, 0, dbfx, n), devtest.Floats(t, 0, dhx, n)
	raw := devtest.Floats(t, 0, dbf, (n+1)/2)
	rawh := devtest.Floats(t, 0, dh, (n+1)/2)
	bits := func(raw []float32, i int) uint16 { return uint16(math.Float32bits(raw[i/2]) >> (16 * (i % 2))) }
	bfTable, hTable := table(0x7f80, bf16Value), table(0x7c00, halfValue)
	for i, v := range x {
		for _, c := range []struct {
			name  string
			got   uint16
			back  float32
			tab   []float64
			value func(uint16) float64
			nan   func(uint16) bool
		}{
			{"bf16", bits(raw, i), bfx[i], bfTable, bf16Value, func(b uint16) bool { return b&0x7f80 == 0x7f80 && b&0x7f != 0 }},
			{"half", bits(rawh, i), hx[i], hTable, halfValue, func(b uint16) bool { return b&0x7c00 == 0x7c00 && b&0x3ff != 0 }},
		} {
			if v != v {
				if !c.nan(c.got) || c.back == c.back {
					t.Errorf("%s(NaN) = %#04x, back %v; want a NaN", c.name, c.got, c.back)
				}
				continue
			}
			want := nearest(v, c.tab)
			back := c.value(want) * sign(want)
			if int(want&0x7fff) == len(c.tab)-1 {
				back = math.Inf(int(sign(want)))
			}
			if c.got != want || float64(c.back) != back {
				t.Errorf("%s(%g) = %#04x, back %v; want %#04x (%v)", c.name, v, c.got, c.back, want, back)
			}
		}
	}
}

func sign(b uint16) float64 {
	if b&0x8000 != 0 {
		return -1
	}
	return 1
}

// bf16Value and halfValue are the magnitude of a bf16 or half (bits of
// an infinity: the power of two past the largest finite value).
func bf16Value(b uint16) float64 {
	e, m := int(b>>7&0xff), float64(b&0x7f)
	if e == 0 {
		return math.Ldexp(m, -133)
	}
	return math.Ldexp(128+m, e-134)
}

func halfValue(b uint16) float64 {
	e, m := int(b>>10&0x1f), float64(b&0x3ff)
	if e == 0 {
		return math.Ldexp(m, -24)
	}
	return math.Ldexp(1024+m, e-25)
}

// table is the magnitudes of bits 0 .. last (last: infinity).
func table(last uint16, value func(uint16) float64) []float64 {
	out := make([]float64, last+1)
	for b := range out {
		out[b] = value(uint16(b))
	}
	return out
}

// nearest is v's 16-bit value in tab's format: the nearest magnitude, a
// tie to the even bits, infinity (tab's last) past the largest finite
// value by half its ulp or more, with v's sign.
func nearest(v float32, tab []float64) uint16 {
	a := math.Abs(float64(v))
	var b uint16
	if a >= tab[len(tab)-1] {
		b = uint16(len(tab) - 1)
	} else {
		i := sort.SearchFloat64s(tab, a) // tab[i-1] < a <= tab[i]
		switch {
		case tab[i] == a || i == 0:
			b = uint16(i)
		case a-tab[i-1] < tab[i]-a:
			b = uint16(i - 1)
		case a-tab[i-1] > tab[i]-a:
			b = uint16(i)
		case i%2 == 0:
			b = uint16(i)
		default:
			b = uint16(i - 1)
		}
	}
	if math.Signbit(float64(v)) {
		b |= 0x8000
	}
	return b
}
