// gdist's own matrix products (gpu/gemm): a shared-memory tiled GEMM for
// when cuBLAS cannot be loaded, and the cast of fp32 operands to bf16
// for bf16 autocast. Row-major, as our tensors: C [m, n] = alpha op(A)
// op(B) + beta C, op(A) [m, k] (A stored [m, k] rows of lda, or [k, m]
// with ta), op(B) [k, n] (stored [k, n], or [n, k] with tb), product z of
// a batch at A + z sa, B + z sb, C + z sc.

#define TS 16

// bf16 rounding of x (bf16.cuh's bf16_bits, which Source puts before
// this file), as its bits.
#define to_bf16 bf16_bits

__device__ float round_bf16(float x) { return __uint_as_float((unsigned)to_bf16(x) << 16); }

// dst[i] = bf16(src[i]) over n elements.
extern "C" __global__ void gd_to_bf16(unsigned short *dst, const float *src, long long n) {
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
		dst[i] = to_bf16(src[i]);
}

// gd_to_bf16 four values a thread: 16-byte loads and 8-byte stores (src
// 16-byte and dst 8-byte aligned), so that more bytes are in flight a
// thread; the last n % 4 one by one. The same bits as gd_to_bf16.
extern "C" __global__ void gd_to_bf16x4(unsigned short *dst, const float *src, long long n) {
	long long n4 = n / 4, stride = (long long)gridDim.x * blockDim.x;
	long long first = blockIdx.x * (long long)blockDim.x + threadIdx.x;
	const float4 *s4 = (const float4 *)src;
	int2 *d4 = (int2 *)dst;
	for (long long i = first; i < n4; i += stride) {
		float4 v = s4[i];
		int2 o;
		o.x = (int)((unsigned)to_bf16(v.x) | ((unsigned)to_bf16(v.y) << 16));
		o.y = (int)((unsigned)to_bf16(v.z) | ((unsigned)to_bf16(v.w) << 16));
		d4[i] = o;
	}
	for (long long i = 4 * n4 + first; i < n; i += stride) dst[i] = to_bf16(src[i]);
}

// The cast of a strided operand: batch matrices stride values apart, each
// rows rows of cols values, rows ld apart, into dst with rows dld and
// matrices dstride apart (dld = cols, dstride = rows cols: a compact copy
// of only the values a product reads; dld = ld, dstride = stride: a copy
// at the same index). A block's threads take rows of tpr threads each
// (tpr a power of two, about a row's values: a short row does not leave
// most of a block idle); row q = z rows + r of the batch's rows along y
// (grid-stride), its values along x. The same bits as gd_to_bf16.
extern "C" __global__ void gd_to_bf16_2d(unsigned short *dst, const float *src, int rows, int cols, long long ld,
					 long long stride, int batch, long long dld, long long dstride, int tpr) {
	long long all = (long long)batch * rows;
	int rpb = blockDim.x / tpr, lane = threadIdx.x % tpr;
	for (long long q = (long long)blockIdx.y * rpb + threadIdx.x / tpr; q < all; q += (long long)gridDim.y * rpb) {
		long long z = q / rows, r = q - z * rows;
		const float *s = src + z * stride + r * ld;
		unsigned short *d = dst + z * dstride + r * dld;
		for (int c = blockIdx.x * tpr + lane; c < cols; c += gridDim.x * tpr) d[c] = to_bf16(s[c]);
	}
}

// gd_to_bf16_2d four values a thread (cols, ld, stride, dld, dstride
// multiples of 4; src 16-byte and dst 8-byte aligned).
extern "C" __global__ void gd_to_bf16_2dx4(unsigned short *dst, const float *src, int rows, int cols, long long ld,
					   long long stride, int batch, long long dld, long long dstride, int tpr) {
	long long all = (long long)batch * rows;
	int rpb = blockDim.x / tpr, lane = threadIdx.x % tpr;
	for (long long q = (long long)blockIdx.y * rpb + threadIdx.x / tpr; q < all; q += (long long)gridDim.y * rpb) {
		long long z = q / rows, r = q - z * rows;
		const float4 *s = (const float4 *)(src + z * stride + r * ld);
		int2 *d = (int2 *)(dst + z * dstride + r * dld);
		for (int c = blockIdx.x * tpr + lane; c < cols / 4; c += gridDim.x * tpr) {
			float4 v = s[c];
			int2 o;
			o.x = (int)((unsigned)to_bf16(v.x) | ((unsigned)to_bf16(v.y) << 16));
			o.y = (int)((unsigned)to_bf16(v.z) | ((unsigned)to_bf16(v.w) << 16));
			d[c] = o;
		}
	}
}

// One BM x BN (64 x 64) tile of C per block of TS x TS (16 x 16)
// threads, each thread 4 x 4 elements of it (rows ty + 16 i, columns tx +
// 16 j), k in steps of BK (16) through shared memory (each operand's
// tile read along its rows as stored, so that neighbouring threads read
// neighbouring addresses, whichever the transposes); blocks along z walk
// the batch. Each element is one fp32 sum over k in order (no fused
// multiply-add); with bf16 the inputs are rounded to bf16 first (their
// products are then exact in fp32). beta 0: C is not read.
#define BM 64
#define BK 16
extern "C" __global__ void gd_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, long long sa,
				   const float *B, int ldb, long long sb, float beta, float *C, int ldc, long long sc,
				   int batch, int bf16) {
	__shared__ float As[BK][BM + 1]; // As[p][r] = op(A)[row0 + r][p0 + p]
	__shared__ float Bs[BK][BM + 1]; // Bs[p][c] = op(B)[p0 + p][col0 + c]
	int tx = threadIdx.x, ty = threadIdx.y, tid = ty * TS + tx;
	int row0 = blockIdx.y * BM, col0 = blockIdx.x * BM;
	for (int z = blockIdx.z; z < batch; z += gridDim.z) {
		const float *a = A + z * sa, *b = B + z * sb;
		float acc[4][4];
		for (int i = 0; i < 4; i++)
			for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
		for (int p0 = 0; p0 < k; p0 += BK) {
			for (int l = 0; l < 4; l++) {
				int idx = tid + TS * TS * l;
				int r, p;
				if (ta) { // A stored [k, m]: along r
					r = idx % BM;
					p = idx / BM;
				} else { // [m, k]: along p
					r = idx / BK;
					p = idx % BK;
				}
				float v = 0.0f;
				if (row0 + r < m && p0 + p < k)
					v = ta ? a[(long long)(p0 + p) * lda + row0 + r] : a[(long long)(row0 + r) * lda + p0 + p];
				As[p][r] = bf16 ? round_bf16(v) : v;
				int c;
				if (tb) { // B stored [n, k]: along p
					c = idx / BK;
					p = idx % BK;
				} else { // [k, n]: along c
					c = idx % BM;
					p = idx / BM;
				}
				v = 0.0f;
				if (p0 + p < k && col0 + c < n)
					v = tb ? b[(long long)(col0 + c) * ldb + p0 + p] : b[(long long)(p0 + p) * ldb + col0 + c];
				Bs[p][c] = bf16 ? round_bf16(v) : v;
			}
			__syncthreads();
			int q1 = k - p0 < BK ? k - p0 : BK;
			for (int q = 0; q < q1; q++) {
				float av[4], bv[4];
				for (int i = 0; i < 4; i++) av[i] = As[q][ty + TS * i];
				for (int j = 0; j < 4; j++) bv[j] = Bs[q][tx + TS * j];
				for (int i = 0; i < 4; i++)
					for (int j = 0; j < 4; j++) acc[i][j] = __fadd_rn(acc[i][j], __fmul_rn(av[i], bv[j]));
			}
			__syncthreads();
		}
		for (int i = 0; i < 4; i++) {
			int row = row0 + ty + TS * i;
			for (int j = 0; j < 4; j++) {
				int col = col0 + tx + TS * j;
				if (row < m && col < n) {
					float *c = C + z * sc + (long long)row * ldc + col;
					float v = alpha * acc[i][j];
					if (beta != 0.0f) v += beta * *c;
					*c = v;
				}
			}
		}
	}
}
