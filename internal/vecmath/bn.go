package vecmath

// Batch-norm kernels (nn's BNLayer), in float64 like its loops. Each
// reports whether it ran (false without AVX-512: the caller loops). The
// sums add in a different order from a loop's one running sum (eight
// lanes, several registers): the same to float64 rounding. The
// element-wise kernels do the loops' float64 operations in their order:
// bit for bit the same.

// SumF64 sets *s to the sum of float64(x[i]).
func SumF64(x []float32, s *float64) bool {
	if !HasAVX512 {
		return false
	}
	*s = sumF64Kernel(x)
	return true
}

// SqDevF64 sets *s to the sum of (float64(x[i]) - mu)^2.
func SqDevF64(x []float32, mu float64, s *float64) bool {
	if !HasAVX512 {
		return false
	}
	*s = sqDevF64Kernel(x, mu)
	return true
}

// SumDotF64 sets out to [sum of float64(d[i]), sum of float64(d[i]) *
// float64(e[i])]; e must be at least as long as d.
func SumDotF64(d, e []float32, out *[2]float64) bool {
	if !HasAVX512 {
		return false
	}
	sumDotF64Kernel(d, e[:len(d)], out)
	return true
}

// BNNorm sets, with c = [mu, is, g, b] and xh = (float64(x[i]) - mu) *
// is, out[i] = float32(g*xh + b) and, unless xhat is nil, xhat[i] =
// float32(xh). out and xhat must be at least as long as x.
func BNNorm(x, out, xhat []float32, c *[4]float64) bool {
	if !HasAVX512 {
		return false
	}
	if xhat != nil {
		xhat = xhat[:len(x)]
	}
	bnNormKernel(x, out[:len(x)], xhat, c)
	return true
}

// BNGrad sets, with c = [k, mdy, mdyx], out[i] = float32(k *
// (float64(dy[i]) - mdy - float64(xhat[i])*mdyx)). xhat and out must be
// at least as long as dy.
func BNGrad(dy, xhat, out []float32, c *[3]float64) bool {
	if !HasAVX512 {
		return false
	}
	bnGradKernel(dy, xhat[:len(dy)], out[:len(dy)], c)
	return true
}
