//go:build amd64 && !purego

#include "textflag.h"

// Winograd tile transforms, 16 tiles a register (lane l: tile 16g+l of
// group g). Input tiles are gathered from the planes and output tiles
// scattered back, under per-lane masks for the plane's edges (masked
// lanes read nothing and read as 0, or write nothing). Arguments: a
// *kargs (kernels_amd64.go); constants: Z24 = 4, Z25 = 5, Z26 = 2,
// Z27 = 8, Z28 = 0, Z29 = the bias, Z30 = the tiles' plane offsets,
// Z31 = the plane stride. Registers: DI the transformed rows (group g's
// columns), R8 their stride in bytes, SI the plane, R9 a plane row in
// bytes, CX groups left, R10/R11 the tile tables, R12 the group's masks
// (R13 bytes a group), R14 36 registers of scratch.

#define PROLOGUE \
	MOVQ a+0(FP), AX \
	MOVQ 0(AX), DI \
	MOVQ 8(AX), R8 \
	SHLQ $2, R8 \
	MOVQ 16(AX), SI \
	VPBROADCASTD 24(AX), Z31 \
	MOVQ 32(AX), R9 \
	SHLQ $2, R9 \
	MOVQ 40(AX), CX \
	MOVQ 48(AX), R10 \
	MOVQ 56(AX), R11 \
	MOVQ 64(AX), R12 \
	MOVQ 72(AX), R13 \
	MOVQ 80(AX), R14 \
	VBROADCASTSS 88(AX), Z29 \
	MOVL $0x40800000, AX \
	VPBROADCASTD AX, Z24 \
	MOVL $0x40a00000, AX \
	VPBROADCASTD AX, Z25 \
	MOVL $0x40000000, AX \
	VPBROADCASTD AX, Z26 \
	MOVL $0x41000000, AX \
	VPBROADCASTD AX, Z27 \
	VPXORD Z28, Z28, Z28

// TILEIDX sets Z30 to the group's tile offsets: image x stride + offset.
#define TILEIDX \
	VPMULLD (R10), Z31, Z30 \
	VPADDD (R11), Z30, Z30

#define NEXTGROUP \
	ADDQ $64, DI \
	ADDQ $64, R10 \
	ADDQ $64, R11 \
	ADDQ R13, R12

// GATHER sets z to the plane values at disp(BX) + 4*Z30 under the masks
// at rm(R12) and cm(R12) (0 where either is clear).
#define GATHER(rm, cm, disp, z) \
	KMOVW rm(R12), K1 \
	KMOVW cm(R12), K2 \
	KANDW K1, K2, K3 \
	VPXORD z, z, z \
	VGATHERDPS disp(BX)(Z30*4), K3, z

// SCATTER stores z to disp(BX) + 4*Z30 under the masks at rm and cm.
#define SCATTER(rm, cm, disp, z) \
	KMOVW rm(R12), K1 \
	KMOVW cm(R12), K2 \
	KANDW K1, K2, K3 \
	VSCATTERDPS z, K3, disp(BX)(Z30*4)

// BT2: (d0, d1, d2, d3) = (d0-d2, d1+d2, d2-d1, d1-d3).
#define BT2(d0, d1, d2, d3) \
	VSUBPS d2, d0, d0 \
	VADDPS d2, d1, Z16 \
	VSUBPS d1, d2, d2 \
	VSUBPS d3, d1, d3 \
	VMOVAPS Z16, d1

// AT2: (m0, m1) = (m0+m1+m2, m1-m2-m3).
#define AT2(m0, m1, m2, m3) \
	VADDPS m1, m0, m0 \
	VADDPS m2, m0, m0 \
	VSUBPS m2, m1, m1 \
	VSUBPS m3, m1, m1

// A2: (x0, r1, r2, r3) = (x0, x0+x1, x0-x1, -x1); r1 may not be x1.
#define A2(x0, x1, r1, r2, r3) \
	VADDPS x1, x0, r1 \
	VSUBPS x1, x0, r2 \
	VSUBPS x1, Z28, r3

// BT4: d0..d5 = 4d0-5d2+d4, (d3+d4)-4(d1+d2), (d4-d3)+4(d1-d2),
// (d4-d2)+2(d3-d1), (d4-d2)-2(d3-d1), 4d1-5d3+d5.
#define BT4(d0, d1, d2, d3, d4, d5) \
	VMULPS Z24, d0, d0 \
	VFNMADD231PS Z25, d2, d0 \
	VADDPS d4, d0, d0 \
	VFMADD231PS Z24, d1, d5 \
	VFNMADD231PS Z25, d3, d5 \
	VADDPS d2, d1, Z16 \
	VADDPS d4, d3, Z17 \
	VFNMADD231PS Z24, Z16, Z17 \
	VSUBPS d2, d1, Z16 \
	VSUBPS d3, d4, Z18 \
	VFMADD231PS Z24, Z16, Z18 \
	VSUBPS d2, d4, Z16 \
	VSUBPS d1, d3, Z19 \
	VMOVAPS Z16, Z20 \
	VFMADD231PS Z26, Z19, Z16 \
	VFNMADD231PS Z26, Z19, Z20 \
	VMOVAPS Z17, d1 \
	VMOVAPS Z18, d2 \
	VMOVAPS Z16, d3 \
	VMOVAPS Z20, d4

// AT4: (m0, m1, m2, m3) = (m0+(m1+m2)+(m3+m4), (m1-m2)+2(m3-m4),
// (m1+m2)+4(m3+m4), (m1-m2)+8(m3-m4)+m5).
#define AT4(m0, m1, m2, m3, m4, m5) \
	VADDPS m2, m1, Z16 \
	VADDPS m4, m3, Z17 \
	VSUBPS m2, m1, Z18 \
	VSUBPS m4, m3, Z19 \
	VADDPS Z16, m0, m0 \
	VADDPS Z17, m0, m0 \
	VMOVAPS Z18, m1 \
	VFMADD231PS Z26, Z19, m1 \
	VMOVAPS Z16, m2 \
	VFMADD231PS Z24, Z17, m2 \
	VADDPS Z18, m5, m3 \
	VFMADD231PS Z27, Z19, m3

// A4: (e0, r1, r2, r3, r4, e3) = (e0, (e0+e2)+(e1+e3), (e0+e2)-(e1+e3),
// (e0+4e2)+(2e1+8e3), (e0+4e2)-(2e1+8e3), e3); r1..r4 may not be e0..e3.
#define A4(e0, e1, e2, e3, r1, r2, r3, r4) \
	VADDPS e2, e0, Z16 \
	VADDPS e3, e1, Z17 \
	VADDPS Z17, Z16, r1 \
	VSUBPS Z17, Z16, r2 \
	VMOVAPS e0, Z16 \
	VFMADD231PS Z24, e2, Z16 \
	VMULPS Z26, e1, Z17 \
	VFMADD231PS Z27, e3, Z17 \
	VADDPS Z17, Z16, r3 \
	VSUBPS Z17, Z16, r4

// STORE stores z at (DX) and moves DX to the next row.
#define STORE(z) \
	VMOVUPS z, (DX) \
	ADDQ R8, DX

#define LOAD(z) \
	VMOVUPS (DX), z \
	ADDQ R8, DX

// func inputF2AVX512(a *kargs)
// masks: input rows at 0, 2, 4, 6; input columns at 8, 10, 12, 14.
TEXT ·inputF2AVX512(SB), NOSPLIT, $0-8
	PROLOGUE
	SUBQ R9, SI
	SUBQ $4, SI // the origin of tile (0, 0): row -1, column -1
	TESTQ CX, CX
	JZ in2done
in2loop:
	TILEIDX
	MOVQ SI, BX
	GATHER(0, 8, 0, Z0)
	GATHER(0, 10, 4, Z1)
	GATHER(0, 12, 8, Z2)
	GATHER(0, 14, 12, Z3)
	ADDQ R9, BX
	GATHER(2, 8, 0, Z4)
	GATHER(2, 10, 4, Z5)
	GATHER(2, 12, 8, Z6)
	GATHER(2, 14, 12, Z7)
	ADDQ R9, BX
	GATHER(4, 8, 0, Z8)
	GATHER(4, 10, 4, Z9)
	GATHER(4, 12, 8, Z10)
	GATHER(4, 14, 12, Z11)
	ADDQ R9, BX
	GATHER(6, 8, 0, Z12)
	GATHER(6, 10, 4, Z13)
	GATHER(6, 12, 8, Z14)
	GATHER(6, 14, 12, Z15)
	BT2(Z0, Z1, Z2, Z3)
	BT2(Z4, Z5, Z6, Z7)
	BT2(Z8, Z9, Z10, Z11)
	BT2(Z12, Z13, Z14, Z15)
	BT2(Z0, Z4, Z8, Z12)
	BT2(Z1, Z5, Z9, Z13)
	BT2(Z2, Z6, Z10, Z14)
	BT2(Z3, Z7, Z11, Z15)
	MOVQ DI, DX
	STORE(Z0)
	STORE(Z1)
	STORE(Z2)
	STORE(Z3)
	STORE(Z4)
	STORE(Z5)
	STORE(Z6)
	STORE(Z7)
	STORE(Z8)
	STORE(Z9)
	STORE(Z10)
	STORE(Z11)
	STORE(Z12)
	STORE(Z13)
	STORE(Z14)
	STORE(Z15)
	NEXTGROUP
	DECQ CX
	JNZ in2loop
in2done:
	VZEROUPPER
	RET

// func outputF2AVX512(a *kargs)
// masks: output rows at 16, 18; output columns at 20, 22.
TEXT ·outputF2AVX512(SB), NOSPLIT, $0-8
	PROLOGUE
	TESTQ CX, CX
	JZ out2done
out2loop:
	MOVQ DI, DX
	LOAD(Z0)
	LOAD(Z1)
	LOAD(Z2)
	LOAD(Z3)
	LOAD(Z4)
	LOAD(Z5)
	LOAD(Z6)
	LOAD(Z7)
	LOAD(Z8)
	LOAD(Z9)
	LOAD(Z10)
	LOAD(Z11)
	LOAD(Z12)
	LOAD(Z13)
	LOAD(Z14)
	LOAD(Z15)
	AT2(Z0, Z1, Z2, Z3)
	AT2(Z4, Z5, Z6, Z7)
	AT2(Z8, Z9, Z10, Z11)
	AT2(Z12, Z13, Z14, Z15)
	AT2(Z0, Z4, Z8, Z12)
	AT2(Z1, Z5, Z9, Z13)
	VADDPS Z29, Z0, Z0
	VADDPS Z29, Z1, Z1
	VADDPS Z29, Z4, Z4
	VADDPS Z29, Z5, Z5
	TILEIDX
	MOVQ SI, BX
	SCATTER(16, 20, 0, Z0)
	SCATTER(16, 22, 4, Z1)
	ADDQ R9, BX
	SCATTER(18, 20, 0, Z4)
	SCATTER(18, 22, 4, Z5)
	NEXTGROUP
	DECQ CX
	JNZ out2loop
out2done:
	VZEROUPPER
	RET

// func gradF2AVX512(a *kargs)
// masks: output rows at 16, 18; output columns at 20, 22.
TEXT ·gradF2AVX512(SB), NOSPLIT, $0-8
	PROLOGUE
	TESTQ CX, CX
	JZ grad2done
grad2loop:
	TILEIDX
	MOVQ SI, BX
	GATHER(16, 20, 0, Z0)
	GATHER(16, 22, 4, Z16)
	ADDQ R9, BX
	GATHER(18, 20, 0, Z4)
	GATHER(18, 22, 4, Z17)
	A2(Z0, Z16, Z1, Z2, Z3)
	A2(Z4, Z17, Z5, Z6, Z7)
	A2(Z0, Z4, Z18, Z8, Z12)
	VMOVAPS Z18, Z4
	A2(Z1, Z5, Z18, Z9, Z13)
	VMOVAPS Z18, Z5
	A2(Z2, Z6, Z18, Z10, Z14)
	VMOVAPS Z18, Z6
	A2(Z3, Z7, Z18, Z11, Z15)
	VMOVAPS Z18, Z7
	MOVQ DI, DX
	STORE(Z0)
	STORE(Z1)
	STORE(Z2)
	STORE(Z3)
	STORE(Z4)
	STORE(Z5)
	STORE(Z6)
	STORE(Z7)
	STORE(Z8)
	STORE(Z9)
	STORE(Z10)
	STORE(Z11)
	STORE(Z12)
	STORE(Z13)
	STORE(Z14)
	STORE(Z15)
	NEXTGROUP
	DECQ CX
	JNZ grad2loop
grad2done:
	VZEROUPPER
	RET

// GROW6 gathers input row rm's 6 values into Z0..Z5 (F(4x4, 3x3):
// input columns' masks at 12, 14, ..., 22).
#define GROW6(rm) \
	GATHER(rm, 12, 0, Z0) \
	GATHER(rm, 14, 4, Z1) \
	GATHER(rm, 16, 8, Z2) \
	GATHER(rm, 18, 12, Z3) \
	GATHER(rm, 20, 16, Z4) \
	GATHER(rm, 22, 20, Z5)

// TSTORE6 stores Z0..Z5 at the scratch from (DX), 64 bytes apart, and
// moves DX past them.
#define TSTORE6 \
	VMOVUPS Z0, 0(DX) \
	VMOVUPS Z1, 64(DX) \
	VMOVUPS Z2, 128(DX) \
	VMOVUPS Z3, 192(DX) \
	VMOVUPS Z4, 256(DX) \
	VMOVUPS Z5, 320(DX) \
	ADDQ $384, DX

// func inputF4AVX512(a *kargs)
// masks: input rows at 0, 2, ..., 10; input columns at 12, ..., 22.
// Rows first, into the scratch (36 registers), then columns.
TEXT ·inputF4AVX512(SB), NOSPLIT, $0-8
	PROLOGUE
	SUBQ R9, SI
	SUBQ $4, SI
	MOVQ R8, AX
	IMULQ $6, AX // 6 rows of the output
	TESTQ CX, CX
	JZ in4done
in4loop:
	TILEIDX
	MOVQ SI, BX
	MOVQ R14, DX
	GROW6(0)
	BT4(Z0, Z1, Z2, Z3, Z4, Z5)
	TSTORE6
	ADDQ R9, BX
	GROW6(2)
	BT4(Z0, Z1, Z2, Z3, Z4, Z5)
	TSTORE6
	ADDQ R9, BX
	GROW6(4)
	BT4(Z0, Z1, Z2, Z3, Z4, Z5)
	TSTORE6
	ADDQ R9, BX
	GROW6(6)
	BT4(Z0, Z1, Z2, Z3, Z4, Z5)
	TSTORE6
	ADDQ R9, BX
	GROW6(8)
	BT4(Z0, Z1, Z2, Z3, Z4, Z5)
	TSTORE6
	ADDQ R9, BX
	GROW6(10)
	BT4(Z0, Z1, Z2, Z3, Z4, Z5)
	TSTORE6
	// Columns j: scratch j, j+6, ..., j+30 -> rows j, j+6, ..., j+30.
	MOVQ R14, DX
	MOVQ DI, BX
in4col:
	VMOVUPS 0(DX), Z0
	VMOVUPS 384(DX), Z1
	VMOVUPS 768(DX), Z2
	VMOVUPS 1152(DX), Z3
	VMOVUPS 1536(DX), Z4
	VMOVUPS 1920(DX), Z5
	BT4(Z0, Z1, Z2, Z3, Z4, Z5)
	MOVQ BX, R15
	VMOVUPS Z0, (R15)
	ADDQ AX, R15
	VMOVUPS Z1, (R15)
	ADDQ AX, R15
	VMOVUPS Z2, (R15)
	ADDQ AX, R15
	VMOVUPS Z3, (R15)
	ADDQ AX, R15
	VMOVUPS Z4, (R15)
	ADDQ AX, R15
	VMOVUPS Z5, (R15)
	ADDQ $64, DX
	ADDQ R8, BX
	MOVQ R14, R15
	ADDQ $384, R15
	CMPQ DX, R15
	JB in4col
	NEXTGROUP
	DECQ CX
	JNZ in4loop
in4done:
	VZEROUPPER
	RET

// func outputF4AVX512(a *kargs)
// masks: output rows at 24, 26, 28, 30; output columns at 32, ..., 38.
// Rows first (6 rows of 6 -> 6 rows of 4, into the scratch), then
// columns.
TEXT ·outputF4AVX512(SB), NOSPLIT, $0-8
	PROLOGUE
	TESTQ CX, CX
	JZ out4done
out4loop:
	MOVQ DI, DX
	MOVQ R14, BX
	MOVQ $6, AX
out4row:
	LOAD(Z0)
	LOAD(Z1)
	LOAD(Z2)
	LOAD(Z3)
	LOAD(Z4)
	LOAD(Z5)
	AT4(Z0, Z1, Z2, Z3, Z4, Z5)
	VMOVUPS Z0, 0(BX)
	VMOVUPS Z1, 64(BX)
	VMOVUPS Z2, 128(BX)
	VMOVUPS Z3, 192(BX)
	ADDQ $256, BX
	DECQ AX
	JNZ out4row
	TILEIDX
	MOVQ R14, DX
	// Column b: scratch b, b+4, ..., b+20 -> outputs (0..3, b).
	VMOVUPS 0(DX), Z0
	VMOVUPS 256(DX), Z1
	VMOVUPS 512(DX), Z2
	VMOVUPS 768(DX), Z3
	VMOVUPS 1024(DX), Z4
	VMOVUPS 1280(DX), Z5
	AT4(Z0, Z1, Z2, Z3, Z4, Z5)
	VMOVUPS 64(DX), Z6
	VMOVUPS 320(DX), Z7
	VMOVUPS 576(DX), Z8
	VMOVUPS 832(DX), Z9
	VMOVUPS 1088(DX), Z10
	VMOVUPS 1344(DX), Z11
	AT4(Z6, Z7, Z8, Z9, Z10, Z11)
	VMOVUPS 128(DX), Z12
	VMOVUPS 384(DX), Z13
	VMOVUPS 640(DX), Z14
	VMOVUPS 896(DX), Z15
	VMOVUPS 1152(DX), Z4
	VMOVUPS 1408(DX), Z5
	AT4(Z12, Z13, Z14, Z15, Z4, Z5)
	VMOVUPS 192(DX), Z4
	VMOVUPS 448(DX), Z5
	VMOVUPS 704(DX), Z10
	VMOVUPS 960(DX), Z11
	VMOVUPS 1216(DX), Z20
	VMOVUPS 1472(DX), Z21
	AT4(Z4, Z5, Z10, Z11, Z20, Z21)
	// (a, b): column 0 in Z0..Z3, 1 in Z6..Z9, 2 in Z12..Z15, 3 in Z4, Z5, Z10, Z11.
	VADDPS Z29, Z0, Z0
	VADDPS Z29, Z1, Z1
	VADDPS Z29, Z2, Z2
	VADDPS Z29, Z3, Z3
	VADDPS Z29, Z6, Z6
	VADDPS Z29, Z7, Z7
	VADDPS Z29, Z8, Z8
	VADDPS Z29, Z9, Z9
	VADDPS Z29, Z12, Z12
	VADDPS Z29, Z13, Z13
	VADDPS Z29, Z14, Z14
	VADDPS Z29, Z15, Z15
	VADDPS Z29, Z4, Z4
	VADDPS Z29, Z5, Z5
	VADDPS Z29, Z10, Z10
	VADDPS Z29, Z11, Z11
	MOVQ SI, BX
	SCATTER(24, 32, 0, Z0)
	SCATTER(24, 34, 4, Z6)
	SCATTER(24, 36, 8, Z12)
	SCATTER(24, 38, 12, Z4)
	ADDQ R9, BX
	SCATTER(26, 32, 0, Z1)
	SCATTER(26, 34, 4, Z7)
	SCATTER(26, 36, 8, Z13)
	SCATTER(26, 38, 12, Z5)
	ADDQ R9, BX
	SCATTER(28, 32, 0, Z2)
	SCATTER(28, 34, 4, Z8)
	SCATTER(28, 36, 8, Z14)
	SCATTER(28, 38, 12, Z10)
	ADDQ R9, BX
	SCATTER(30, 32, 0, Z3)
	SCATTER(30, 34, 4, Z9)
	SCATTER(30, 36, 8, Z15)
	SCATTER(30, 38, 12, Z11)
	NEXTGROUP
	DECQ CX
	JNZ out4loop
out4done:
	VZEROUPPER
	RET

// GROW4 gathers output row rm's 4 values of dy into Z0..Z3 (output
// columns' masks at 32, ..., 38).
#define GROW4(rm) \
	GATHER(rm, 32, 0, Z0) \
	GATHER(rm, 34, 4, Z1) \
	GATHER(rm, 36, 8, Z2) \
	GATHER(rm, 38, 12, Z3)

// func gradF4AVX512(a *kargs)
// masks: output rows at 24, ..., 30; output columns at 32, ..., 38. Rows
// first (4 rows of 4 -> 4 rows of 6, into the scratch), then columns.
TEXT ·gradF4AVX512(SB), NOSPLIT, $0-8
	PROLOGUE
	MOVQ R8, AX
	IMULQ $6, AX
	TESTQ CX, CX
	JZ grad4done
grad4loop:
	TILEIDX
	MOVQ SI, BX
	MOVQ R14, DX
	GROW4(24)
	A4(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)
	VMOVUPS Z0, 0(DX)
	VMOVUPS Z4, 64(DX)
	VMOVUPS Z5, 128(DX)
	VMOVUPS Z6, 192(DX)
	VMOVUPS Z7, 256(DX)
	VMOVUPS Z3, 320(DX)
	ADDQ $384, DX
	ADDQ R9, BX
	GROW4(26)
	A4(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)
	VMOVUPS Z0, 0(DX)
	VMOVUPS Z4, 64(DX)
	VMOVUPS Z5, 128(DX)
	VMOVUPS Z6, 192(DX)
	VMOVUPS Z7, 256(DX)
	VMOVUPS Z3, 320(DX)
	ADDQ $384, DX
	ADDQ R9, BX
	GROW4(28)
	A4(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)
	VMOVUPS Z0, 0(DX)
	VMOVUPS Z4, 64(DX)
	VMOVUPS Z5, 128(DX)
	VMOVUPS Z6, 192(DX)
	VMOVUPS Z7, 256(DX)
	VMOVUPS Z3, 320(DX)
	ADDQ $384, DX
	ADDQ R9, BX
	GROW4(30)
	A4(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)
	VMOVUPS Z0, 0(DX)
	VMOVUPS Z4, 64(DX)
	VMOVUPS Z5, 128(DX)
	VMOVUPS Z6, 192(DX)
	VMOVUPS Z7, 256(DX)
	VMOVUPS Z3, 320(DX)
	// Columns j: scratch j, j+6, j+12, j+18 -> rows j, j+6, ..., j+30.
	MOVQ R14, DX
	MOVQ DI, BX
grad4col:
	VMOVUPS 0(DX), Z0
	VMOVUPS 384(DX), Z1
	VMOVUPS 768(DX), Z2
	VMOVUPS 1152(DX), Z3
	A4(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)
	MOVQ BX, R15
	VMOVUPS Z0, (R15)
	ADDQ AX, R15
	VMOVUPS Z4, (R15)
	ADDQ AX, R15
	VMOVUPS Z5, (R15)
	ADDQ AX, R15
	VMOVUPS Z6, (R15)
	ADDQ AX, R15
	VMOVUPS Z7, (R15)
	ADDQ AX, R15
	VMOVUPS Z3, (R15)
	ADDQ $64, DX
	ADDQ R8, BX
	MOVQ R14, R15
	ADDQ $384, R15
	CMPQ DX, R15
	JB grad4col
	NEXTGROUP
	DECQ CX
	JNZ grad4loop
grad4done:
	VZEROUPPER
	RET
