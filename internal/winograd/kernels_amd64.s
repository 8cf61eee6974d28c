//go:build amd64 && !purego

#include "textflag.h"

// Winograd tile transforms, 16 tiles a register (lane l: tile 16g+l of
// group g), between the transformed rows and a chunk's planes of one
// channel split by column phase (Plan.QW): deint* splits a plane into
// the scratch, inter* joins the scratch back into a plane (adding the
// bias), and the transforms read and write the scratch with one masked
// load or store per run of tiles in a tile row (a segment), contiguous in
// the scratch. Arguments: a *kargs (kernels_amd64.go). Constants: Z24 =
// 4, Z25 = 5, Z26 = 2, Z27 = 8, Z28 = 0.

#define CONSTS \
	MOVL $0x40800000, AX \
	VPBROADCASTD AX, Z24 \
	MOVL $0x40a00000, AX \
	VPBROADCASTD AX, Z25 \
	MOVL $0x40000000, AX \
	VPBROADCASTD AX, Z26 \
	MOVL $0x41000000, AX \
	VPBROADCASTD AX, Z27 \
	VPXORD Z28, Z28, Z28

// TARGS loads a transform's arguments: DI the transformed rows (group
// g's columns), R8 their stride in bytes, SI the scratch, R10 a scratch
// row (M phases) in bytes, R11 a phase row (QW values) in bytes, R15
// 3*R11, CX groups, R12 the segments, R13 the groups' segment ends, R9
// the 36 registers of scratch; R14 = 0, the first segment.
#define TARGS(m) \
	MOVQ a+0(FP), AX \
	MOVQ 0(AX), DI \
	MOVQ 8(AX), R8 \
	SHLQ $2, R8 \
	MOVQ 48(AX), SI \
	MOVQ 64(AX), R11 \
	SHLQ $2, R11 \
	MOVQ R11, R10 \
	IMULQ $m, R10 \
	MOVQ R11, R15 \
	IMULQ $3, R15 \
	MOVQ 72(AX), CX \
	MOVQ 80(AX), R12 \
	MOVQ 88(AX), R13 \
	MOVQ 128(AX), R9 \
	XORQ R14, R14 \
	CONSTS

// SEG sets K1 to segment R14's lanes and BX to its values' base.
#define SEG \
	KMOVW (R12)(R14*8), K1 \
	MOVLQSX 4(R12)(R14*8), BX \
	ADDQ SI, BX

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
TEXT ·inputF2AVX512(SB), NOSPLIT, $0-8
	TARGS(2)
	TESTQ CX, CX
	JZ in2done
in2loop:
	MOVL (R13), AX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
in2seg:
	CMPQ R14, AX
	JAE in2segdone
	SEG
	// (i, j): row i, phase j%2, column +j/2
	VMOVUPS (BX), K1, Z0
	VMOVUPS (BX)(R11*1), K1, Z1
	VMOVUPS 4(BX), K1, Z2
	VMOVUPS 4(BX)(R11*1), K1, Z3
	ADDQ R10, BX
	VMOVUPS (BX), K1, Z4
	VMOVUPS (BX)(R11*1), K1, Z5
	VMOVUPS 4(BX), K1, Z6
	VMOVUPS 4(BX)(R11*1), K1, Z7
	ADDQ R10, BX
	VMOVUPS (BX), K1, Z8
	VMOVUPS (BX)(R11*1), K1, Z9
	VMOVUPS 4(BX), K1, Z10
	VMOVUPS 4(BX)(R11*1), K1, Z11
	ADDQ R10, BX
	VMOVUPS (BX), K1, Z12
	VMOVUPS (BX)(R11*1), K1, Z13
	VMOVUPS 4(BX), K1, Z14
	VMOVUPS 4(BX)(R11*1), K1, Z15
	INCQ R14
	JMP in2seg
in2segdone:
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
	ADDQ $64, DI
	ADDQ $4, R13
	DECQ CX
	JNZ in2loop
in2done:
	VZEROUPPER
	RET

// func outputF2AVX512(a *kargs)
TEXT ·outputF2AVX512(SB), NOSPLIT, $0-8
	TARGS(2)
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
	MOVL (R13), AX
out2seg:
	CMPQ R14, AX
	JAE out2segdone
	SEG
	VMOVUPS Z0, K1, (BX)
	VMOVUPS Z1, K1, (BX)(R11*1)
	ADDQ R10, BX
	VMOVUPS Z4, K1, (BX)
	VMOVUPS Z5, K1, (BX)(R11*1)
	INCQ R14
	JMP out2seg
out2segdone:
	ADDQ $64, DI
	ADDQ $4, R13
	DECQ CX
	JNZ out2loop
out2done:
	VZEROUPPER
	RET

// func gradF2AVX512(a *kargs)
TEXT ·gradF2AVX512(SB), NOSPLIT, $0-8
	TARGS(2)
	TESTQ CX, CX
	JZ grad2done
grad2loop:
	MOVL (R13), AX
	VPXORD Z0, Z0, Z0
	VPXORD Z16, Z16, Z16
	VPXORD Z4, Z4, Z4
	VPXORD Z17, Z17, Z17
grad2seg:
	CMPQ R14, AX
	JAE grad2segdone
	SEG
	VMOVUPS (BX), K1, Z0
	VMOVUPS (BX)(R11*1), K1, Z16
	ADDQ R10, BX
	VMOVUPS (BX), K1, Z4
	VMOVUPS (BX)(R11*1), K1, Z17
	INCQ R14
	JMP grad2seg
grad2segdone:
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
	ADDQ $64, DI
	ADDQ $4, R13
	DECQ CX
	JNZ grad2loop
grad2done:
	VZEROUPPER
	RET

// INROW4 loads input row i (SI: the scratch advanced by i rows) of the
// group's segments R14..AX into Z0..Z5 (phases 0..3 at column +0, phases
// 0, 1 at +1), transforms it (B^T along the row) into the scratch row at
// toff(R9), and moves SI to the next row. loop and done: labels.
#define INROW4(toff, loop, done) \
	VPXORD Z0, Z0, Z0 \
	VPXORD Z1, Z1, Z1 \
	VPXORD Z2, Z2, Z2 \
	VPXORD Z3, Z3, Z3 \
	VPXORD Z4, Z4, Z4 \
	VPXORD Z5, Z5, Z5 \
	MOVQ R14, DX \
loop: \
	CMPQ DX, AX \
	JAE done \
	KMOVW (R12)(DX*8), K1 \
	MOVLQSX 4(R12)(DX*8), BX \
	ADDQ SI, BX \
	VMOVUPS (BX), K1, Z0 \
	VMOVUPS (BX)(R11*1), K1, Z1 \
	VMOVUPS (BX)(R11*2), K1, Z2 \
	VMOVUPS (BX)(R15*1), K1, Z3 \
	VMOVUPS 4(BX), K1, Z4 \
	VMOVUPS 4(BX)(R11*1), K1, Z5 \
	INCQ DX \
	JMP loop \
done: \
	BT4(Z0, Z1, Z2, Z3, Z4, Z5) \
	VMOVUPS Z0, toff(R9) \
	VMOVUPS Z1, toff+64(R9) \
	VMOVUPS Z2, toff+128(R9) \
	VMOVUPS Z3, toff+192(R9) \
	VMOVUPS Z4, toff+256(R9) \
	VMOVUPS Z5, toff+320(R9) \
	ADDQ R10, SI

// func inputF4AVX512(a *kargs)
// Rows first (each row's values from the segments, transformed along the
// row into the scratch: (i, j) at 64*(6i+j)), then columns into the
// transformed rows.
TEXT ·inputF4AVX512(SB), NOSPLIT, $0-8
	TARGS(4)
	TESTQ CX, CX
	JZ in4done
in4loop:
	MOVL (R13), AX
	INROW4(0, in4s0, in4d0)
	INROW4(384, in4s1, in4d1)
	INROW4(768, in4s2, in4d2)
	INROW4(1152, in4s3, in4d3)
	INROW4(1536, in4s4, in4d4)
	INROW4(1920, in4s5, in4d5)
	SUBQ R10, SI
	SUBQ R10, SI
	SUBQ R10, SI
	SUBQ R10, SI
	SUBQ R10, SI
	SUBQ R10, SI
	MOVQ AX, R14
	// Columns j: scratch j, j+6, ..., j+30 -> rows j, j+6, ..., j+30.
	MOVQ R9, DX
	MOVQ DI, BX
	MOVQ R8, AX
	IMULQ $6, AX
in4col:
	VMOVUPS 0(DX), Z0
	VMOVUPS 384(DX), Z1
	VMOVUPS 768(DX), Z2
	VMOVUPS 1152(DX), Z3
	VMOVUPS 1536(DX), Z4
	VMOVUPS 1920(DX), Z5
	BT4(Z0, Z1, Z2, Z3, Z4, Z5)
	MOVQ BX, R10
	VMOVUPS Z0, (R10)
	ADDQ AX, R10
	VMOVUPS Z1, (R10)
	ADDQ AX, R10
	VMOVUPS Z2, (R10)
	ADDQ AX, R10
	VMOVUPS Z3, (R10)
	ADDQ AX, R10
	VMOVUPS Z4, (R10)
	ADDQ AX, R10
	VMOVUPS Z5, (R10)
	ADDQ $64, DX
	ADDQ R8, BX
	LEAQ 384(R9), R10
	CMPQ DX, R10
	JB in4col
	MOVQ R11, R10
	SHLQ $2, R10 // a scratch row again
	ADDQ $64, DI
	ADDQ $4, R13
	DECQ CX
	JNZ in4loop
in4done:
	VZEROUPPER
	RET

// func outputF4AVX512(a *kargs)
// Rows first (6 rows of 6 -> 6 rows of 4, into the scratch), then
// columns; the 16 outputs go to the segments' (a, b) = row a, phase b.
TEXT ·outputF4AVX512(SB), NOSPLIT, $0-8
	TARGS(4)
	TESTQ CX, CX
	JZ out4done
out4loop:
	MOVQ DI, DX
	MOVQ R9, BX
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
	MOVQ R9, DX
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
	MOVL (R13), AX
out4seg:
	CMPQ R14, AX
	JAE out4segdone
	SEG
	VMOVUPS Z0, K1, (BX)
	VMOVUPS Z6, K1, (BX)(R11*1)
	VMOVUPS Z12, K1, (BX)(R11*2)
	VMOVUPS Z4, K1, (BX)(R15*1)
	ADDQ R10, BX
	VMOVUPS Z1, K1, (BX)
	VMOVUPS Z7, K1, (BX)(R11*1)
	VMOVUPS Z13, K1, (BX)(R11*2)
	VMOVUPS Z5, K1, (BX)(R15*1)
	ADDQ R10, BX
	VMOVUPS Z2, K1, (BX)
	VMOVUPS Z8, K1, (BX)(R11*1)
	VMOVUPS Z14, K1, (BX)(R11*2)
	VMOVUPS Z10, K1, (BX)(R15*1)
	ADDQ R10, BX
	VMOVUPS Z3, K1, (BX)
	VMOVUPS Z9, K1, (BX)(R11*1)
	VMOVUPS Z15, K1, (BX)(R11*2)
	VMOVUPS Z11, K1, (BX)(R15*1)
	INCQ R14
	JMP out4seg
out4segdone:
	ADDQ $64, DI
	ADDQ $4, R13
	DECQ CX
	JNZ out4loop
out4done:
	VZEROUPPER
	RET

// AROW4 transforms dy row (e0..e3) with A into scratch row toff (6).
#define AROW4(e0, e1, e2, e3, toff) \
	A4(e0, e1, e2, e3, Z18, Z19, Z20, Z21) \
	VMOVUPS e0, toff(R9) \
	VMOVUPS Z18, toff+64(R9) \
	VMOVUPS Z19, toff+128(R9) \
	VMOVUPS Z20, toff+192(R9) \
	VMOVUPS Z21, toff+256(R9) \
	VMOVUPS e3, toff+320(R9)

// func gradF4AVX512(a *kargs)
// Rows first (4 rows of 4 -> 4 rows of 6, into the scratch), then
// columns.
TEXT ·gradF4AVX512(SB), NOSPLIT, $0-8
	TARGS(4)
	MOVQ R8, DX
	IMULQ $6, DX
	MOVQ DX, R10 // 6 transformed rows; a scratch row is 4*R11
	TESTQ CX, CX
	JZ grad4done
grad4loop:
	MOVL (R13), AX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
grad4seg:
	CMPQ R14, AX
	JAE grad4segdone
	SEG
	MOVQ R11, DX
	SHLQ $2, DX
	VMOVUPS (BX), K1, Z0
	VMOVUPS (BX)(R11*1), K1, Z1
	VMOVUPS (BX)(R11*2), K1, Z2
	VMOVUPS (BX)(R15*1), K1, Z3
	ADDQ DX, BX
	VMOVUPS (BX), K1, Z4
	VMOVUPS (BX)(R11*1), K1, Z5
	VMOVUPS (BX)(R11*2), K1, Z6
	VMOVUPS (BX)(R15*1), K1, Z7
	ADDQ DX, BX
	VMOVUPS (BX), K1, Z8
	VMOVUPS (BX)(R11*1), K1, Z9
	VMOVUPS (BX)(R11*2), K1, Z10
	VMOVUPS (BX)(R15*1), K1, Z11
	ADDQ DX, BX
	VMOVUPS (BX), K1, Z12
	VMOVUPS (BX)(R11*1), K1, Z13
	VMOVUPS (BX)(R11*2), K1, Z14
	VMOVUPS (BX)(R15*1), K1, Z15
	INCQ R14
	JMP grad4seg
grad4segdone:
	AROW4(Z0, Z1, Z2, Z3, 0)
	AROW4(Z4, Z5, Z6, Z7, 384)
	AROW4(Z8, Z9, Z10, Z11, 768)
	AROW4(Z12, Z13, Z14, Z15, 1152)
	// Columns j: scratch j, j+6, j+12, j+18 -> rows j, j+6, ..., j+30.
	MOVQ R9, DX
	MOVQ DI, BX
grad4col:
	VMOVUPS 0(DX), Z0
	VMOVUPS 384(DX), Z1
	VMOVUPS 768(DX), Z2
	VMOVUPS 1152(DX), Z3
	A4(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)
	MOVQ BX, AX
	VMOVUPS Z0, (AX)
	ADDQ R10, AX
	VMOVUPS Z4, (AX)
	ADDQ R10, AX
	VMOVUPS Z5, (AX)
	ADDQ R10, AX
	VMOVUPS Z6, (AX)
	ADDQ R10, AX
	VMOVUPS Z7, (AX)
	ADDQ R10, AX
	VMOVUPS Z3, (AX)
	ADDQ $64, DX
	ADDQ R8, BX
	LEAQ 384(R9), AX
	CMPQ DX, AX
	JB grad4col
	ADDQ $64, DI
	ADDQ $4, R13
	DECQ CX
	JNZ grad4loop
grad4done:
	VZEROUPPER
	RET

// PARGS loads a split's or join's arguments: SI the plane, R10 a plane
// row in bytes, R9 the plane's rows, DI the scratch, R12 a phase row
// (QW values) in bytes, R13 the column masks, R14 the scratch rows, R15
// the shift (0 or 1: rows and columns), Z30 and Z31 the even and odd
// lanes of two registers, Z26 and Z27 the interleaved low and high halves
// of two, Z29 the bias.
#define PARGS \
	MOVQ a+0(FP), AX \
	MOVQ 16(AX), SI \
	MOVQ 32(AX), R9 \
	MOVQ 40(AX), R10 \
	SHLQ $2, R10 \
	MOVQ 48(AX), DI \
	MOVQ 64(AX), R12 \
	SHLQ $2, R12 \
	MOVQ 96(AX), R13 \
	MOVQ 112(AX), R14 \
	MOVQ 120(AX), R15 \
	VBROADCASTSS 144(AX), Z29 \
	MOVQ 136(AX), AX \
	VMOVDQU32 0(AX), Z30 \
	VMOVDQU32 64(AX), Z31 \
	VMOVDQU32 128(AX), Z26 \
	VMOVDQU32 192(AX), Z27 \
	VPXORD Z28, Z28, Z28

// SPLITSETUP points SI at the plane's row -shift, column -shift, sets R9
// to h + shift (rows r in [shift, h+shift) come from plane row r -
// shift), BX to row 0's source, DX to the scratch and AX to 0.
#define SPLITSETUP \
	MOVQ R15, AX \
	IMULQ R10, AX \
	SUBQ AX, SI \
	MOVQ R15, AX \
	SHLQ $2, AX \
	SUBQ AX, SI \
	ADDQ R15, R9 \
	MOVQ SI, BX \
	MOVQ DI, DX \
	XORQ AX, AX

// func deint2AVX512(a *kargs)
// One plane (rows scratch rows) into phases 0, 1: scratch (r, b, q) =
// plane (r - shift, 2q + b - shift), 0 outside the plane.
TEXT ·deint2AVX512(SB), NOSPLIT, $0-8
	PARGS
	SPLITSETUP
d2row:
	CMPQ AX, R14
	JAE d2done
	MOVQ DX, DI
	MOVQ R12, CX
	SHRQ $6, CX
	CMPQ AX, R15
	JB d2zero
	CMPQ AX, R9
	JAE d2zero
	MOVQ BX, R11
	MOVQ R13, R8
d2blk:
	KMOVW (R8), K1
	KMOVW 2(R8), K2
	VMOVUPS.Z (R11), K1, Z0
	VMOVUPS.Z 64(R11), K2, Z1
	VMOVAPS Z0, Z2
	VPERMT2PS Z1, Z30, Z2
	VPERMT2PS Z1, Z31, Z0
	VMOVUPS Z2, (DI)
	VMOVUPS Z0, (DI)(R12*1)
	ADDQ $128, R11
	ADDQ $4, R8
	ADDQ $64, DI
	DECQ CX
	JNZ d2blk
	JMP d2next
d2zero:
	VMOVUPS Z28, (DI)
	VMOVUPS Z28, (DI)(R12*1)
	ADDQ $64, DI
	DECQ CX
	JNZ d2zero
d2next:
	ADDQ R10, BX
	LEAQ (DX)(R12*2), DX
	INCQ AX
	JMP d2row
d2done:
	VZEROUPPER
	RET

// func deint4AVX512(a *kargs)
// deint2AVX512 with phases 0..3.
TEXT ·deint4AVX512(SB), NOSPLIT, $0-8
	PARGS
	SPLITSETUP
d4row:
	CMPQ AX, R14
	JAE d4done
	MOVQ DX, DI
	MOVQ R12, CX
	SHRQ $6, CX
	CMPQ AX, R15
	JB d4zero
	CMPQ AX, R9
	JAE d4zero
	MOVQ BX, R11
	MOVQ R13, R8
d4blk:
	KMOVW (R8), K1
	KMOVW 2(R8), K2
	KMOVW 4(R8), K3
	KMOVW 6(R8), K4
	VMOVUPS.Z (R11), K1, Z0
	VMOVUPS.Z 64(R11), K2, Z1
	VMOVUPS.Z 128(R11), K3, Z2
	VMOVUPS.Z 192(R11), K4, Z3
	VMOVAPS Z0, Z4
	VPERMT2PS Z1, Z30, Z4 // columns 0 mod 2 of the first 32
	VPERMT2PS Z1, Z31, Z0 // 1 mod 2
	VMOVAPS Z2, Z5
	VPERMT2PS Z3, Z30, Z5
	VPERMT2PS Z3, Z31, Z2
	VMOVAPS Z4, Z6
	VPERMT2PS Z5, Z30, Z6 // phase 0
	VPERMT2PS Z5, Z31, Z4 // phase 2
	VMOVAPS Z0, Z7
	VPERMT2PS Z2, Z30, Z7 // phase 1
	VPERMT2PS Z2, Z31, Z0 // phase 3
	VMOVUPS Z6, (DI)
	VMOVUPS Z7, (DI)(R12*1)
	VMOVUPS Z4, (DI)(R12*2)
	ADDQ R12, DI
	VMOVUPS Z0, (DI)(R12*2)
	SUBQ R12, DI
	ADDQ $256, R11
	ADDQ $8, R8
	ADDQ $64, DI
	DECQ CX
	JNZ d4blk
	JMP d4next
d4zero:
	VMOVUPS Z28, (DI)
	VMOVUPS Z28, (DI)(R12*1)
	VMOVUPS Z28, (DI)(R12*2)
	ADDQ R12, DI
	VMOVUPS Z28, (DI)(R12*2)
	SUBQ R12, DI
	ADDQ $64, DI
	DECQ CX
	JNZ d4zero
d4next:
	ADDQ R10, BX
	LEAQ (DX)(R12*4), DX
	INCQ AX
	JMP d4row
d4done:
	VZEROUPPER
	RET

// func inter2AVX512(a *kargs)
// The scratch's phases 0, 1 (rows 0..h-1) back into the plane's columns
// under the column masks, plus the bias.
TEXT ·inter2AVX512(SB), NOSPLIT, $0-8
	PARGS
	MOVQ DI, BX
	MOVQ SI, DX
	XORQ AX, AX
i2row:
	CMPQ AX, R9
	JAE i2done
	MOVQ BX, R11
	MOVQ DX, DI
	MOVQ R13, R8
	MOVQ R12, CX
	SHRQ $6, CX
i2blk:
	KMOVW (R8), K1
	KMOVW 2(R8), K2
	VADDPS (R11), Z29, Z0
	VADDPS (R11)(R12*1), Z29, Z1
	VMOVAPS Z0, Z2
	VPERMT2PS Z1, Z26, Z2
	VPERMT2PS Z1, Z27, Z0
	VMOVUPS Z2, K1, (DI)
	VMOVUPS Z0, K2, 64(DI)
	ADDQ $64, R11
	ADDQ $4, R8
	ADDQ $128, DI
	DECQ CX
	JNZ i2blk
	LEAQ (BX)(R12*2), BX
	ADDQ R10, DX
	INCQ AX
	JMP i2row
i2done:
	VZEROUPPER
	RET

// func inter4AVX512(a *kargs)
// inter2AVX512 with phases 0..3.
TEXT ·inter4AVX512(SB), NOSPLIT, $0-8
	PARGS
	MOVQ DI, BX
	MOVQ SI, DX
	XORQ AX, AX
i4row:
	CMPQ AX, R9
	JAE i4done
	MOVQ BX, R11
	MOVQ DX, DI
	MOVQ R13, R8
	MOVQ R12, CX
	SHRQ $6, CX
i4blk:
	KMOVW (R8), K1
	KMOVW 2(R8), K2
	KMOVW 4(R8), K3
	KMOVW 6(R8), K4
	VADDPS (R11), Z29, Z0
	VADDPS (R11)(R12*1), Z29, Z1
	VADDPS (R11)(R12*2), Z29, Z2
	ADDQ R12, R11
	VADDPS (R11)(R12*2), Z29, Z3
	SUBQ R12, R11
	VMOVAPS Z0, Z4
	VPERMT2PS Z2, Z26, Z4 // phases 0, 2 interleaved, low half
	VPERMT2PS Z2, Z27, Z0 // high half
	VMOVAPS Z1, Z5
	VPERMT2PS Z3, Z26, Z5 // phases 1, 3, low
	VPERMT2PS Z3, Z27, Z1 // high
	VMOVAPS Z4, Z6
	VPERMT2PS Z5, Z26, Z6 // columns 0..15
	VPERMT2PS Z5, Z27, Z4 // 16..31
	VMOVAPS Z0, Z7
	VPERMT2PS Z1, Z26, Z7 // 32..47
	VPERMT2PS Z1, Z27, Z0 // 48..63
	VMOVUPS Z6, K1, (DI)
	VMOVUPS Z4, K2, 64(DI)
	VMOVUPS Z7, K3, 128(DI)
	VMOVUPS Z0, K4, 192(DI)
	ADDQ $64, R11
	ADDQ $8, R8
	ADDQ $256, DI
	DECQ CX
	JNZ i4blk
	LEAQ (BX)(R12*4), BX
	ADDQ R10, DX
	INCQ AX
	JMP i4row
i4done:
	VZEROUPPER
	RET
