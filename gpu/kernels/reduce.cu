// gdist's reduction kernels (gpu/kernels): sums and maxima over blocks of
// BLOCK threads through shared memory, a __syncthreads at each level (no
// warp-synchronous code), always in the same order: the results do not
// change from run to run.

// BLOCK and block_sum: block.cuh.

// block_max is the largest of every thread's v over the block (a tree as
// block_sum's); all threads get it.
__device__ float block_max(float v, float *s) {
	int t = threadIdx.x;
	s[t] = v;
	__syncthreads();
	for (int w = BLOCK / 2; w > 0; w >>= 1) {
		if (t < w) s[t] = fmaxf(s[t], s[t + w]);
		__syncthreads();
	}
	float r = s[0];
	__syncthreads();
	return r;
}

// The softmax cross-entropy of each row of logits [rows, classes] against
// its label (one block per row): rowLoss[r] = max + log(sum exp(x - max))
// - x[label]; NaN for a label outside [0, classes).
extern "C" __global__ void gd_xent_rows(float *rowLoss, const float *logits, const int *labels, int classes) {
	__shared__ float s[BLOCK];
	const float *x = logits + (long long)blockIdx.x * classes;
	float m = __int_as_float(0xff800000); // -inf
	for (int j = threadIdx.x; j < classes; j += BLOCK) m = fmaxf(m, x[j]);
	m = block_max(m, s);
	float e = 0.0f;
	for (int j = threadIdx.x; j < classes; j += BLOCK) e = __fadd_rn(e, expf(x[j] - m));
	e = block_sum(e, s);
	if (threadIdx.x == 0) {
		int l = labels[blockIdx.x];
		rowLoss[blockIdx.x] = l >= 0 && l < classes ? (m + logf(e)) - x[l] : __int_as_float(0x7fffffff);
	}
}

// out[0] = the mean of x[0..n) (one block).
extern "C" __global__ void gd_mean(float *out, const float *x, int n) {
	__shared__ float s[BLOCK];
	float v = 0.0f;
	for (int i = threadIdx.x; i < n; i += BLOCK) v = __fadd_rn(v, x[i]);
	v = block_sum(v, s);
	if (threadIdx.x == 0) out[0] = v / (float)n;
}

// The gradient of the cross-entropy with respect to the logits (one block
// per row): dlogits = (softmax(x) - onehot(label)) * scale; scale is
// dloss / rows for the mean loss. dlogits may be logits.
extern "C" __global__ void gd_xent_backward(float *dlogits, const float *logits, const int *labels, int classes, float scale) {
	__shared__ float s[BLOCK];
	long long base = (long long)blockIdx.x * classes;
	const float *x = logits + base;
	float m = __int_as_float(0xff800000);
	for (int j = threadIdx.x; j < classes; j += BLOCK) m = fmaxf(m, x[j]);
	m = block_max(m, s);
	float e = 0.0f;
	for (int j = threadIdx.x; j < classes; j += BLOCK) e = __fadd_rn(e, expf(x[j] - m));
	e = block_sum(e, s);
	int l = labels[blockIdx.x];
	for (int j = threadIdx.x; j < classes; j += BLOCK) {
		float p = expf(x[j] - m) / e;
		if (j == l) p -= 1.0f;
		dlogits[base + j] = p * scale;
	}
}

// hit[r] = 1 when row r of logits [rows, classes] predicts its label, else
// 0 (one block per row). The prediction is train's argmax: the first index
// of the largest logit, NaNs passed over, except that a NaN first logit
// predicts class 0 (a loop from best = 0 taking j when x[j] > x[best]).
extern "C" __global__ void gd_argmax_hits(int *hit, const float *logits, const int *labels, int classes) {
	__shared__ float sv[BLOCK];
	__shared__ int si[BLOCK];
	const float *x = logits + (long long)blockIdx.x * classes;
	int t = threadIdx.x;
	float bv = 0.0f;
	int bi = -1; // none yet
	for (int j = t; j < classes; j += BLOCK) {
		float v = x[j];
		if (!isnan(v) && (bi < 0 || v > bv)) {
			bv = v;
			bi = j;
		}
	}
	sv[t] = bv;
	si[t] = bi;
	__syncthreads();
	for (int w = BLOCK / 2; w > 0; w >>= 1) {
		if (t < w) {
			float ov = sv[t + w];
			int oi = si[t + w];
			if (oi >= 0 && (si[t] < 0 || ov > sv[t] || (ov == sv[t] && oi < si[t]))) {
				sv[t] = ov;
				si[t] = oi;
			}
		}
		__syncthreads();
	}
	if (t == 0) {
		int best = isnan(x[0]) || si[0] < 0 ? 0 : si[0];
		hit[blockIdx.x] = best == labels[blockIdx.x] ? 1 : 0;
	}
}

// out[0] = the sum of the ints x[0..n) (one block).
extern "C" __global__ void gd_count(int *out, const int *x, int n) {
	__shared__ int s[BLOCK];
	int t = threadIdx.x;
	int v = 0;
	for (int i = t; i < n; i += BLOCK) v += x[i];
	s[t] = v;
	__syncthreads();
	for (int w = BLOCK / 2; w > 0; w >>= 1) {
		if (t < w) s[t] += s[t + w];
		__syncthreads();
	}
	if (t == 0) out[0] = s[0];
}
