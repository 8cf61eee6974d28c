//go:build amd64 && !purego

#include "textflag.h"

// func geluAVX2(y, d, x *float32, n int, c *GELUConsts)
//
// y = x Phi(x) and, if d is not nil, d = Phi(x) + x phi(x), 8 lanes at a
// time (n a multiple of 8), in float32: Phi(-|x|) = exp(-x^2/2) u S(u),
// u = 1/(1 + k |x|) (the Mills-ratio fit of activation.go), exp by
// Cody-Waite reduction and a degree-7 polynomial; x^2 carried as hi + lo
// (FMA) so the exponent stays exact to float32. c holds each constant
// broadcast to 8 lanes, in the order GELUConsts documents.
TEXT ·geluAVX2(SB), NOSPLIT, $0-40
	MOVQ y+0(FP), DI
	MOVQ d+8(FP), DX
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), CX
	MOVQ c+32(FP), R8
	VMOVUPS 416(R8), Y13 // 1
	VMOVUPS 32(R8), Y14 // 20
loop:
	CMPQ CX, $8
	JB done
	VMOVUPS (SI), Y0 // x
	VANDPS 0(R8), Y0, Y1 // t = |x|
	VMINPS Y1, Y14, Y1 // t = min(t, 20), NaN kept
	VMULPS Y1, Y1, Y2 // hi = t*t
	VMOVAPS Y2, Y3
	VFMSUB231PS Y1, Y1, Y3 // lo = t*t - hi
	VMULPS 64(R8), Y2, Y4 // a = -hi/2
	VCMPPS $0x1d, 96(R8), Y4, Y15 // a >= -87 (false for NaN)
	VMAXPS 96(R8), Y4, Y4 // a >= -87
	VMULPS 128(R8), Y4, Y5
	VROUNDPS $0, Y5, Y5 // n = round(a log2 e)
	VFNMADD231PS 160(R8), Y5, Y4
	VFNMADD231PS 192(R8), Y5, Y4 // r = a - n ln 2
	VMOVUPS 224(R8), Y6
	VFMADD213PS 256(R8), Y4, Y6
	VFMADD213PS 288(R8), Y4, Y6
	VFMADD213PS 320(R8), Y4, Y6
	VFMADD213PS 352(R8), Y4, Y6
	VFMADD213PS 384(R8), Y4, Y6
	VFMADD213PS Y13, Y4, Y6
	VFMADD213PS Y13, Y4, Y6 // p = e^r
	VCVTPS2DQ Y5, Y5
	VPADDD 448(R8), Y5, Y5
	VPSLLD $23, Y5, Y5 // 2^n
	VMULPS Y5, Y6, Y6 // e^(-hi/2)
	VMULPS 480(R8), Y3, Y3
	VFNMADD231PS Y3, Y6, Y6 // e = e^(-hi/2) (1 - lo/2) = e^(-t^2/2)
	VANDPS Y15, Y6, Y6 // 0 below e^-87: Phi(-t) and phi(t) are 0 in float32
	VMOVAPS Y13, Y7
	VFMADD231PS 512(R8), Y1, Y7 // 1 + k t
	VDIVPS Y7, Y13, Y8 // u
	VMOVUPS 832(R8), Y9
	VFMADD213PS 800(R8), Y8, Y9
	VFMADD213PS 768(R8), Y8, Y9
	VFMADD213PS 736(R8), Y8, Y9
	VFMADD213PS 704(R8), Y8, Y9
	VFMADD213PS 672(R8), Y8, Y9
	VFMADD213PS 640(R8), Y8, Y9
	VFMADD213PS 608(R8), Y8, Y9
	VFMADD213PS 576(R8), Y8, Y9
	VFMADD213PS 544(R8), Y8, Y9
	VMULPS Y8, Y9, Y9
	VMULPS Y6, Y9, Y9 // q = Phi(-t)
	VSUBPS Y9, Y13, Y10 // 1 - q
	VBLENDVPS Y0, Y9, Y10, Y10 // Phi(x): q where x's sign bit is set
	VMULPS Y10, Y0, Y11
	VMOVUPS Y11, (DI)
	TESTQ DX, DX
	JZ next
	VMULPS Y6, Y0, Y12 // x e
	VFMADD231PS 864(R8), Y12, Y10 // Phi + x e / sqrt(2 pi)
	VMOVUPS Y10, (DX)
	ADDQ $32, DX
next:
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP loop
done:
	VZEROUPPER
	RET
