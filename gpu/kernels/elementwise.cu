// gdist's element-wise device kernels (gpu/kernels): grid-stride loops over
// flat float32 buffers, n elements (a 64-bit count). No thread talks to
// another, so gpu/cudafake runs them without fibers. The arithmetic uses
// the _rn intrinsics where the CPU path's result must be matched bit for
// bit: they round each operation, and the compiler may not fuse a
// multiply and an add into one (as it does by default).

// y[i] += bias[i % cols]: a Linear layer's bias over a row-major
// [rows, cols] output.
extern "C" __global__ void gd_bias_add(float *y, const float *bias, long long n, int cols) {
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
		y[i] = __fadd_rn(y[i], bias[i % cols]);
}

// y = max(x, 0) (0 for NaN); y may be x.
extern "C" __global__ void gd_relu(float *y, const float *x, long long n) {
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
		float v = x[i];
		y[i] = v > 0.0f ? v : 0.0f;
	}
}

// dx = y > 0 ? dy : 0, from ReLU's output y; dx may be dy.
extern "C" __global__ void gd_relu_backward(float *dx, const float *dy, const float *y, long long n) {
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
		dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
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
