//go:build ignore

// gen_kernels_amd64 writes kernels_amd64.s, the AVX2 and AVX-512 reduce
// kernels: go run gen_kernels_amd64.go (go generate ./internal/reduce).
//
// Every binary kernel is
//
//	func NAME(dst, a, b *byte, n int)   // dst = a op b, n bytes, n % 64 == 0
//
// and every divide kernel
//
//	func NAME(dst, a *byte, n int, d float32|float64)   // dst = a / d
//
// The caller (kernels_amd64.go) passes whole 64-byte blocks and handles a
// tail by padding it into a block. dst may be a or b exactly (in place) but
// must not overlap them otherwise.
//
// Operand order matters for bit-exact results: x86 returns the first
// source's NaN when both operands are NaN, and min/max pick by a fixed
// rule, so each kernel mirrors the scalar reference (kernels_ref.go):
// sum/prod compute a op b with a as the first source; min/max compute
// "b if b < a (b > a) or b is NaN, else a".
package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

type isa struct {
	name string // "AVX2" or "AVX512"
	w    int    // vector bytes
	r    string // register prefix
	evex bool
}

var (
	avx2   = isa{"AVX2", 32, "Y", false}
	avx512 = isa{"AVX512", 64, "Z", true}
)

type gen struct {
	buf bytes.Buffer
	isa isa
}

func (g *gen) p(format string, args ...any) {
	fmt.Fprintf(&g.buf, "\t"+format+"\n", args...)
}

func (g *gen) reg(i int) string { return fmt.Sprintf("%s%d", g.isa.r, i) }

// half is the register holding half a vector's worth (f16 source width).
func (g *gen) half(i int) string {
	if g.isa.evex {
		return fmt.Sprintf("Y%d", i)
	}
	return fmt.Sprintf("X%d", i)
}

// Bitwise instructions have EVEX-only names with an element size.
func (g *gen) bitop(op string) string {
	if g.isa.evex {
		return op + "D"
	}
	return op
}

// constant broadcasts the 32-bit value v into vector register r.
func (g *gen) constant(r int, v uint32) {
	g.p("MOVL $0x%08x, AX", v)
	if g.isa.evex {
		g.p("VPBROADCASTD AX, %s", g.reg(r))
	} else {
		g.p("MOVD AX, X%d", r)
		g.p("VPBROADCASTD X%d, %s", r, g.reg(r))
	}
}

// kernel describes one function.
type kernel struct {
	name   string
	step   int // input bytes of a (and b) consumed by one body
	unroll int
	regs   int // vector registers one body uses (from base)
	consts func(g *gen)
	body   func(g *gen, off, base int)
	divide string // "" for binary kernels; "float32" or "float64"
}

func (g *gen) emit(k kernel) {
	i := g.isa
	name := k.name + i.name
	if k.divide == "" {
		fmt.Fprintf(&g.buf, "// func %s(dst, a, b *byte, n int)\n", name)
		fmt.Fprintf(&g.buf, "TEXT ·%s(SB), NOSPLIT, $0-32\n", name)
		g.p("MOVQ dst+0(FP), DI")
		g.p("MOVQ a+8(FP), SI")
		g.p("MOVQ b+16(FP), DX")
		g.p("MOVQ n+24(FP), CX")
	} else {
		size := 4
		if k.divide == "float64" {
			size = 8
		}
		fmt.Fprintf(&g.buf, "// func %s(dst, a *byte, n int, d %s)\n", name, k.divide)
		fmt.Fprintf(&g.buf, "TEXT ·%s(SB), NOSPLIT, $0-%d\n", name, 24+size)
		g.p("MOVQ dst+0(FP), DI")
		g.p("MOVQ a+8(FP), SI")
		g.p("MOVQ n+16(FP), CX")
		if size == 4 {
			g.p("VBROADCASTSS d+24(FP), %s", g.reg(15))
		} else {
			g.p("VBROADCASTSD d+24(FP), %s", g.reg(15))
		}
	}
	if k.consts != nil {
		k.consts(g)
	}
	big := k.step * k.unroll
	adv := func(n int) {
		g.p("ADDQ $%d, SI", n)
		if k.divide == "" {
			g.p("ADDQ $%d, DX", n)
		}
		g.p("ADDQ $%d, DI", n)
		g.p("SUBQ $%d, CX", n)
	}
	if k.unroll > 1 {
		g.p("CMPQ CX, $%d", big)
		g.p("JB one")
		fmt.Fprintf(&g.buf, "loop:\n")
		for u := 0; u < k.unroll; u++ {
			k.body(g, u*k.step, u*k.regs)
		}
		adv(big)
		g.p("CMPQ CX, $%d", big)
		g.p("JAE loop")
	}
	fmt.Fprintf(&g.buf, "one:\n")
	g.p("CMPQ CX, $%d", k.step)
	g.p("JB done")
	k.body(g, 0, 0)
	adv(k.step)
	g.p("JMP one")
	fmt.Fprintf(&g.buf, "done:\n")
	g.p("VZEROUPPER")
	g.p("RET")
	fmt.Fprintf(&g.buf, "\n")
}

func off(o int, r string) string {
	if o == 0 {
		return "(" + r + ")"
	}
	return fmt.Sprintf("%d(%s)", o, r)
}

// arith: dst = a OP b for one full vector (float add/mul, integer ops).
func arith(mov, op string) func(g *gen, o, base int) {
	return func(g *gen, o, base int) {
		r := g.reg(base)
		g.p("%s %s, %s", mov, off(o, "SI"), r)
		g.p("%s %s, %s, %s", op, off(o, "DX"), r, r)
		g.p("%s %s, %s", mov, r, off(o, "DI"))
	}
}

// bitwise: dst = a OP b with the ISA's name for the instruction.
func bitwise(op string) func(g *gen, o, base int) {
	return func(g *gen, o, base int) {
		mov := "VMOVDQU"
		if g.isa.evex {
			mov = "VMOVDQU32"
		}
		arith(mov, g.bitop(op))(g, o, base)
	}
}

func intArith(op string) func(g *gen, o, base int) {
	return func(g *gen, o, base int) {
		mov := "VMOVDQU"
		if g.isa.evex {
			mov = "VMOVDQU32"
		}
		arith(mov, op)(g, o, base)
	}
}

// minmaxRegs computes, in registers, res = (b OP a) or b if b is NaN, where
// OP is VMINPx/VMAXPx: MIN(src1=b, src2=a) is "b < a ? b : a", which is the
// reference except for a NaN b, patched in with a blend. Uses base..base+2
// (base+2 only for AVX2) and K1.
func minmaxRegs(g *gen, op, cmp, blend string, a, b, res, tmp string) {
	g.p("%s %s, %s, %s", op, a, b, res)
	if g.isa.evex {
		g.p("%s $3, %s, %s, K1", cmp, b, b)
		g.p("%s %s, K1, %s", blend, b, res) // merge-masked move
	} else {
		g.p("%s $3, %s, %s, %s", cmp, b, b, tmp)
		g.p("%s %s, %s, %s, %s", blend, tmp, b, res, res)
	}
}

func floatMinMax(suffix, op string) func(g *gen, o, base int) {
	return func(g *gen, o, base int) {
		mov, cmp, blend := "VMOVUP"+suffix, "VCMPP"+suffix, "VBLENDVP"+suffix
		if g.isa.evex {
			blend = "VMOVAP" + suffix
		}
		b, res, tmp := g.reg(base), g.reg(base+1), g.reg(base+2)
		g.p("%s %s, %s", mov, off(o, "DX"), b)
		minmaxRegs(g, op+suffix, cmp, blend, off(o, "SI"), b, res, tmp)
		g.p("%s %s, %s", mov, res, off(o, "DI"))
	}
}

// f32op applies a float32 op to registers a, b (a is the first source),
// leaving the result in a. Uses tmp1, tmp2 for min/max.
func f32op(g *gen, op, a, b, tmp1, tmp2 string) {
	switch op {
	case "add":
		g.p("VADDPS %s, %s, %s", b, a, a)
	case "mul":
		g.p("VMULPS %s, %s, %s", b, a, a)
	case "div":
		g.p("VDIVPS %s, %s, %s", b, a, a)
	case "min", "max":
		blend := "VBLENDVPS"
		if g.isa.evex {
			blend = "VMOVAPS"
		}
		minmaxRegs(g, "V"+strings.ToUpper(op)+"PS", "VCMPPS", blend, a, b, tmp1, tmp2)
		g.p("VMOVAPS %s, %s", tmp1, a)
	}
}

// bf16 constants: 15 = divisor (divide kernels), 14 = 0xffff0000,
// 13 = 1, 12 = 0x7fff, 11 = 0x00400000.
func bf16Consts(g *gen) {
	g.constant(14, 0xffff0000)
	g.constant(13, 1)
	g.constant(12, 0x7fff)
	g.constant(11, 0x00400000)
}

// bf16Round rounds the float32 bits in x to bfloat16 in the upper 16 bits,
// as comm.ToBF16: NaN -> bits | 0x00400000 (quiet), else
// bits + 0x7fff + (bits>>16 & 1); the low 16 bits are garbage.
func bf16Round(g *gen, x, t, m string) {
	g.p("VPSRLD $16, %s, %s", x, t)
	g.p("%s %s, %s, %s", g.bitop("VPAND"), g.reg(13), t, t)
	g.p("VPADDD %s, %s, %s", g.reg(12), t, t)
	if g.isa.evex {
		g.p("VCMPPS $7, %s, %s, K2", x, x) // ordered: not NaN
		g.p("VCMPPS $3, %s, %s, K3", x, x) // NaN
		g.p("VPADDD %s, %s, K2, %s", t, x, x)
		g.p("VPORD %s, %s, K3, %s", g.reg(11), x, x)
		return
	}
	g.p("VCMPPS $3, %s, %s, %s", x, x, m)
	g.p("VPANDN %s, %s, %s", t, m, t) // t = ~m & t
	g.p("VPAND %s, %s, %s", g.reg(11), m, m)
	g.p("VPADDD %s, %s, %s", t, x, x)
	g.p("VPOR %s, %s, %s", m, x, x)
}

// bf16Body: 16 (AVX2) or 32 (AVX-512) bfloat16 elements per vector, split
// into the even elements (shifted up) and the odd ones (masked), each a
// vector of float32. Registers base..base+7.
func bf16Body(op string) func(g *gen, o, base int) {
	return func(g *gen, o, base int) {
		r := func(i int) string { return g.reg(base + i) }
		mov := "VMOVDQU"
		if g.isa.evex {
			mov = "VMOVDQU32"
		}
		and, or := g.bitop("VPAND"), g.bitop("VPOR")
		g.p("%s %s, %s", mov, off(o, "SI"), r(0))
		g.p("VPSLLD $16, %s, %s", r(0), r(2))
		g.p("%s %s, %s, %s", and, g.reg(14), r(0), r(0))
		if op == "div" {
			f32op(g, op, r(2), g.reg(15), "", "")
			f32op(g, op, r(0), g.reg(15), "", "")
		} else {
			g.p("%s %s, %s", mov, off(o, "DX"), r(1))
			g.p("VPSLLD $16, %s, %s", r(1), r(3))
			g.p("%s %s, %s, %s", and, g.reg(14), r(1), r(1))
			f32op(g, op, r(2), r(3), r(4), r(5))
			f32op(g, op, r(0), r(1), r(4), r(5))
		}
		bf16Round(g, r(2), r(4), r(5))
		bf16Round(g, r(0), r(6), r(7))
		g.p("VPSRLD $16, %s, %s", r(2), r(2))
		g.p("%s %s, %s, %s", and, g.reg(14), r(0), r(0))
		g.p("%s %s, %s, %s", or, r(2), r(0), r(0))
		g.p("%s %s, %s", mov, r(0), off(o, "DI"))
	}
}

// f16 constants: 15 = divisor, 14 = 0x80000000, 13 = 0x7fc00000.
func f16Consts(g *gen) {
	g.constant(14, 0x80000000)
	g.constant(13, 0x7fc00000)
}

// f16Body: half a vector of float16 widened to a vector of float32 with
// VCVTPH2PS (exact), the op in float32, every NaN made the canonical
// sign|0x7fc00000 (so that it narrows to comm.ToF16's sign|0x7e00), and
// VCVTPS2PH with round-to-nearest-even. Registers base..base+3.
func f16Body(op string) func(g *gen, o, base int) {
	return func(g *gen, o, base int) {
		r := func(i int) string { return g.reg(base + i) }
		g.p("VCVTPH2PS %s, %s", off(o, "SI"), r(0))
		if op == "div" {
			f32op(g, op, r(0), g.reg(15), "", "")
		} else {
			g.p("VCVTPH2PS %s, %s", off(o, "DX"), r(1))
			f32op(g, op, r(0), r(1), r(2), r(3))
		}
		if g.isa.evex {
			g.p("VCMPPS $3, %s, %s, K2", r(0), r(0))
			// r0 = (r0 & sign) | qnan where NaN: ternary-logic 0xEA is (A & B) | C.
			g.p("VPTERNLOGD $0xea, %s, %s, K2, %s", g.reg(13), g.reg(14), r(0))
		} else {
			g.p("VCMPPS $3, %s, %s, %s", r(0), r(0), r(2))
			g.p("VANDPS %s, %s, %s", g.reg(14), r(0), r(3))
			g.p("VORPS %s, %s, %s", g.reg(13), r(3), r(3))
			g.p("VBLENDVPS %s, %s, %s, %s", r(2), r(3), r(0), r(0))
		}
		g.p("VCVTPS2PH $0, %s, %s", r(0), off(o, "DI"))
	}
}

func kernels(g *gen) []kernel {
	w := g.isa.w
	var ks []kernel
	add := func(name string, unroll, regs int, body func(*gen, int, int)) {
		ks = append(ks, kernel{name: name, step: w, unroll: unroll, regs: regs, body: body})
	}
	add("addF32", 4, 1, arith("VMOVUPS", "VADDPS"))
	add("mulF32", 4, 1, arith("VMOVUPS", "VMULPS"))
	add("minF32", 4, 3, floatMinMax("S", "VMINP"))
	add("maxF32", 4, 3, floatMinMax("S", "VMAXP"))
	add("addF64", 4, 1, arith("VMOVUPD", "VADDPD"))
	add("mulF64", 4, 1, arith("VMOVUPD", "VMULPD"))
	add("minF64", 4, 3, floatMinMax("D", "VMINP"))
	add("maxF64", 4, 3, floatMinMax("D", "VMAXP"))
	add("addI32", 4, 1, intArith("VPADDD"))
	add("mulI32", 4, 1, intArith("VPMULLD"))
	add("minI32", 4, 1, intArith("VPMINSD"))
	add("maxI32", 4, 1, intArith("VPMAXSD"))
	add("addI64", 4, 1, intArith("VPADDQ"))
	add("addU8", 4, 1, intArith("VPADDB"))
	add("minU8", 4, 1, intArith("VPMINUB"))
	add("maxU8", 4, 1, intArith("VPMAXUB"))
	add("and", 4, 1, bitwise("VPAND"))
	add("or", 4, 1, bitwise("VPOR"))
	add("xor", 4, 1, bitwise("VPXOR"))
	for _, op := range []string{"add", "mul", "min", "max", "div"} {
		name := op + "BF16"
		k := kernel{name: name, step: w, unroll: 1, regs: 8, consts: bf16Consts, body: bf16Body(op)}
		if op == "div" {
			k.divide = "float32"
		}
		ks = append(ks, k)
		k = kernel{name: op + "F16", step: w / 2, unroll: 2, regs: 4, consts: f16Consts, body: f16Body(op)}
		if op == "div" {
			k.divide = "float32"
		}
		ks = append(ks, k)
	}
	divF32 := kernel{name: "divF32", step: w, unroll: 4, regs: 1, divide: "float32",
		body: func(g *gen, o, base int) {
			r := g.reg(base)
			g.p("VMOVUPS %s, %s", off(o, "SI"), r)
			g.p("VDIVPS %s, %s, %s", g.reg(15), r, r)
			g.p("VMOVUPS %s, %s", r, off(o, "DI"))
		}}
	divF64 := kernel{name: "divF64", step: w, unroll: 4, regs: 1, divide: "float64",
		body: func(g *gen, o, base int) {
			r := g.reg(base)
			g.p("VMOVUPD %s, %s", off(o, "SI"), r)
			g.p("VDIVPD %s, %s, %s", g.reg(15), r, r)
			g.p("VMOVUPD %s, %s", r, off(o, "DI"))
		}}
	ks = append(ks, divF32, divF64)
	return ks
}

func main() {
	var out bytes.Buffer
	out.WriteString("// Code generated by gen_kernels_amd64.go; DO NOT EDIT.\n\n")
	out.WriteString("//go:build amd64 && !purego\n\n")
	out.WriteString("#include \"textflag.h\"\n\n")
	for _, i := range []isa{avx2, avx512} {
		g := &gen{isa: i}
		for _, k := range kernels(g) {
			g.emit(k)
		}
		out.Write(g.buf.Bytes())
	}
	if err := os.WriteFile("kernels_amd64.s", out.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
