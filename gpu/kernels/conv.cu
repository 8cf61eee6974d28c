// gdist's convolution and pooling kernels (gpu/kernels): element-wise,
// grid-stride loops with 32-bit unsigned indices (ConvGeom.check and
// MaxPool2d keep every tensor below 2^31 elements, so an index plus the
// grid's stride stays below 2^32: 32-bit division is several times
// cheaper than 64-bit); no thread talks to another (the fake runs them
// without fibers). Compiled with --fmad=false: every
// float operation is rounded on its own, as Go computes (no fused
// multiply-adds), so sums made in the CPU path's order give its bits.

#define GRID_LOOP(i, n) for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < (unsigned)(n); i += gridDim.x * blockDim.x)

// im2col of a batch: x (N, C, H, W) unrolled into col [C K K, N Ho Wo]:
// row (c, ki, kj), column (n, oy, ox) holds x[n, c, oy S + ki - P,
// ox S + kj - P], 0 outside the image.
extern "C" __global__ void gd_im2col(float *col, const float *x, int N, int C, int H, int W, int K, int P, int S, int Ho,
				     int Wo) {
	unsigned cols = (unsigned)N * Ho * Wo, total = (unsigned)C * K * K * cols, k = K, wo = Wo, ho = Ho;
	GRID_LOOP(i, total) {
		unsigned r = i / cols, j = i - r * cols, rk = r / k, jw = j / wo;
		int kj = (int)(r - rk * k), ki = (int)(rk % k), c = (int)(rk / k);
		int ox = (int)(j - jw * wo), oy = (int)(jw % ho), n = (int)(jw / ho);
		int iy = oy * S + ki - P, ix = ox * S + kj - P;
		col[i] = iy >= 0 && iy < H && ix >= 0 && ix < W ? x[((n * C + c) * H + iy) * W + ix] : 0.0f;
	}
}

// col2im: dx (N, C, H, W) = the adjoint of gd_im2col applied to col. Each
// element gathers its taps in row order (ki, then kj), from 0: the order
// in which nn's col2im adds the rows of col, without atomics.
extern "C" __global__ void gd_col2im(float *dx, const float *col, int N, int C, int H, int W, int K, int P, int S, int Ho,
				     int Wo) {
	unsigned cols = (unsigned)N * Ho * Wo, total = (unsigned)N * C * H * W, w = W, h = H, nc = C;
	GRID_LOOP(i, total) {
		unsigned iw = i / w, iwh = iw / h;
		int ix = (int)(i - iw * w), iy = (int)(iw - iwh * h), c = (int)(iwh % nc), n = (int)(iwh / nc);
		unsigned base = (unsigned)n * Ho * Wo;
		float v = 0.0f;
		for (int ki = 0; ki < K; ki++) {
			int ty = iy + P - ki;
			if (ty < 0 || ty % S) continue;
			int oy = ty / S;
			if (oy >= Ho) continue;
			for (int kj = 0; kj < K; kj++) {
				int tx = ix + P - kj;
				if (tx < 0 || tx % S) continue;
				int ox = tx / S;
				if (ox >= Wo) continue;
				v = v + col[((c * K + ki) * K + kj) * cols + base + oy * Wo + ox];
			}
		}
		dx[i] = v;
	}
}

// out (C, N, inner) = in (N, C, inner): a gradient in NCHW as a matrix of
// C rows of N inner, for the convolution's filter and input gradients.
extern "C" __global__ void gd_nchw_to_cnhw(float *out, const float *in, int N, int C, int inner) {
	unsigned total = (unsigned)N * C * inner, in_ = inner, nc = C;
	GRID_LOOP(i, total) {
		unsigned p = i / in_, r = i - p * in_, c = p % nc, n = p / nc;
		out[(c * N + n) * in_ + r] = in[i];
	}
}

// y[n, c, ...] += b[c] over y (N, C, inner): a convolution's bias.
extern "C" __global__ void gd_channel_bias(float *y, const float *b, int total, int C, int inner) {
	unsigned in_ = inner, nc = C;
	GRID_LOOP(i, total) y[i] = y[i] + b[i / in_ % nc];
}

// The order of floats as integers (-0 below +0; a NaN with the sign bit
// clear above +Inf, one with it set below -Inf): nn's orderKey.
__device__ int order_key(float v) {
	int b = __float_as_int(v);
	return b ^ ((b >> 31) & 0x7fffffff);
}

// 2x2 max pooling, stride 2, over planes (H, W) (an odd last row or
// column dropped): y the window's maximum by order_key, the first in
// row-major order among equals; arg which (0, 1: top row; 2, 3: bottom).
extern "C" __global__ void gd_maxpool2x2(float *y, unsigned char *arg, const float *x, int planes, int H, int W) {
	unsigned Ho = H / 2, Wo = W / 2, total = (unsigned)planes * Ho * Wo;
	GRID_LOOP(o, total) {
		unsigned ow = o / Wo, p = ow / Ho, ox = o - ow * Wo, oy = ow - p * Ho;
		const float *top = x + (p * H + 2 * oy) * W + 2 * ox, *bot = top + W;
		float v[4] = {top[0], top[1], bot[0], bot[1]};
		int a = 0, best = order_key(v[0]);
		for (int j = 1; j < 4; j++) {
			int kj = order_key(v[j]);
			if (kj > best) {
				best = kj;
				a = j;
			}
		}
		y[o] = v[a];
		arg[o] = (unsigned char)a;
	}
}

// The gradient of gd_maxpool2x2: every element of dx (planes, H, W) is dy
// of its window's output where arg names it, else 0.
extern "C" __global__ void gd_maxpool2x2_backward(float *dx, const float *dy, const unsigned char *arg, int planes, int H,
						  int W) {
	unsigned Ho = H / 2, Wo = W / 2, total = (unsigned)planes * H * W, h = H, w = W;
	GRID_LOOP(i, total) {
		unsigned iw = i / w, p = iw / h, ix = i - iw * w, iy = iw - p * h;
		float v = 0.0f;
		if (iy / 2 < Ho && ix / 2 < Wo) {
			unsigned o = (p * Ho + iy / 2) * Wo + ix / 2;
			if (arg[o] == (iy % 2) * 2 + ix % 2) v = dy[o];
		}
		dx[i] = v;
	}
}
