package nn

import "github.com/gdist/gdist/internal/vecmath"

// geluC is vecmath.GELU's constants, with this package's Mills-ratio fit.
var geluC = vecmath.NewGELUConsts(millsK, millsS)

// geluAsm runs the vectorised GELU over the whole multiples of 8 of x and
// returns how many elements it did.
func geluAsm(y, d, x []float32) int { return vecmath.GELU(y, d, x, geluC) }
