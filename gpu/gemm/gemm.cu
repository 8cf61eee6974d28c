// gdist's own matrix products (gpu/gemm): a shared-memory tiled GEMM for
// when cuBLAS cannot be loaded, and the cast of fp32 operands to bf16
// for bf16 autocast. Row-major, as our tensors: C [m, n] = alpha op(A)
// op(B) + beta C, op(A) [m, k] (A stored [m, k] rows of lda, or [k, m]
// with ta), op(B) [k, n] (stored [k, n], or [n, k] with tb), product z of
// a batch at A + z sa, B + z sb, C + z sc.

#define TS 16

// bf16 rounding of x, round to nearest even (NaN stays NaN), as its bits.
__device__ unsigned short to_bf16(float x) {
	unsigned u = __float_as_uint(x);
	if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (unsigned short)(u >> 16);
}

__device__ float round_bf16(float x) { return __uint_as_float((unsigned)to_bf16(x) << 16); }

// dst[i] = bf16(src[i]) over n elements.
extern "C" __global__ void gd_to_bf16(unsigned short *dst, const float *src, long long n) {
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
		dst[i] = to_bf16(src[i]);
}

// One TS x TS tile of C per block of TS x TS threads (x: columns, y:
// rows), k in steps of TS through shared memory; blocks along z walk the
// batch. Each element is one fp32 sum over k in order; with bf16 the
// inputs are rounded to bf16 first (their products are exact in fp32).
// beta 0: C is not read.
extern "C" __global__ void gd_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, long long sa,
				   const float *B, int ldb, long long sb, float beta, float *C, int ldc, long long sc,
				   int batch, int bf16) {
	__shared__ float As[TS][TS + 1];
	__shared__ float Bs[TS][TS + 1];
	int tx = threadIdx.x, ty = threadIdx.y;
	int row = blockIdx.y * TS + ty, col = blockIdx.x * TS + tx;
	for (int z = blockIdx.z; z < batch; z += gridDim.z) {
		const float *a = A + z * sa, *b = B + z * sb;
		float acc = 0.0f;
		for (int p0 = 0; p0 < k; p0 += TS) {
			int p = p0 + tx;
			float v = 0.0f;
			if (row < m && p < k) v = ta ? a[(long long)p * lda + row] : a[(long long)row * lda + p];
			As[ty][tx] = bf16 ? round_bf16(v) : v;
			p = p0 + ty;
			v = 0.0f;
			if (p < k && col < n) v = tb ? b[(long long)col * ldb + p] : b[(long long)p * ldb + col];
			Bs[ty][tx] = bf16 ? round_bf16(v) : v;
			__syncthreads();
			int q1 = k - p0 < TS ? k - p0 : TS;
			for (int q = 0; q < q1; q++) acc += As[ty][q] * Bs[q][tx];
			__syncthreads();
		}
		if (row < m && col < n) {
			float *c = C + z * sc + (long long)row * ldc + col;
			float v = alpha * acc;
			if (beta != 0.0f) v += beta * *c;
			*c = v;
		}
	}
}
