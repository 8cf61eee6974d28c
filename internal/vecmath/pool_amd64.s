//go:build amd64 && !purego

#include "textflag.h"

// POOL8 pools the 8 windows of Z0 (top row) and Z1 (bottom row): the
// outputs' bits into Y8, their winner codes into X9's low 8 bytes.
#define POOL8 \
	VPSRAD $31, Z0, Z2 \
	VPANDD Z31, Z2, Z2 \
	VPXORD Z2, Z0, Z0 \
	VPSRAD $31, Z1, Z3 \
	VPANDD Z31, Z3, Z3 \
	VPXORD Z3, Z1, Z1 \
	VPMAXSD Z1, Z0, Z4 \
	VPSHUFD $0xB1, Z4, Z5 \
	VPMAXSD Z5, Z4, Z4 \
	VPMAXSD Z30, Z4, Z4 \
	VPCMPEQD Z4, Z0, K1 \
	VPCMPEQD Z4, Z1, K2 \
	VPCMPEQD Z30, Z4, K3 \
	VMOVDQA32 Z29, Z6 \
	VMOVDQA32 Z28, K2, Z6 \
	VMOVDQA32 Z27, K1, Z6 \
	VPSHUFD $0xB1, Z6, Z7 \
	VPMINSD Z7, Z6, Z6 \
	VMOVDQA32 Z26, K3, Z6 \
	VPMOVQD Z4, Y8 \
	VPMOVQB Z6, X9

// func poolReLUArgAVX512(top, bot, y *float32, arg *uint8, n int)
//
// n outputs (a last group of fewer than 8 under masks) of a 2x2 max-pool followed by ReLU over one
// pair of input rows (top and bot, 2n values each), with the index of the
// window's winner (0 top-left, 1 top-right, 2 bottom-left, 3
// bottom-right, the first in that order among equals; 4 when the output
// is 0): order-preserving integer keys, as nn's scalar loop compares.
TEXT ·poolReLUArgAVX512(SB), NOSPLIT, $0-40
	MOVQ top+0(FP), SI
	MOVQ bot+8(FP), DI
	MOVQ y+16(FP), DX
	MOVQ arg+24(FP), BX
	MOVQ n+32(FP), CX
	MOVL $0x7fffffff, AX
	VPBROADCASTD AX, Z31
	VPXORD Z30, Z30, Z30
	MOVL $7, AX
	VPBROADCASTD AX, Z29
	MOVQ $0x0000000300000002, AX
	VPBROADCASTQ AX, Z28 // bottom codes 2, 3
	MOVQ $0x0000000100000000, AX
	VPBROADCASTQ AX, Z27 // top codes 0, 1
	MOVL $4, AX
	VPBROADCASTD AX, Z26
loop:
	CMPQ CX, $8
	JB tail
	VMOVDQU32 (SI), Z0
	VMOVDQU32 (DI), Z1
	POOL8
	VMOVDQU Y8, (DX)
	MOVQ X9, (BX)
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $32, DX
	ADDQ $8, BX
	SUBQ $8, CX
	JMP loop
tail:
	TESTQ CX, CX
	JZ done
	// The last 1-7 outputs: loads and stores under masks.
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVB AX, K5 // outputs
	MOVQ CX, R8
	SHLQ $1, R8
	MOVQ $1, AX
	MOVQ R8, CX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K4 // inputs
	VMOVDQU32.Z (SI), K4, Z0
	VMOVDQU32.Z (DI), K4, Z1
	POOL8
	VMOVDQU32 Y8, K5, (DX)
	VMOVDQU8 X9, K5, (BX)
done:
	VZEROUPPER
	RET

// func poolReLUArgPlanesAVX512(x, y *float32, arg *uint8, planes, ho, wo, w, pstride int)
//
// poolReLUArgAVX512 over ho output rows of wo outputs in each of planes
// planes: output row oy of plane p from the input rows at x + p*pstride +
// 2*oy*w and w further (w, pstride in elements), into the next wo
// elements of y and arg. One call for what nn made planes*ho calls for.
TEXT ·poolReLUArgPlanesAVX512(SB), NOSPLIT, $0-64
	MOVQ x+0(FP), R8
	MOVQ y+8(FP), DX
	MOVQ arg+16(FP), BX
	MOVQ planes+24(FP), R9
	MOVQ ho+32(FP), R10
	MOVQ wo+40(FP), R11
	MOVQ w+48(FP), R12
	SHLQ $2, R12 // input row stride, bytes
	MOVQ pstride+56(FP), R13
	SHLQ $2, R13 // plane stride, bytes
	MOVL $0x7fffffff, AX
	VPBROADCASTD AX, Z31
	VPXORD Z30, Z30, Z30
	MOVL $7, AX
	VPBROADCASTD AX, Z29
	MOVQ $0x0000000300000002, AX
	VPBROADCASTQ AX, Z28 // bottom codes 2, 3
	MOVQ $0x0000000100000000, AX
	VPBROADCASTQ AX, Z27 // top codes 0, 1
	MOVL $4, AX
	VPBROADCASTD AX, Z26
	// The masks of a row's last 1-7 outputs (wo mod 8) and their inputs.
	MOVQ R11, CX
	ANDQ $7, CX
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVB AX, K5 // outputs
	SHLQ $1, CX
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K4 // inputs
pplane:
	TESTQ R9, R9
	JZ pdone
	MOVQ R8, R14 // the row pair's top row
	MOVQ R10, R15 // output rows left in the plane
prow:
	TESTQ R15, R15
	JZ pnextplane
	MOVQ R14, SI
	LEAQ (R14)(R12*1), DI
	MOVQ R11, CX
ploop:
	CMPQ CX, $8
	JB ptail
	VMOVDQU32 (SI), Z0
	VMOVDQU32 (DI), Z1
	POOL8
	VMOVDQU Y8, (DX)
	MOVQ X9, (BX)
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $32, DX
	ADDQ $8, BX
	SUBQ $8, CX
	JMP ploop
ptail:
	TESTQ CX, CX
	JZ prowdone
	VMOVDQU32.Z (SI), K4, Z0
	VMOVDQU32.Z (DI), K4, Z1
	POOL8
	VMOVDQU32 Y8, K5, (DX)
	VMOVDQU8 X9, K5, (BX)
	LEAQ (DX)(CX*4), DX
	ADDQ CX, BX
prowdone:
	LEAQ (R14)(R12*2), R14
	DECQ R15
	JMP prow
pnextplane:
	ADDQ R13, R8
	DECQ R9
	JMP pplane
pdone:
	VZEROUPPER
	RET

// func poolArgGradPlanesAVX512(arg *uint8, dy, dx *float32, planes, ho, wo, w, pstride int)
//
// poolArgGradAVX512 over the rows poolReLUArgPlanesAVX512 pools: output
// row oy of plane p (the next wo elements of arg and dy) into the two
// rows at dx + p*pstride + 2*oy*w and w further (their first 2*wo
// elements).
TEXT ·poolArgGradPlanesAVX512(SB), NOSPLIT, $0-64
	MOVQ arg+0(FP), BX
	MOVQ dy+8(FP), DX
	MOVQ dx+16(FP), R8
	MOVQ planes+24(FP), R9
	MOVQ ho+32(FP), R10
	MOVQ wo+40(FP), R11
	MOVQ w+48(FP), R12
	SHLQ $2, R12
	MOVQ pstride+56(FP), R13
	SHLQ $2, R13
	MOVQ $0x0000000300000002, AX
	VPBROADCASTQ AX, Z28 // bottom codes 2, 3
	MOVQ $0x0000000100000000, AX
	VPBROADCASTQ AX, Z27 // top codes 0, 1
	MOVQ R11, CX
	ANDQ $7, CX
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K5 // outputs
	SHLQ $1, CX
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K4 // inputs
qplane:
	TESTQ R9, R9
	JZ qdone
	MOVQ R8, R14
	MOVQ R10, R15
qrow:
	TESTQ R15, R15
	JZ qnextplane
	MOVQ R14, SI
	LEAQ (R14)(R12*1), DI
	MOVQ R11, CX
qloop:
	CMPQ CX, $8
	JB qtail
	VPMOVZXBQ (BX), Z0
	VPMOVZXDQ (DX), Z1
	VPSHUFD $0xA0, Z0, Z0 // each code in both lanes of its pair
	VPSHUFD $0xA0, Z1, Z1 // each gradient in both lanes of its pair
	VPCMPEQD Z27, Z0, K1
	VPCMPEQD Z28, Z0, K2
	VMOVDQA32.Z Z1, K1, Z2
	VMOVDQA32.Z Z1, K2, Z3
	VMOVDQU32 Z2, (SI)
	VMOVDQU32 Z3, (DI)
	ADDQ $8, BX
	ADDQ $32, DX
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $8, CX
	JMP qloop
qtail:
	TESTQ CX, CX
	JZ qrowdone
	VMOVDQU8.Z (BX), K5, X0
	VMOVDQU32.Z (DX), K5, Y1
	VPMOVZXBQ X0, Z0
	VPMOVZXDQ Y1, Z1
	VPSHUFD $0xA0, Z0, Z0
	VPSHUFD $0xA0, Z1, Z1
	VPCMPEQD Z27, Z0, K1
	VPCMPEQD Z28, Z0, K2
	VMOVDQA32.Z Z1, K1, Z2
	VMOVDQA32.Z Z1, K2, Z3
	VMOVDQU32 Z2, K4, (SI)
	VMOVDQU32 Z3, K4, (DI)
	ADDQ CX, BX
	LEAQ (DX)(CX*4), DX
qrowdone:
	LEAQ (R14)(R12*2), R14
	DECQ R15
	JMP qrow
qnextplane:
	ADDQ R13, R8
	DECQ R9
	JMP qplane
qdone:
	VZEROUPPER
	RET
