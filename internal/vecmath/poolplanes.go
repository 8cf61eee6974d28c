package vecmath

import "fmt"

// Whole planes of the fused ReLU + 2x2 max-pool (PoolReLUArg) and its
// gradient (PoolArgGrad): one call for every row of many planes, where
// the row kernels cost a call (and its checks) per output row — 7 or 14
// outputs at the cnn's planes, where the calls cost as much as the
// pooling. The values are the row kernels' bit for bit: the avx512 set
// runs the same pooling code over every row in one assembly loop
// (pool_amd64.s), the other sets their row kernel row by row.

// PoolReLUArgPlanes is PoolReLUArg over every output row of planes planes
// of h x w one after another in x (h and w even, w at least 2): output
// row oy of plane p, from input rows 2oy and 2oy+1, goes to y and arg at
// (p*(h/2) + oy)*(w/2). y and arg must hold planes*(h/2)*(w/2) values.
func PoolReLUArgPlanes(x []float32, planes, h, w int, y []float32, arg []uint8) {
	ho, wo := checkPoolPlanes("PoolReLUArgPlanes", len(x), planes, h, w, len(y), len(arg))
	if planes == 0 {
		return
	}
	if poolPlanesAsm() {
		poolReLUArgPlanesAVX512(&x[0], &y[0], &arg[0], planes, ho, wo, w, h*w)
		return
	}
	o := 0
	for p := 0; p < planes; p++ {
		for oy := 0; oy < ho; oy++ {
			r0 := p*h*w + 2*oy*w
			active.poolReLUArg(x[r0:r0+w], x[r0+w:r0+2*w], y[o:o+wo], arg[o:o+wo])
			o += wo
		}
	}
}

// PoolArgGradPlanes is PoolArgGrad over the rows PoolReLUArgPlanes pools:
// it writes every element of dx (planes planes of h x w, h and w even)
// from the gradient dy of the pooled output and its arg.
func PoolArgGradPlanes(arg []uint8, dy []float32, planes, h, w int, dx []float32) {
	ho, wo := checkPoolPlanes("PoolArgGradPlanes", len(dx), planes, h, w, len(dy), len(arg))
	if planes == 0 {
		return
	}
	if poolPlanesAsm() {
		poolArgGradPlanesAVX512(&arg[0], &dy[0], &dx[0], planes, ho, wo, w, h*w)
		return
	}
	o := 0
	for p := 0; p < planes; p++ {
		for oy := 0; oy < ho; oy++ {
			r0 := p*h*w + 2*oy*w
			active.poolArgGrad(arg[o:o+wo], dy[o:o+wo], dx[r0:r0+w], dx[r0+w:r0+2*w])
			o += wo
		}
	}
}

// checkPoolPlanes panics unless planes planes of h x w (h, w even and
// positive) fit in n inputs and the pooled ones in ny values and na codes;
// it returns the pooled plane's size.
func checkPoolPlanes(what string, n, planes, h, w, ny, na int) (ho, wo int) {
	ho, wo = h/2, w/2
	if planes < 0 || h < 2 || w < 2 || h%2 != 0 || w%2 != 0 || n < planes*h*w || ny < planes*ho*wo || na < planes*ho*wo {
		panic(fmt.Sprintf("vecmath: %s: %d planes of %dx%d (even sides) in %d values, %d pooled values and %d codes", what, planes, h, w, n, ny, na))
	}
	return ho, wo
}
