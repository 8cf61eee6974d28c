// gdist's element-wise layer kernels (gpu/kernels): grid-stride loops
// with 64-bit indices; no thread talks to another (the fake runs them
// without fibers). Compiled with --fmad=false: every float operation is
// rounded on its own, as Go computes it (fmaf where the CPU path fuses).

#define GRID_LOOP(i, n) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

// ---- batch norm (nn.BNLayer), in float64 as nn computes it ----

// Batch norm's per-channel mean and 1/std (mi[c], mi[C + c]) from the
// statistics of gd_bn_stats (train: the running statistics rm, rv move
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
extern "C" __global__ void gd_bn_norm(float *y, float *xhat, const float *x, const double *mi, const float *gamma,
				      const float *beta, int C, long long inner, long long total) {
	GRID_LOOP(i, total) {
		int c = (int)(i / inner % C);
		double xh = ((double)x[i] - mi[c]) * mi[C + c];
		y[i] = (float)((double)gamma[c] * xh + (double)beta[c]);
		if (xhat) xhat[i] = (float)xh;
	}
}

// dgamma = sum dy xhat, dbeta = sum dy (from gd_bn_grad_sums), rounded
// to float32, set or added.
extern "C" __global__ void gd_bn_param_grads(float *dgamma, float *dbeta, const double *sums, int C, int accumulate) {
	GRID_LOOP(c, C) {
		float g = (float)sums[C + c], b = (float)sums[c];
		if (dgamma) dgamma[c] = accumulate ? dgamma[c] + g : g;
		if (dbeta) dbeta[c] = accumulate ? dbeta[c] + b : b;
	}
}

// dx = gamma/std ((dy - mean dy) - xhat mean(dy xhat)), in float64 as nn.
extern "C" __global__ void gd_bn_dx(float *dx, const float *dy, const float *xhat, const double *sums, const double *mi,
				    const double *stats, const float *gamma, int C, long long inner, long long total) {
	double m = stats[2 * C];
	GRID_LOOP(i, total) {
		int c = (int)(i / inner % C);
		double k = (double)gamma[c] * mi[C + c], mdy = sums[c] / m, mdyx = sums[C + c] / m;
		dx[i] = (float)(k * (((double)dy[i] - mdy) - (double)xhat[i] * mdyx));
	}
}
