// wmma_gemm.cu: products of 64 x 64 tiles by CUDA's warp matrix functions
// (nvcuda::wmma, tensor cores on a GPU; gpu/cudafake's emulation on the
// fake), the test kernels of wmma_test.go.
//
// D (m x n, row-major) = A (m x k, row-major) B (k x n) + C (m x n,
// column-major; zero when c is null), in fp32. A block of 4 warps makes a
// 64 x 64 tile of D: warp w its rows 16 w .. 16 w + 15, as four 16 x 16
// accumulators. B goes through shared memory a 16 x 64 slab at a time (a
// barrier before and after each); A is read from global memory. m and n
// are multiples of 64, k of 16; the grid is n / 64 x m / 64.
#include <mma.h>

using namespace nvcuda;

template <bool COL> struct layout_of { typedef wmma::row_major type; };
template <> struct layout_of<true> { typedef wmma::col_major type; };

// gemm_tile: B column-major (b[j k + p] is B's row p, column j: a
// Linear's weight, K of Q K^T) when BCOL, else row-major.
template <class T, bool BCOL>
__device__ void gemm_tile(const T *a, const T *b, const float *c, float *d, int m, int n, int k) {
	typedef typename layout_of<BCOL>::type LB;
	__shared__ __align__(32) T bs[16 * 64];
	int warp = threadIdx.x / 32, row0 = blockIdx.y * 64 + warp * 16, col0 = blockIdx.x * 64;
	wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4];
	for (int j = 0; j < 4; j++) {
		if (c)
			wmma::load_matrix_sync(acc[j], c + (size_t)(col0 + 16 * j) * m + row0, m, wmma::mem_col_major);
		else
			wmma::fill_fragment(acc[j], 0.0f);
	}
	for (int p = 0; p < k; p += 16) {
		for (int e = threadIdx.x; e < 16 * 64; e += blockDim.x) {
			if (BCOL) // bs: 64 columns of 16
				bs[e] = b[(size_t)(col0 + e / 16) * k + p + e % 16];
			else // bs: 16 rows of 64
				bs[e] = b[(size_t)(p + e / 64) * n + col0 + e % 64];
		}
		__syncthreads();
		wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
		wmma::load_matrix_sync(fa, a + (size_t)row0 * k + p, k);
		for (int j = 0; j < 4; j++) {
			wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LB> fb;
			if (BCOL)
				wmma::load_matrix_sync(fb, bs + 16 * 16 * j, 16);
			else
				wmma::load_matrix_sync(fb, bs + 16 * j, 64);
			wmma::mma_sync(acc[j], fa, fb, acc[j]);
		}
		__syncthreads();
	}
	for (int j = 0; j < 4; j++)
		wmma::store_matrix_sync(d + (size_t)row0 * n + col0 + 16 * j, acc[j], n, wmma::mem_row_major);
}

extern "C" __global__ void __launch_bounds__(128) wmma_gemm_bf16(const __nv_bfloat16 *a, const __nv_bfloat16 *b,
								  const float *c, float *d, int m, int n, int k) {
	gemm_tile<__nv_bfloat16, true>(a, b, c, d, m, n, k);
}

extern "C" __global__ void __launch_bounds__(128) wmma_gemm_half(const __half *a, const __half *b, const float *c,
								  float *d, int m, int n, int k) {
	gemm_tile<__half, false>(a, b, c, d, m, n, k);
}

// wmma_diverge: lanes below `lanes` of each warp load a fragment, the
// others skip it (ret 0) or return (ret 1): a divergent call (undefined on
// a GPU; the fake fails the launch).
extern "C" __global__ void wmma_diverge(const __nv_bfloat16 *a, float *d, int lanes, int ret) {
	wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
	wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
	wmma::fill_fragment(acc, 0.0f);
	if ((int)(threadIdx.x % 32) >= lanes && ret) return;
	if ((int)(threadIdx.x % 32) < lanes) wmma::load_matrix_sync(fa, a, 16);
	wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}

// wmma_offset: a load from a + off elements (off 8: 16 bytes past the
// 32-byte alignment CUDA requires).
extern "C" __global__ void wmma_offset(const __nv_bfloat16 *a, float *d, int off, int unused) {
	wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
	wmma::load_matrix_sync(fa, a + off, 16);
	wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
	wmma::fill_fragment(acc, (float)fa.x[0] * 0.0f);
	wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}

// wmma_convert: each of n floats to bf16 and half (__float2bfloat16,
// __float2half: round to nearest even) as bits, and back to float.
extern "C" __global__ void wmma_convert(const float *x, unsigned short *bf, unsigned short *h, float *bfx, float *hx,
					int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) {
		__nv_bfloat16 b = __float2bfloat16(x[i]);
		__half q = __float2half(x[i]);
		bf[i] = __bfloat16_as_ushort(b);
		h[i] = __half_as_ushort(q);
		bfx[i] = __bfloat162float(b);
		hx[i] = __half2float(q);
	}
}
