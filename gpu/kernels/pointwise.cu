// gdist's element-wise layer kernels (gpu/kernels): grid-stride loops
// with 64-bit indices (32-bit where the launch says the sizes allow), or
// 2-d grids of rows by a row's values; no thread talks to another (the
// fake runs them without fibers). Compiled with --fmad=false: every float operation is
// rounded on its own, as Go computes it (fmaf where the CPU path fuses).

#define GRID_LOOP(i, n) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

// ---- batch norm (nn.BNLayer), in float64 as nn computes it ----

// Batch norm's per-channel mean and 1/std (mi[c], mi[C + c]) from the
// statistics of gd_bn_finish (train: the running statistics rm, rv move
// toward the batch's with PyTorch's momentum and unbiased variance) or
// from the running statistics (eval).
extern "C" __global__ void gd_bn_finalize(double *mi, float *rm, float *rv, const double *stats, int C, double mom,
					  double eps, int train) {
	GRID_LOOP(c, C) {
		double mean, invstd;
		if (train) {
			double m = stats[2 * C];
			mean = stats[c] / m;
			double vr = stats[C + c] / m;
			if (vr < 0.0 || vr == 0.0) vr = 0.0; // max(vr, 0), NaN kept
			invstd = 1.0 / sqrt(vr + eps);
			double unbiased = m > 1.0 ? vr * m / (m - 1.0) : vr;
			rm[c] = (float)((1.0 - mom) * (double)rm[c] + mom * mean);
			rv[c] = (float)((1.0 - mom) * (double)rv[c] + mom * unbiased);
		} else {
			mean = (double)rm[c];
			invstd = 1.0 / sqrt((double)rv[c] + eps);
		}
		mi[c] = mean;
		mi[C + c] = invstd;
	}
}

// y = gamma xhat + beta, xhat = (x - mean) / std per channel of
// (N, C, inner), in float64 rounded once; xhat (float32) kept unless null.
// I is the index type: unsigned (32-bit division, several times cheaper)
// when the launch finds total + the grid's stride below 2^32, else 64-bit.
template <class I> __device__ void bn_norm(float *y, float *xhat, const float *x, const double *mi, const float *gamma,
					   const float *beta, int C, long long inner, long long total) {
	I in = (I)inner, nc = (I)C, n = (I)total;
	for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
		int c = (int)(i / in % nc);
		double xh = ((double)x[i] - mi[c]) * mi[C + c];
		y[i] = (float)((double)gamma[c] * xh + (double)beta[c]);
		if (xhat) xhat[i] = (float)xh;
	}
}

extern "C" __global__ void gd_bn_norm(float *y, float *xhat, const float *x, const double *mi, const float *gamma,
				      const float *beta, int C, long long inner, long long total) {
	bn_norm<unsigned long long>(y, xhat, x, mi, gamma, beta, C, inner, total);
}

extern "C" __global__ void gd_bn_norm32(float *y, float *xhat, const float *x, const double *mi, const float *gamma,
					const float *beta, int C, long long inner, long long total) {
	bn_norm<unsigned>(y, xhat, x, mi, gamma, beta, C, inner, total);
}

// dgamma = sum dy xhat, dbeta = sum dy (from gd_bn_grad_finish), rounded
// to float32, set or added.
extern "C" __global__ void gd_bn_param_grads(float *dgamma, float *dbeta, const double *sums, int C, int accumulate) {
	GRID_LOOP(c, C) {
		float g = (float)sums[C + c], b = (float)sums[c];
		if (dgamma) dgamma[c] = accumulate ? dgamma[c] + g : g;
		if (dbeta) dbeta[c] = accumulate ? dbeta[c] + b : b;
	}
}

// dx = gamma/std ((dy - mean dy) - xhat mean(dy xhat)), in float64 as nn
// (I as for bn_norm).
template <class I> __device__ void bn_dx(float *dx, const float *dy, const float *xhat, const double *sums, const double *mi,
					 const double *stats, const float *gamma, int C, long long inner, long long total) {
	double m = stats[2 * C];
	I in = (I)inner, nc = (I)C, n = (I)total;
	for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
		int c = (int)(i / in % nc);
		double k = (double)gamma[c] * mi[C + c], mdy = sums[c] / m, mdyx = sums[C + c] / m;
		dx[i] = (float)(k * (((double)dy[i] - mdy) - (double)xhat[i] * mdyx));
	}
}

extern "C" __global__ void gd_bn_dx(float *dx, const float *dy, const float *xhat, const double *sums, const double *mi,
				    const double *stats, const float *gamma, int C, long long inner, long long total) {
	bn_dx<unsigned long long>(dx, dy, xhat, sums, mi, stats, gamma, C, inner, total);
}

extern "C" __global__ void gd_bn_dx32(float *dx, const float *dy, const float *xhat, const double *sums, const double *mi,
				      const double *stats, const float *gamma, int C, long long inner, long long total) {
	bn_dx<unsigned>(dx, dy, xhat, sums, mi, stats, gamma, C, inner, total);
}

// ---- GELU (nn.GELU: x Phi(x), the exact form) ----

// gelu: embed.cuh (rows.cu's fused backward shares it).

// y = gelu(x); y may be x. y16, unless null, gets y's bf16 copy
// (bf16_bits); y null writes the copy alone.
extern "C" __global__ void gd_gelu(float *y, const float *x, long long n, unsigned short *y16) {
	GRID_LOOP(i, n) {
		float v = gelu(x[i], 0);
		if (y) y[i] = v;
		if (y16) y16[i] = bf16_bits(v);
	}
}

// dx = dy gelu'(x), the derivative computed again from x; dx may be dy.
// dx16, unless null, gets dx's bf16 copy (bf16_bits).
extern "C" __global__ void gd_gelu_backward(float *dx, const float *dy, const float *x, long long n, unsigned short *dx16) {
	GRID_LOOP(i, n) {
		float d;
		gelu(x[i], &d);
		float v = dy[i] * d;
		dx[i] = v;
		if (dx16) dx16[i] = bf16_bits(v);
	}
}

// y[r, c] = gelu(x[r, c] + bias[c]) over rows of cols: a Linear's bias
// add and the GELU after it in one pass (gpu/kernels' BiasGELU), the
// same float32 add as gd_bias_add, then gelu: bit for bit the two
// kernels. x (the product without its bias) is left as it is, for
// gd_gelu_bias_backward. The blocks' y index strides over the rows,
// their x threads over a row's columns (V a thread: 4 with float4
// accesses, cols a multiple of 4 and y, x, bias 16-byte aligned, as the
// launch checks). y16, unless null, gets y's bf16 copy (bf16_bits); y
// null writes the copy alone.
template <int V> __device__ void bias_gelu(float *y, const float *x, const float *bias, int rows, int cols, unsigned short *y16) {
	for (int r = blockIdx.y; r < rows; r += gridDim.y) {
		long long o = (long long)r * cols;
		for (int c = (blockIdx.x * blockDim.x + threadIdx.x) * V; c < cols; c += gridDim.x * blockDim.x * V) {
			if (V == 4) {
				float4 v = *(const float4 *)(x + o + c), b = *(const float4 *)(bias + c);
				float4 u = make_float4(gelu(v.x + b.x, 0), gelu(v.y + b.y, 0), gelu(v.z + b.z, 0), gelu(v.w + b.w, 0));
				if (y) *(float4 *)(y + o + c) = u;
				if (y16) {
					y16[o + c] = bf16_bits(u.x);
					y16[o + c + 1] = bf16_bits(u.y);
					y16[o + c + 2] = bf16_bits(u.z);
					y16[o + c + 3] = bf16_bits(u.w);
				}
			} else {
				float u = gelu(x[o + c] + bias[c], 0);
				if (y) y[o + c] = u;
				if (y16) y16[o + c] = bf16_bits(u);
			}
		}
	}
}

extern "C" __global__ void gd_bias_gelu(float *y, const float *x, const float *bias, int rows, int cols, unsigned short *y16) {
	bias_gelu<1>(y, x, bias, rows, cols, y16);
}

extern "C" __global__ void gd_bias_gelu4(float *y, const float *x, const float *bias, int rows, int cols, unsigned short *y16) {
	bias_gelu<4>(y, x, bias, rows, cols, y16);
}

// y[r, c] = x[r, c] + (f[r, c] + bias[c]): a Residual's add (x + fn(x))
// with the bias of the Linear that ends fn (f, its product without the
// bias) added first, the two float32 adds of gd_bias_add and gd_add in
// their order: bit for bit the two kernels (gpu/kernels'
// BiasAddResidual). y may be x; f is left as it is. The grid as
// bias_gelu's (V 4: float4, as the launch checks).
template <int V> __device__ void bias_residual(float *y, const float *x, const float *f, const float *bias, int rows, int cols) {
	for (int r = blockIdx.y; r < rows; r += gridDim.y) {
		long long o = (long long)r * cols;
		for (int c = (blockIdx.x * blockDim.x + threadIdx.x) * V; c < cols; c += gridDim.x * blockDim.x * V) {
			if (V == 4) {
				float4 u = *(const float4 *)(x + o + c), v = *(const float4 *)(f + o + c), b = *(const float4 *)(bias + c);
				*(float4 *)(y + o + c) = make_float4(u.x + (v.x + b.x), u.y + (v.y + b.y), u.z + (v.z + b.z), u.w + (v.w + b.w));
			} else
				y[o + c] = x[o + c] + (f[o + c] + bias[c]);
		}
	}
}

extern "C" __global__ void gd_bias_residual(float *y, const float *x, const float *f, const float *bias, int rows, int cols) {
	bias_residual<1>(y, x, f, bias, rows, cols);
}

extern "C" __global__ void gd_bias_residual4(float *y, const float *x, const float *f, const float *bias, int rows, int cols) {
	bias_residual<4>(y, x, f, bias, rows, cols);
}

// ---- embeddings (nn.Embedding, nn.PositionEmbedding) ----

// embed_row: embed.cuh.

// y[r] = w[ids[r]] (+ pos[r % T] unless pos is null) over rows of dim; a
// row of NaNs for an id outside the table. The blocks' y index strides
// over the rows, their x threads over a row's values (V a thread: 4 with
// float4 accesses, dim a multiple of 4 and the buffers 16-byte aligned).
template <int V> __device__ void embed(float *y, const float *ids, const float *w, const float *pos, int rows, int num, int dim,
				       int T) {
	for (int r = blockIdx.y; r < rows; r += gridDim.y) {
		long long id = embed_row(ids[r], num);
		float *yr = y + (long long)r * dim;
		const float *wr = w + (id < 0 ? 0 : id) * dim, *pr = pos ? pos + (long long)(r % T) * dim : 0;
		for (int d = (blockIdx.x * blockDim.x + threadIdx.x) * V; d < dim; d += gridDim.x * blockDim.x * V) {
			if (V == 4) {
				float4 v = *(const float4 *)(wr + d);
				if (id < 0) v = make_float4(__int_as_float(0x7fc00000), __int_as_float(0x7fc00000), __int_as_float(0x7fc00000),
							    __int_as_float(0x7fc00000));
				if (pr) {
					float4 p = *(const float4 *)(pr + d);
					v = make_float4(v.x + p.x, v.y + p.y, v.z + p.z, v.w + p.w);
				}
				*(float4 *)(yr + d) = v;
			} else {
				float v = id < 0 ? __int_as_float(0x7fc00000) : wr[d];
				if (pr) v = v + pr[d];
				yr[d] = v;
			}
		}
	}
}

extern "C" __global__ void gd_embed(float *y, const float *ids, const float *w, const float *pos, int rows, int num, int dim,
				    int T) {
	embed<1>(y, ids, w, pos, rows, num, dim, T);
}

extern "C" __global__ void gd_embed4(float *y, const float *ids, const float *w, const float *pos, int rows, int num, int dim,
				     int T) {
	embed<4>(y, ids, w, pos, rows, num, dim, T);
}

// dpos[t] (+)= the sum over the batch, in order, of dy[n, t] (dy (N, T,
// dim)): the position embedding's gradient.
extern "C" __global__ void gd_pos_backward(float *dpos, const float *dy, int N, int T, int dim, int accumulate) {
	long long total = (long long)T * dim;
	GRID_LOOP(i, total) {
		float s = 0.0f;
		for (int n = 0; n < N; n++) s = s + dy[(long long)n * total + i];
		dpos[i] = accumulate ? dpos[i] + s : s;
	}
}

// ---- attention's heads ----

// Between (N, T, ld) rows holding secs sections of H heads of D values
// side by side from column off (attention's queries, keys and values:
// secs 3), and secs (N H, T, D) arrays one after another, one matrix per
// sequence and head: heads = 1 copies the former's into the latter (x at
// src), 0 the other way (into dst). The blocks' y index strides over the
// N T rows, their x threads over a row's secs C values (C = H D), V a
// thread (4: float4 accesses, with D, ld and off multiples of 4 and the
// buffers 16-byte aligned, as the launch checks); 32-bit indices
// (AttentionGeom.check keeps them below 2^31).
template <int V> __device__ void heads_copy(float *dst, const float *src, int N, int T, int H, int D, int ld, int off, int secs,
					    int heads) {
	int C = H * D, rows = N * T, SC = secs * C, NTC = rows * C;
	for (int r = blockIdx.y; r < rows; r += gridDim.y) {
		int n = r / T, t = r - n * T;
		for (int c = (blockIdx.x * blockDim.x + threadIdx.x) * V; c < SC; c += gridDim.x * blockDim.x * V) {
			int sec = c / C, cc = c - sec * C, h = cc / D, d = cc - h * D;
			int j = r * ld + off + c, i = sec * NTC + ((n * H + h) * T + t) * D + d;
			if (V == 4) {
				if (heads)
					*(float4 *)(dst + i) = *(const float4 *)(src + j);
				else
					*(float4 *)(dst + j) = *(const float4 *)(src + i);
			} else if (heads)
				dst[i] = src[j];
			else
				dst[j] = src[i];
		}
	}
}

extern "C" __global__ void gd_heads(float *dst, const float *src, int N, int T, int H, int D, int ld, int off, int secs,
				    int heads) {
	heads_copy<1>(dst, src, N, T, H, D, ld, off, secs, heads);
}

extern "C" __global__ void gd_heads4(float *dst, const float *src, int N, int T, int H, int D, int ld, int off, int secs,
				     int heads) {
	heads_copy<4>(dst, src, N, T, H, D, ld, off, secs, heads);
}

// ---- optimizers (package optim) ----

// torch.optim.Adam (decoupled 0: weight decay wd added to the gradient)
// or AdamW (decoupled 1: p -= lrwd p first), as package optim computes
// them (AdamW: vecmath's kernel), every float32 operation rounded on its
// own: m = b1 m + c1 g; v = b2 v + (c2 g) g; p -= (step m) / (sqrt(v) /
// sqrtBC2 + eps), c1 = 1 - b1, c2 = 1 - b2, step = lr / (1 - b1^t),
// sqrtBC2 = sqrt(1 - b2^t), lrwd = lr wd.
struct adam_k {
	float wd, lrwd, b1, c1, b2, c2, sqrtBC2, eps, step;
	int decoupled;
	// one element: p, m, v updated from g
	__device__ void up(float &pi, float gi, float &mi, float &vi) const {
		if (decoupled)
			pi = pi - lrwd * pi;
		else if (wd != 0.0f)
			gi = gi + wd * pi;
		mi = b1 * mi + c1 * gi;
		vi = b2 * vi + (c2 * gi) * gi;
		float denom = sqrtf(vi) / sqrtBC2 + eps;
		pi = pi - (step * mi) / denom;
	}
};

extern "C" __global__ void gd_adam(float *p, const float *g, float *m, float *v, long long n, float wd, float lrwd, float b1,
				   float c1, float b2, float c2, float sqrtBC2, float eps, float step, int decoupled) {
	adam_k k = {wd, lrwd, b1, c1, b2, c2, sqrtBC2, eps, step, decoupled};
	GRID_LOOP(i, n) {
		float pi = p[i], mi = m[i], vi = v[i];
		k.up(pi, g[i], mi, vi);
		m[i] = mi;
		v[i] = vi;
		p[i] = pi;
	}
}

// gd_adam with float4 accesses (p, g, m, v 16-byte aligned, as the
// launch checks): the same operations on each element, the same bits;
// the last n % 4 elements one a thread.
extern "C" __global__ void gd_adam4(float *p, const float *g, float *m, float *v, long long n, float wd, float lrwd, float b1,
				    float c1, float b2, float c2, float sqrtBC2, float eps, float step, int decoupled) {
	adam_k k = {wd, lrwd, b1, c1, b2, c2, sqrtBC2, eps, step, decoupled};
	long long q = n / 4;
	float4 *p4 = (float4 *)p, *m4 = (float4 *)m, *v4 = (float4 *)v;
	const float4 *g4 = (const float4 *)g;
	GRID_LOOP(i, q) {
		float4 pi = p4[i], gi = g4[i], mi = m4[i], vi = v4[i];
		k.up(pi.x, gi.x, mi.x, vi.x);
		k.up(pi.y, gi.y, mi.y, vi.y);
		k.up(pi.z, gi.z, mi.z, vi.z);
		k.up(pi.w, gi.w, mi.w, vi.w);
		m4[i] = mi;
		v4[i] = vi;
		p4[i] = pi;
	}
	GRID_LOOP(j, n - 4 * q) {
		long long i = 4 * q + j;
		float pi = p[i], mi = m[i], vi = v[i];
		k.up(pi, g[i], mi, vi);
		m[i] = mi;
		v[i] = vi;
		p[i] = pi;
	}
}

// g *= the factor gd_clip_finish left in f[1] (nothing when it is 1).
extern "C" __global__ void gd_scale_by(float *g, long long n, const double *f) {
	float s = (float)f[1];
	if (s == 1.0f) return;
	GRID_LOOP(i, n) g[i] = g[i] * s;
}

// sq[0] = ws[0]^2: the square of a shard's norm (gd_clip_finish's, in
// ws[0]), the shard's part of the global norm's square that the ranks
// sum (ZeRO's clipping on the device).
extern "C" __global__ void gd_clip_square(double *sq, const double *ws) {
	if (blockIdx.x == 0 && threadIdx.x == 0) sq[0] = ws[0] * ws[0];
}

// The global norm, sqrt(sq[0]) (sq: the shards' squares summed), into
// ws[0], and into ws[1] the factor to scale the shard by, for gd_scale_by:
// with local the shard's norm (ws[0] on entry) and coef = max / (norm +
// 1e-6), when coef is below 1, the norm finite and local not 0, what
// gd_clip_finish gives for a bound of coef * (local + 1e-6) (the host's
// devmodel ClipShard's rounding: that bound over local + 1e-6, as a
// float32 when below 1), else 1. With exact set, the factor is
// float32(coef) itself (devmodel Stage's ClipGrads' rounding, and
// train's: the CPU's factor).
extern "C" __global__ void gd_clip_global(double *ws, const double *sq, double max, int exact) {
	if (blockIdx.x != 0 || threadIdx.x != 0) return;
	double local = ws[0], norm = sqrt(sq[0]), coef = max / (norm + 1e-6), f = 1.0;
	if (exact && coef < 1.0 && !isinf(norm) && !isnan(norm) && local != 0.0) {
		f = (double)(float)coef;
	} else if (!exact && coef < 1.0 && !isinf(norm) && !isnan(norm) && local != 0.0) {
		double bound = coef * (local + 1e-6);
		double c = bound / (local + 1e-6);
		if (c < 1.0 && !isinf(local) && !isnan(local)) f = (double)(float)c;
	}
	ws[0] = norm;
	ws[1] = f;
}

// ---- dropout (nn.Dropout) ----

// nn's rng: splitmix64's step from the state s.
__device__ unsigned long long splitmix(unsigned long long s) {
	unsigned long long z = s + 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

// y = x scale where nn's Dropout keeps the element, else 0: element i is
// element first + i of the global batch, kept when the hash of (seed, run,
// that index) as a float64 in [0, 1) is at least p (nn's keep). y may be
// x; the backward is the same call on dy.
extern "C" __global__ void gd_dropout(float *y, const float *x, long long n, double p, unsigned long long seed,
				      unsigned long long run, unsigned long long first, float scale) {
	GRID_LOOP(i, n) {
		unsigned long long idx = first + (unsigned long long)i;
		unsigned long long z = splitmix(seed ^ run * 0xd1b54a32d192ed03ull ^ idx * 0x9e3779b97f4a7c15ull);
		double u = (double)(z >> 11) / 9007199254740992.0; // 2^53
		y[i] = u >= p ? x[i] * scale : 0.0f;
	}
}

// y = a + b (nn's Residual; a residual's gradient is dy plus the
// branch's). y may be a or b.
extern "C" __global__ void gd_add(float *y, const float *a, const float *b, long long n, unsigned short *y16) {
	GRID_LOOP(i, n) {
		float v = a[i] + b[i];
		y[i] = v;
		if (y16) y16[i] = bf16_bits(v);
	}
}

// gd_add with float4 accesses (y, a, b 16-byte aligned, as the launch
// checks); the last n % 4 one a thread.
extern "C" __global__ void gd_add4(float *y, const float *a, const float *b, long long n, unsigned short *y16) {
	long long q = n / 4;
	GRID_LOOP(i, q) {
		float4 u = ((const float4 *)a)[i], w = ((const float4 *)b)[i];
		float4 v = make_float4(u.x + w.x, u.y + w.y, u.z + w.z, u.w + w.w);
		((float4 *)y)[i] = v;
		if (y16) {
			y16[4 * i] = bf16_bits(v.x);
			y16[4 * i + 1] = bf16_bits(v.y);
			y16[4 * i + 2] = bf16_bits(v.z);
			y16[4 * i + 3] = bf16_bits(v.w);
		}
	}
	GRID_LOOP(j, n - 4 * q) {
		float v = a[4 * q + j] + b[4 * q + j];
		y[4 * q + j] = v;
		if (y16) y16[4 * q + j] = bf16_bits(v);
	}
}

// ---- Tanh (nn.Tanh) and a PositionEmbedding on its own ----

// y = tanh(x) (the device's tanhf: within TanhTol of nn's math32.Tanh);
// y may be x.
extern "C" __global__ void gd_tanh(float *y, const float *x, long long n) {
	GRID_LOOP(i, n) y[i] = tanhf(x[i]);
}

// dx = (1 - y y) dy from Tanh's output y, gorgonia's tanh gradient
// operation for operation (square, subtract from one, multiply); dx may
// be dy.
extern "C" __global__ void gd_tanh_backward(float *dx, const float *dy, const float *y, long long n) {
	GRID_LOOP(i, n) {
		float v = y[i];
		dx[i] = (1.0f - v * v) * dy[i];
	}
}

// y = x + pos[i % per]: a PositionEmbedding's broadcast add over the
// batch (pos [T, dim], per = T dim); y may be x.
extern "C" __global__ void gd_add_rows(float *y, const float *x, const float *pos, long long n, long long per) {
	GRID_LOOP(i, n) y[i] = x[i] + pos[i % per];
}
