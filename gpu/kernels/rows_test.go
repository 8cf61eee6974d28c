package kernels

import (
	"fmt"
	"math"
	"testing"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/internal/devtest"
)

// rowsSetup is the kernels and a stream on dev for a test that switches
// rowsInRegisters (back on when t ends).
func rowsSetup(t *testing.T, dev int) (*Kernels, *cuda.Stream) {
	t.Helper()
	cudafake.RequireCUDA(t)
	k, err := Load(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rowsInRegisters = true })
	return k, devtest.Stream(t, dev)
}

// The causal softmax and its backward with each row in registers (rows
// of up to 1024) give the bits of the row-in-memory kernels (Sum32's
// order either way): every register width (T up to 64, 128, 256, 512,
// 1024), rows shorter than a chunk of 32, chunks with and without whole
// groups of 8 after them, and rows beyond the width's first row count.
func TestCausalSoftmaxRegisters(t *testing.T) {
	const dev = 0
	k, s := rowsSetup(t, dev)
	for _, sh := range [][2]int{{2, 1}, {3, 7}, {2, 33}, {1, 64}, {1, 65}, {1, 100}, {1, 250}, {1, 300}, {1, 520}, {1, 1024}} {
		b, tt := sh[0], sh[1]
		n := b * tt * tt
		sc, dp := devtest.Vals(170, n, 8), devtest.Vals(171, n, 1)
		run := func(regs bool) (p, ds []float32) {
			rowsInRegisters = regs
			dS, dDP := devtest.Upload(t, dev, sc), devtest.Upload(t, dev, dp)
			if err := k.CausalSoftmax(s, dS, b*tt, tt); err != nil {
				t.Fatal(err)
			}
			if err := k.CausalSoftmaxBackward(s, dDP, dS, b*tt, tt, 0.3); err != nil {
				t.Fatal(err)
			}
			return devtest.Floats(t, dev, dS, n), devtest.Floats(t, dev, dDP, n)
		}
		p0, ds0 := run(false)
		p1, ds1 := run(true)
		for what, v := range map[string][2][]float32{"p": {p1, p0}, "ds": {ds1, ds0}} {
			for i := range v[0] {
				if math.Float32bits(v[0][i]) != math.Float32bits(v[1][i]) {
					t.Fatalf("%s: T %d (%s): [%d] = %v in registers, %v in memory", what, tt, rowsKernel("gd_causal_softmax", tt), i, v[0][i], v[1][i])
				}
			}
		}
		t.Log(fmt.Sprintf("T %d: %s, the same bits", tt, rowsKernel("gd_causal_softmax", tt)))
	}
}

// LayerNorm's forward and dx with each row in registers give the bits of
// the row-in-memory kernels: every register width (C up to 64, 128, 256,
// 512, 768, 1024), rows shorter than a chunk of 32, partial chunks.
func TestLayerNormRegisters(t *testing.T) {
	const dev = 0
	k, s := rowsSetup(t, dev)
	for _, sh := range [][2]int{{3, 1}, {5, 7}, {4, 37}, {3, 64}, {2, 100}, {2, 200}, {2, 300}, {2, 600}, {2, 768}, {2, 1000}} {
		rows, c := sh[0], sh[1]
		n := rows * c
		x, dy := devtest.Vals(172, n, 3), devtest.Vals(173, n, 1)
		for i := range x {
			x[i] += float32(i%c) * 0.125
		}
		gamma, beta := devtest.Vals(174, c, 1), devtest.Vals(175, c, 1)
		dG, dB := devtest.Upload(t, dev, gamma), devtest.Upload(t, dev, beta)
		run := func(regs bool) [4][]float32 {
			rowsInRegisters = regs
			dX, dDY := devtest.Upload(t, dev, x), devtest.Upload(t, dev, dy)
			y, xhat, inv, dx := devtest.Alloc(t, dev, n, 4), devtest.Alloc(t, dev, n, 4), devtest.Alloc(t, dev, rows, 4), devtest.Alloc(t, dev, n, 4)
			if err := k.LayerNormForward(s, y, xhat, inv, dX, dG, dB, rows, c, 1e-5); err != nil {
				t.Fatal(err)
			}
			if err := k.LayerNormBackward(s, dx, 0, 0, dDY, xhat, inv, dG, rows, c, false); err != nil {
				t.Fatal(err)
			}
			return [4][]float32{devtest.Floats(t, dev, y, n), devtest.Floats(t, dev, xhat, n), devtest.Floats(t, dev, inv, rows), devtest.Floats(t, dev, dx, n)}
		}
		mem, reg := run(false), run(true)
		for o, what := range []string{"y", "xhat", "1/std", "dx"} {
			for i := range mem[o] {
				if math.Float32bits(mem[o][i]) != math.Float32bits(reg[o][i]) {
					t.Fatalf("%s: C %d (%s): [%d] = %v in registers, %v in memory", what, c, rowsKernel("gd_layernorm", c), i, reg[o][i], mem[o][i])
				}
			}
		}
		t.Logf("C %d: %s, the same bits", c, rowsKernel("gd_layernorm", c))
	}
}
