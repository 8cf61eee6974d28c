package nn

import (
	"math"

	"github.com/gdist/gdist/internal/vecmath"
)

// geluC is vecmath.GELU's constants: see vecmath.GELUConsts for the order.
var geluC = func() *vecmath.GELUConsts {
	vals := []float32{
		math.Float32frombits(0x7fffffff), // |x| mask
		20,                               // |x| clamp: Phi(-20) is 0 in float32
		-0.5,
		-87, // e^-87: the float32 range's end
		math.Log2E,
		0.693359375,   // ln 2, leading bits (n ln2hi is exact)
		-2.1219444e-4, // ln 2 - ln2hi
		1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5,
		1,
		math.Float32frombits(127), // exponent bias, as an int32
		0.5,
		millsK,
	}
	for _, s := range millsS {
		vals = append(vals, float32(s))
	}
	vals = append(vals, invSqrt2Pi)
	c := new(vecmath.GELUConsts)
	if len(vals) != len(c) {
		panic("nn: gelu constants")
	}
	for i, v := range vals {
		for j := range c[i] {
			c[i][j] = v
		}
	}
	return c
}()

// useGELUAsm reports whether geluAsm runs here.
func useGELUAsm() bool { return vecmath.HasAVX2FMA }

// geluAsm runs the vectorised GELU over the whole multiples of 8 of x and
// returns how many elements it did (0 where it does not run).
func geluAsm(y, d, x []float32) int { return vecmath.GELU(y, d, x, geluC) }
