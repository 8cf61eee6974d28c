//go:build !amd64 || purego

package winograd

var useAsm = false

func inputAsm(p *Plan, v []float32, vstride int, x []float32, stride int) { panic("unreachable") }

func outputAsm(p *Plan, y []float32, stride int, mm []float32, mstride int, bias float32) {
	panic("unreachable")
}

func gradOutputAsm(p *Plan, q []float32, qstride int, dy []float32, stride int) { panic("unreachable") }

// SetAsm does nothing here (no assembly kernels) and returns false.
func SetAsm(on bool) bool { return false }

// Vectorized reports false: no assembly kernels here.
func Vectorized() bool { return false }
