//go:build amd64 && !purego

#include "textflag.h"

// func geluAVX512(y, d, x *float32, n int, c *GELUConsts)
//
// geluAVX2 (gelu_amd64.s) 16 lanes at a time, instruction for instruction
// (the same operations on each lane, so the same bits), the constants by
// embedded broadcast from GELUConsts' first lane; n a multiple of 8, a
// last group of 8 under a mask. The AVX2 kernel's blend on x's sign and
// its AND with the exponent's range mask become mask registers. The
// derivative, which nothing reads until the backward pass, goes out by
// streaming stores (no read for ownership, no cache pollution) where d
// is 64-byte aligned, as a large buffer is; an SFENCE ends the call.
TEXT ·geluAVX512(SB), NOSPLIT, $0-40
	MOVQ y+0(FP), DI
	MOVQ d+8(FP), DX
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), CX
	MOVQ c+32(FP), R8
	VBROADCASTSS 416(R8), Z13 // 1
	VBROADCASTSS 32(R8), Z14 // 20
	XORQ R9, R9 // d's whole vectors by streaming stores if d is 64-byte aligned
	TESTQ DX, DX
	JZ nont
	MOVQ DX, AX
	ANDQ $63, AX
	JNZ nont
	MOVQ $1, R9
nont:
	MOVQ $0xffff, AX
	KMOVW AX, K3
loop:
	CMPQ CX, $16
	JAE full
	TESTQ CX, CX
	JZ done
	MOVQ $0xff, AX // the last 8
	KMOVW AX, K3
full:
	VMOVUPS.Z (SI), K3, Z0 // x
	VANDPS.BCST 0(R8), Z0, Z1 // t = |x|
	VMINPS Z1, Z14, Z1 // t = min(t, 20), NaN kept
	VMULPS Z1, Z1, Z2 // hi = t*t
	VMOVAPS Z2, Z3
	VFMSUB231PS Z1, Z1, Z3 // lo = t*t - hi
	VMULPS.BCST 64(R8), Z2, Z4 // a = -hi/2
	VCMPPS.BCST $0x1d, 96(R8), Z4, K1 // a >= -87 (false for NaN)
	VMAXPS.BCST 96(R8), Z4, Z4 // a >= -87
	VMULPS.BCST 128(R8), Z4, Z5
	VRNDSCALEPS $0, Z5, Z5 // n = round(a log2 e)
	VFNMADD231PS.BCST 160(R8), Z5, Z4
	VFNMADD231PS.BCST 192(R8), Z5, Z4 // r = a - n ln 2
	VBROADCASTSS 224(R8), Z6
	VFMADD213PS.BCST 256(R8), Z4, Z6
	VFMADD213PS.BCST 288(R8), Z4, Z6
	VFMADD213PS.BCST 320(R8), Z4, Z6
	VFMADD213PS.BCST 352(R8), Z4, Z6
	VFMADD213PS.BCST 384(R8), Z4, Z6
	VFMADD213PS Z13, Z4, Z6
	VFMADD213PS Z13, Z4, Z6 // p = e^r
	VCVTPS2DQ Z5, Z5
	VPADDD.BCST 448(R8), Z5, Z5
	VPSLLD $23, Z5, Z5 // 2^n
	VMULPS Z5, Z6, Z6 // e^(-hi/2)
	VMULPS.BCST 480(R8), Z3, Z3
	VFNMADD231PS Z3, Z6, Z6 // e = e^(-hi/2) (1 - lo/2) = e^(-t^2/2)
	VMOVAPS.Z Z6, K1, Z6 // 0 below e^-87: Phi(-t) and phi(t) are 0 in float32
	VMOVAPS Z13, Z7
	VFMADD231PS.BCST 512(R8), Z1, Z7 // 1 + k t
	VDIVPS Z7, Z13, Z8 // u
	VBROADCASTSS 832(R8), Z9
	VFMADD213PS.BCST 800(R8), Z8, Z9
	VFMADD213PS.BCST 768(R8), Z8, Z9
	VFMADD213PS.BCST 736(R8), Z8, Z9
	VFMADD213PS.BCST 704(R8), Z8, Z9
	VFMADD213PS.BCST 672(R8), Z8, Z9
	VFMADD213PS.BCST 640(R8), Z8, Z9
	VFMADD213PS.BCST 608(R8), Z8, Z9
	VFMADD213PS.BCST 576(R8), Z8, Z9
	VFMADD213PS.BCST 544(R8), Z8, Z9
	VMULPS Z8, Z9, Z9
	VMULPS Z6, Z9, Z9 // q = Phi(-t)
	VSUBPS Z9, Z13, Z10 // 1 - q
	VPMOVD2M Z0, K2
	VMOVAPS Z9, K2, Z10 // Phi(x): q where x's sign bit is set
	VMULPS Z10, Z0, Z11
	VMOVUPS Z11, K3, (DI)
	TESTQ DX, DX
	JZ next
	VMULPS Z6, Z0, Z12 // x e
	VFMADD231PS.BCST 864(R8), Z12, Z10 // Phi + x e / sqrt(2 pi)
	TESTQ R9, R9
	JZ dstore
	CMPQ CX, $16
	JB dstore
	VMOVNTPS Z10, (DX)
	JMP dnext
dstore:
	VMOVUPS Z10, K3, (DX)
dnext:
	ADDQ $64, DX
next:
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JA loop // more left (CX > 0 and no borrow)
done:
	TESTQ R9, R9
	JZ ret
	SFENCE // the streaming stores before any later load or store
ret:
	VZEROUPPER
	RET
