package nn

import (
	"fmt"
	"math"
	"math/rand"
	"syscall"
	"testing"

	"gorgonia.org/tensor"
)

// attnRun runs attention forward and backward on (n, t, 3c) input with
// the given block size (and the AVX-512 tiles if tiles), returning the
// output and the input gradient.
func attnRun(t testing.TB, block int, tiles bool, n, tt, c, heads int, qkv, dout []float32) (out, dqkv []float32) {
	t.Helper()
	UseBLAS()
	defer func(b int, tl bool) { attnBlock, attnTiles = b, tl }(attnBlock, attnTiles)
	attnBlock, attnTiles = block, tiles
	op := &attnOp{baseOp: baseOp{nextID(), "attention"}, heads: heads, st: &attnState{}}
	x := tensor.New(tensor.WithShape(n, tt, 3*c), tensor.WithBacking(qkv))
	o, err := op.Do(x)
	if err != nil {
		t.Fatal(err)
	}
	g := &attnGradOp{baseOp: baseOp{nextID(), "attention'"}, fwd: op}
	dy := tensor.New(tensor.WithShape(n, tt, c), tensor.WithBacking(dout))
	d, err := g.Do(x, dy)
	if err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), o.Data().([]float32)...), append([]float32(nil), d.Data().([]float32)...)
}

func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// TestAttentionBlocks: attention that skips the products above the
// diagonal in blocks (attnBlock), and that runs its small products on
// vecmath.GemmTiles (AVX-512, where the shapes fit: heads of 32 or 64,
// T a multiple of the block), gives the unblocked BLAS products' output
// and input gradient within float32 rounding (the skipped terms are
// zeros; the rest may be summed in another order), for block sizes that
// do and do not divide T.
func TestAttentionBlocks(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for _, g := range []struct{ n, c, heads int }{{2, 24, 3}, {2, 128, 2}, {1, 64, 2}} {
		for _, tt := range []int{1, 7, 32, 45, 64, 96} {
			qkv, dout := randVec(rng, g.n*tt*3*g.c), randVec(rng, g.n*tt*g.c)
			wantO, wantD := attnRun(t, tt, false, g.n, tt, g.c, g.heads, qkv, dout)
			for _, block := range []int{1, 5, 8, 16, 32, 64} {
				for _, tiles := range []bool{false, true} {
					gotO, gotD := attnRun(t, block, tiles, g.n, tt, g.c, g.heads, qkv, dout)
					for what, pair := range map[string][2][]float32{"output": {gotO, wantO}, "input gradient": {gotD, wantD}} {
						for i := range pair[0] {
							if d := math.Abs(float64(pair[0][i] - pair[1][i])); d > 1e-5*(1+math.Abs(float64(pair[1][i]))) {
								t.Fatalf("%+v T=%d block %d tiles %v: %s[%d] = %v, unblocked %v", g, tt, block, tiles, what, i, pair[0][i], pair[1][i])
							}
						}
					}
				}
			}
		}
	}
}

// BenchmarkAttention: the gpt-L4-D256-H4-T128 layer's attention at batch
// 32, forward and backward, by block size (128: unblocked).
func BenchmarkAttention(b *testing.B) {
	UseBLAS()
	rng := rand.New(rand.NewSource(3))
	const n, tt, c, heads = 32, 128, 256, 4
	x := tensor.New(tensor.WithShape(n, tt, 3*c), tensor.WithBacking(randVec(rng, n*tt*3*c)))
	dy := tensor.New(tensor.WithShape(n, tt, c), tensor.WithBacking(randVec(rng, n*tt*c)))
	for _, block := range []int{128, 64, 32, 16} {
		b.Run(fmt.Sprint("block", block), func(b *testing.B) {
			defer func(b int) { attnBlock = b }(attnBlock)
			attnBlock = block
			op := &attnOp{baseOp: baseOp{nextID(), "attention"}, heads: heads, st: &attnState{}}
			g := &attnGradOp{baseOp: baseOp{nextID(), "attention'"}, fwd: op}
			c0 := cpuSeconds()
			for i := 0; i < b.N; i++ {
				if _, err := op.Do(x); err != nil {
					b.Fatal(err)
				}
				if _, err := g.Do(x, dy); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric((cpuSeconds()-c0)*1e9/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuSeconds is the process's user and system time (a measure that a busy
// machine disturbs less than the wall clock).
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
