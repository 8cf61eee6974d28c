package kernels

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/internal/devtest"
)

// With y 0, LayerNormForwardBF16, GELUBF16 and BiasGELU write y's bf16
// copy alone (gpu/devmodel keeps no fp32 value of a Linear's input that
// only bf16 products read): the copy, and LayerNorm's xhat and 1/std,
// are the bits they write beside y (rows in registers and in memory;
// BiasGELU with float4 accesses and one value a thread); with neither y
// nor y16 each is refused, naming the problem.
func TestCopyAlone(t *testing.T) {
	const dev = 0
	k, s := rowsSetup(t, dev)
	check := func(what string, want, got []uintptr, sizes []int) {
		t.Helper()
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if !bytes.Equal(bytesAt(t, dev, got[i], sizes[i]), bytesAt(t, dev, want[i], sizes[i])) {
				t.Fatalf("%s: output %d written alone differs from the one written beside y", what, i)
			}
		}
	}
	for _, sh := range [][2]int{{3, 1}, {4, 37}, {2, 768}, {2, 1100}} {
		rows, c := sh[0], sh[1]
		n := rows * c
		dX := devtest.Upload(t, dev, devtest.Vals(401, n, 3))
		dG, dB := devtest.Upload(t, dev, devtest.Vals(402, c, 1)), devtest.Upload(t, dev, devtest.Vals(403, c, 1))
		for _, regs := range []bool{false, true} {
			rowsInRegisters = regs
			var out [2][3]uintptr // y16, xhat, invstd: beside y, alone
			for j, y := range []uintptr{devtest.Alloc(t, dev, n, 4), 0} {
				out[j] = [3]uintptr{devtest.Alloc(t, dev, n, 2), devtest.Alloc(t, dev, n, 4), devtest.Alloc(t, dev, rows, 4)}
				if err := k.LayerNormForwardBF16(s, y, out[j][0], out[j][1], out[j][2], dX, dG, dB, rows, c, 1e-5); err != nil {
					t.Fatal(err)
				}
			}
			check(fmt.Sprintf("LayerNorm %dx%d (%s)", rows, c, rowsKernel("gd_layernorm", c)), out[0][:], out[1][:], []int{2 * n, 4 * n, 4 * rows})
		}
		rowsInRegisters = true
		// GELU over the n values; BiasGELU over rows of c, and of c - 1
		// (one value a thread: gd_bias_gelu) where c is a multiple of 4
		// (float4: gd_bias_gelu4)
		var g [2]uintptr
		for j, y := range []uintptr{devtest.Alloc(t, dev, n, 4), 0} {
			g[j] = devtest.Alloc(t, dev, n, 2)
			if err := k.GELUBF16(s, y, g[j], dX, n); err != nil {
				t.Fatal(err)
			}
		}
		check(fmt.Sprintf("GELU of %d", n), g[:1], g[1:], []int{2 * n})
		for _, cols := range []int{c, c - 1} {
			if cols < 1 {
				continue
			}
			m := rows * cols
			for j, y := range []uintptr{devtest.Alloc(t, dev, m, 4), 0} {
				g[j] = devtest.Alloc(t, dev, m, 2)
				if err := k.BiasGELU(s, y, g[j], dX, dB, rows, cols); err != nil {
					t.Fatal(err)
				}
			}
			check(fmt.Sprintf("BiasGELU %dx%d", rows, cols), g[:1], g[1:], []int{2 * m})
		}
	}
	x := devtest.Alloc(t, dev, 8, 4)
	for _, c := range []struct {
		what string
		err  error
	}{
		{"LayerNorm", k.LayerNormForwardBF16(s, 0, 0, 0, 0, x, x, x, 2, 4, 1e-5)},
		{"GELU", k.GELUBF16(s, 0, 0, x, 8)},
		{"BiasGELU", k.BiasGELU(s, 0, 0, x, x, 2, 4)},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), "neither y nor") {
			t.Errorf("%s with neither y nor y16: %v, want refused naming both", c.what, c.err)
		}
	}
}

// bytesAt reads n bytes at p.
func bytesAt(t *testing.T, dev int, p uintptr, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if err := cuda.CopyDtoH(dev, b, p); err != nil {
		t.Fatal(err)
	}
	return b
}
