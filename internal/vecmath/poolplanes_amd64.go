//go:build amd64 && !purego

package vecmath

// poolPlanesAsm says whether PoolReLUArgPlanes and PoolArgGradPlanes run
// their assembly (pool_amd64.s): where the active set is avx512, whose
// row kernels it repeats.
func poolPlanesAsm() bool { return active.name == "avx512" }

//go:noescape
func poolReLUArgPlanesAVX512(x, y *float32, arg *uint8, planes, ho, wo, w, pstride int)

//go:noescape
func poolArgGradPlanesAVX512(arg *uint8, dy, dx *float32, planes, ho, wo, w, pstride int)
