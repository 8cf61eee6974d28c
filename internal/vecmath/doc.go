// Package vecmath holds the vectorised kernels of nn and optim (and one
// copy of comm/algo's, CopyNT): GELU, the
// AdamW and SGD steps, the fused ReLU + 2x2 max-pool and its gradient,
// im2col and col2im of one plane, float32 sums and bias adds, and batch
// norm's float64 sums and element-wise passes. It exists because a
// package that uses cgo (nn) cannot hold Go assembly. Every kernel runs
// everywhere: nn and optim keep no loops of their own for them.
//
// The layout is internal/reduce's (the reduce kernels of comm/algo):
//
//   - vecmath.go, conv.go, bn.go: the exported kernels and their
//     contracts; each checks its arguments and runs the active set's
//     implementation.
//   - kernels.go: the kernel sets, and the choice of one at start-up:
//     the widest this CPU runs, or the one GDIST_KERNELS=go|avx2|avx512
//     caps it at (cpu.ChooseKernels; for measurements). KernelSet names it.
//   - kernels_go.go: the "go" set, every kernel in portable Go: the
//     reference the assembly reproduces, and the only set on other
//     architectures or with the purego build tag (kernels_other.go).
//   - kernels_amd64.go and the hand-written gelu_amd64.s, gelu512_amd64.s,
//     optim_amd64.s, pool_amd64.s, conv_amd64.s, bn_amd64.s: the "avx2" set (AVX2 and
//     FMA: GELU, AdamW, SGD and Sum32's lanes in assembly, the rest the go
//     set's) and the "avx512" set (every kernel in assembly).
//   - copynt.go, copynt_amd64.go/.s, copynt_other.go: CopyNT, a copy
//     with streaming stores (AVX2 VMOVNTDQ and an SFENCE; a plain copy
//     under 4 KiB, without AVX2 or with purego), for comm/algo's staged
//     all-reduce: the one kernel outside nn and optim, and outside the
//     sets (it has no reference result to differ from); copynt_test.go.
//   - rows.go, rows_amd64.go/.s, rows_other.go: the row kernels of nn's
//     transformer ops (AddTo, Add, Mul, AddMulTo, Dot32, SqDev32, LayerNormRow,
//     LayerNormGradRow, Softmax, SoftmaxGradRow, Exp32; and transpose.go's
//     Transpose, 8 x 8 blocks in registers): each defined by a
//     Go loop in rows.go that AVX2 assembly reproduces bit for bit over the
//     whole groups of 8, used where the active set is avx2 or avx512
//     (rows_test.go).
//   - poolplanes.go, poolplanes_amd64.go/_other.go: PoolReLUArgPlanes
//     and PoolArgGradPlanes, the pooling kernels over whole planes in one
//     call (the avx512 set's rows in one assembly loop in pool_amd64.s,
//     the other sets' row kernels row by row: the same values).
//   - xent.go (its assembly in rows_amd64.s): ExpSubF64, a cross-entropy
//     row's float64 exponentials, math.Exp's amd64 FMA path on 4 lanes,
//     bit for bit (xent_test.go), math.Exp itself outside [-700, 700].
//   - gemm.go, gemm_amd64.go/.s, gemm_other.go: GemmTiles, small matrix
//     products in 8 x 32 AVX-512 tiles (fused multiply-adds in order, then
//     alpha: gemm_test.go checks them bit for bit against that
//     definition), for attention's products, where a BLAS's packing costs
//     more than the arithmetic; it declines (returns false) off avx512 or
//     off its shapes, and the caller uses the BLAS.
//   - kernels_test.go, bn_test.go, conv_test.go, pool_test.go: every set
//     this machine runs, through the exported functions, against each
//     kernel's definition bit for bit, on lengths with and without a
//     partial last vector and with guards around the buffers; fuzz tests
//     of every set against the go set. With -tags purego they test the go
//     set alone.
//
// Every set gives bit for bit the go set's results, NaN payloads aside
// (which NaN comes out of an operation on two differs between the
// assembly's operand order and the one Go's compiler picks). The go set
// follows the assembly where a definition leaves the order open: the
// float64 sums add in its lanes and registers, GELU's fused multiply-adds
// are done exactly (fma32), and a product the assembly rounds before an
// add is converted to float32 in Go, which would otherwise let the
// compiler fuse it on some architectures.
package vecmath
