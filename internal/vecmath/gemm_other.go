//go:build !amd64 || purego

package vecmath

// haveGemmAsm: no assembly here; GemmTiles always declines.
const haveGemmAsm = false

func gemmTile8x32(a *float32, sai, sak int, b *float32, ldb int, c *float32, ldc, k int, alpha float32) {
	panic("vecmath: gemm tile assembly without the assembly")
}
