package vecmath

// Batch-norm kernels (nn's BNLayer), in float64. The sums add in the
// assembly's order (eight lanes, several running registers; see
// kernels_go.go), not a loop's one running sum: the same to float64
// rounding. The element-wise kernels do the float64 operations their
// comments state, in that order, with no fused multiply-adds.

// SumF64 is the sum of float64(x[i]).
func SumF64(x []float32) float64 { return active.sumF64(x) }

// SqDevF64 is the sum of (float64(x[i]) - mu)^2.
func SqDevF64(x []float32, mu float64) float64 { return active.sqDevF64(x, mu) }

// SumDotF64 returns the sum of float64(d[i]) and the sum of float64(d[i])
// * float64(e[i]); e must be at least as long as d.
func SumDotF64(d, e []float32) (s, sx float64) { return active.sumDotF64(d, e[:len(d)]) }

// BNNorm sets, with c = [mu, is, g, b] and xh = (float64(x[i]) - mu) *
// is, out[i] = float32(g*xh + b) and, unless xhat is nil, xhat[i] =
// float32(xh). out and xhat must be at least as long as x.
func BNNorm(x, out, xhat []float32, c *[4]float64) {
	if xhat != nil {
		xhat = xhat[:len(x)]
	}
	active.bnNorm(x, out[:len(x)], xhat, c)
}

// BNGrad sets, with c = [k, mdy, mdyx], out[i] = float32(k *
// ((float64(dy[i]) - mdy) - float64(xhat[i])*mdyx)). xhat and out must be
// at least as long as dy.
func BNGrad(dy, xhat, out []float32, c *[3]float64) {
	active.bnGrad(dy, xhat[:len(dy)], out[:len(dy)], c)
}
