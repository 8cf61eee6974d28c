package kernels_test

import (
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
)

// The examples' set-up and device buffers (an example has no
// *testing.T for devtest's helpers: these panic on an error).

// load loads the kernels on dev (kernels.Load).
func load(dev int) *kernels.Kernels {
	k, err := kernels.Load(dev)
	if err != nil {
		panic(err)
	}
	return k
}

// newStream is a blocking stream on dev (cuda.NewStream); the caller
// destroys it.
func newStream(dev int) *cuda.Stream {
	s, err := cuda.NewStream(dev, false)
	if err != nil {
		panic(err)
	}
	return s
}

// put copies v to a new buffer on dev (cudaMalloc, then the copy).
func put(dev int, v []float32) uintptr {
	p, err := cuda.Malloc(dev, 4*len(v))
	if err != nil {
		panic(err)
	}
	if err := cuda.CopyHtoD(dev, p, devtest.Bytes(v)); err != nil {
		panic(err)
	}
	return p
}

// get copies n floats at p on dev back to the host.
func get(dev int, p uintptr, n int) []float32 {
	v := make([]float32, n)
	if err := cuda.CopyDtoH(dev, devtest.Bytes(v), p); err != nil {
		panic(err)
	}
	return v
}
