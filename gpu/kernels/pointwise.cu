// gdist's element-wise layer kernels (gpu/kernels): grid-stride loops
// with 64-bit indices; no thread talks to another (the fake runs them
// without fibers). Compiled with --fmad=false: every float operation is
// rounded on its own, as Go computes it (fmaf where the CPU path fuses).

#define GRID_LOOP(i, n) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)
