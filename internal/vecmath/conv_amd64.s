//go:build amd64 && !purego

#include "textflag.h"

// Kernels for nn's convolution (im2col and its adjoint), the pooling
// gradient, bias sums and bias adds. Rows are done 16 lanes at a time,
// the lanes outside a row or outside its valid columns under masks
// (masked-out lanes are neither read nor written, so no load touches
// memory outside the valid columns).

// func im2colPlaneAVX512(col, x *float32, h, w, ho, wo, k, pad int, masks *uint16)
//
// One channel's im2col: for tap t = ki*k+kj, oy < ho, ox < wo:
// col[t*ho*wo + oy*wo + ox] = x[iy*w + ox+kj-pad] with iy = oy+ki-pad when
// that lies in the plane, else 0. masks holds one entry every 32 values
// (64 bytes, as the chunks' offsets step): entry kj*nc + c (nc =
// ceil(wo/16)) is the lanes of output chunk c whose input column lies in
// the row, entry k*nc + c those below wo.
TEXT ·im2colPlaneAVX512(SB), NOSPLIT, $0-72
	MOVQ col+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ wo+40(FP), R9
	MOVQ k+48(FP), R10
	MOVQ masks+64(FP), R11
	LEAQ 15(R9), R12
	SHRQ $4, R12
	SHLQ $6, R12 // nc*64: the bytes of one kj's masks, and the end of a row's chunks
	MOVQ R10, AX
	IMULQ R12, AX
	LEAQ (R11)(AX*1), R13 // the store masks
	VPXORD Z1, Z1, Z1
	XORQ BX, BX // ki
iki:
	CMPQ BX, R10
	JAE idone
	XORQ DX, DX // kj
ikj:
	CMPQ DX, R10
	JAE inextki
	// R8: x + (iy*w + kj - pad)*4 for oy = 0, i.e. iy = ki - pad.
	MOVQ BX, AX
	SUBQ pad+56(FP), AX
	MOVQ AX, R15 // iy
	IMULQ w+24(FP), AX
	ADDQ DX, AX
	SUBQ pad+56(FP), AX
	LEAQ (SI)(AX*4), R8
	// R14: this kj's masks.
	MOVQ DX, AX
	IMULQ R12, AX
	LEAQ (R11)(AX*1), R14
	XORQ CX, CX // oy
ioy:
	CMPQ CX, ho+32(FP)
	JAE inextkj
	XORQ AX, AX // the chunk's offset in bytes
	CMPQ R15, $0
	JLT izero
	CMPQ R15, h+16(FP)
	JGE izero
ich:
	CMPQ AX, R12
	JAE inextoy
	KMOVW (R14)(AX*1), K1
	KMOVW (R13)(AX*1), K2
	VMOVUPS.Z (R8)(AX*1), K1, Z0
	VMOVUPS Z0, K2, (DI)(AX*1)
	ADDQ $64, AX
	JMP ich
izero:
	CMPQ AX, R12
	JAE inextoy
	KMOVW (R13)(AX*1), K2
	VMOVUPS Z1, K2, (DI)(AX*1)
	ADDQ $64, AX
	JMP izero
inextoy:
	LEAQ (DI)(R9*4), DI
	MOVQ w+24(FP), AX
	LEAQ (R8)(AX*4), R8
	INCQ R15
	INCQ CX
	JMP ioy
inextkj:
	INCQ DX
	JMP ikj
inextki:
	INCQ BX
	JMP iki
idone:
	VZEROUPPER
	RET

// func col2imPlaneAVX512(dx, col *float32, h, w, ho, wo, k, pad int, masks *uint16)
//
// One channel's col2im, im2colPlaneAVX512's adjoint: for iy < h, ix < w,
// dx[iy*w + ix] += col[t*ho*wo + oy*wo + ox] over the taps t = ki*k+kj in
// that order whose oy = iy-ki+pad and ox = ix-kj+pad lie in [0, ho) and
// [0, wo), in a register: the same sums, in the same order, as adding one
// tap at a time. masks as for im2colPlaneAVX512 but over input chunks (nc
// = ceil(w/16)): entry kj*nc + c the lanes of input chunk c whose output
// column lies in [0, wo), entry k*nc + c those below w.
TEXT ·col2imPlaneAVX512(SB), NOSPLIT, $0-72
	MOVQ dx+0(FP), DI
	MOVQ col+8(FP), SI
	MOVQ w+24(FP), R9
	MOVQ k+48(FP), R10
	MOVQ masks+64(FP), R11
	LEAQ 15(R9), R12
	SHRQ $4, R12
	SHLQ $6, R12
	MOVQ R10, AX
	IMULQ R12, AX
	LEAQ (R11)(AX*1), R13 // the store masks
	XORQ R15, R15 // iy
ciy:
	CMPQ R15, h+16(FP)
	JAE cdone
	XORQ AX, AX // the chunk's offset in bytes
cch:
	CMPQ AX, R12
	JAE cnextiy
	KMOVW (R13)(AX*1), K2
	VMOVUPS.Z (DI)(AX*1), K2, Z0
	XORQ BX, BX // ki
cki:
	CMPQ BX, R10
	JAE cstore
	// oy = iy - ki + pad
	MOVQ R15, CX
	SUBQ BX, CX
	ADDQ pad+56(FP), CX
	CMPQ CX, $0
	JLT cnextki
	CMPQ CX, ho+32(FP)
	JGE cnextki
	// R8: col + (ki*k*ho*wo + oy*wo + pad)*4 (tap (ki, 0), ox = ix + pad):
	// tap kj is ho*wo further and one column back.
	MOVQ ho+32(FP), DX
	IMULQ wo+40(FP), DX
	MOVQ DX, R14 // ho*wo
	IMULQ R10, DX
	IMULQ BX, DX
	IMULQ wo+40(FP), CX
	ADDQ CX, DX
	ADDQ pad+56(FP), DX
	LEAQ (SI)(DX*4), R8
	SHLQ $2, R14
	SUBQ $4, R14 // bytes from one tap's column to the next tap's
	MOVQ R11, CX // this kj's masks
	XORQ DX, DX // kj
ckj:
	CMPQ DX, R10
	JAE cnextki
	KMOVW (CX)(AX*1), K1
	VMOVUPS.Z (R8)(AX*1), K1, Z1
	VADDPS Z1, Z0, K1, Z0
	ADDQ R14, R8
	ADDQ R12, CX
	INCQ DX
	JMP ckj
cnextki:
	INCQ BX
	JMP cki
cstore:
	VMOVUPS Z0, K2, (DI)(AX*1)
	ADDQ $64, AX
	JMP cch
cnextiy:
	LEAQ (DI)(R9*4), DI
	INCQ R15
	JMP ciy
cdone:
	VZEROUPPER
	RET

// func poolArgGradAVX512(arg *uint8, dy, top, bot *float32, n int)
//
// One output row's gradient through poolReLUArg: for i < n, top[2i],
// top[2i+1], bot[2i], bot[2i+1] get dy[i] where arg[i] is 0, 1, 2, 3
// respectively, 0 otherwise (all four 0 for code 4).
TEXT ·poolArgGradAVX512(SB), NOSPLIT, $0-40
	MOVQ arg+0(FP), BX
	MOVQ dy+8(FP), DX
	MOVQ top+16(FP), SI
	MOVQ bot+24(FP), DI
	MOVQ n+32(FP), CX
	MOVQ $0x0000000300000002, AX
	VPBROADCASTQ AX, Z28 // bottom codes 2, 3
	MOVQ $0x0000000100000000, AX
	VPBROADCASTQ AX, Z27 // top codes 0, 1
gloop:
	CMPQ CX, $8
	JB gtail
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
	JMP gloop
gtail:
	TESTQ CX, CX
	JZ gdone
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K5 // outputs
	SHLQ $1, CX
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K4 // inputs
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
gdone:
	VZEROUPPER
	RET

// func sum8AVX(v *float32, n int, s *[8]float32)
//
// s[j] = the float32 sum, in order, of v[8i+j] for 8i+j < n rounded down
// to a multiple of 8: eight running sums in one register.
TEXT ·sum8AVX(SB), NOSPLIT, $0-24
	MOVQ v+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ s+16(FP), DI
	VXORPS Y0, Y0, Y0
	SHRQ $3, CX
sloop:
	TESTQ CX, CX
	JZ sdone
	VADDPS (SI), Y0, Y0
	ADDQ $32, SI
	DECQ CX
	JMP sloop
sdone:
	VMOVUPS Y0, (DI)
	VZEROUPPER
	RET

// func addScalarAVX512(v *float32, n int, s float32)
//
// v[i] += s for i < n.
TEXT ·addScalarAVX512(SB), NOSPLIT, $0-20
	MOVQ v+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS s+16(FP), Z1
aloop:
	CMPQ CX, $16
	JB atail
	VADDPS (SI), Z1, Z0
	VMOVUPS Z0, (SI)
	ADDQ $64, SI
	SUBQ $16, CX
	JMP aloop
atail:
	TESTQ CX, CX
	JZ aend
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K1
	VMOVUPS.Z (SI), K1, Z0
	VADDPS Z0, Z1, Z0
	VMOVUPS Z0, K1, (SI)
aend:
	VZEROUPPER
	RET
