//go:build amd64 && !purego

#include "textflag.h"

// func copyNTAVX(dst, src *byte, n int)
//
// n a multiple of 64, dst 64-byte aligned: 32-byte unaligned loads,
// non-temporal stores, then SFENCE.
TEXT ·copyNTAVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	TESTQ CX, CX
	JZ done
loop:
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVNTDQ Y0, 0(DI)
	VMOVNTDQ Y1, 32(DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $64, CX
	JNZ loop
done:
	SFENCE
	VZEROUPPER
	RET
