package gemm

import (
	"fmt"
	"os"
)

// EnvBF16Cast chooses, where Config.BF16Cast is empty, where bf16
// autocast rounds the products' operands: "kernel" (the default) or
// "cublas".
const EnvBF16Cast = "GDIST_BF16_CAST"

// BF16Cast is where bf16 autocast rounds the fp32 operands of a product
// through cuBLAS to bf16.
type BF16Cast string

const (
	// CastKernel (the default): gdist's cast kernel writes a bf16 copy
	// of each operand (weights once per change, into the weight cache;
	// the rest for each product, or for two with KeepNext), which
	// cublasGemmEx reads with CUDA_R_16BF inputs: every input of every
	// product is rounded to bf16 (round to nearest even), as PyTorch's
	// autocast does. Each value cast moves 6 bytes (CastStats).
	CastKernel BF16Cast = "kernel"
	// CastInCUBLAS: no casts. cublasGemmEx reads the fp32 operands with
	// the compute type CUBLAS_COMPUTE_32F_FAST_16BF ("inputs may be
	// rounded to bf16"): cuBLAS rounds them as it loads its tiles, on
	// the tensor cores, fp32 accumulation and output. No scratch, no
	// cache, no cast pass; the products read 4 bytes a value instead of
	// 2, mostly from cache where a product is compute-bound. cuBLAS's
	// word is "may": where it finds no faster bf16 kernel it may compute
	// in fp32, so the rounding is not guaranteed as autocast's is (the
	// tolerances, BF16Tol, hold either way). An option to measure
	// against CastKernel on a GPU (benchmarks/NOTES.md); the fake cuBLAS
	// rounds both alike, so that there the two give the same bits
	// (TestBF16CastInCUBLAS).
	CastInCUBLAS BF16Cast = "cublas"
)

// ParseBF16Cast checks a BF16Cast's name ("" is CastKernel).
func ParseBF16Cast(s string) (BF16Cast, error) {
	switch BF16Cast(s) {
	case "", CastKernel:
		return CastKernel, nil
	case CastInCUBLAS:
		return CastInCUBLAS, nil
	}
	return "", fmt.Errorf("gemm: bf16 cast %q: want %q (gdist's cast kernel, PyTorch's autocast rounding) or %q (inside cuBLAS: CUBLAS_COMPUTE_32F_FAST_16BF)", s, CastKernel, CastInCUBLAS)
}

// castInCUBLAS resolves Config.BF16Cast (or $GDIST_BF16_CAST).
func castInCUBLAS(c BF16Cast) (bool, error) {
	if c == "" {
		if v := os.Getenv(EnvBF16Cast); v != "" {
			p, err := ParseBF16Cast(v)
			if err != nil {
				return false, fmt.Errorf("$%s: %w", EnvBF16Cast, err)
			}
			c = p
		}
	}
	p, err := ParseBF16Cast(string(c))
	return p == CastInCUBLAS, err
}

// BF16Cast is where the engine rounds bf16 autocast's operands:
// CastInCUBLAS only with bf16 through cuBLAS (the tiled kernel rounds
// as it loads its tiles).
func (e *Engine) BF16Cast() BF16Cast {
	if e.prec == BF16 && e.h != nil && e.castIn {
		return CastInCUBLAS
	}
	return CastKernel
}
