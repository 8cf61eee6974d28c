// bf16.cuh: the cast of a float to bf16, one definition for gpu/gemm's
// cast kernels (gemm.cu) and for gpu/kernels' kernels that write a bf16
// copy of what they produce beside the fp32 value (pointwise.cu's GELU,
// rows.cu's LayerNorm, ...): both put it (BF16Header) before their
// source, so that a copy a producer writes for gemm.Engine.Provide has
// the bits the engine's cast would give.

// bf16_bits is x rounded to bf16 (round to nearest even, NaN kept
// quiet), as its bits.
__device__ unsigned short bf16_bits(float x) {
	unsigned u = __float_as_uint(x);
	if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (unsigned short)(u >> 16);
}
