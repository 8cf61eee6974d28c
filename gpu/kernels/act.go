package kernels

import "github.com/gdist/gdist/gpu/cuda"

// GELU sets y = x Phi(x) (nn's GELU: the exact form, Phi the standard
// normal CDF) over n elements, bit for bit what nn computes with
// vecmath's kernel (its float32 Mills-ratio formula, nn's constants,
// fused multiply-adds where it fuses): nn's output wherever nn uses the
// kernel (all but the last len%8 of an op's input, where nn's float64
// table is within GELUTailTol). y may be x.
func (k *Kernels) GELU(s *cuda.Stream, y, x uintptr, n int) error {
	if err := sizeErr("GELU", "n", n); err != nil || n == 0 {
		return err
	}
	return k.launch("gd_gelu", s, grid(n), y, x, int64(n))
}

// GELUBackward sets dx = dy gelu'(x), the derivative Phi(x) + x phi(x)
// computed again from GELU's input x as GELU computes it (nn keeps it
// from the forward pass: the same bits). dx may be dy.
func (k *Kernels) GELUBackward(s *cuda.Stream, dx, dy, x uintptr, n int) error {
	if err := sizeErr("GELUBackward", "n", n); err != nil || n == 0 {
		return err
	}
	return k.launch("gd_gelu_backward", s, grid(n), dx, dy, x, int64(n))
}
