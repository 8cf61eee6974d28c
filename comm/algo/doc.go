// Package algo implements comm.Comm once, over any point-to-point
// Transport: argument checks, per-Comm ordering and sequence numbers,
// sub-groups (Split), failure handling (the first error poisons the Comm and
// aborts the group on every member), and the collective algorithms, one file
// per collective:
//
//   - allreduce.go: recursive doubling (small; non-powers of two fold the
//     extra ranks in and out) and the chunked, pipelined ring
//     (reduce-scatter then all-gather, with each step's chunks leaving as
//     soon as the previous step delivered them: pipeline.go).
//   - broadcast.go: binomial tree (small) and pipelined chain (large).
//   - reduce.go: binomial tree (small) and ring reduce-scatter plus gather.
//   - gather.go: ring all-gather, direct gather and scatter, ring
//     reduce-scatter, pairwise all-to-all and the dissemination barrier.
//   - kernels.go: the element-wise reductions for every dtype (bfloat16 and
//     float16 reduced in float32).
//   - tuning.go: the alpha-beta-gamma cost model that picks algorithms by
//     message size and group size, and the GDIST_ALGO / GDIST_CHUNK_BYTES
//     overrides.
//
// Every message carries a header with the op, sequence number, dtype,
// count, reduction, root, algorithm and step, which the transport checks
// before it writes a byte, so ranks that disagree get an error naming both
// sides rather than wrong data. Transports: comm/inproc and comm/tcp.
package algo
