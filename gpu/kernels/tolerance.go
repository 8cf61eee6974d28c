package kernels

// The tolerances the tests hold the kernels to, against float64 references
// (see the package comment for why each is what it is).
const (
	// SumTol bounds the column sums' error (BiasGrad, LayerNorm's
	// dgamma and dbeta) relative to the sum of the magnitudes summed, for
	// up to about 8000 rows: a term meets at most per/8 + 7 + parts
	// roundings of 2^-24 (colSplit's chunks of per rows, parts of them:
	// 71 for 8192 rows of 768 columns, at most about 170 up to 8000 rows).
	SumTol = 1e-5
	// CrossEntropyTol bounds CrossEntropy's error relative to max(1,
	// |loss|), and each element of CrossEntropyBackward's gradient to
	// CrossEntropyTol/rows (for scale 1/rows): float32 exponentials (a
	// few ulps on a GPU), sums over the classes and the rows.
	CrossEntropyTol = 1e-5
)

// GemmTol is the error bound of a float32 sum of k products (a GEMM's
// element, a convolution's, a column's sum), relative to the sum of the
// products' magnitudes: (k+1) roundings of 2^-24 each, whatever the order
// of the sum (cuBLAS splits k; the reductions here sum in trees), plus one
// for alpha or the bias.
func GemmTol(k int) float64 { return float64(k+2) * 0x1p-24 }

// BatchNormULP bounds batch norm's outputs, running statistics and
// gradients in float32 steps from nn's: both compute in float64 with the
// same formulas and round once to float32; only the order of the float64
// sums differs (about 1e-16 relative), which moves a value across a
// float32 rounding boundary rarely, and then by one step.
const BatchNormULP = 1

// GELUTailTol bounds GELU's value and derivative on the elements nn
// computes with its float64 table (the last len%8 of an op's input),
// relative to max(1, |x|) (times |dy| for the gradient): the device's
// float32 formula is vecmath's, a few float32 steps from the exact value.
const GELUTailTol = 1e-6

// SoftmaxTol bounds CausalSoftmax's probabilities relative to the exact
// value: nn's float32 exponential (within about 2 steps of 2^-24), a
// float32 sum and a product.
const SoftmaxTol = 1e-6

// AttentionTol bounds every value of CausalSelfAttention's output and
// gradients on the device against nn's on the CPU path, relative to the
// largest value of its tensor: six products and a softmax in float32
// whose sums run in other orders.
const AttentionTol = 1e-5

// NormTol bounds ClipGradNorm's norm relative to the float64 sum of
// squares in order (train's): float64 sums in another order.
const NormTol = 1e-12

// TanhTol bounds Tanh's output against nn's (chewxy/math32's float32
// tanh), relative to the larger of |y| and 2^-60: both are within a few
// float32 steps of the exact value (CUDA's tanhf within 2 ulp; math32's
// 1 - 2/(e^2x + 1) within a few steps of 1 for large |x|).
const TanhTol = 1e-6
