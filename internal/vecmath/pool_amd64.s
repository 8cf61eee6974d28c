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
