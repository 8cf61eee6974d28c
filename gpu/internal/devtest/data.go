package devtest

import "math"

// Vals returns n values of a function of (seed, index) in [-scale, scale).
func Vals(seed, n int, scale float32) []float32 {
	v := make([]float32, n)
	x := uint32(seed)*2654435761 + 777
	for i := range v {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		v[i] = (float32(x%(1<<24))/(1<<23) - 1) * scale
	}
	return v
}

// Images is batch number i of a task a classifier learns in a few steps:
// samples of in pixels in [0, 1), and the tenth of a sample's pixels that
// its label (of 10) names brighter by 1.
func Images(i, batch, in int) ([]float32, []int32) {
	x := Vals(100+i, batch*in, 0.5)
	y := make([]int32, batch)
	for j := range y {
		y[j] = int32((j*31 + i*7) % 10)
		for p := 0; p < in; p++ {
			x[j*in+p] += 0.5
			if p*10/in == int(y[j]) {
				x[j*in+p]++
			}
		}
	}
	return x, y
}

// ClipGrads is train's clipGrads on one rank, on the host: the float64
// norm of g, returned, and every gradient times float32(max / (norm +
// 1e-6)) when that is below 1 and the norm finite
// (torch.nn.utils.clip_grad_norm_).
func ClipGrads(g []float32, max float64) float64 {
	var ss float64
	for _, v := range g {
		ss += float64(v) * float64(v)
	}
	norm := math.Sqrt(ss)
	if coef := max / (norm + 1e-6); coef < 1 && !math.IsInf(norm, 0) && !math.IsNaN(norm) {
		f := float32(coef)
		for i := range g {
			g[i] *= f
		}
	}
	return norm
}
