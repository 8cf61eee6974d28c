// gdist's reductions over rows and channels (gpu/kernels): block sums
// through shared memory with a __syncthreads at each level, and warps
// that meet at shuffles and __syncwarp (never implicit lockstep), always
// in the same order: the results do not change from run to run. Compiled
// with --fmad=false (each float operation rounded on its own, as Go
// computes), so that where a kernel follows the CPU path's order of
// operations it gives the CPU's bits.

// BLOCK and block_sum: block.cuh; embed_row: embed.cuh; bf16_bits:
// bf16.cuh.

#define FULL 0xffffffffu

// ---- row and per-channel sums in two stages (fixed order, no atomics) ----

// part[p rows + r] = the sum of x[r, lo..hi) over the chunk p
// (blockIdx.x) of per columns of row r (blockIdx.y, striding): the
// first stage of a convolution's bias gradient (the rows of the output
// gradient as (Cout, N Ho Wo)); gd_col_finish adds the chunks in order.
extern "C" __global__ void gd_row_partial(float *part, const float *x, int rows, long long cols, long long per) {
	__shared__ float s[BLOCK];
	long long lo = blockIdx.x * per, hi = min(lo + per, cols);
	for (int r = blockIdx.y; r < rows; r += gridDim.y) {
		const float *row = x + (long long)r * cols;
		float v = 0.0f;
		for (long long j = lo + threadIdx.x; j < hi; j += BLOCK) v = v + row[j];
		v = block_sum(v, s);
		if (threadIdx.x == 0) part[(long long)blockIdx.x * rows + r] = v;
	}
}

// The chunk [lo, hi) of channel c's m = N inner values of (N, C, inner):
// each thread walks its values i = lo + t, lo + t + BLOCK, ... as (n, j)
// = (i / inner, i % inner), dividing once and then stepping by BLOCK's
// quotient and remainder.
struct chan_walk {
	long long n, j, sn, sj, inner, base;
	__device__ chan_walk(long long i, int c, int C, long long in) {
		inner = in;
		n = i / in;
		j = i - n * in;
		sn = BLOCK / in;
		sj = BLOCK - sn * in;
		base = (long long)c * in;
		n *= (long long)C * in; // n now the image's offset
		sn *= (long long)C * in;
	}
	__device__ long long at() const { return n + base + j; }
	__device__ void next(int C) {
		j += sj;
		n += sn;
		if (j >= inner) {
			j -= inner;
			n += (long long)C * inner;
		}
	}
};

// Batch norm's statistics, first stage (nn.BNLayer.Forward's): for the
// chunk p (blockIdx.x) of per values of channel c (blockIdx.y, striding)
// of x (N, C, inner), part[(p C + c) 3 + 0, 1, 2] = its count, sum and
// sum of squared deviations from its own mean (M2), in float64.
extern "C" __global__ void gd_bn_partial(double *part, const float *x, int N, int C, long long inner, long long per) {
	__shared__ double s[BLOCK];
	long long m = (long long)N * inner, lo = blockIdx.x * per, hi = min(lo + per, m);
	for (int c = blockIdx.y; c < C; c += gridDim.y) {
		double v = 0.0;
		chan_walk w(lo + threadIdx.x, c, C, inner);
		for (long long i = lo + threadIdx.x; i < hi; i += BLOCK, w.next(C)) v = v + (double)x[w.at()];
		double sum = block_sum(v, s), cnt = (double)max(hi - lo, 0LL), mu = cnt > 0.0 ? sum / cnt : 0.0;
		v = 0.0;
		chan_walk w2(lo + threadIdx.x, c, C, inner);
		for (long long i = lo + threadIdx.x; i < hi; i += BLOCK, w2.next(C)) {
			double d = (double)x[w2.at()] - mu;
			v = v + d * d;
		}
		double m2 = block_sum(v, s);
		if (threadIdx.x == 0) {
			double *o = part + ((long long)blockIdx.x * C + c) * 3;
			o[0] = cnt;
			o[1] = sum;
			o[2] = m2;
		}
	}
}

// The second stage: stats[c] = channel c's sum (the chunks' in order),
// stats[C + c] its M2 (the chunks' combined in order with Chan's
// formula), stats[2C] the count N inner.
extern "C" __global__ void gd_bn_finish(double *stats, const double *part, int parts, int C) {
	for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
		double n = 0.0, mean = 0.0, m2 = 0.0, sum = 0.0;
		for (int p = 0; p < parts; p++) {
			const double *o = part + ((long long)p * C + c) * 3;
			double nb = o[0];
			if (nb == 0.0) continue;
			double mb = o[1] / nb;
			sum = sum + o[1];
			if (n == 0.0) {
				n = nb;
				mean = mb;
				m2 = o[2];
				continue;
			}
			double delta = mb - mean, t = n + nb;
			mean = mean + delta * (nb / t);
			m2 = m2 + o[2] + delta * delta * (n * nb / t);
			n = t;
		}
		stats[c] = sum;
		stats[C + c] = m2;
		if (c == 0) stats[2 * C] = n;
	}
}

// Batch norm's backward sums, first stage: for the chunk p (blockIdx.x)
// of channel c (blockIdx.y), part[(p C + c) 2 + 0, 1] = its sums of dy
// and dy xhat, in float64.
extern "C" __global__ void gd_bn_grad_partial(double *part, const float *dy, const float *xhat, int N, int C, long long inner,
					      long long per) {
	__shared__ double s[BLOCK];
	long long m = (long long)N * inner, lo = blockIdx.x * per, hi = min(lo + per, m);
	for (int c = blockIdx.y; c < C; c += gridDim.y) {
		double v = 0.0, vx = 0.0;
		chan_walk w(lo + threadIdx.x, c, C, inner);
		for (long long i = lo + threadIdx.x; i < hi; i += BLOCK, w.next(C)) {
			long long j = w.at();
			double d = (double)dy[j];
			v = v + d;
			vx = vx + d * (double)xhat[j];
		}
		v = block_sum(v, s);
		vx = block_sum(vx, s);
		if (threadIdx.x == 0) {
			double *o = part + ((long long)blockIdx.x * C + c) * 2;
			o[0] = v;
			o[1] = vx;
		}
	}
}

// The second stage: sums[c] = the sum of dy over channel c, sums[C + c]
// that of dy xhat (the chunks' in order).
extern "C" __global__ void gd_bn_grad_finish(double *sums, const double *part, int parts, int C) {
	for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
		double v = 0.0, vx = 0.0;
		for (int p = 0; p < parts; p++) {
			const double *o = part + ((long long)p * C + c) * 2;
			v = v + o[0];
			vx = vx + o[1];
		}
		sums[c] = v;
		sums[C + c] = vx;
	}
}

// ---- column sums in two stages (Kernels.colSums) ----

// The first stage over a [rows, cols] row-major: blocks of 32 columns
// (blockIdx.x) by 8 row lanes, over the chunk blockIdx.y of per rows. Lane
// y sums the chunk's rows y, y + 8, ... of its column in order, then the
// 8 lanes' sums are added in order; out[chunk cols + c] (null: skipped)
// gets the chunk's sum of a b (of a when b is null), out2 (null: skipped;
// only with b) that of a. With acc the sums are added to out and out2
// (a grid of one chunk writing the result).
extern "C" __global__ void gd_col_partial(float *out, float *out2, const float *a, const float *b, int rows, int cols, int per,
					  int acc) {
	__shared__ float s[8][33], s2[8][33];
	int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * 32 + tx;
	int lo = blockIdx.y * per, hi = min(lo + per, rows);
	float v = 0.0f, v2 = 0.0f;
	if (c < cols && lo + ty < hi) {
		long long first = (long long)(lo + ty) * cols + c, step = 8LL * cols;
		const float *pa = a + first;
		if (b) {
			const float *pb = b + first;
			for (int r = lo + ty; r < hi; r += 8, pa += step, pb += step) {
				float x = *pa;
				v = v + x * *pb;
				v2 = v2 + x;
			}
		} else {
			for (int r = lo + ty; r < hi; r += 8, pa += step) v = v + *pa;
		}
	}
	s[ty][tx] = v;
	s2[ty][tx] = v2;
	__syncthreads();
	if (ty == 0 && c < cols) {
		float t = s[0][tx], t2 = s2[0][tx];
		for (int k = 1; k < 8; k++) {
			t = t + s[k][tx];
			t2 = t2 + s2[k][tx];
		}
		long long o = (long long)blockIdx.y * cols + c;
		if (out) out[o] = acc ? out[o] + t : t;
		if (out2) out2[o] = acc ? out2[o] + t2 : t2;
	}
}

// The second stage: out[c] (+)= the sum of part[p cols + c] over the
// parts in order (out null: skipped), out2 likewise from part2. A
// thread's loads go 16 parts at a time, in flight together, and are
// then added in order: a column of parts waits for about parts / 16
// loads, not parts (the launch is small, its time the loads' latency).
__device__ float col_finish(const float *part, int parts, long long cols, long long c) {
	float t = part[c];
	for (int p0 = 1; p0 < parts; p0 += 16) {
		float v[16];
#pragma unroll
		for (int j = 0; j < 16; j++) v[j] = p0 + j < parts ? part[(p0 + j) * cols + c] : 0.0f;
#pragma unroll
		for (int j = 0; j < 16; j++)
			if (p0 + j < parts) t = t + v[j];
	}
	return t;
}

extern "C" __global__ void gd_col_finish(float *out, float *out2, const float *part, const float *part2, int parts, int cols,
					 int acc) {
	for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < cols; c += (long long)gridDim.x * blockDim.x) {
		if (out) {
			float t = col_finish(part, parts, cols, c);
			out[c] = acc ? out[c] + t : t;
		}
		if (out2) {
			float t = col_finish(part2, parts, cols, c);
			out2[c] = acc ? out2[c] + t : t;
		}
	}
}

// GELU's backward fused with the bias gradient of the Linear before it
// (gpu/kernels' BiasGELUBackward): dx[r, c] = dy[r, c] gelu'(x[r, c] +
// bias[c]) (x the Linear's product without its bias; bias null: x as it
// is), dx16 (unless null) its bf16 copy, and out (unless null) the
// column sums of dx over the chunk blockIdx.y of per rows, in
// gd_col_partial's order and grid (32 columns by 8 row lanes, each lane
// every 8th row, the lanes added in order): the same bits as
// gd_gelu_backward and then gd_col_partial over dx, without reading dx
// again. With acc the sums are added to out (a grid of one chunk writing
// the result).
extern "C" __global__ void gd_gelu_bias_backward(float *dx, unsigned short *dx16, float *out, const float *dy, const float *x,
						 const float *bias, int rows, int cols, int per, int acc) {
	__shared__ float s[8][33];
	int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * 32 + tx;
	int lo = blockIdx.y * per, hi = min(lo + per, rows);
	float v = 0.0f;
	if (c < cols && lo + ty < hi) {
		float b = bias ? bias[c] : 0.0f;
		long long o = (long long)(lo + ty) * cols + c, step = 8LL * cols;
		for (int r = lo + ty; r < hi; r += 8, o += step) {
			float d, xv = bias ? x[o] + b : x[o];
			gelu(xv, &d);
			float g = dy[o] * d;
			dx[o] = g;
			if (dx16) dx16[o] = bf16_bits(g);
			v = v + g;
		}
	}
	s[ty][tx] = v;
	__syncthreads();
	if (out && ty == 0 && c < cols) {
		float t = s[0][tx];
		for (int k = 1; k < 8; k++) t = t + s[k][tx];
		long long o = (long long)blockIdx.y * cols + c;
		out[o] = acc ? out[o] + t : t;
	}
}

// ---- the embedding's gradient (nn.Embedding) ----

// dw[v] (+)= the sum over the rows r with ids[r] = v, in order, of dy[r]
// (dy [rows, dim]): nn's sum, bit for bit, without atomics, in
// O(rows dim + num dim) work: a stable sort of the rows by id, then a
// warp per table row and 32 of its values adding that row's dy rows in
// the sorted (increasing) order. The sort is an LSD radix sort of the
// keys (the id; a row whose id is not an integer in [0, num) gets key 0
// and is skipped by table row 0's warps, as nn's forward gives it NaNs)
// by EMBED_RADIX_BITS-bit digits, a pass a digit of num - 1 (one pass for
// a byte vocabulary, two for GPT-2's 50257): per pass gd_embed_hist (each
// block's digit counts, a block of BLOCK rows or, past embedSortBlocks
// (act.go) of them, of several rounds of BLOCK), gd_embed_scan (their
// exclusive sums, digit-major: every block's place for each digit) and
// gd_embed_scatter (each row to its place; within a block the warps'
// rows in order and each warp's lanes in order: stable). No atomics:
// a warp finds its lanes of one digit by EMBED_RADIX_BITS ballots.
// Then gd_embed_rows: the table row v's rows are [lower_bound(v),
// lower_bound(v + 1)) of the sorted keys, in increasing row order.
// It replaced gd_embed_backward, whose warps each scanned all the ids
// (rows num dim / 32 id reads: 0.2 GB a GPT-2 small b8 step at a byte
// vocabulary, 40 GB at GPT-2's); not kept for small tables: there its
// warps waited rows / 256 rounds of id loads before their sums, which
// gd_embed_rows does without, against the sort's three small launches
// (an estimate: no GPU timed either).

#ifndef EMBED_RADIX_BITS
#define EMBED_RADIX_BITS 8
#endif
#define EMBED_RADIX (1 << EMBED_RADIX_BITS)
#if BLOCK % 32 != 0 || BLOCK < 32
#error "the embedding sort's blocks (BLOCK) must be whole warps"
#endif
#if EMBED_RADIX_BITS < 1 || EMBED_RADIX_BITS > 10
#error "EMBED_RADIX_BITS: a block's digit counts for each warp are in shared memory"
#endif

// The key of row r: ids[r] when it names a row, else 0 (pass 0), or
// the key the previous pass placed at r.
__device__ int embed_key(const float *ids, const int *kin, int r, int num) {
	if (kin) return kin[r];
	long long v = embed_row(ids[r], num);
	return v < 0 ? 0 : (int)v;
}

// The lanes of this warp with this lane's digit (in: this lane has a
// row): the mask of them, over EMBED_RADIX_BITS ballots.
__device__ unsigned embed_peers(int digit, bool in) {
	unsigned m = __ballot_sync(FULL, in);
#pragma unroll
	for (int b = 0; b < EMBED_RADIX_BITS; b++) {
		unsigned o = __ballot_sync(FULL, (digit >> b) & 1);
		m &= (digit >> b & 1) ? o : ~o;
	}
	return in ? m : 0u;
}

// cnt[w][d]: the rows of warp w of this block with digit d (w < BLOCK /
// 32); each warp's lowest lane of a digit writes it.
__device__ void embed_warp_counts(int (*cnt)[EMBED_RADIX], int digit, bool in, unsigned *peers) {
	for (int i = threadIdx.x; i < (BLOCK / 32) * EMBED_RADIX; i += BLOCK) cnt[i / EMBED_RADIX][i % EMBED_RADIX] = 0;
	__syncthreads();
	int lane = threadIdx.x & 31;
	unsigned m = embed_peers(digit, in);
	if (in && (m & ((1u << lane) - 1u)) == 0) cnt[threadIdx.x >> 5][digit] = __popc(m);
	*peers = m;
	__syncthreads();
}

// Block b's rows are the rounds [b R / B, (b + 1) R / B) of BLOCK rows
// (R = rounds, the rows' BLOCKs; B = gridDim.x): one each, or as evenly
// as whole rounds go when R > B.
__device__ void embed_rounds(int rounds, long long *lo, long long *hi) {
	*lo = (long long)blockIdx.x * rounds / gridDim.x;
	*hi = (long long)(blockIdx.x + 1) * rounds / gridDim.x;
}

// hist[d B + b] = the rows of block b whose key has digit d at shift.
extern "C" __global__ void gd_embed_hist(int *hist, const float *ids, const int *kin, int rows, int num, int shift, int rounds) {
	__shared__ int cnt[BLOCK / 32][EMBED_RADIX];
	__shared__ int tot[EMBED_RADIX]; // entry d: thread d % BLOCK's
	for (int d = threadIdx.x; d < EMBED_RADIX; d += BLOCK) tot[d] = 0;
	long long lo, hi;
	embed_rounds(rounds, &lo, &hi);
	for (long long k = lo; k < hi; k++) {
		long long r = k * BLOCK + threadIdx.x;
		bool in = r < rows;
		int digit = in ? embed_key(ids, kin, (int)r, num) >> shift & (EMBED_RADIX - 1) : 0;
		unsigned m;
		embed_warp_counts(cnt, digit, in, &m);
		for (int d = threadIdx.x; d < EMBED_RADIX; d += BLOCK)
			for (int w = 0; w < BLOCK / 32; w++) tot[d] += cnt[w][d];
		__syncthreads(); // the counts read before the next round clears them
	}
	for (int d = threadIdx.x; d < EMBED_RADIX; d += BLOCK) hist[(long long)d * gridDim.x + blockIdx.x] = tot[d];
}

// hist[0..n) becomes its exclusive prefix sums, in place: one block, a
// thread a contiguous segment of it. n is EMBED_RADIX a block: at most
// embedSortBlocks (act.go) x EMBED_RADIX ints, 512 KiB, at any number
// of rows.
extern "C" __global__ void gd_embed_scan(int *hist, int n) {
	__shared__ int warps[BLOCK / 32];
	int t = threadIdx.x, lane = t & 31, per = (n + BLOCK - 1) / BLOCK;
	int lo = min(n, t * per), hi = min(n, lo + per);
	int s = 0;
	for (int i = lo; i < hi; i++) s += hist[i];
	int x = s; // the warp's inclusive sums, then the block's
#pragma unroll
	for (int o = 1; o < 32; o <<= 1) {
		int y = __shfl_up_sync(FULL, x, o);
		if (lane >= o) x += y;
	}
	if (lane == 31) warps[t >> 5] = x;
	__syncthreads();
	int base = 0;
	for (int w = 0; w < (t >> 5); w++) base += warps[w];
	int run = base + x - s; // before this thread's segment
	for (int i = lo; i < hi; i++) {
		int c = hist[i];
		hist[i] = run;
		run += c;
	}
}

// Every row of block b to its place: off[d B + b] (gd_embed_scan's) plus
// the rows of digit d before it in the block (earlier rounds, earlier
// warps, then earlier lanes); kout, pout get its key and its row (pin's,
// or r).
extern "C" __global__ void gd_embed_scatter(int *kout, int *pout, const int *off, const float *ids, const int *kin,
					    const int *pin, int rows, int num, int shift, int rounds) {
	__shared__ int cnt[BLOCK / 32][EMBED_RADIX];
	__shared__ int base[EMBED_RADIX]; // the next place of digit d: thread d % BLOCK's
	for (int d = threadIdx.x; d < EMBED_RADIX; d += BLOCK) base[d] = off[(long long)d * gridDim.x + blockIdx.x];
	int lane = threadIdx.x & 31;
	long long lo, hi;
	embed_rounds(rounds, &lo, &hi);
	for (long long k = lo; k < hi; k++) {
		long long r = k * BLOCK + threadIdx.x;
		bool in = r < rows;
		int key = in ? embed_key(ids, kin, (int)r, num) : 0, digit = key >> shift & (EMBED_RADIX - 1);
		unsigned m;
		embed_warp_counts(cnt, digit, in, &m);
		for (int d = threadIdx.x; d < EMBED_RADIX; d += BLOCK) {
			int run = base[d];
			for (int w = 0; w < BLOCK / 32; w++) {
				int c = cnt[w][d];
				cnt[w][d] = run;
				run += c;
			}
			base[d] = run;
		}
		__syncthreads();
		if (in) {
			int to = cnt[threadIdx.x >> 5][digit] + __popc(m & ((1u << lane) - 1u));
			kout[to] = key;
			pout[to] = pin ? pin[r] : (int)r;
		}
		__syncthreads(); // the places read before the next round clears them
	}
}

// The first of keys[0..n) (sorted) not below v.
__device__ int embed_lower(const int *keys, int n, int v) {
	int lo = 0, hi = n;
	while (lo < hi) {
		int mid = (lo + hi) >> 1;
		if (keys[mid] < v) lo = mid + 1;
		else hi = mid;
	}
	return lo;
}

// dw[v, d] (+)= the sum of dy[pos[i], d] over the sorted rows i of key v,
// in order: a warp (threadIdx.y) per table row v and 32 values (its
// lanes: d = blockIdx.x 32 + lane), BLOCK / 32 table rows a block,
// striding past the grid. It loads 32 of the row's positions at a time,
// then their 32 values (a lane's loads in flight together), then adds
// them in order. Table row 0's warps skip the rows whose id names no row
// (their key is 0 too).
extern "C" __global__ void gd_embed_rows(float *dw, const float *dy, const float *ids, const int *keys, const int *pos, int rows,
					 int num, int dim, int accumulate) {
	int lane = threadIdx.x, d = blockIdx.x * 32 + lane;
	for (int v = blockIdx.y * (BLOCK / 32) + threadIdx.y; v < num; v += gridDim.y * (BLOCK / 32)) {
		int lo = embed_lower(keys, rows, v), hi = embed_lower(keys, rows, v + 1);
		float s = 0.0f;
		for (int g = lo; g < hi; g += 32) {
			int cnt = min(32, hi - g);
			int p = lane < cnt ? pos[g + lane] : 0;
			unsigned ok = __ballot_sync(FULL, lane < cnt && (v != 0 || embed_row(ids[p], num) == 0));
			float t[32];
#pragma unroll
			for (int q = 0; q < 32; q++) {
				long long rq = __shfl_sync(FULL, p, q);
				t[q] = (ok >> q & 1) && d < dim ? dy[rq * dim + d] : 0.0f;
			}
#pragma unroll
			for (int q = 0; q < 32; q++)
				if (ok >> q & 1) s = s + t[q];
		}
		if (d < dim) {
			long long o = (long long)v * dim + d;
			dw[o] = accumulate ? dw[o] + s : s;
		}
	}
}

// ---- row sums in vecmath.Sum32's order, one warp per row ----

// What a warp sums over a row: a[i]; (a[i] - m)^2; a[i] b[i]; (a[i] b[i])
// c[i] (each product rounded).
enum { TERM_A, TERM_SQDEV, TERM_AB, TERM_ABC };

__device__ float term(int kind, const float *a, const float *b, const float *c, float m, int i) {
	switch (kind) {
	case TERM_SQDEV: {
		float d = a[i] - m;
		return d * d;
	}
	case TERM_AB: return a[i] * b[i];
	case TERM_ABC: return (a[i] * b[i]) * c[i];
	}
	return a[i];
}

// warp_sum32 is the float32 sum of term(i) over [0, n) as vecmath.Sum32
// (and nn's sqDev32, dot32) computes it: eight running sums s[j] of the
// terms 8i + j of the whole groups of eight, in order, then the last
// partial group's terms added to s[0], s[1], ..., and ((s0 + s1) + (s2 +
// s3)) + ((s4 + s5) + (s6 + s7)). Called by all 32 lanes of a warp
// together (lanes 0-7 keep one running sum each); every lane gets it.
// The warp reads 32 terms at a time, one a lane (coalesced), and lane j
// < 8 takes the terms of lanes j, j + 8, j + 16, j + 24 by shuffles, in
// that order: the order of Sum32's running sum j, so the same bits.
__device__ float warp_sum32(int kind, const float *a, const float *b, const float *c, float m, int n) {
	int lane = threadIdx.x & 31, whole = n & ~7, full = n & ~31;
	float s = 0.0f;
	for (int base = 0; base < full; base += 32) {
		float t0 = term(kind, a, b, c, m, base + lane);
		float t1 = __shfl_down_sync(FULL, t0, 8), t2 = __shfl_down_sync(FULL, t0, 16), t3 = __shfl_down_sync(FULL, t0, 24);
		if (lane < 8) {
			s = s + t0;
			s = s + t1;
			s = s + t2;
			s = s + t3;
		}
	}
	if (lane < 8) {
		for (int i = full + lane; i < whole; i += 8) s = s + term(kind, a, b, c, m, i);
		if (whole + lane < n) s = s + term(kind, a, b, c, m, whole + lane);
	}
	float v[8];
	for (int j = 0; j < 8; j++) v[j] = __shfl_sync(FULL, s, j);
	return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

// The warps of the grid take rows in turn: for (r = first_row(); r <
// rows; r += row_step()), the same r on every lane of a warp.
__device__ int first_row() { return (int)((blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5); }
__device__ int row_step() { return (int)((gridDim.x * (long long)blockDim.x) >> 5); }

// Layer norm over rows of C (nn's lnOp, bit for bit): mean = sum x / C,
// var = sum (x - mean)^2 / C in float32 (Sum32's order), 1/std =
// float32(1 / sqrt(float64(var) + eps)); y = xhat gamma + beta with xhat
// = (x - mean) / std, kept (with 1/std per row) unless null. y may be x.
// y16, unless null, gets y's bf16 copy (bf16_bits); y null writes the
// copy alone (a Linear's input that only bf16 products read).
extern "C" __global__ void gd_layernorm(float *y, float *xhat, float *invstd, const float *x, const float *gamma,
					const float *beta, int rows, int C, float invC, double eps, unsigned short *y16) {
	int lane = threadIdx.x & 31;
	for (int r = first_row(); r < rows; r += row_step()) {
		const float *row = x + (long long)r * C;
		float mean = warp_sum32(TERM_A, row, 0, 0, 0.0f, C) * invC;
		float var = warp_sum32(TERM_SQDEV, row, 0, 0, mean, C) * invC;
		float inv = (float)(1.0 / sqrt((double)var + eps));
		__syncwarp();
		if (lane == 0 && invstd) invstd[r] = inv;
		for (int j = lane; j < C; j += 32) {
			float h = (row[j] - mean) * inv;
			if (xhat) xhat[(long long)r * C + j] = h;
			float o = h * gamma[j] + beta[j];
			if (y) y[(long long)r * C + j] = o;
			if (y16) y16[(long long)r * C + j] = bf16_bits(o);
		}
		__syncwarp();
	}
}

// Layer norm's input gradient (nn's lnGradOp, bit for bit): with g = dy
// gamma, dx = 1/std ((g - mean g) - xhat mean(g xhat)). dx may be dy.
// dx16, unless null, gets dx's bf16 copy (bf16_bits).
extern "C" __global__ void gd_layernorm_backward(float *dx, const float *dy, const float *xhat, const float *invstd,
						 const float *gamma, int rows, int C, float invC, unsigned short *dx16) {
	int lane = threadIdx.x & 31;
	for (int r = first_row(); r < rows; r += row_step()) {
		const float *d = dy + (long long)r * C, *xh = xhat + (long long)r * C;
		float m1 = warp_sum32(TERM_AB, d, gamma, 0, 0.0f, C) * invC;
		float m2 = warp_sum32(TERM_ABC, d, gamma, xh, 0.0f, C) * invC;
		float inv = invstd[r];
		__syncwarp();
		for (int j = lane; j < C; j += 32) {
			float g = d[j] * gamma[j];
			float v = inv * ((g - m1) - xh[j] * m2);
			dx[(long long)r * C + j] = v;
			if (dx16) dx16[(long long)r * C + j] = bf16_bits(v);
		}
		__syncwarp();
	}
}

// ---- attention's causal softmax (nn's attnOp) ----

// exp32 is nn's exp32: e^y for y <= 0 in float32 (y below -87 taken as
// -87; NaN gives NaN), Cody-Waite reduction with ln 2 in two parts, a
// degree-7 Taylor polynomial, the power of two by its bits; every
// operation rounded on its own, as nn's Go computes it.
__device__ float exp32(float y) {
	const float log2e = 1.442695f, ln2hi = 0.693359375f, ln2lo = -2.1219444e-4f, round = 12582912.0f; // 0x1.8p23
	if (y < -87.0f) y = -87.0f;
	float nf = (y * log2e + round) - round;
	float r = (y - nf * ln2hi) - nf * ln2lo;
	float r2 = r * r, r4 = r2 * r2;
	float p = (1.0f + r + (0.5f + r * (1.0f / 6.0f)) * r2) +
		  ((1.0f / 24.0f + r * (1.0f / 120.0f)) + (1.0f / 720.0f + r * (1.0f / 5040.0f)) * r2) * r4;
	return p * __int_as_float(((int)nf + 127) << 23);
}

// nn's max: NaN wins.
__device__ float max_nan(float a, float b) { return a != a || b != b ? a + b : (b > a ? b : a); }

// written is how much of row i (n = i + 1 entries valid) of a T x T
// score matrix the causal kernels write when the products compute blocks
// of Tb rows and only the key blocks at or left of the diagonal: up to
// the end of the row's block (T where Tb >= T: the whole row, zeros
// above the diagonal). Entries beyond are neither read nor written.
__device__ int written(int n, int T, int Tb) {
	int w = ((n - 1) / Tb + 1) * Tb;
	return w < T ? w : T;
}

// The causal softmax of each row of p, rows of T: row r is position i = r
// % T of its sequence, and becomes the softmax of its first i+1 entries
// (max subtracted, exp32, 1/sum times each, the sum in Sum32's order),
// zeros after up to the end of its block of Tb rows (written): nn's
// causalSoftmax, bit for bit. In place; a warp a row.
extern "C" __global__ void gd_causal_softmax(float *p, int rows, int T, int Tb) {
	int lane = threadIdx.x & 31;
	for (int r = first_row(); r < rows; r += row_step()) {
		float *row = p + (long long)r * T;
		int n = r % T + 1, w = written(n, T, Tb);
		float mx = row[0];
		for (int j = lane; j < n; j += 32) mx = max_nan(mx, row[j]);
		for (int o = 16; o > 0; o >>= 1) mx = max_nan(mx, __shfl_xor_sync(FULL, mx, o));
		__syncwarp();
		for (int j = lane; j < w; j += 32) row[j] = j < n ? exp32(row[j] - mx) : 0.0f;
		__syncwarp();
		float inv = 1.0f / warp_sum32(TERM_A, row, 0, 0, 0.0f, n);
		__syncwarp();
		for (int j = lane; j < n; j += 32) row[j] = row[j] * inv;
		__syncwarp();
	}
}

// The causal softmax's backward, in place on ds (dP in, dS out) from its
// output p: dS = (p (dP - sum p dP)) scale over the first i+1 entries of
// row i (the sum in Sum32's order), zeros after up to the end of its
// block (written): nn's, bit for bit.
extern "C" __global__ void gd_causal_softmax_backward(float *ds, const float *p, int rows, int T, int Tb, float scale) {
	int lane = threadIdx.x & 31;
	for (int r = first_row(); r < rows; r += row_step()) {
		float *d = ds + (long long)r * T;
		const float *pr = p + (long long)r * T;
		int n = r % T + 1, w = written(n, T, Tb);
		float dot = warp_sum32(TERM_AB, pr, d, 0, 0.0f, n);
		__syncwarp();
		for (int j = lane; j < w; j += 32) d[j] = j < n ? (pr[j] * (d[j] - dot)) * scale : 0.0f;
		__syncwarp();
	}
}

// ---- the same, a row held in registers (rows of T <= 32 K) ----

// sum32_regs is warp_sum32 over the n (<= 32 K) terms held in registers,
// term 32 k + lane in v[k] of that lane: the same order (chunks of 32,
// lane j < 8 taking the terms of lanes j, j + 8, j + 16, j + 24; the last
// partial chunk's whole groups, then its tail), so the same bits.
template <int K> __device__ float sum32_regs(const float (&v)[K], int n) {
	int lane = threadIdx.x & 31, whole = n & ~7, full = n & ~31, kf = full >> 5;
	float s = 0.0f, c = 0.0f;
#pragma unroll
	for (int k = 0; k < K; k++) {
		if (k < kf) {
			float t0 = v[k];
			float t1 = __shfl_down_sync(FULL, t0, 8), t2 = __shfl_down_sync(FULL, t0, 16), t3 = __shfl_down_sync(FULL, t0, 24);
			if (lane < 8) {
				s = s + t0;
				s = s + t1;
				s = s + t2;
				s = s + t3;
			}
		}
		if (k == kf) c = v[k];
	}
	// the partial chunk: whole groups from full (at most 3), then the tail
	float t0 = c, t1 = __shfl_down_sync(FULL, c, 8), t2 = __shfl_down_sync(FULL, c, 16);
	float tail = __shfl_sync(FULL, c, ((whole - full) + (lane & 7)) & 31);
	if (lane < 8) {
		if (full + lane < whole) s = s + t0;
		if (full + 8 + lane < whole) s = s + t1;
		if (full + 16 + lane < whole) s = s + t2;
		if (whole + lane < n) s = s + tail;
	}
	float w[8];
	for (int j = 0; j < 8; j++) w[j] = __shfl_sync(FULL, s, j);
	return ((w[0] + w[1]) + (w[2] + w[3])) + ((w[4] + w[5]) + (w[6] + w[7]));
}

// gd_causal_softmax with each row in registers (K per lane, T <= 32 K):
// the row read once and written once, the same operations in the same
// order, so the same bits.
template <int K> __device__ void causal_softmax_regs(float *p, int rows, int T, int Tb) {
	int lane = threadIdx.x & 31;
	for (int r = first_row(); r < rows; r += row_step()) {
		float *row = p + (long long)r * T;
		int n = r % T + 1, w = written(n, T, Tb);
		float v[K];
		float mx = row[0];
#pragma unroll
		for (int k = 0; k < K; k++) {
			int j = 32 * k + lane;
			v[k] = j < n ? row[j] : 0.0f;
			if (j < n) mx = max_nan(mx, v[k]);
		}
		for (int o = 16; o > 0; o >>= 1) mx = max_nan(mx, __shfl_xor_sync(FULL, mx, o));
#pragma unroll
		for (int k = 0; k < K; k++)
			if (32 * k + lane < n) v[k] = exp32(v[k] - mx);
		float inv = 1.0f / sum32_regs<K>(v, n);
#pragma unroll
		for (int k = 0; k < K; k++) {
			int j = 32 * k + lane;
			if (j < w) row[j] = j < n ? v[k] * inv : 0.0f;
		}
		__syncwarp();
	}
}

// gd_causal_softmax_backward with each row of p and ds in registers.
template <int K> __device__ void causal_softmax_backward_regs(float *ds, const float *p, int rows, int T, int Tb, float scale) {
	int lane = threadIdx.x & 31;
	for (int r = first_row(); r < rows; r += row_step()) {
		float *d = ds + (long long)r * T;
		const float *pr = p + (long long)r * T;
		int n = r % T + 1, w = written(n, T, Tb);
		float pv[K], dv[K], t[K];
#pragma unroll
		for (int k = 0; k < K; k++) {
			int j = 32 * k + lane;
			pv[k] = j < n ? pr[j] : 0.0f;
			dv[k] = j < n ? d[j] : 0.0f;
			t[k] = pv[k] * dv[k];
		}
		float dot = sum32_regs<K>(t, n);
#pragma unroll
		for (int k = 0; k < K; k++) {
			int j = 32 * k + lane;
			if (j < w) d[j] = j < n ? (pv[k] * (dv[k] - dot)) * scale : 0.0f;
		}
		__syncwarp();
	}
}

// The widths instantiated (each spelled out: the fake finds kernels by
// their extern "C" __global__ declarations).
extern "C" __global__ void gd_causal_softmax_r2(float *p, int rows, int T, int Tb) { causal_softmax_regs<2>(p, rows, T, Tb); }
extern "C" __global__ void gd_causal_softmax_backward_r2(float *ds, const float *p, int rows, int T, int Tb, float scale) {
	causal_softmax_backward_regs<2>(ds, p, rows, T, Tb, scale);
}

extern "C" __global__ void gd_causal_softmax_r4(float *p, int rows, int T, int Tb) { causal_softmax_regs<4>(p, rows, T, Tb); }
extern "C" __global__ void gd_causal_softmax_backward_r4(float *ds, const float *p, int rows, int T, int Tb, float scale) {
	causal_softmax_backward_regs<4>(ds, p, rows, T, Tb, scale);
}

extern "C" __global__ void gd_causal_softmax_r8(float *p, int rows, int T, int Tb) { causal_softmax_regs<8>(p, rows, T, Tb); }
extern "C" __global__ void gd_causal_softmax_backward_r8(float *ds, const float *p, int rows, int T, int Tb, float scale) {
	causal_softmax_backward_regs<8>(ds, p, rows, T, Tb, scale);
}

extern "C" __global__ void gd_causal_softmax_r16(float *p, int rows, int T, int Tb) { causal_softmax_regs<16>(p, rows, T, Tb); }
extern "C" __global__ void gd_causal_softmax_backward_r16(float *ds, const float *p, int rows, int T, int Tb, float scale) {
	causal_softmax_backward_regs<16>(ds, p, rows, T, Tb, scale);
}

extern "C" __global__ void gd_causal_softmax_r32(float *p, int rows, int T, int Tb) { causal_softmax_regs<32>(p, rows, T, Tb); }
extern "C" __global__ void gd_causal_softmax_backward_r32(float *ds, const float *p, int rows, int T, int Tb, float scale) {
	causal_softmax_backward_regs<32>(ds, p, rows, T, Tb, scale);
}

// gd_layernorm with each row in registers (K per lane, C <= 32 K): the
// row read once, the same operations in the same order (the same bits);
// y null as gd_layernorm's.
template <int K> __device__ void layernorm_regs(float *y, float *xhat, float *invstd, const float *x, const float *gamma,
						const float *beta, int rows, int C, float invC, double eps, unsigned short *y16) {
	int lane = threadIdx.x & 31;
	for (int r = first_row(); r < rows; r += row_step()) {
		const float *row = x + (long long)r * C;
		float v[K], t[K];
#pragma unroll
		for (int k = 0; k < K; k++) {
			int j = 32 * k + lane;
			v[k] = j < C ? row[j] : 0.0f;
		}
		float mean = sum32_regs<K>(v, C) * invC;
#pragma unroll
		for (int k = 0; k < K; k++) {
			float d = v[k] - mean;
			t[k] = d * d;
		}
		float var = sum32_regs<K>(t, C) * invC;
		float inv = (float)(1.0 / sqrt((double)var + eps));
		if (lane == 0 && invstd) invstd[r] = inv;
#pragma unroll
		for (int k = 0; k < K; k++) {
			int j = 32 * k + lane;
			if (j < C) {
				float h = (v[k] - mean) * inv;
				if (xhat) xhat[(long long)r * C + j] = h;
				float o = h * gamma[j] + beta[j];
				if (y) y[(long long)r * C + j] = o;
				if (y16) y16[(long long)r * C + j] = bf16_bits(o);
			}
		}
		__syncwarp();
	}
}

// gd_layernorm_backward with each row of dy and xhat in registers.
template <int K> __device__ void layernorm_backward_regs(float *dx, const float *dy, const float *xhat, const float *invstd,
							 const float *gamma, int rows, int C, float invC, unsigned short *dx16) {
	int lane = threadIdx.x & 31;
	for (int r = first_row(); r < rows; r += row_step()) {
		const float *d = dy + (long long)r * C, *xh = xhat + (long long)r * C;
		float g[K], xv[K], t[K];
#pragma unroll
		for (int k = 0; k < K; k++) {
			int j = 32 * k + lane;
			g[k] = j < C ? d[j] * gamma[j] : 0.0f;
			xv[k] = j < C ? xh[j] : 0.0f;
			t[k] = g[k] * xv[k];
		}
		float m1 = sum32_regs<K>(g, C) * invC;
		float m2 = sum32_regs<K>(t, C) * invC;
		float inv = invstd[r];
		__syncwarp();
#pragma unroll
		for (int k = 0; k < K; k++) {
			int j = 32 * k + lane;
			if (j < C) {
				float v = inv * ((g[k] - m1) - xv[k] * m2);
				dx[(long long)r * C + j] = v;
				if (dx16) dx16[(long long)r * C + j] = bf16_bits(v);
			}
		}
		__syncwarp();
	}
}

// LayerNorm's backward with its parameters' gradients in the same pass
// (gpu/kernels' LayerNormBackward, rows in registers): the block
// blockIdx.x takes the chunk of per rows from blockIdx.x per, its warp w
// the rows w, w + 8, ... of it, each row's dx as
// layernorm_backward_regs's (the same bits), and each lane sums, for its
// columns 32 k + lane, dy xhat (each product rounded) and dy over the
// warp's rows in order; the 8 warps' sums are then added in order
// (shared memory, one of the two sums at a time) into part[blockIdx.x]
// (2 C: the dy xhat sums, then the dy sums), which gd_col_finish_w adds
// over the chunks. dy and xhat are read once for dx and the sums both.
// dx null: the sums only, in the same order (the same bits).
template <int K> __device__ void layernorm_backward_cols(float *dx, const float *dy, const float *xhat, const float *invstd,
							 const float *gamma, int rows, int C, float invC, unsigned short *dx16,
							 float *part, int per) {
	__shared__ float sh[8][32 * K];
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	int lo = blockIdx.x * per, hi = min(lo + per, rows);
	float sg[K], sb[K];
#pragma unroll
	for (int k = 0; k < K; k++) sg[k] = sb[k] = 0.0f;
	for (int r = lo + w; r < hi; r += 8) {
		const float *d = dy + (long long)r * C, *xh = xhat + (long long)r * C;
		float g[K], xv[K], t[K];
#pragma unroll
		for (int k = 0; k < K; k++) {
			int j = 32 * k + lane;
			float dv = j < C ? d[j] : 0.0f;
			xv[k] = j < C ? xh[j] : 0.0f;
			sg[k] = sg[k] + dv * xv[k];
			sb[k] = sb[k] + dv;
			g[k] = j < C ? dv * gamma[j] : 0.0f;
			t[k] = g[k] * xv[k];
		}
		if (!dx) continue; // the sums only (the same for the whole warp)
		float m1 = sum32_regs<K>(g, C) * invC;
		float m2 = sum32_regs<K>(t, C) * invC;
		float inv = invstd[r];
		__syncwarp();
#pragma unroll
		for (int k = 0; k < K; k++) {
			int j = 32 * k + lane;
			if (j < C) {
				float v = inv * ((g[k] - m1) - xv[k] * m2);
				dx[(long long)r * C + j] = v;
				if (dx16) dx16[(long long)r * C + j] = bf16_bits(v);
			}
		}
		__syncwarp();
	}
	for (int pass = 0; pass < 2; pass++) {
#pragma unroll
		for (int k = 0; k < K; k++) sh[w][32 * k + lane] = pass == 0 ? sg[k] : sb[k];
		__syncthreads();
		for (int c = threadIdx.x; c < C; c += blockDim.x) {
			float v = sh[0][c];
			for (int q = 1; q < 8; q++) v = v + sh[q][c];
			part[(long long)blockIdx.x * 2 * C + pass * C + c] = v;
		}
		__syncthreads();
	}
}

// The sums over the chunks of gd_layernorm_backward_cols: out[c] (+)= the
// sum over p of part[p 2C + c], out2[c] (+)= that of part[p 2C + C + c]
// (null: skipped). A warp a column of the 2 C: lane l adds the parts l,
// l + 32, ... in order (8 loads in flight together), then the lanes'
// sums are added in lane order: a fixed order, the same bits every run;
// enough warps to fill the GPU where the parts are many (1 MiB and
// more), and a column waits for about parts / 256 rounds of loads.
extern "C" __global__ void gd_col_finish_w(float *out, float *out2, const float *part, int parts, int C, int acc) {
	int lane = threadIdx.x & 31;
	long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5, step = (gridDim.x * (long long)blockDim.x) >> 5;
	for (long long c = warp; c < 2LL * C; c += step) {
		float *o = c < C ? out : out2;
		if (!o) continue; // the whole warp
		float s = 0.0f;
		for (int p0 = lane; p0 < parts; p0 += 32 * 8) {
			float v[8];
#pragma unroll
			for (int j = 0; j < 8; j++) v[j] = p0 + 32 * j < parts ? part[(long long)(p0 + 32 * j) * 2 * C + c] : 0.0f;
#pragma unroll
			for (int j = 0; j < 8; j++)
				if (p0 + 32 * j < parts) s = s + v[j];
		}
		float t = __shfl_sync(FULL, s, 0);
		for (int q = 1; q < 32; q++) t = t + __shfl_sync(FULL, s, q);
		if (lane == 0) {
			long long i = c < C ? c : c - C;
			o[i] = acc ? o[i] + t : t;
		}
	}
}

extern "C" __global__ void gd_layernorm_r2(float *y, float *xhat, float *invstd, const float *x, const float *gamma,
					    const float *beta, int rows, int C, float invC, double eps, unsigned short *y16) {
	layernorm_regs<2>(y, xhat, invstd, x, gamma, beta, rows, C, invC, eps, y16);
}
extern "C" __global__ void gd_layernorm_backward_r2(float *dx, const float *dy, const float *xhat, const float *invstd,
						     const float *gamma, int rows, int C, float invC, unsigned short *dx16) {
	layernorm_backward_regs<2>(dx, dy, xhat, invstd, gamma, rows, C, invC, dx16);
}

extern "C" __global__ void gd_layernorm_r4(float *y, float *xhat, float *invstd, const float *x, const float *gamma,
					    const float *beta, int rows, int C, float invC, double eps, unsigned short *y16) {
	layernorm_regs<4>(y, xhat, invstd, x, gamma, beta, rows, C, invC, eps, y16);
}
extern "C" __global__ void gd_layernorm_backward_r4(float *dx, const float *dy, const float *xhat, const float *invstd,
						     const float *gamma, int rows, int C, float invC, unsigned short *dx16) {
	layernorm_backward_regs<4>(dx, dy, xhat, invstd, gamma, rows, C, invC, dx16);
}

extern "C" __global__ void gd_layernorm_r8(float *y, float *xhat, float *invstd, const float *x, const float *gamma,
					    const float *beta, int rows, int C, float invC, double eps, unsigned short *y16) {
	layernorm_regs<8>(y, xhat, invstd, x, gamma, beta, rows, C, invC, eps, y16);
}
extern "C" __global__ void gd_layernorm_backward_r8(float *dx, const float *dy, const float *xhat, const float *invstd,
						     const float *gamma, int rows, int C, float invC, unsigned short *dx16) {
	layernorm_backward_regs<8>(dx, dy, xhat, invstd, gamma, rows, C, invC, dx16);
}

extern "C" __global__ void gd_layernorm_r16(float *y, float *xhat, float *invstd, const float *x, const float *gamma,
					    const float *beta, int rows, int C, float invC, double eps, unsigned short *y16) {
	layernorm_regs<16>(y, xhat, invstd, x, gamma, beta, rows, C, invC, eps, y16);
}
extern "C" __global__ void gd_layernorm_backward_r16(float *dx, const float *dy, const float *xhat, const float *invstd,
						     const float *gamma, int rows, int C, float invC, unsigned short *dx16) {
	layernorm_backward_regs<16>(dx, dy, xhat, invstd, gamma, rows, C, invC, dx16);
}

extern "C" __global__ void gd_layernorm_r24(float *y, float *xhat, float *invstd, const float *x, const float *gamma,
					    const float *beta, int rows, int C, float invC, double eps, unsigned short *y16) {
	layernorm_regs<24>(y, xhat, invstd, x, gamma, beta, rows, C, invC, eps, y16);
}
extern "C" __global__ void gd_layernorm_backward_r24(float *dx, const float *dy, const float *xhat, const float *invstd,
						     const float *gamma, int rows, int C, float invC, unsigned short *dx16) {
	layernorm_backward_regs<24>(dx, dy, xhat, invstd, gamma, rows, C, invC, dx16);
}

extern "C" __global__ void gd_layernorm_r32(float *y, float *xhat, float *invstd, const float *x, const float *gamma,
					    const float *beta, int rows, int C, float invC, double eps, unsigned short *y16) {
	layernorm_regs<32>(y, xhat, invstd, x, gamma, beta, rows, C, invC, eps, y16);
}
extern "C" __global__ void gd_layernorm_backward_r32(float *dx, const float *dy, const float *xhat, const float *invstd,
						     const float *gamma, int rows, int C, float invC, unsigned short *dx16) {
	layernorm_backward_regs<32>(dx, dy, xhat, invstd, gamma, rows, C, invC, dx16);
}

// ---- the gradient's global norm (train's clipGrads) ----

// part[b] = the float64 sum of squares of block b's stretch of g: the
// blocks (gridDim.x of them: a fixed number) split [0, n) into equal
// stretches in order, each summed by a tree.
extern "C" __global__ void gd_sumsq(double *part, const float *g, long long n) {
	__shared__ double s[BLOCK];
	long long per = (n + gridDim.x - 1) / gridDim.x, lo = blockIdx.x * per, hi = min(lo + per, n);
	double v = 0.0;
	for (long long i = lo + threadIdx.x; i < hi; i += BLOCK) v = v + (double)g[i] * (double)g[i];
	v = block_sum(v, s);
	if (threadIdx.x == 0) part[blockIdx.x] = v;
}

// One block: norm = sqrt(the sum of part[0..parts)) into out[0], and into
// out[1] the factor float32(max / (norm + 1e-6)) when it is below 1 and
// the norm finite, else 1 (clip_grad_norm_'s, as train computes it).
extern "C" __global__ void gd_clip_finish(double *out, const double *part, int parts, double max) {
	__shared__ double s[BLOCK];
	double v = 0.0;
	for (int i = threadIdx.x; i < parts; i += BLOCK) v = v + part[i];
	double ss = block_sum(v, s);
	if (threadIdx.x == 0) {
		double norm = sqrt(ss), coef = max / (norm + 1e-6);
		out[0] = norm;
		out[1] = coef < 1.0 && !isinf(norm) && !isnan(norm) ? (double)(float)coef : 1.0;
	}
}

// gd_layernorm_backward_cols's widths (regWidths' of gd_layernorm_backward).
extern "C" __global__ void gd_layernorm_backward_cols_r2(float *dx, const float *dy, const float *xhat, const float *invstd,
							  const float *gamma, int rows, int C, float invC, unsigned short *dx16, float *part,
							  int per) {
	layernorm_backward_cols<2>(dx, dy, xhat, invstd, gamma, rows, C, invC, dx16, part, per);
}
extern "C" __global__ void gd_layernorm_backward_cols_r4(float *dx, const float *dy, const float *xhat, const float *invstd,
							  const float *gamma, int rows, int C, float invC, unsigned short *dx16, float *part,
							  int per) {
	layernorm_backward_cols<4>(dx, dy, xhat, invstd, gamma, rows, C, invC, dx16, part, per);
}
extern "C" __global__ void gd_layernorm_backward_cols_r8(float *dx, const float *dy, const float *xhat, const float *invstd,
							  const float *gamma, int rows, int C, float invC, unsigned short *dx16, float *part,
							  int per) {
	layernorm_backward_cols<8>(dx, dy, xhat, invstd, gamma, rows, C, invC, dx16, part, per);
}
extern "C" __global__ void gd_layernorm_backward_cols_r16(float *dx, const float *dy, const float *xhat, const float *invstd,
							  const float *gamma, int rows, int C, float invC, unsigned short *dx16, float *part,
							  int per) {
	layernorm_backward_cols<16>(dx, dy, xhat, invstd, gamma, rows, C, invC, dx16, part, per);
}
extern "C" __global__ void gd_layernorm_backward_cols_r24(float *dx, const float *dy, const float *xhat, const float *invstd,
							  const float *gamma, int rows, int C, float invC, unsigned short *dx16, float *part,
							  int per) {
	layernorm_backward_cols<24>(dx, dy, xhat, invstd, gamma, rows, C, invC, dx16, part, per);
}
extern "C" __global__ void gd_layernorm_backward_cols_r32(float *dx, const float *dy, const float *xhat, const float *invstd,
							  const float *gamma, int rows, int C, float invC, unsigned short *dx16, float *part,
							  int per) {
	layernorm_backward_cols<32>(dx, dy, xhat, invstd, gamma, rows, C, invC, dx16, part, per);
}
