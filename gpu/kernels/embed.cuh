// embed.cuh: what the embedding's kernels in pointwise.cu (forward) and
// rows.cu (the weight gradient) share (gpu/kernels' Programs put it
// before their source).

// The row of a table of num rows that id names (nn's ids are float32),
// or -1 when id is not an integer in [0, num).
__device__ long long embed_row(float id, int num) {
	return id >= 0.0f && id < (float)num && id == floorf(id) ? (long long)id : -1;
}
