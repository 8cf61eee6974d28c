//go:build amd64 && !purego

#include "textflag.h"

// func adamWAVX(pp, gg, mm, vv *float32, n int, c *AdamWConsts)
//
// One AdamW step, 8 lanes at a time (n a multiple of 8), with the scalar
// loop's operations in its order and no FMA, so the results are
// bit-identical to it.
TEXT ·adamWAVX(SB), NOSPLIT, $0-48
	MOVQ pp+0(FP), DI
	MOVQ gg+8(FP), SI
	MOVQ mm+16(FP), DX
	MOVQ vv+24(FP), BX
	MOVQ n+32(FP), CX
	MOVQ c+40(FP), R8
	VMOVUPS 0(R8), Y8 // lr wd
	VMOVUPS 32(R8), Y9 // b1
	VMOVUPS 64(R8), Y10 // 1 - b1
	VMOVUPS 96(R8), Y11 // b2
	VMOVUPS 128(R8), Y12 // 1 - b2
	VMOVUPS 160(R8), Y13 // sqrt(1 - b2^t)
	VMOVUPS 192(R8), Y14 // eps
	VMOVUPS 224(R8), Y15 // step size
loop:
	CMPQ CX, $8
	JB done
	VMOVUPS (DI), Y0 // p
	VMOVUPS (SI), Y1 // g
	VMULPS Y0, Y8, Y2
	VSUBPS Y2, Y0, Y0 // p -= lr wd p
	VMULPS (DX), Y9, Y3
	VMULPS Y1, Y10, Y4
	VADDPS Y4, Y3, Y3 // m = b1 m + (1-b1) g
	VMOVUPS Y3, (DX)
	VMULPS (BX), Y11, Y5
	VMULPS Y1, Y12, Y6
	VMULPS Y1, Y6, Y6
	VADDPS Y6, Y5, Y5 // v = b2 v + (1-b2) g g
	VMOVUPS Y5, (BX)
	VSQRTPS Y5, Y6
	VDIVPS Y13, Y6, Y6
	VADDPS Y14, Y6, Y6 // sqrt(v) / sqrtBC2 + eps
	VMULPS Y3, Y15, Y7
	VDIVPS Y6, Y7, Y7
	VSUBPS Y7, Y0, Y0 // p -= step m / denom
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, BX
	SUBQ $8, CX
	JMP loop
done:
	VZEROUPPER
	RET

// func sgdAVX(pp, gg, bb *float32, n int, c *SGDConsts)
//
// One SGD step, 8 lanes at a time (n a multiple of 8), with the scalar
// loop's operations in its order and no FMA (bit-identical): d = g + wd p;
// with momentum (bb not nil) b = mu b + d, p -= lr b; else p -= lr d.
TEXT ·sgdAVX(SB), NOSPLIT, $0-40
	MOVQ pp+0(FP), DI
	MOVQ gg+8(FP), SI
	MOVQ bb+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ c+32(FP), R8
	VMOVUPS 0(R8), Y8   // wd
	VMOVUPS 32(R8), Y9  // mu
	VMOVUPS 64(R8), Y10 // lr
	TESTQ DX, DX
	JZ plain
momentum:
	CMPQ CX, $8
	JB done
	VMOVUPS (DI), Y0 // p
	VMULPS Y0, Y8, Y2
	VADDPS (SI), Y2, Y2 // d = g + wd p
	VMULPS (DX), Y9, Y3
	VADDPS Y2, Y3, Y3 // b = mu b + d
	VMOVUPS Y3, (DX)
	VMULPS Y3, Y10, Y4
	VSUBPS Y4, Y0, Y0 // p -= lr b
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, DX
	SUBQ $8, CX
	JMP momentum
plain:
	CMPQ CX, $8
	JB done
	VMOVUPS (DI), Y0
	VMULPS Y0, Y8, Y2
	VADDPS (SI), Y2, Y2 // d = g + wd p
	VMULPS Y2, Y10, Y4
	VSUBPS Y4, Y0, Y0 // p -= lr d
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	SUBQ $8, CX
	JMP plain
done:
	VZEROUPPER
	RET
