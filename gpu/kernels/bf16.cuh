// bf16.cuh: gpu/gemm's cast of a float to bf16, for the kernels that
// write a bf16 copy of what they produce beside the fp32 value
// (pointwise.cu's GELU, rows.cu's LayerNorm; gpu/kernels' Programs put it
// before their source).

// bf16_bits is gpu/gemm's cast of x to bf16 (round to nearest even, NaN
// kept quiet), as its bits: the copy a producer writes for
// gemm.Engine.Provide has the bits the engine's cast would give.
__device__ unsigned short bf16_bits(float x) {
	unsigned u = __float_as_uint(x);
	if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (unsigned short)(u >> 16);
}
