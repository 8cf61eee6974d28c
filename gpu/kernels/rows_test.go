package kernels

import (
	"fmt"
	"math"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/internal/devtest"
)

// The causal softmax and its backward with each row in registers (rows
// of up to 1024) give the bits of the row-in-memory kernels (Sum32's
// order either way): every register width (T up to 64, 128, 256, 512,
// 1024), rows shorter than a chunk of 32, chunks with and without whole
// groups of 8 after them, and rows beyond the width's first row count.
func TestCausalSoftmaxRegisters(t *testing.T) {
	cudafake.RequireCUDA(t)
	const dev = 0
	k, err := Load(dev)
	if err != nil {
		t.Fatal(err)
	}
	s := devtest.Stream(t, dev)
	defer func() { softmaxRegs = true }()
	for _, sh := range [][2]int{{2, 1}, {3, 7}, {2, 33}, {1, 64}, {1, 65}, {1, 100}, {1, 250}, {1, 300}, {1, 520}, {1, 1024}} {
		b, tt := sh[0], sh[1]
		n := b * tt * tt
		sc, dp := devtest.Vals(170, n, 8), devtest.Vals(171, n, 1)
		run := func(regs bool) (p, ds []float32) {
			softmaxRegs = regs
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
					t.Fatalf("%s: T %d (%s): [%d] = %v in registers, %v in memory", what, tt, softmaxKernel("gd_causal_softmax", tt), i, v[0][i], v[1][i])
				}
			}
		}
		t.Log(fmt.Sprintf("T %d: %s, the same bits", tt, softmaxKernel("gd_causal_softmax", tt)))
	}
}
