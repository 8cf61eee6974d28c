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
