package gemm

// SetPointerCache sets the pointer arrays' chunk size and limit
// (batched2.go) and returns the function that restores them.
func SetPointerCache(chunk, limit int) func() {
	c, l := ptrChunkBytes, ptrCacheLimit
	ptrChunkBytes, ptrCacheLimit = chunk, limit
	return func() { ptrChunkBytes, ptrCacheLimit = c, l }
}
