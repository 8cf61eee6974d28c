// Package winograd holds the tile transforms of Winograd's minimal
// filtering algorithms F(2x2, 3x3) and F(4x4, 3x3) (Lavin and Gray, "Fast
// Algorithms for Convolutional Neural Networks", 2015) for 3x3, stride-1,
// pad-1 convolutions of NCHW float32 planes, in AVX-512 assembly where the
// CPU has it and in Go everywhere. It does no matrix products: nn strings
// the transforms around OpenBLAS's sgemm (nn/winograd.go). It is its own
// package because a package that uses cgo (nn) cannot hold Go assembly.
//
// With output tiles of m x m (m = 2 or 4) and input tiles of a x a (a =
// m+2) overlapping by 2, one convolution of an image is, per tile,
//
//	Y = A^T [ (G g G^T) . (B^T d B) ] A
//
// (g the 3x3 filter, d the input tile, . the element-wise product) and,
// summed over input channels, the element-wise products become a*a
// matrix products over all tiles at once, which is where the arithmetic
// goes. The transforms lay a chunk of Plan.N images out as a*a matrices
// of one row per channel and one column per tile ("tile p" is tile (ty,
// tx) of image s, p = s*TH*TW + ty*TW + tx), each row Plan.PP (P rounded
// up to 16) long. The assembly kernels work on 16 tiles a register (their
// layout: Plan.QW), the Go ones a tile at a time.
//
// The layout is internal/reduce's (the reduce kernels of comm/algo):
//
//   - winograd.go: Plan (a chunk's geometry, the assembly's tables and
//     scratch) and its transforms Input, Output and GradOutput, which
//     check their arguments and run the active kernel set; Filter and
//     FilterGrad (small, in float64, Go only).
//   - kernels.go: the kernel sets and the choice of one at start-up: the
//     widest this CPU runs, or the one GDIST_KERNELS=go|avx2|avx512 caps
//     it at (cpu.ChooseKernels; "avx2" means the go set here). KernelSet
//     names it; Vectorized reports whether it is assembly (nn uses
//     Winograd only then); SetAsm switches, for tests and benchmarks.
//   - kernels_go.go: the "go" set, the transforms a tile at a time in
//     portable Go: the reference of the assembly, and the only set on
//     other architectures or with the purego build tag (kernels_other.go).
//   - kernels_amd64.go, kernels_amd64.s: the "avx512" set, 16 tiles a
//     register (hand-written assembly). It does the go set's sums with
//     fused multiply-adds and in another order: equal to float32
//     rounding, not bit for bit.
//   - kernels_test.go: the go set against the transforms' definitions in
//     float64 (wgref: the paper's matrices, shared with nn's Winograd
//     tests), every set against the go set on planes from 1x1 up, chunks
//     of several images, every output written and nothing past it; a
//     fuzz test of the same over arbitrary sizes and values. With -tags
//     purego they test the go set alone. kernels_bench_test.go times the
//     transforms and Filter.
package winograd
