package kernels_test

import (
	"bytes"
	"fmt"
	"math"
	"testing"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/internal/devtest"
)

// fusedShapes: one chunk of rows and several (the column sums in two
// stages, the last chunk short), columns not a multiple of 4 (one value
// a thread) or of 32, a multiple of 4 (float4), fewer rows than lanes.
var fusedShapes = [][2]int{{1, 1}, {7, 13}, {3, 70}, {65, 40}, {300, 36}, {1000, 33}}

// raw reads n bytes at p.
func raw(t *testing.T, dev int, p uintptr, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if err := cuda.CopyDtoH(dev, b, p); err != nil {
		t.Fatal(err)
	}
	return b
}

// The fused bias + GELU and its backward fused with the bias gradient
// (what gpu/devmodel runs for a Linear followed by a GELU) give the
// unfused kernels' bits: BiasAdd then GELUBF16 forward, GELUBackwardBF16
// then BiasGrad backward (set and accumulated), the bf16 copies too, and
// leave the product x as it was; special values (0, -0, +-Inf, NaN,
// beyond the clamp) in x.
func TestFusedBiasGELU(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	for _, sh := range fusedShapes {
		rows, cols := sh[0], sh[1]
		n := rows * cols
		x, b, dy, old := devtest.Vals(301, n, 4), devtest.Vals(302, cols, 1), devtest.Vals(303, n, 1), devtest.Vals(304, cols, 1)
		copy(x, []float32{0, float32(math.Copysign(0, -1)), -30, 30, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), -9.5, 7})
		dX, dB, dDY := devtest.Upload(t, dev, x), devtest.Upload(t, dev, b), devtest.Upload(t, dev, dy)
		for _, acc := range []bool{false, true} {
			what := fmt.Sprintf("%dx%d accumulate=%v", rows, cols, acc)
			// unfused: the Linear's bias add in place, GELU, GELU's
			// backward, the bias gradient
			xb := devtest.Upload(t, dev, x)
			y1, y161 := devtest.Alloc(t, dev, n, 4), devtest.Alloc(t, dev, n, 2)
			dx1, dx161, db1 := devtest.Alloc(t, dev, n, 4), devtest.Alloc(t, dev, n, 2), devtest.Upload(t, dev, old)
			if err := k.BiasAdd(s, xb, dB, rows, cols); err != nil {
				t.Fatal(err)
			}
			if err := k.GELUBF16(s, y1, y161, xb, n); err != nil {
				t.Fatal(err)
			}
			if err := k.GELUBackwardBF16(s, dx1, dx161, dDY, xb, n); err != nil {
				t.Fatal(err)
			}
			if err := k.BiasGrad(s, db1, dx1, rows, cols, acc); err != nil {
				t.Fatal(err)
			}
			// fused
			y2, y162 := devtest.Alloc(t, dev, n, 4), devtest.Alloc(t, dev, n, 2)
			dx2, dx162, db2 := devtest.Alloc(t, dev, n, 4), devtest.Alloc(t, dev, n, 2), devtest.Upload(t, dev, old)
			if err := k.BiasGELU(s, y2, y162, dX, dB, rows, cols); err != nil {
				t.Fatal(err)
			}
			if err := k.BiasGELUBackward(s, dx2, dx162, db2, dDY, dX, dB, rows, cols, acc); err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			same(t, what+": y", devtest.Floats(t, dev, y2, n), devtest.Floats(t, dev, y1, n))
			same(t, what+": dx", devtest.Floats(t, dev, dx2, n), devtest.Floats(t, dev, dx1, n))
			same(t, what+": dbias", devtest.Floats(t, dev, db2, cols), devtest.Floats(t, dev, db1, cols))
			same(t, what+": x after", devtest.Floats(t, dev, dX, n), x)
			if !bytes.Equal(raw(t, dev, y162, 2*n), raw(t, dev, y161, 2*n)) || !bytes.Equal(raw(t, dev, dx162, 2*n), raw(t, dev, dx161, 2*n)) {
				t.Errorf("%s: the bf16 copies differ from GELUBF16's and GELUBackwardBF16's", what)
			}
			// no copies, no bias gradient, dx in place of dy
			dyIn := devtest.Upload(t, dev, dy)
			if err := k.BiasGELU(s, y2, 0, dX, dB, rows, cols); err != nil {
				t.Fatal(err)
			}
			if err := k.BiasGELUBackward(s, dyIn, 0, 0, dyIn, dX, dB, rows, cols, acc); err != nil {
				t.Fatal(err)
			}
			same(t, what+": y without a copy", devtest.Floats(t, dev, y2, n), devtest.Floats(t, dev, y1, n))
			same(t, what+": dx in place", devtest.Floats(t, dev, dyIn, n), devtest.Floats(t, dev, dx1, n))
		}
	}
	if err := k.BiasGELU(s, 256, 0, 256, 512, 2, 2); err == nil {
		t.Error("BiasGELU with y = x: no error")
	}
}

// The Residual's add with the bias of the Linear that ends its function
// gives BiasAdd then Add's bits; in place into x too.
func TestFusedBiasResidual(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	for _, sh := range fusedShapes {
		rows, cols := sh[0], sh[1]
		n := rows * cols
		x, f, b := devtest.Vals(311, n, 2), devtest.Vals(312, n, 2), devtest.Vals(313, cols, 1)
		copy(f, []float32{float32(math.Inf(1)), float32(math.NaN()), float32(math.Copysign(0, -1))})
		dX, dF, dB := devtest.Upload(t, dev, x), devtest.Upload(t, dev, f), devtest.Upload(t, dev, b)
		fb, y1 := devtest.Upload(t, dev, f), devtest.Alloc(t, dev, n, 4)
		if err := k.BiasAdd(s, fb, dB, rows, cols); err != nil {
			t.Fatal(err)
		}
		if err := k.Add(s, y1, dX, fb, n); err != nil {
			t.Fatal(err)
		}
		y2 := devtest.Alloc(t, dev, n, 4)
		if err := k.BiasAddResidual(s, y2, dX, dF, dB, rows, cols); err != nil {
			t.Fatal(err)
		}
		want := devtest.Floats(t, dev, y1, n)
		what := fmt.Sprintf("%dx%d", rows, cols)
		same(t, what+": y", devtest.Floats(t, dev, y2, n), want)
		same(t, what+": f after", devtest.Floats(t, dev, dF, n), f)
		if err := k.BiasAddResidual(s, dX, dX, dF, dB, rows, cols); err != nil {
			t.Fatal(err)
		}
		same(t, what+": in place", devtest.Floats(t, dev, dX, n), want)
	}
}

// ExampleKernels_BiasGELU runs a Linear's bias and the GELU after it in
// one pass (forward), and GELU's backward with the bias's gradient in
// one pass (backward), as gpu/devmodel does for a Linear followed by a
// GELU.
func ExampleKernels_BiasGELU() {
	if cudafake.Mode() == "none" {
		fmt.Println("[-0.1587 0.0000 1.9545 1.9545 -0.0455 1.3998] [1.0019 0.4148 2.2127]") // no CUDA here: what it prints with one
		return
	}
	const dev, rows, cols = 0, 2, 3
	k := load(dev)
	x := put(dev, []float32{-1, 0, 1, 2, -2, 0.5}) // the product x W, (2, 3)
	b := put(dev, []float32{0, 0, 1})              // the bias
	dy := put(dev, []float32{1, 1, 1, 1, 1, 1})
	y, dx, db := put(dev, make([]float32, 6)), put(dev, make([]float32, 6)), put(dev, make([]float32, 3))
	if err := k.BiasGELU(nil, y, 0, x, b, rows, cols); err != nil { // y = GELU(x + b)
		panic(err)
	}
	// dx = dy GELU'(x + b); db = dx's column sums
	if err := k.BiasGELUBackward(nil, dx, 0, db, dy, x, b, rows, cols, false); err != nil {
		panic(err)
	}
	fmt.Printf("%.4f %.4f\n", get(dev, y, 6), get(dev, db, 3))
	// Output: [-0.1587 0.0000 1.9545 1.9545 -0.0455 1.3998] [1.0019 0.4148 2.2127]
}
