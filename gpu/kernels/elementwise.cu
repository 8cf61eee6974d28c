// gdist's element-wise device kernels (gpu/kernels): grid-stride loops over
// flat float32 buffers, n elements (a 64-bit count), and the bias add over
// a 2-d grid of rows by columns. No thread talks to another, so gpu/cudafake runs them without fibers. The arithmetic uses
// the _rn intrinsics where the CPU path's result must be matched bit for
// bit: they round each operation, and the compiler may not fuse a
// multiply and an add into one (as it does by default).

// y[r, c] += bias[c]: a Linear layer's bias over a row-major [rows,
// cols] output. The blocks' y index strides over the rows, their x
// threads over a row's columns: no division per element. gd_bias_add4
// moves four columns a thread (float4: cols a multiple of 4, y and bias
// 16-byte aligned, as the launch checks).
extern "C" __global__ void gd_bias_add(float *y, const float *bias, int rows, int cols) {
	for (int r = blockIdx.y; r < rows; r += gridDim.y) {
		float *row = y + (long long)r * cols;
		for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x)
			row[c] = __fadd_rn(row[c], bias[c]);
	}
}

extern "C" __global__ void gd_bias_add4(float *y, const float *bias, int rows, int cols) {
	int q = cols / 4;
	const float4 *b4 = (const float4 *)bias;
	for (int r = blockIdx.y; r < rows; r += gridDim.y) {
		float4 *row = (float4 *)(y + (long long)r * cols);
		for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < q; c += gridDim.x * blockDim.x) {
			float4 v = row[c], b = b4[c];
			row[c] = make_float4(__fadd_rn(v.x, b.x), __fadd_rn(v.y, b.y), __fadd_rn(v.z, b.z), __fadd_rn(v.w, b.w));
		}
	}
}

// y = max(x, 0) (0 for NaN); y may be x.
extern "C" __global__ void gd_relu(float *y, const float *x, long long n, unsigned short *y16) {
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
		float v = x[i];
		v = v > 0.0f ? v : 0.0f;
		y[i] = v;
		if (y16) y16[i] = bf16_bits(v);
	}
}

// dx = y > 0 ? dy : 0, from ReLU's output y; dx may be dy. dx16, unless
// null, gets dx's bf16 copy (bf16_bits).
extern "C" __global__ void gd_relu_backward(float *dx, const float *dy, const float *y, long long n, unsigned short *dx16) {
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
		float v = y[i] > 0.0f ? dy[i] : 0.0f;
		dx[i] = v;
		if (dx16) dx16[i] = bf16_bits(v);
	}
}

// torch.optim.SGD (dampening 0, no Nesterov), as package optim on the CPU:
// d = g + wd p; with momentum (buf not null) buf = mu buf + d, d = buf;
// p -= lr d. Each operation rounded on its own: bit for bit the CPU's.
extern "C" __global__ void gd_sgd(float *p, const float *g, float *buf, long long n, float lr, float mu, float wd) {
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
		float d = __fadd_rn(g[i], __fmul_rn(wd, p[i]));
		if (buf) {
			d = __fadd_rn(__fmul_rn(mu, buf[i]), d);
			buf[i] = d;
		}
		p[i] = __fsub_rn(p[i], __fmul_rn(lr, d));
	}
}
