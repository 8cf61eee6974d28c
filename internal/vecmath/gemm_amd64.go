//go:build amd64 && !purego

package vecmath

// haveGemmAsm: gemm_amd64.s holds GemmTiles' tile (AVX-512 F).
const haveGemmAsm = true

// gemmTile8x32 is one 8 x 32 tile of GemmTiles (strides in elements; a
// and b may be nil when k is 0).
//
//go:noescape
func gemmTile8x32(a *float32, sai, sak int, b *float32, ldb int, c *float32, ldc, k int, alpha float32)
