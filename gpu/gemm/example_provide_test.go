package gemm_test

import (
	"encoding/binary"
	"fmt"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/gemm"
)

// A producer that wrote x's bf16 copy beside x (here the host, as
// gpu/kernels' LayerNormForwardBF16 does on the device) gives it to the
// engine: the forward product x W and the weight gradient's x^T dy read
// it, and nothing of x is cast.
func ExampleEngine_Provide() {
	if cudafake.Mode() == "none" {
		// no CUDA here: what it prints with one
		fmt.Println("x W and x^T dy: 16 values cast without x's copy, 8 with (W and dy)")
		return
	}
	e, err := gemm.New(0, nil, gemm.Config{Precision: gemm.BF16, NoWeightCache: true})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	up := func(b []byte) uintptr {
		p, err := cuda.Malloc(0, len(b))
		if err != nil {
			panic(err)
		}
		if err := cuda.CopyHtoD(0, p, b); err != nil {
			panic(err)
		}
		return p
	}
	xs := []float32{1, 2, 3, 4} // [2, 2]
	x16 := make([]byte, 2*len(xs))
	for i, v := range xs {
		binary.LittleEndian.PutUint16(x16[2*i:], bf16Bits(v)) // the engine's rounding
	}
	x, w, dy := up(bytes(xs)), up(bytes([]float32{1, 0, 0, 1})), up(bytes([]float32{1, 1, 1, 1}))
	y, dw := up(make([]byte, 16)), up(make([]byte, 16))
	products := func() int64 {
		before := e.Casts()
		if err := e.MatMul(false, false, 2, 2, 2, 1, x, w, 0, y); err != nil { // y = x W
			panic(err)
		}
		if err := e.MatMul(true, false, 2, 2, 2, 1, x, dy, 0, dw); err != nil { // dW = x^T dy
			panic(err)
		}
		return e.Casts() - before
	}
	without := products()
	if err := e.Provide(x, up(x16), 2, 2); err != nil {
		panic(err)
	}
	with := products()
	e.Withdraw(x)
	if !e.UsesCopies() { // the tiled kernel rounds as it reads: no casts
		without, with = 16, 8
	}
	fmt.Printf("x W and x^T dy: %d values cast without x's copy, %d with (W and dy)\n", without, with)
	// Output:
	// x W and x^T dy: 16 values cast without x's copy, 8 with (W and dy)
}
