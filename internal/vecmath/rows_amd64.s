//go:build amd64 && !purego

#include "textflag.h"

// The row kernels of rows.go (AVX2, 8 lanes; n a positive multiple of 8).
// Each reproduces its ...Go twin bit for bit: the same float32 operations
// in the same order, no FMA, sums in 8 lanes (lane j gets elements 8i+j in
// order). Go's assembler takes operands right to left: VSUBPS a, b, c is
// c = b - a.

// func addToAVX(d, a *float32, n int)
TEXT ·addToAVX(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ n+16(FP), CX
at4:
	CMPQ CX, $32
	JB at1
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VADDPS (DI), Y0, Y0
	VADDPS 32(DI), Y1, Y1
	VADDPS 64(DI), Y2, Y2
	VADDPS 96(DI), Y3, Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JMP at4
at1:
	TESTQ CX, CX
	JZ atdone
	VMOVUPS (SI), Y0
	VADDPS (DI), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP at1
atdone:
	VZEROUPPER
	RET

// func addAVX(d, a, b *float32, n int)
TEXT ·addAVX(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
ad4:
	CMPQ CX, $32
	JB ad1
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VADDPS (DX), Y0, Y0
	VADDPS 32(DX), Y1, Y1
	VADDPS 64(DX), Y2, Y2
	VADDPS 96(DX), Y3, Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ $128, SI
	ADDQ $128, DX
	ADDQ $128, DI
	SUBQ $32, CX
	JMP ad4
ad1:
	TESTQ CX, CX
	JZ addone
	VMOVUPS (SI), Y0
	VADDPS (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JMP ad1
addone:
	VZEROUPPER
	RET

// func mulAVX(d, a, b *float32, n int)
TEXT ·mulAVX(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
mu4:
	CMPQ CX, $32
	JB mu1
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VMULPS (DX), Y0, Y0
	VMULPS 32(DX), Y1, Y1
	VMULPS 64(DX), Y2, Y2
	VMULPS 96(DX), Y3, Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ $128, SI
	ADDQ $128, DX
	ADDQ $128, DI
	SUBQ $32, CX
	JMP mu4
mu1:
	TESTQ CX, CX
	JZ mudone
	VMOVUPS (SI), Y0
	VMULPS (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JMP mu1
mudone:
	VZEROUPPER
	RET

// func addMulToAVX(d, a, b *float32, n int)
TEXT ·addMulToAVX(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
am1:
	TESTQ CX, CX
	JZ amdone
	VMOVUPS (SI), Y0
	VMULPS (DX), Y0, Y0
	VADDPS (DI), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JMP am1
amdone:
	VZEROUPPER
	RET

// func dotAVX(a, b *float32, n int, s *[8]float32)
TEXT ·dotAVX(SB), NOSPLIT, $0-32
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DX
	MOVQ n+16(FP), CX
	MOVQ s+24(FP), DI
	VXORPS Y0, Y0, Y0
dt1:
	TESTQ CX, CX
	JZ dtdone
	VMOVUPS (SI), Y1
	VMULPS (DX), Y1, Y1
	VADDPS Y1, Y0, Y0
	ADDQ $32, SI
	ADDQ $32, DX
	SUBQ $8, CX
	JMP dt1
dtdone:
	VMOVUPS Y0, (DI)
	VZEROUPPER
	RET

// func sqDevAVX(v *float32, n int, m float32, s *[8]float32)
TEXT ·sqDevAVX(SB), NOSPLIT, $0-32
	MOVQ v+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS m+16(FP), Y2
	MOVQ s+24(FP), DI
	VXORPS Y0, Y0, Y0
sd1:
	TESTQ CX, CX
	JZ sddone
	VMOVUPS (SI), Y1
	VSUBPS Y2, Y1, Y1
	VMULPS Y1, Y1, Y1
	VADDPS Y1, Y0, Y0
	ADDQ $32, SI
	SUBQ $8, CX
	JMP sd1
sddone:
	VMOVUPS Y0, (DI)
	VZEROUPPER
	RET

// func lnRowAVX(y, xh, x, gg, b *float32, n int, mean, inv float32)
//
// xh = (x - mean) inv; y = xh g + b.
TEXT ·lnRowAVX(SB), NOSPLIT, $0-56
	MOVQ y+0(FP), DI
	MOVQ xh+8(FP), R9
	MOVQ x+16(FP), SI
	MOVQ gg+24(FP), DX
	MOVQ b+32(FP), R8
	MOVQ n+40(FP), CX
	VBROADCASTSS mean+48(FP), Y4
	VBROADCASTSS inv+52(FP), Y5
ln1:
	TESTQ CX, CX
	JZ lndone
	VMOVUPS (SI), Y0
	VSUBPS Y4, Y0, Y0
	VMULPS Y5, Y0, Y0
	VMOVUPS Y0, (R9)
	VMULPS (DX), Y0, Y0
	VADDPS (R8), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, R8
	ADDQ $32, R9
	ADDQ $32, DI
	SUBQ $8, CX
	JMP ln1
lndone:
	VZEROUPPER
	RET

// func lnGradSumsAVX(gg, dy, gamma, xh *float32, n int, s *[16]float32)
//
// g = dy gamma; s[0:8] the lanes of g, s[8:16] those of g xh.
TEXT ·lnGradSumsAVX(SB), NOSPLIT, $0-48
	MOVQ gg+0(FP), DI
	MOVQ dy+8(FP), SI
	MOVQ gamma+16(FP), DX
	MOVQ xh+24(FP), R8
	MOVQ n+32(FP), CX
	MOVQ s+40(FP), R9
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
lg1:
	TESTQ CX, CX
	JZ lgdone
	VMOVUPS (SI), Y2
	VMULPS (DX), Y2, Y2
	VMOVUPS Y2, (DI)
	VADDPS Y2, Y0, Y0
	VMULPS (R8), Y2, Y3
	VADDPS Y3, Y1, Y1
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, R8
	ADDQ $32, DI
	SUBQ $8, CX
	JMP lg1
lgdone:
	VMOVUPS Y0, (R9)
	VMOVUPS Y1, 32(R9)
	VZEROUPPER
	RET

// func lnGradApplyAVX(dx, gg, xh *float32, n int, m1, m2, inv float32)
//
// dx = inv ((g - m1) - xh m2).
TEXT ·lnGradApplyAVX(SB), NOSPLIT, $0-44
	MOVQ dx+0(FP), DI
	MOVQ gg+8(FP), SI
	MOVQ xh+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS m1+32(FP), Y4
	VBROADCASTSS m2+36(FP), Y5
	VBROADCASTSS inv+40(FP), Y6
la1:
	TESTQ CX, CX
	JZ ladone
	VMOVUPS (SI), Y0
	VSUBPS Y4, Y0, Y0
	VMULPS (DX), Y5, Y1
	VSUBPS Y1, Y0, Y0
	VMULPS Y6, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JMP la1
ladone:
	VZEROUPPER
	RET

// func maxAVX(v *float32, n int, s *[8]float32)
//
// s = the lane-wise largest of v's groups of 8.
TEXT ·maxAVX(SB), NOSPLIT, $0-24
	MOVQ v+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ s+16(FP), DI
	VMOVUPS (SI), Y0
	ADDQ $32, SI
	SUBQ $8, CX
mx1:
	TESTQ CX, CX
	JZ mxdone
	VMAXPS (SI), Y0, Y0
	ADDQ $32, SI
	SUBQ $8, CX
	JMP mx1
mxdone:
	VMOVUPS Y0, (DI)
	VZEROUPPER
	RET

// rowmask: 8 lanes of -1 then 8 of 0; the 8 from 8-n on mask n lanes.
DATA rowmask<>+0(SB)/8, $0xffffffffffffffff
DATA rowmask<>+8(SB)/8, $0xffffffffffffffff
DATA rowmask<>+16(SB)/8, $0xffffffffffffffff
DATA rowmask<>+24(SB)/8, $0xffffffffffffffff
DATA rowmask<>+32(SB)/8, $0
DATA rowmask<>+40(SB)/8, $0
DATA rowmask<>+48(SB)/8, $0
DATA rowmask<>+56(SB)/8, $0
GLOBL rowmask<>(SB), RODATA|NOPTR, $64

// func expSubSumAVX(r *float32, n int, mx float32, c *expConsts, s *[8]float32)
//
// r = Exp32(r - mx), s its lanes, for any n > 0: the whole groups of 8,
// then the rest under a mask (lane j of the last group gets value j, the
// others +0, which leaves their sums as they are). Exp32's operations in its order:
//   y = max(y, -87)  (a NaN y stays: VMAXPS returns its second source,
//                     which is y, when either is NaN)
//   nf = (y log2e + round) - round
//   r = (y - nf ln2hi) - nf ln2lo; r2 = r r; r4 = r2 r2
//   p = ((1 + r) + (1/2 + r/6) r2) + ((1/24 + r/120) + (1/720 + r/5040) r2) r4
//   e = p 2^int32(nf)
TEXT ·expSubSumAVX(SB), NOSPLIT, $0-40
	MOVQ r+0(FP), DI
	MOVQ n+8(FP), CX
	VBROADCASTSS mx+16(FP), Y9
	MOVQ c+24(FP), R8
	MOVQ s+32(FP), SI
	VMOVUPS 0(R8), Y10   // -87
	VMOVUPS 32(R8), Y11  // log2e
	VMOVUPS 64(R8), Y12  // round
	VMOVUPS 96(R8), Y13  // ln2hi
	VMOVUPS 128(R8), Y14 // ln2lo
	VMOVUPS 160(R8), Y15 // 1
	VXORPS Y8, Y8, Y8
ex1:
	CMPQ CX, $8
	JB extail
	VMOVUPS (DI), Y0
	VSUBPS Y9, Y0, Y0 // y = v - mx
	VMAXPS Y0, Y10, Y0
	VMULPS Y11, Y0, Y1
	VADDPS Y12, Y1, Y1
	VSUBPS Y12, Y1, Y1 // nf
	VMULPS Y13, Y1, Y2
	VSUBPS Y2, Y0, Y2
	VMULPS Y14, Y1, Y3
	VSUBPS Y3, Y2, Y2 // r
	VMULPS Y2, Y2, Y3 // r2
	VMULPS Y3, Y3, Y4 // r4
	VADDPS Y15, Y2, Y5 // 1 + r
	VMULPS 224(R8), Y2, Y6
	VADDPS 192(R8), Y6, Y6
	VMULPS Y3, Y6, Y6
	VADDPS Y6, Y5, Y5 // (1 + r) + (1/2 + r/6) r2
	VMULPS 288(R8), Y2, Y6
	VADDPS 256(R8), Y6, Y6 // 1/24 + r/120
	VMULPS 352(R8), Y2, Y7
	VADDPS 320(R8), Y7, Y7 // 1/720 + r/5040
	VMULPS Y3, Y7, Y7
	VADDPS Y7, Y6, Y6
	VMULPS Y4, Y6, Y6
	VADDPS Y6, Y5, Y5 // p
	VCVTTPS2DQ Y1, Y7
	VPADDD 384(R8), Y7, Y7
	VPSLLD $23, Y7, Y7
	VMULPS Y7, Y5, Y5
	VMOVUPS Y5, (DI)
	VADDPS Y5, Y8, Y8
	ADDQ $32, DI
	SUBQ $8, CX
	JMP ex1
extail: // the last 1-7 values under a mask: lane j gets value j, as in Sum32
	TESTQ CX, CX
	JZ exdone
	LEAQ rowmask<>+32(SB), AX
	SHLQ $2, CX
	SUBQ CX, AX
	VMOVUPS (AX), Y15 // -1 in the first n lanes
	VMASKMOVPS (DI), Y15, Y0
	VSUBPS Y9, Y0, Y0 // y = v - mx
	VMAXPS Y0, Y10, Y0
	VMULPS Y11, Y0, Y1
	VADDPS Y12, Y1, Y1
	VSUBPS Y12, Y1, Y1 // nf
	VMULPS Y13, Y1, Y2
	VSUBPS Y2, Y0, Y2
	VMULPS Y14, Y1, Y3
	VSUBPS Y3, Y2, Y2 // r
	VMULPS Y2, Y2, Y3 // r2
	VMULPS Y3, Y3, Y4 // r4
	VADDPS 160(R8), Y2, Y5 // 1 + r
	VMULPS 224(R8), Y2, Y6
	VADDPS 192(R8), Y6, Y6
	VMULPS Y3, Y6, Y6
	VADDPS Y6, Y5, Y5 // (1 + r) + (1/2 + r/6) r2
	VMULPS 288(R8), Y2, Y6
	VADDPS 256(R8), Y6, Y6 // 1/24 + r/120
	VMULPS 352(R8), Y2, Y7
	VADDPS 320(R8), Y7, Y7 // 1/720 + r/5040
	VMULPS Y3, Y7, Y7
	VADDPS Y7, Y6, Y6
	VMULPS Y4, Y6, Y6
	VADDPS Y6, Y5, Y5 // p
	VCVTTPS2DQ Y1, Y7
	VPADDD 384(R8), Y7, Y7
	VPSLLD $23, Y7, Y7
	VMULPS Y7, Y5, Y5
	VMASKMOVPS Y5, Y15, (DI)
	VANDPS Y15, Y5, Y5 // +0 in the lanes past the row
	VADDPS Y5, Y8, Y8
exdone:
	VMOVUPS Y8, (SI)
	VZEROUPPER
	RET

// func scaleAVX(v *float32, n int, a float32)
TEXT ·scaleAVX(SB), NOSPLIT, $0-20
	MOVQ v+0(FP), DI
	MOVQ n+8(FP), CX
	VBROADCASTSS a+16(FP), Y1
sc1:
	TESTQ CX, CX
	JZ scdone
	VMULPS (DI), Y1, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	SUBQ $8, CX
	JMP sc1
scdone:
	VZEROUPPER
	RET

// func softmaxGradAVX(d, p *float32, n int, dot, scale float32)
//
// d = (p (d - dot)) scale.
TEXT ·softmaxGradAVX(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ p+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS dot+24(FP), Y4
	VBROADCASTSS scale+28(FP), Y5
sg1:
	TESTQ CX, CX
	JZ sgdone
	VMOVUPS (DI), Y0
	VSUBPS Y4, Y0, Y0
	VMULPS (SI), Y0, Y0
	VMULPS Y5, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP sg1
sgdone:
	VZEROUPPER
	RET

// func transpose8x8AVX(dst *float32, ldd int, src *float32, lds int)
//
// One 8 x 8 block: rows unpacked in pairs, shuffled in fours, then the
// 128-bit halves exchanged (the usual AVX 8 x 8 transpose).
TEXT ·transpose8x8AVX(SB), NOSPLIT, $0-32
	MOVQ src+16(FP), SI
	MOVQ lds+24(FP), R8
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R10 // 3 lds
	LEAQ (SI)(R8*4), R11 // row 4
	VMOVUPS (SI), Y0
	VMOVUPS (SI)(R8*1), Y1
	VMOVUPS (SI)(R8*2), Y2
	VMOVUPS (SI)(R10*1), Y3
	VMOVUPS (R11), Y4
	VMOVUPS (R11)(R8*1), Y5
	VMOVUPS (R11)(R8*2), Y6
	VMOVUPS (R11)(R10*1), Y7
	VUNPCKLPS Y1, Y0, Y8
	VUNPCKHPS Y1, Y0, Y9
	VUNPCKLPS Y3, Y2, Y10
	VUNPCKHPS Y3, Y2, Y11
	VUNPCKLPS Y5, Y4, Y12
	VUNPCKHPS Y5, Y4, Y13
	VUNPCKLPS Y7, Y6, Y14
	VUNPCKHPS Y7, Y6, Y15
	VSHUFPS $0x44, Y10, Y8, Y0
	VSHUFPS $0xEE, Y10, Y8, Y1
	VSHUFPS $0x44, Y11, Y9, Y2
	VSHUFPS $0xEE, Y11, Y9, Y3
	VSHUFPS $0x44, Y14, Y12, Y4
	VSHUFPS $0xEE, Y14, Y12, Y5
	VSHUFPS $0x44, Y15, Y13, Y6
	VSHUFPS $0xEE, Y15, Y13, Y7
	VPERM2F128 $0x20, Y4, Y0, Y8
	VPERM2F128 $0x20, Y5, Y1, Y9
	VPERM2F128 $0x20, Y6, Y2, Y10
	VPERM2F128 $0x20, Y7, Y3, Y11
	VPERM2F128 $0x31, Y4, Y0, Y12
	VPERM2F128 $0x31, Y5, Y1, Y13
	VPERM2F128 $0x31, Y6, Y2, Y14
	VPERM2F128 $0x31, Y7, Y3, Y15
	MOVQ dst+0(FP), DI
	MOVQ ldd+8(FP), R8
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R10
	LEAQ (DI)(R8*4), R11
	VMOVUPS Y8, (DI)
	VMOVUPS Y9, (DI)(R8*1)
	VMOVUPS Y10, (DI)(R8*2)
	VMOVUPS Y11, (DI)(R10*1)
	VMOVUPS Y12, (R11)
	VMOVUPS Y13, (R11)(R8*1)
	VMOVUPS Y14, (R11)(R8*2)
	VMOVUPS Y15, (R11)(R10*1)
	VZEROUPPER
	RET

// func expSubF64AVX(e *float64, v *float32, n int, m float64, c *expF64Consts) int
//
// e = math.Exp(float64(v) - m), 4 lanes at a time, with the operations of
// math.Exp's amd64 FMA path (exp_amd64.s: avxfma) in its order: the
// exponent k = round(x log2e) (CVTSD2SL: to nearest), x - k ln2U - k ln2L
// by fused negative multiply-adds, times 1/16, the Taylor polynomial by
// fused multiply-adds, squared four times through (y + 2) y, the last
// with + 1 fused, times 2^k by its bits. Arguments in [-700, 700] take
// that path in math.Exp (no overflow, no denormal); a group with any
// other (or NaN) stops the loop.
TEXT ·expSubF64AVX(SB), NOSPLIT, $0-48
	MOVQ e+0(FP), DI
	MOVQ v+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSD m+24(FP), Y15
	MOVQ c+32(FP), R8
	XORQ AX, AX
	MOVQ $1023, DX
	MOVQ DX, X14
	VPBROADCASTQ X14, Y14 // the exponent bias
xloop:
	CMPQ AX, CX
	JAE xdone
	VCVTPS2PD (SI)(AX*4), Y0
	VSUBPD Y15, Y0, Y0 // x
	VCMPPD $0x1d, 416(R8), Y0, Y1 // x >= -700 (false for NaN)
	VCMPPD $0x12, 448(R8), Y0, Y2 // x <= 700
	VANDPD Y2, Y1, Y1
	VMOVMSKPD Y1, DX
	CMPQ DX, $15
	JNE xdone
	VMULPD 0(R8), Y0, Y1
	VCVTPD2DQY Y1, X3 // k
	VCVTDQ2PD X3, Y1
	VFNMADD231PD 32(R8), Y1, Y0 // x - k ln2U
	VFNMADD231PD 64(R8), Y1, Y0 // - k ln2L
	VMULPD 96(R8), Y0, Y0 // / 16
	VMOVUPD 128(R8), Y1
	VFMADD213PD 160(R8), Y0, Y1
	VFMADD213PD 192(R8), Y0, Y1
	VFMADD213PD 224(R8), Y0, Y1
	VFMADD213PD 256(R8), Y0, Y1
	VFMADD213PD 288(R8), Y0, Y1
	VFMADD213PD 320(R8), Y0, Y1 // + 1/2
	VFMADD213PD 352(R8), Y0, Y1 // + 1
	VMULPD Y1, Y0, Y0
	VADDPD 384(R8), Y0, Y1
	VMULPD Y1, Y0, Y0
	VADDPD 384(R8), Y0, Y1
	VMULPD Y1, Y0, Y0
	VADDPD 384(R8), Y0, Y1
	VMULPD Y1, Y0, Y0
	VADDPD 384(R8), Y0, Y1
	VFMADD213PD 352(R8), Y1, Y0 // y (y + 2) + 1
	VPMOVSXDQ X3, Y3
	VPADDQ Y14, Y3, Y3
	VPSLLQ $52, Y3, Y3 // 2^k
	VMULPD Y3, Y0, Y0
	VMOVUPD Y0, (DI)(AX*8)
	ADDQ $4, AX
	JMP xloop
xdone:
	MOVQ AX, ret+40(FP)
	VZEROUPPER
	RET
