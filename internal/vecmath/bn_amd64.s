//go:build amd64 && !purego

#include "textflag.h"

// Batch-norm kernels in float64 (as nn's batch norm computes), 8 values a
// register: sums over 4 (or 2 + 2) running registers, a last partial
// group under a mask.

// TAILMASK sets K1 to the low CX bits (CX < 8) for the last group.
#define TAILMASK \
	MOVQ $1, AX \
	SHLQ CX, AX \
	DECQ AX \
	KMOVB AX, K1

// HSUM adds the 8 lanes of Z0 into X0's low lane.
#define HSUM \
	VEXTRACTF64X4 $1, Z0, Y1 \
	VADDPD Y1, Y0, Y0 \
	VEXTRACTF128 $1, Y0, X1 \
	VADDPD X1, X0, X0 \
	VPERMILPD $1, X0, X1 \
	VADDSD X1, X0, X0

// func sumF64AVX512(x *float32, n int) float64
TEXT ·sumF64AVX512(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VXORPD Z0, Z0, Z0
	VXORPD Z2, Z2, Z2
	VXORPD Z3, Z3, Z3
	VXORPD Z4, Z4, Z4
s32:
	CMPQ CX, $32
	JB s8
	VCVTPS2PD (SI), Z5
	VCVTPS2PD 32(SI), Z6
	VCVTPS2PD 64(SI), Z7
	VCVTPS2PD 96(SI), Z8
	VADDPD Z5, Z0, Z0
	VADDPD Z6, Z2, Z2
	VADDPD Z7, Z3, Z3
	VADDPD Z8, Z4, Z4
	ADDQ $128, SI
	SUBQ $32, CX
	JMP s32
s8:
	CMPQ CX, $8
	JB stail
	VCVTPS2PD (SI), Z5
	VADDPD Z5, Z0, Z0
	ADDQ $32, SI
	SUBQ $8, CX
	JMP s8
stail:
	TESTQ CX, CX
	JZ sdone
	TAILMASK
	VMOVUPS.Z (SI), K1, Y5
	VCVTPS2PD Y5, Z5
	VADDPD Z5, Z0, Z0
sdone:
	VADDPD Z2, Z0, Z0
	VADDPD Z4, Z3, Z3
	VADDPD Z3, Z0, Z0
	HSUM
	VMOVSD X0, ret+16(FP)
	VZEROUPPER
	RET

// func sqDevF64AVX512(x *float32, n int, mu float64) float64
//
// The sum of (float64(x[i]) - mu)^2.
TEXT ·sqDevF64AVX512(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSD mu+16(FP), Z9
	VXORPD Z0, Z0, Z0
	VXORPD Z2, Z2, Z2
	VXORPD Z3, Z3, Z3
	VXORPD Z4, Z4, Z4
q32:
	CMPQ CX, $32
	JB q8
	VCVTPS2PD (SI), Z5
	VCVTPS2PD 32(SI), Z6
	VCVTPS2PD 64(SI), Z7
	VCVTPS2PD 96(SI), Z8
	VSUBPD Z9, Z5, Z5
	VSUBPD Z9, Z6, Z6
	VSUBPD Z9, Z7, Z7
	VSUBPD Z9, Z8, Z8
	VMULPD Z5, Z5, Z5
	VMULPD Z6, Z6, Z6
	VMULPD Z7, Z7, Z7
	VMULPD Z8, Z8, Z8
	VADDPD Z5, Z0, Z0
	VADDPD Z6, Z2, Z2
	VADDPD Z7, Z3, Z3
	VADDPD Z8, Z4, Z4
	ADDQ $128, SI
	SUBQ $32, CX
	JMP q32
q8:
	CMPQ CX, $8
	JB qtail
	VCVTPS2PD (SI), Z5
	VSUBPD Z9, Z5, Z5
	VMULPD Z5, Z5, Z5
	VADDPD Z5, Z0, Z0
	ADDQ $32, SI
	SUBQ $8, CX
	JMP q8
qtail:
	TESTQ CX, CX
	JZ qdone
	TAILMASK
	VMOVUPS.Z (SI), K1, Y5
	VCVTPS2PD Y5, Z5
	VSUBPD Z9, Z5, K1, Z5
	VMULPD Z5, Z5, Z5
	VADDPD Z5, Z0, Z0
qdone:
	VADDPD Z2, Z0, Z0
	VADDPD Z4, Z3, Z3
	VADDPD Z3, Z0, Z0
	HSUM
	VMOVSD X0, ret+24(FP)
	VZEROUPPER
	RET

// func sumDotF64AVX512(d, e *float32, n int, out *[2]float64)
//
// out = [sum of float64(d[i]), sum of float64(d[i]) * float64(e[i])].
TEXT ·sumDotF64AVX512(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), SI
	MOVQ e+8(FP), DI
	MOVQ n+16(FP), CX
	MOVQ out+24(FP), DX
	VXORPD Z0, Z0, Z0 // sum d
	VXORPD Z2, Z2, Z2
	VXORPD Z3, Z3, Z3 // sum d*e
	VXORPD Z4, Z4, Z4
d16:
	CMPQ CX, $16
	JB d8
	VCVTPS2PD (SI), Z5
	VCVTPS2PD 32(SI), Z6
	VCVTPS2PD (DI), Z7
	VCVTPS2PD 32(DI), Z8
	VADDPD Z5, Z0, Z0
	VADDPD Z6, Z2, Z2
	VMULPD Z7, Z5, Z7
	VMULPD Z8, Z6, Z8
	VADDPD Z7, Z3, Z3
	VADDPD Z8, Z4, Z4
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JMP d16
d8:
	CMPQ CX, $8
	JB dtail
	VCVTPS2PD (SI), Z5
	VCVTPS2PD (DI), Z7
	VADDPD Z5, Z0, Z0
	VMULPD Z7, Z5, Z7
	VADDPD Z7, Z3, Z3
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP d8
dtail:
	TESTQ CX, CX
	JZ ddone
	TAILMASK
	VMOVUPS.Z (SI), K1, Y5
	VMOVUPS.Z (DI), K1, Y7
	VCVTPS2PD Y5, Z5
	VCVTPS2PD Y7, Z7
	VADDPD Z5, Z0, Z0
	VMULPD Z7, Z5, Z7
	VADDPD Z7, Z3, Z3
ddone:
	VADDPD Z2, Z0, Z0
	VADDPD Z4, Z3, Z3
	HSUM
	VMOVSD X0, (DX)
	VMOVAPD Z3, Z0
	HSUM
	VMOVSD X0, 8(DX)
	VZEROUPPER
	RET

// func bnNormAVX512(x, out, xhat *float32, n int, c *[4]float64)
//
// With c = [mu, is, g, b]: xh = (float64(x[i]) - mu) * is, out[i] =
// float32(g*xh + b) and, unless xhat is nil, xhat[i] = float32(xh): the
// same float64 operations, in the same order, as nn's loop.
TEXT ·bnNormAVX512(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ out+8(FP), DI
	MOVQ xhat+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ c+32(FP), AX
	VBROADCASTSD (AX), Z10
	VBROADCASTSD 8(AX), Z11
	VBROADCASTSD 16(AX), Z12
	VBROADCASTSD 24(AX), Z13
	MOVQ $0xff, AX
	KMOVB AX, K1
n8:
	CMPQ CX, $8
	JB ntail
nbody:
	VMOVUPS.Z (SI), K1, Y5
	VCVTPS2PD Y5, Z5
	VSUBPD Z10, Z5, Z5
	VMULPD Z11, Z5, Z5 // xh
	VMULPD Z12, Z5, Z6
	VADDPD Z13, Z6, Z6
	VCVTPD2PS Z6, Y6
	VMOVUPS Y6, K1, (DI)
	TESTQ DX, DX
	JZ nnext
	VCVTPD2PS Z5, Y5
	VMOVUPS Y5, K1, (DX)
	ADDQ $32, DX
nnext:
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JA n8
	JMP ndone
ntail:
	TESTQ CX, CX
	JZ ndone
	TAILMASK
	MOVQ $8, CX
	JMP nbody
ndone:
	VZEROUPPER
	RET

// func bnGradAVX512(dy, xhat, out *float32, n int, c *[3]float64)
//
// With c = [k, mdy, mdyx]: out[i] = float32(k * (float64(dy[i]) - mdy -
// float64(xhat[i])*mdyx)), the same float64 operations as nn's loop.
TEXT ·bnGradAVX512(SB), NOSPLIT, $0-40
	MOVQ dy+0(FP), SI
	MOVQ xhat+8(FP), DX
	MOVQ out+16(FP), DI
	MOVQ n+24(FP), CX
	MOVQ c+32(FP), AX
	VBROADCASTSD (AX), Z10
	VBROADCASTSD 8(AX), Z11
	VBROADCASTSD 16(AX), Z12
	MOVQ $0xff, AX
	KMOVB AX, K1
g8:
	CMPQ CX, $8
	JB gtail
gbody:
	VMOVUPS.Z (SI), K1, Y5
	VMOVUPS.Z (DX), K1, Y6
	VCVTPS2PD Y5, Z5
	VCVTPS2PD Y6, Z6
	VSUBPD Z11, Z5, Z5
	VMULPD Z12, Z6, Z6
	VSUBPD Z6, Z5, Z5
	VMULPD Z5, Z10, Z5
	VCVTPD2PS Z5, Y5
	VMOVUPS Y5, K1, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JA g8
	JMP gdone
gtail:
	TESTQ CX, CX
	JZ gdone
	TAILMASK
	MOVQ $8, CX
	JMP gbody
gdone:
	VZEROUPPER
	RET
