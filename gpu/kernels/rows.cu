// gdist's reductions over rows and channels (gpu/kernels): block sums
// through shared memory with a __syncthreads at each level, and warps
// that meet at shuffles and __syncwarp (never implicit lockstep), always
// in the same order: the results do not change from run to run. Compiled
// with --fmad=false (each float operation rounded on its own, as Go
// computes), so that where a kernel follows the CPU path's order of
// operations it gives the CPU's bits.

#ifndef BLOCK
#define BLOCK 256 // threads per block; a power of two
#endif

#define FULL 0xffffffffu

// block_sumd is the sum of every thread's v over the block, a tree over
// shared memory in a fixed order; all threads get it.
__device__ double block_sumd(double v, double *s) {
	int t = threadIdx.x;
	s[t] = v;
	__syncthreads();
	for (int w = BLOCK / 2; w > 0; w >>= 1) {
		if (t < w) s[t] = s[t] + s[t + w];
		__syncthreads();
	}
	double r = s[0];
	__syncthreads();
	return r;
}

__device__ float block_sumf(float v, float *s) {
	int t = threadIdx.x;
	s[t] = v;
	__syncthreads();
	for (int w = BLOCK / 2; w > 0; w >>= 1) {
		if (t < w) s[t] = s[t] + s[t + w];
		__syncthreads();
	}
	float r = s[0];
	__syncthreads();
	return r;
}

// out[r] (+)= the sum of row r of x [rows, cols] (one block per row, the
// blocks striding over the rows): a convolution's bias gradient from the
// output gradient as (Cout, N Ho Wo).
extern "C" __global__ void gd_row_sum(float *out, const float *x, int rows, long long cols, int accumulate) {
	__shared__ float s[BLOCK];
	for (int r = blockIdx.x; r < rows; r += gridDim.x) {
		const float *row = x + (long long)r * cols;
		float v = 0.0f;
		for (long long j = threadIdx.x; j < cols; j += BLOCK) v = v + row[j];
		v = block_sumf(v, s);
		if (threadIdx.x == 0) out[r] = accumulate ? out[r] + v : v;
	}
}

// The element i of channel c's N inner values in x (N, C, inner).
__device__ long long chan_at(long long i, int c, int C, long long inner) { return (i / inner * C + c) * inner + i % inner; }

// Batch norm's statistics (nn.BNLayer.Forward's, one block per channel):
// stats[c] the sum of channel c of x (N, C, inner), stats[C + c] the sum
// of its squared deviations from its mean (M2), stats[2C] the count N
// inner; in float64.
extern "C" __global__ void gd_bn_stats(double *stats, const float *x, int N, int C, long long inner) {
	__shared__ double s[BLOCK];
	long long m = (long long)N * inner;
	for (int c = blockIdx.x; c < C; c += gridDim.x) {
		double v = 0.0;
		for (long long i = threadIdx.x; i < m; i += BLOCK) v = v + (double)x[chan_at(i, c, C, inner)];
		double sum = block_sumd(v, s);
		double mu = sum / (double)m;
		v = 0.0;
		for (long long i = threadIdx.x; i < m; i += BLOCK) {
			double d = (double)x[chan_at(i, c, C, inner)] - mu;
			v = v + d * d;
		}
		double m2 = block_sumd(v, s);
		if (threadIdx.x == 0) {
			stats[c] = sum;
			stats[C + c] = m2;
			if (c == 0) stats[2 * C] = (double)m;
		}
	}
}

// Batch norm's backward sums (one block per channel): sums[c] the sum of
// channel c of dy, sums[C + c] that of dy xhat; in float64.
extern "C" __global__ void gd_bn_grad_sums(double *sums, const float *dy, const float *xhat, int N, int C, long long inner) {
	__shared__ double s[BLOCK];
	long long m = (long long)N * inner;
	for (int c = blockIdx.x; c < C; c += gridDim.x) {
		double v = 0.0, vx = 0.0;
		for (long long i = threadIdx.x; i < m; i += BLOCK) {
			long long j = chan_at(i, c, C, inner);
			double d = (double)dy[j];
			v = v + d;
			vx = vx + d * (double)xhat[j];
		}
		v = block_sumd(v, s);
		vx = block_sumd(vx, s);
		if (threadIdx.x == 0) {
			sums[c] = v;
			sums[C + c] = vx;
		}
	}
}
