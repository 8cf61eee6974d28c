// block.cuh: the block reductions that reduce.cu and rows.cu share
// (gpu/kernels' Programs put it before their source).

#ifndef BLOCK
#define BLOCK 256 // threads per block; a power of two
#endif

// block_sum is the sum of every thread's v (a float or a double) over
// the block, a tree over shared memory in a fixed order, a __syncthreads
// at each level (no warp-synchronous code); all threads get it. Each
// addition is rounded on its own (nothing to fuse it with), with or
// without --fmad=false.
template <class T> __device__ T block_sum(T v, T *s) {
	int t = threadIdx.x;
	s[t] = v;
	__syncthreads();
	for (int w = BLOCK / 2; w > 0; w >>= 1) {
		if (t < w) s[t] = s[t] + s[t + w];
		__syncthreads();
	}
	T r = s[0];
	__syncthreads();
	return r;
}
