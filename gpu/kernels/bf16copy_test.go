package kernels

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/internal/devtest"
)

// bf16Of is gpu/gemm's cast of v to bf16 (round to nearest even, NaN
// kept quiet), as its bits.
func bf16Of(v float32) uint16 {
	u := math.Float32bits(v)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// LayerNormForwardBF16 writes LayerNormForward's fp32 outputs unchanged
// and y's bf16 copy beside them (LayerNormBackwardBF16 dx and its copy,
// with and without dgamma and dbeta: rows of up to 1024 in registers sum
// them in dx's pass, gd_layernorm_backward_cols), the bits gpu/gemm's
// cast gives (what gemm.Engine.Provide serves to the products that read
// y): rows in registers (every width) and in memory, a NaN, ties to even.
func TestLayerNormForwardBF16(t *testing.T) {
	const dev = 0
	k, s := rowsSetup(t, dev)
	for _, sh := range [][2]int{{3, 1}, {5, 7}, {4, 37}, {2, 200}, {2, 768}, {2, 1100}} {
		rows, c := sh[0], sh[1]
		n := rows * c
		x := devtest.Vals(176, n, 3)
		gamma, beta := devtest.Vals(177, c, 1), devtest.Vals(178, c, 1)
		if c > 1 {
			// row 0's y[1] = beta[1] exactly: a tie (halfway between two
			// bf16 values, rounded to even), and a NaN in the last row
			gamma[1], beta[1] = 0, math.Float32frombits(0x3f818000)
			x[n-1] = float32(math.NaN())
		}
		dG, dB := devtest.Upload(t, dev, gamma), devtest.Upload(t, dev, beta)
		for _, regs := range []bool{false, true} {
			rowsInRegisters = regs
			dX := devtest.Upload(t, dev, x)
			run := func(with bool) ([]float32, []uint16) {
				y, xhat, inv := devtest.Alloc(t, dev, n, 4), devtest.Alloc(t, dev, n, 4), devtest.Alloc(t, dev, rows, 4)
				var y16 uintptr
				if with {
					y16 = devtest.Alloc(t, dev, n, 2)
				}
				if err := k.LayerNormForwardBF16(s, y, y16, xhat, inv, dX, dG, dB, rows, c, 1e-5); err != nil {
					t.Fatal(err)
				}
				if err := s.Synchronize(); err != nil {
					t.Fatal(err)
				}
				if !with {
					return devtest.Floats(t, dev, y, n), nil
				}
				return devtest.Floats(t, dev, y, n), halves(t, dev, y16, n)
			}
			y0, _ := run(false)
			y1, h := run(true)
			// backward: dx and its copy
			dY := devtest.Upload(t, dev, devtest.Vals(181, n, 1))
			xhat, inv := devtest.Alloc(t, dev, n, 4), devtest.Alloc(t, dev, rows, 4)
			if err := k.LayerNormForward(s, devtest.Alloc(t, dev, n, 4), xhat, inv, dX, dG, dB, rows, c, 1e-5); err != nil {
				t.Fatal(err)
			}
			dx0, dx1, dx16 := devtest.Alloc(t, dev, n, 4), devtest.Alloc(t, dev, n, 4), devtest.Alloc(t, dev, n, 2)
			dx2, dx216, dgb := devtest.Alloc(t, dev, n, 4), devtest.Alloc(t, dev, n, 2), devtest.Alloc(t, dev, 2*c, 4)
			if err := k.LayerNormBackward(s, dx0, 0, 0, dY, xhat, inv, dG, rows, c, false); err != nil {
				t.Fatal(err)
			}
			if err := k.LayerNormBackwardBF16(s, dx1, dx16, 0, 0, dY, xhat, inv, dG, rows, c, false); err != nil {
				t.Fatal(err)
			}
			if err := k.LayerNormBackwardBF16(s, dx2, dx216, dgb, dgb+uintptr(4*c), dY, xhat, inv, dG, rows, c, false); err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			a := devtest.Floats(t, dev, dx0, n)
			for _, w := range []struct {
				what    string
				dx, d16 uintptr
			}{{"", dx1, dx16}, {" with dgamma and dbeta", dx2, dx216}} {
				b, g := devtest.Floats(t, dev, w.dx, n), halves(t, dev, w.d16, n)
				for i := range a {
					if math.Float32bits(a[i]) != math.Float32bits(b[i]) || g[i] != bf16Of(a[i]) {
						t.Fatalf("C %d backward%s: dx[%d] = %v with the copy (copy %#04x), %v without (want copy %#04x)", c, w.what, i, b[i], g[i], a[i], bf16Of(a[i]))
					}
				}
			}
			for i := range y0 {
				if math.Float32bits(y0[i]) != math.Float32bits(y1[i]) {
					t.Fatalf("C %d (%s): y[%d] = %v with the copy, %v without", c, rowsKernel("gd_layernorm", c), i, y1[i], y0[i])
				}
				if h[i] != bf16Of(y0[i]) {
					t.Fatalf("C %d (%s): y16[%d] = %#04x, want gemm's cast of %v: %#04x", c, rowsKernel("gd_layernorm", c), i, h[i], y0[i], bf16Of(y0[i]))
				}
			}
		}
	}
}

// GELUBF16 and ReLUBF16 write GELU's and ReLU's y unchanged and its
// bf16 copy beside it, the bits gpu/gemm's cast gives (a NaN among the
// values; LayerNorm's test has the tie); their backwards' BF16 forms
// likewise dx and its copy.
func TestActivationsBF16(t *testing.T) {
	const dev = 0
	k, s := rowsSetup(t, dev)
	const n = 1001
	x := devtest.Vals(179, n, 4)
	x[7] = float32(math.NaN())
	dX, dB := devtest.Upload(t, dev, x), devtest.Upload(t, dev, devtest.Vals(180, n+1, 2))
	for _, f := range []struct {
		name  string
		plain func(s *cuda.Stream, y, x uintptr, n int) error
		with  func(s *cuda.Stream, y, y16, x uintptr, n int) error
	}{{"GELU", k.GELU, k.GELUBF16}, {"ReLU", k.ReLU, k.ReLUBF16},
		{"GELUBackward", func(s *cuda.Stream, dx, dy uintptr, n int) error { return k.GELUBackward(s, dx, dy, dX, n) },
			func(s *cuda.Stream, dx, dx16, dy uintptr, n int) error {
				return k.GELUBackwardBF16(s, dx, dx16, dy, dX, n)
			}},
		{"ReLUBackward", func(s *cuda.Stream, dx, dy uintptr, n int) error { return k.ReLUBackward(s, dx, dy, dX, n) },
			func(s *cuda.Stream, dx, dx16, dy uintptr, n int) error {
				return k.ReLUBackwardBF16(s, dx, dx16, dy, dX, n)
			}},
		// 16-byte aligned: float4 accesses (gd_add4)
		{"Add", func(s *cuda.Stream, y, x uintptr, n int) error { return k.Add(s, y, x, dB, n) },
			func(s *cuda.Stream, y, y16, x uintptr, n int) error { return k.AddBF16(s, y, y16, x, dB, n) }},
		// one value off: one a thread (gd_add)
		{"Add unaligned", func(s *cuda.Stream, y, x uintptr, n int) error { return k.Add(s, y, x, dB+4, n) },
			func(s *cuda.Stream, y, y16, x uintptr, n int) error { return k.AddBF16(s, y, y16, x, dB+4, n) }}} {
		y0, y1, y16 := devtest.Alloc(t, dev, n, 4), devtest.Alloc(t, dev, n, 4), devtest.Alloc(t, dev, n, 2)
		if err := f.plain(s, y0, dX, n); err != nil {
			t.Fatal(err)
		}
		if err := f.with(s, y1, y16, dX, n); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		a, b := devtest.Floats(t, dev, y0, n), devtest.Floats(t, dev, y1, n)
		h := halves(t, dev, y16, n)
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("%s: y[%d] = %v with the copy, %v without", f.name, i, b[i], a[i])
			}
			if h[i] != bf16Of(a[i]) {
				t.Fatalf("%s: y16[%d] = %#04x, want gemm's cast of %v: %#04x", f.name, i, h[i], a[i], bf16Of(a[i]))
			}
		}
	}
}

// halves reads n uint16s at p.
func halves(t *testing.T, dev int, p uintptr, n int) []uint16 {
	t.Helper()
	b := make([]byte, 2*n)
	if err := cuda.CopyDtoH(dev, b, p); err != nil {
		t.Fatal(err)
	}
	h := make([]uint16, n)
	for i := range h {
		h[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return h
}
