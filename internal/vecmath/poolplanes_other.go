//go:build !amd64 || purego

package vecmath

// poolPlanesAsm: no assembly here; the planes go row by row.
func poolPlanesAsm() bool { return false }

func poolReLUArgPlanesAVX512(x, y *float32, arg *uint8, planes, ho, wo, w, pstride int) {
	panic("vecmath: pool assembly without the assembly")
}

func poolArgGradPlanesAVX512(arg *uint8, dy, dx *float32, planes, ho, wo, w, pstride int) {
	panic("vecmath: pool assembly without the assembly")
}
