package kernels_test

import (
	"fmt"
	"os"

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
