// Fused causal self-attention (gpu/kernels' AttentionFusedForward and
// AttentionFusedBackward; attention_fused.go says what each computes and
// what it keeps): Q, K and V read in place from the (N T, 3C) rows of
// the input projection's output, O written in place into (N T, C), the
// T x T scores and probabilities never stored. fp32 throughout (SIMT
// multiply-adds; NVRTC may contract them into fused multiply-adds: this
// program is compiled without --fmad=false).
//
// Every kernel gives each of a block's AF_ROWS rows (queries, or keys
// for dK and dV) to a group of G consecutive threads, which hold the
// row's D values (padded with zeros to DM) in registers, float4 chunk u
// G + g of the row by thread g of its group, and meet at shuffles
// (af_gsum) for the row's dot products; the other side's rows (keys and
// values, or queries and output gradients) come through shared memory a
// tile at a time, every group reading the same row at once (broadcast).
// Tiles wholly above the diagonal are never loaded; loops run over each
// tile's rows uniformly across the block (the shuffles need every lane)
// and the causal mask zeroes the probabilities of keys after the query.
// Scores are kept in base 2: the query (or key) is multiplied by scale
// log2(e) once, so exp2f(s - L) is the probability, L = m + log2(l) the
// row's log-sum-exp in base 2 (what the forward keeps). No atomics: dQ
// is its own kernel (over query tiles, recomputing P), dK and dV
// another (over key tiles): every result the same from run to run.

#define AF_FULL 0xffffffffu
#define AF_ROWS 64  // rows a block owns
#define AF_CHUNK 16 // keys a step of the forward's online softmax

__device__ __forceinline__ float af_neg_inf() { return __int_as_float(0xff800000); }

// af_gsum is v summed over the G lanes of a row's group (G a power of
// two, groups aligned within the warp).
template <int G> __device__ __forceinline__ float af_gsum(float v) {
#pragma unroll
	for (int o = 1; o < G; o <<= 1) v += __shfl_xor_sync(AF_FULL, v, o);
	return v;
}

// af_load copies n (<= rows) rows of D values, ld apart from src, into
// the tile t (rows DM apart, zeros from column D to DM and in the rows
// from n on); every thread of the block takes part.
template <int DM> __device__ void af_load(float *t, const float *src, long long ld, int n, int D, int rows) {
	for (int e = threadIdx.x; e < rows * DM; e += blockDim.x) {
		int r = e / DM, c = e - r * DM;
		t[e] = (r < n && c < D) ? src[r * ld + c] : 0.0f;
	}
}

// af_kv_tile reads the tile of keys and values [j0, j0 + kn) of a head
// (base: its first query column, rows ld apart) into kt and vt, between
// two barriers (the last tile's readers done; the tile there for all).
template <int DM, int BK>
__device__ __forceinline__ void af_kv_tile(float *kt, float *vt, const float *base, int C, long long ld, int j0, int kn, int D) {
	__syncthreads();
	af_load<DM>(kt, base + C + (long long)j0 * ld, ld, kn, D, BK);
	af_load<DM>(vt, base + 2 * C + (long long)j0 * ld, ld, kn, D, BK);
	__syncthreads();
}

// af_row reads the thread's columns of a row (D values at src; none
// where !valid) into x, times mul: chunk u of x is columns 4 (u G + g).
template <int DM, int G> __device__ __forceinline__ void af_row(float (&x)[DM / G], const float *src, bool valid, int D, int g, float mul) {
#pragma unroll
	for (int u = 0; u < DM / G / 4; u++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int c = 4 * (u * G + g) + e;
			x[4 * u + e] = valid && c < D ? src[c] * mul : 0.0f;
		}
}

// af_dot is the thread's part of x . (row r of tile t): four running
// sums (one per float4 lane), so that its multiply-adds are four short
// dependency chains rather than one long one.
template <int DM, int G> __device__ __forceinline__ float af_dot(const float (&x)[DM / G], const float *t, int r, int g) {
	const float4 *row = (const float4 *)(t + r * DM);
	float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
#pragma unroll
	for (int u = 0; u < DM / G / 4; u++) {
		float4 v = row[u * G + g];
		d0 += x[4 * u] * v.x;
		d1 += x[4 * u + 1] * v.y;
		d2 += x[4 * u + 2] * v.z;
		d3 += x[4 * u + 3] * v.w;
	}
	return (d0 + d1) + (d2 + d3);
}

// af_axpy adds a times (row r of tile t) to the thread's columns of acc.
template <int DM, int G> __device__ __forceinline__ void af_axpy(float (&acc)[DM / G], float a, const float *t, int r, int g) {
	const float4 *row = (const float4 *)(t + r * DM);
#pragma unroll
	for (int u = 0; u < DM / G / 4; u++) {
		float4 v = row[u * G + g];
		acc[4 * u] += a * v.x;
		acc[4 * u + 1] += a * v.y;
		acc[4 * u + 2] += a * v.z;
		acc[4 * u + 3] += a * v.w;
	}
}

// af_store writes the thread's columns of x times mul to dst (where valid).
template <int DM, int G> __device__ __forceinline__ void af_store(float *dst, const float (&x)[DM / G], bool valid, int D, int g, float mul) {
	if (!valid) return;
#pragma unroll
	for (int u = 0; u < DM / G / 4; u++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int c = 4 * (u * G + g) + e;
			if (c < D) dst[c] = x[4 * u + e] * mul;
		}
}

// The forward: block (x, n H + h) owns queries [i0, i0 + AF_ROWS) of
// head h of sequence n, the last tiles (the most keys) first; it reads
// the keys and values [0, min(i0 + AF_ROWS, T)) BK at a time into kt and
// vt, and each row keeps its running maximum m, sum l and output o
// (online softmax: AF_CHUNK scores at a time, o and l rescaled when m
// grows). out gets o / l, lse (N H T) gets m + log2(l).
template <int DM, int G, int BK>
__device__ void af_forward(float *out, float *lse, const float *qkv, int T, int C, int H, float scale2, float *kt, float *vt) {
	const int W = DM / G;
	int D = C / H, nh = blockIdx.y, n = nh / H, h = nh - n * H;
	int i0 = (gridDim.x - 1 - blockIdx.x) * AF_ROWS;
	int r = threadIdx.x / G, g = threadIdx.x - r * G, i = i0 + r;
	bool valid = i < T;
	long long ld = 3LL * C;
	const float *base = qkv + (long long)n * T * ld + h * D;
	float q[W], o[W];
	af_row<DM, G>(q, base + (long long)i * ld, valid, D, g, scale2);
#pragma unroll
	for (int c = 0; c < W; c++) o[c] = 0.0f;
	float m = af_neg_inf(), l = 0.0f;
	int ci = min(i0 + AF_ROWS, T); // the keys of the block's rows
	for (int j0 = 0; j0 < ci; j0 += BK) {
		int kn = min(BK, ci - j0);
		af_kv_tile<DM, BK>(kt, vt, base, C, ld, j0, kn, D);
		for (int j = 0; j < kn; j += AF_CHUNK) {
			float s[AF_CHUNK], cm = af_neg_inf();
#pragma unroll
			for (int u = 0; u < AF_CHUNK; u++) {
				float d = j + u < kn ? af_dot<DM, G>(q, kt, j + u, g) : 0.0f;
				d = af_gsum<G>(d);
				s[u] = j + u < kn && j0 + j + u <= i ? d : af_neg_inf();
				cm = fmaxf(cm, s[u]);
			}
			float mn = fmaxf(m, cm);
			if (mn > m) { // rescale (m is -inf at first: a = 0)
				float a = exp2f(m - mn);
				l *= a;
#pragma unroll
				for (int c = 0; c < W; c++) o[c] *= a;
				m = mn;
			}
#pragma unroll
			for (int u = 0; u < AF_CHUNK; u++) {
				if (j + u < kn) {
					float p = exp2f(s[u] - m); // masked: exp2f(-inf) = 0
					l += p;
					af_axpy<DM, G>(o, p, vt, j + u, g);
				}
			}
		}
	}
	float *dst = out + ((long long)n * T + i) * C + h * D;
	af_store<DM, G>(dst, o, valid, D, g, 1.0f / l);
	if (valid && g == 0) lse[(long long)nh * T + i] = m + log2f(l);
}

// The backward's first kernel: block (x, n H + h) owns queries [i0, i0 +
// AF_ROWS) as the forward; each row computes D_i = dO_i . O_i (written
// to dsum for the second kernel) and dQ_i = scale sum_j dS_ij K_j, dS_ij
// = P_ij (dO_i . V_j - D_i), P_ij = exp2(q_i . k_j scale log2(e) - L_i),
// over the keys [0, min(i0 + AF_ROWS, T)) BK at a time. dQ is written
// into dqkv's query columns.
template <int DM, int G, int BK>
__device__ void af_backward_dq(float *dqkv, float *dsum, const float *dout, const float *qkv, const float *out, const float *lse, int T,
			       int C, int H, float scale2, float scale, float *kt, float *vt) {
	const int W = DM / G;
	int D = C / H, nh = blockIdx.y, n = nh / H, h = nh - n * H;
	int i0 = (gridDim.x - 1 - blockIdx.x) * AF_ROWS;
	int r = threadIdx.x / G, g = threadIdx.x - r * G, i = i0 + r;
	bool valid = i < T;
	long long ld = 3LL * C, row = (long long)n * T + i;
	const float *base = qkv + (long long)n * T * ld + h * D;
	float q[W], dO[W], dq[W];
	af_row<DM, G>(q, base + (long long)i * ld, valid, D, g, scale2);
	af_row<DM, G>(dO, dout + row * C + h * D, valid, D, g, 1.0f);
	af_row<DM, G>(dq, out + row * C + h * D, valid, D, g, 1.0f); // O, for D_i
	float di = 0.0f;
#pragma unroll
	for (int c = 0; c < W; c++) {
		di += dO[c] * dq[c];
		dq[c] = 0.0f;
	}
	di = af_gsum<G>(di);
	float li = valid ? lse[(long long)nh * T + i] : 0.0f;
	if (valid && g == 0) dsum[(long long)nh * T + i] = di;
	int ci = min(i0 + AF_ROWS, T);
	for (int j0 = 0; j0 < ci; j0 += BK) {
		int kn = min(BK, ci - j0);
		af_kv_tile<DM, BK>(kt, vt, base, C, ld, j0, kn, D);
#pragma unroll 2
		for (int j = 0; j < kn; j++) { // two keys in flight
			float s = af_gsum<G>(af_dot<DM, G>(q, kt, j, g));
			float dp = af_gsum<G>(af_dot<DM, G>(dO, vt, j, g));
			float p = j0 + j <= i ? exp2f(s - li) : 0.0f;
			af_axpy<DM, G>(dq, p * (dp - di), kt, j, g);
		}
	}
	af_store<DM, G>(dqkv + ((long long)n * T + i) * ld + h * D, dq, valid, D, g, scale);
}

// The backward's second kernel: block (x, n H + h) owns keys [j0, j0 +
// AF_ROWS), each row holding k_j (times scale log2(e)) and v_j and
// summing dV_j = sum_i P_ij dO_i and dK_j = scale sum_i dS_ij Q_i over
// the queries [j0, T), BK at a time (queries, output gradients, L and D
// through shared memory). dK and dV are written into dqkv's key and
// value columns.
template <int DM, int G, int BK>
__device__ void af_backward_dkdv(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *dsum, int T, int C,
				 int H, float scale2, float scale, float *qt, float *ot, float *ls, float *ds) {
	const int W = DM / G;
	int D = C / H, nh = blockIdx.y, n = nh / H, h = nh - n * H;
	int j0 = blockIdx.x * AF_ROWS; // the first tiles have the most queries
	int r = threadIdx.x / G, g = threadIdx.x - r * G, j = j0 + r;
	bool valid = j < T;
	long long ld = 3LL * C;
	const float *base = qkv + (long long)n * T * ld + h * D;
	const float *dbase = dout + (long long)n * T * C + h * D;
	float k[W], v[W], dk[W], dv[W];
	af_row<DM, G>(k, base + C + (long long)j * ld, valid, D, g, scale2);
	af_row<DM, G>(v, base + 2 * C + (long long)j * ld, valid, D, g, 1.0f);
#pragma unroll
	for (int c = 0; c < W; c++) dk[c] = dv[c] = 0.0f;
	for (int i0 = j0; i0 < T; i0 += BK) {
		int qn = min(BK, T - i0);
		__syncthreads();
		af_load<DM>(qt, base + (long long)i0 * ld, ld, qn, D, BK);
		af_load<DM>(ot, dbase + (long long)i0 * C, C, qn, D, BK);
		for (int e = threadIdx.x; e < qn; e += blockDim.x) {
			ls[e] = lse[(long long)nh * T + i0 + e];
			ds[e] = dsum[(long long)nh * T + i0 + e];
		}
		__syncthreads();
#pragma unroll 2
		for (int ii = 0; ii < qn; ii++) { // two queries in flight
			float s = af_gsum<G>(af_dot<DM, G>(k, qt, ii, g));
			float dp = af_gsum<G>(af_dot<DM, G>(v, ot, ii, g));
			float p = j <= i0 + ii ? exp2f(s - ls[ii]) : 0.0f;
			af_axpy<DM, G>(dv, p, ot, ii, g);
			af_axpy<DM, G>(dk, p * (dp - ds[ii]), qt, ii, g);
		}
	}
	float *dst = dqkv + ((long long)n * T + j) * ld + h * D;
	af_store<DM, G>(dst + C, dk, valid, D, g, scale);
	af_store<DM, G>(dst + 2 * C, dv, valid, D, g, 1.0f);
}

// The instantiations, by the heads' width rounded up (DM: 16, 32, 64,
// 128; G = DM / 32 threads a row from 32 on; BK = 64 rows a tile, 32 at
// 128 so that two tiles stay within 48 KiB of static shared memory),
// each spelled out (the fake finds kernels by their extern "C"
// __global__ declarations).

extern "C" __global__ void gd_attn_fused_fwd_d16(float *out, float *lse, const float *qkv, int T, int C, int H, float scale2) {
	__shared__ float4 sh[2 * 64 * 16 / 4];
	af_forward<16, 1, 64>(out, lse, qkv, T, C, H, scale2, (float *)sh, (float *)sh + 64 * 16);
}
extern "C" __global__ void gd_attn_fused_dq_d16(float *dqkv, float *dsum, const float *dout, const float *qkv, const float *out, const float *lse,
					       int T, int C, int H, float scale2, float scale) {
	__shared__ float4 sh[2 * 64 * 16 / 4];
	af_backward_dq<16, 1, 64>(dqkv, dsum, dout, qkv, out, lse, T, C, H, scale2, scale, (float *)sh, (float *)sh + 64 * 16);
}
extern "C" __global__ void gd_attn_fused_dkdv_d16(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *dsum,
						 int T, int C, int H, float scale2, float scale) {
	__shared__ float4 sh[2 * 64 * 16 / 4];
	__shared__ float sl[64], sd[64];
	af_backward_dkdv<16, 1, 64>(dqkv, dout, qkv, lse, dsum, T, C, H, scale2, scale, (float *)sh, (float *)sh + 64 * 16, sl, sd);
}

extern "C" __global__ void gd_attn_fused_fwd_d32(float *out, float *lse, const float *qkv, int T, int C, int H, float scale2) {
	__shared__ float4 sh[2 * 64 * 32 / 4];
	af_forward<32, 1, 64>(out, lse, qkv, T, C, H, scale2, (float *)sh, (float *)sh + 64 * 32);
}
extern "C" __global__ void gd_attn_fused_dq_d32(float *dqkv, float *dsum, const float *dout, const float *qkv, const float *out, const float *lse,
					       int T, int C, int H, float scale2, float scale) {
	__shared__ float4 sh[2 * 64 * 32 / 4];
	af_backward_dq<32, 1, 64>(dqkv, dsum, dout, qkv, out, lse, T, C, H, scale2, scale, (float *)sh, (float *)sh + 64 * 32);
}
extern "C" __global__ void gd_attn_fused_dkdv_d32(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *dsum,
						 int T, int C, int H, float scale2, float scale) {
	__shared__ float4 sh[2 * 64 * 32 / 4];
	__shared__ float sl[64], sd[64];
	af_backward_dkdv<32, 1, 64>(dqkv, dout, qkv, lse, dsum, T, C, H, scale2, scale, (float *)sh, (float *)sh + 64 * 32, sl, sd);
}

extern "C" __global__ void gd_attn_fused_fwd_d64(float *out, float *lse, const float *qkv, int T, int C, int H, float scale2) {
	__shared__ float4 sh[2 * 64 * 64 / 4];
	af_forward<64, 2, 64>(out, lse, qkv, T, C, H, scale2, (float *)sh, (float *)sh + 64 * 64);
}
extern "C" __global__ void gd_attn_fused_dq_d64(float *dqkv, float *dsum, const float *dout, const float *qkv, const float *out, const float *lse,
					       int T, int C, int H, float scale2, float scale) {
	__shared__ float4 sh[2 * 64 * 64 / 4];
	af_backward_dq<64, 2, 64>(dqkv, dsum, dout, qkv, out, lse, T, C, H, scale2, scale, (float *)sh, (float *)sh + 64 * 64);
}
extern "C" __global__ void gd_attn_fused_dkdv_d64(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *dsum,
						 int T, int C, int H, float scale2, float scale) {
	__shared__ float4 sh[2 * 64 * 64 / 4];
	__shared__ float sl[64], sd[64];
	af_backward_dkdv<64, 2, 64>(dqkv, dout, qkv, lse, dsum, T, C, H, scale2, scale, (float *)sh, (float *)sh + 64 * 64, sl, sd);
}

extern "C" __global__ void gd_attn_fused_fwd_d128(float *out, float *lse, const float *qkv, int T, int C, int H, float scale2) {
	__shared__ float4 sh[2 * 32 * 128 / 4];
	af_forward<128, 4, 32>(out, lse, qkv, T, C, H, scale2, (float *)sh, (float *)sh + 32 * 128);
}
extern "C" __global__ void gd_attn_fused_dq_d128(float *dqkv, float *dsum, const float *dout, const float *qkv, const float *out, const float *lse,
					       int T, int C, int H, float scale2, float scale) {
	__shared__ float4 sh[2 * 32 * 128 / 4];
	af_backward_dq<128, 4, 32>(dqkv, dsum, dout, qkv, out, lse, T, C, H, scale2, scale, (float *)sh, (float *)sh + 32 * 128);
}
extern "C" __global__ void gd_attn_fused_dkdv_d128(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *dsum,
						 int T, int C, int H, float scale2, float scale) {
	__shared__ float4 sh[2 * 32 * 128 / 4];
	__shared__ float sl[32], sd[32];
	af_backward_dkdv<128, 4, 32>(dqkv, dout, qkv, lse, dsum, T, C, H, scale2, scale, (float *)sh, (float *)sh + 32 * 128, sl, sd);
}
