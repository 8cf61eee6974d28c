// gdist's convolution and pooling kernels (gpu/kernels): element-wise,
// grid-stride loops with 64-bit indices; no thread talks to another (the
// fake runs them without fibers). Compiled with --fmad=false: every
// float operation is rounded on its own, as Go computes (no fused
// multiply-adds), so sums made in the CPU path's order give its bits.

#define GRID_LOOP(i, n) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

// im2col of a batch: x (N, C, H, W) unrolled into col [C K K, N Ho Wo]:
// row (c, ki, kj), column (n, oy, ox) holds x[n, c, oy S + ki - P,
// ox S + kj - P], 0 outside the image.
extern "C" __global__ void gd_im2col(float *col, const float *x, int N, int C, int H, int W, int K, int P, int S, int Ho,
				     int Wo) {
	long long cols = (long long)N * Ho * Wo, total = (long long)C * K * K * cols;
	GRID_LOOP(i, total) {
		long long r = i / cols, j = i % cols;
		int kj = (int)(r % K), ki = (int)(r / K % K), c = (int)(r / K / K);
		int ox = (int)(j % Wo), oy = (int)(j / Wo % Ho), n = (int)(j / Wo / Ho);
		int iy = oy * S + ki - P, ix = ox * S + kj - P;
		col[i] = iy >= 0 && iy < H && ix >= 0 && ix < W ? x[(((long long)n * C + c) * H + iy) * W + ix] : 0.0f;
	}
}

// col2im: dx (N, C, H, W) = the adjoint of gd_im2col applied to col. Each
// element gathers its taps in row order (ki, then kj), from 0: the order
// in which nn's col2im adds the rows of col, without atomics.
extern "C" __global__ void gd_col2im(float *dx, const float *col, int N, int C, int H, int W, int K, int P, int S, int Ho,
				     int Wo) {
	long long cols = (long long)N * Ho * Wo, total = (long long)N * C * H * W;
	GRID_LOOP(i, total) {
		int ix = (int)(i % W), iy = (int)(i / W % H), c = (int)(i / W / H % C), n = (int)(i / W / H / C);
		long long base = (long long)n * Ho * Wo;
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
				v = v + col[((long long)(c * K + ki) * K + kj) * cols + base + (long long)oy * Wo + ox];
			}
		}
		dx[i] = v;
	}
}

// out (C, N, inner) = in (N, C, inner): a gradient in NCHW as a matrix of
// C rows of N inner, for the convolution's filter and input gradients.
extern "C" __global__ void gd_nchw_to_cnhw(float *out, const float *in, int N, int C, long long inner) {
	long long total = (long long)N * C * inner;
	GRID_LOOP(i, total) {
		long long r = i % inner;
		long long c = i / inner % C, n = i / inner / C;
		out[(c * N + n) * inner + r] = in[i];
	}
}

// y[n, c, ...] += b[c] over y (N, C, inner): a convolution's bias.
extern "C" __global__ void gd_channel_bias(float *y, const float *b, long long total, int C, long long inner) {
	GRID_LOOP(i, total) y[i] = y[i] + b[i / inner % C];
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
extern "C" __global__ void gd_maxpool2x2(float *y, unsigned char *arg, const float *x, long long planes, int H, int W) {
	int Ho = H / 2, Wo = W / 2;
	long long total = planes * Ho * Wo;
	GRID_LOOP(o, total) {
		int ox = (int)(o % Wo), oy = (int)(o / Wo % Ho);
		long long p = o / Wo / Ho;
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
extern "C" __global__ void gd_maxpool2x2_backward(float *dx, const float *dy, const unsigned char *arg, long long planes,
						  int H, int W) {
	int Ho = H / 2, Wo = W / 2;
	long long total = planes * H * W;
	GRID_LOOP(i, total) {
		int ix = (int)(i % W), iy = (int)(i / W % H);
		long long p = i / W / H;
		float v = 0.0f;
		if (iy / 2 < Ho && ix / 2 < Wo) {
			long long o = (p * Ho + iy / 2) * Wo + ix / 2;
			if (arg[o] == (iy % 2) * 2 + ix % 2) v = dy[o];
		}
		dx[i] = v;
	}
}
