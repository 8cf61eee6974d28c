package vecmath

// GemmTiles sets C = alpha A B for A of m x k, B of k x n and C of m x n,
// where A's element (i, l) is a[i*sai + l*sak] (row-major A: sai = lda,
// sak = 1; A stored transposed: sai = 1, sak = lda), B's (l, j) is
// b[l*ldb + j] and C's (i, j) c[i*ldc + j], in 8 x 32 tiles of AVX-512
// assembly: each C element the sum over l in order of fused multiply-adds
// from 0, then times alpha (gemmTileGo). It is for the small products of
// attention, where a BLAS's packing and call cost more than the
// arithmetic. It does them and returns true only where the avx512 set is
// active, m is a multiple of 8, n of 32, and the slices hold every
// element; otherwise it returns false and writes nothing.
func GemmTiles(m, n, k int, alpha float32, a []float32, sai, sak int, b []float32, ldb int, c []float32, ldc int) bool {
	if !haveGemmAsm || active.name != "avx512" || m <= 0 || n <= 0 || k < 0 || m%8 != 0 || n%32 != 0 || sai < 0 || sak < 0 || ldb < n || ldc < n {
		return false
	}
	if k > 0 && ((m-1)*sai+(k-1)*sak >= len(a) || (k-1)*ldb+n > len(b)) || (m-1)*ldc+n > len(c) {
		return false
	}
	for i := 0; i < m; i += 8 {
		for j := 0; j < n; j += 32 {
			var ap, bp *float32
			if k > 0 {
				ap, bp = &a[i*sai], &b[j]
			}
			gemmTile8x32(ap, sai, sak, bp, ldb, &c[i*ldc+j], ldc, k, alpha)
		}
	}
	return true
}

// gemmTileGo is one 8 x 32 tile as the assembly computes it: fused
// multiply-adds in l's order from 0, then alpha times the sum.
func gemmTileGo(a []float32, sai, sak int, b []float32, ldb int, c []float32, ldc, k int, alpha float32) {
	for i := 0; i < 8; i++ {
		for j := 0; j < 32; j++ {
			var s float32
			for l := 0; l < k; l++ {
				s = fma32(a[i*sai+l*sak], b[l*ldb+j], s)
			}
			c[i*ldc+j] = alpha * s
		}
	}
}
