package gemm_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
)

// heads2 is attention's products over heads read in place: N sequences
// of T rows of qkv (N T, 3C) (queries, keys, values side by side), H
// heads of D, head h of sequence n at n T 3C + h D: offsets linear in
// neither index alone.
const hN, hH, hT, hD = 2, 3, 5, 4
const hC = hH * hD

// heads2Products runs three products on e: S = Q_{1..4} K^T (a block of
// rows, B transposed, C linear (N H, T, T)), O = S V into (N T, C) in
// place (A linear, B and C two-level), and dK = S^T Q into dqkv's keys
// (A transposed): by MatMulBatched2, or (two false) by one product per
// sequence and head, the reference. It returns S, O and dqkv.
func heads2Products(t *testing.T, e *gemm.Engine, qkv uintptr, two bool, hold bool) ([]float32, []float32, []float32) {
	t.Helper()
	s := devtest.Upload(t, dev, make([]float32, hN*hH*hT*hT))
	o := devtest.Upload(t, dev, make([]float32, hN*hT*hC))
	dq := devtest.Upload(t, dev, make([]float32, hN*hT*3*hC))
	row := gemm.Strides2{Outer: hT * 3 * hC, Inner: hD} // a head of qkv
	orow := gemm.Strides2{Outer: hT * hC, Inner: hD}    // a head of out
	lin := gemm.Strides2{Outer: hH * hT * hT, Inner: hT * hT}
	f := func(p uintptr, n int) uintptr { return p + uintptr(4*n) }
	type prod struct {
		ta, tb  bool
		m, n, k int
		alpha   float32
		a       uintptr
		lda     int
		sa      gemm.Strides2
		b       uintptr
		ldb     int
		sb      gemm.Strides2
		c       uintptr
		ldc     int
		sc      gemm.Strides2
	}
	ps := []prod{
		{false, true, 4, hT, hD, 0.5, f(qkv, 3*hC), 3 * hC, row, f(qkv, hC), 3 * hC, row, f(s, hT), hT, lin},
		{false, false, hT, hD, hT, 1, s, hT, lin, f(qkv, 2*hC), 3 * hC, row, o, hC, orow},
		{true, false, hT, hD, hT, 1, s, hT, lin, qkv, 3 * hC, row, f(dq, hC), 3 * hC, row},
	}
	if hold {
		if err := e.Hold(qkv, 3*hC, hT*3*hC, hN, []int{36, 36, 36, 36, 36}); err != nil {
			t.Fatal(err)
		}
		defer e.Release()
	}
	for i, p := range ps {
		var err error
		if two {
			err = e.MatMulBatched2(p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.sa, p.b, p.ldb, p.sb, 0, p.c, p.ldc, p.sc, hN, hH)
		} else {
			for n := 0; n < hN*hH && err == nil; n++ {
				at := func(x uintptr, s gemm.Strides2) uintptr {
					return x + uintptr(4*(int64(n/hH)*s.Outer+int64(n%hH)*s.Inner))
				}
				err = e.MatMulBatched(p.ta, p.tb, p.m, p.n, p.k, p.alpha, at(p.a, p.sa), p.lda, 0, at(p.b, p.sb), p.ldb, 0,
					0, at(p.c, p.sc), p.ldc, 0, 1)
			}
		}
		if err != nil {
			t.Fatalf("product %d: %v", i, err)
		}
	}
	return devtest.Floats(t, dev, s, hN*hH*hT*hT), devtest.Floats(t, dev, o, hN*hT*hC), devtest.Floats(t, dev, dq, hN*hT*3*hC)
}

// MatMulBatched2 over heads read in place gives what one product per
// sequence and head gives (bit for bit on the fake, within
// sameProducts' tolerance on a GPU), in every precision and backend: fp32 and bf16 (operands cast, or held by Hold
// and cast once, or rounded inside cuBLAS) through cuBLAS's pointer
// batches, and the tiled kernel (one product per sequence). Held
// operands are not cast again.
func TestMatMulBatched2Heads(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  gemm.Config
		hold bool
	}{
		{"fp32", gemm.Config{}, false},
		{"tf32", gemm.Config{Precision: gemm.TF32}, false},
		{"bf16", gemm.Config{Precision: gemm.BF16, NoWeightCache: true}, false},
		{"bf16 held", gemm.Config{Precision: gemm.BF16, NoWeightCache: true}, true},
		{"bf16 in cuBLAS", gemm.Config{Precision: gemm.BF16, BF16Cast: gemm.CastInCUBLAS}, false},
		{"tiled", gemm.Config{Tiled: true}, false},
		{"tiled bf16", gemm.Config{Tiled: true, Precision: gemm.BF16}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := engine(t, c.cfg)
			if c.cfg.Tiled == e.PointerBatches() {
				t.Fatalf("PointerBatches %v with %s", e.PointerBatches(), e.Backend())
			}
			qkv := devtest.Upload(t, dev, devtest.Vals(70, hN*hT*3*hC, 1))
			s1, o1, d1 := heads2Products(t, e, qkv, false, c.hold)
			before := e.CastStats()
			s2, o2, d2 := heads2Products(t, e, qkv, true, c.hold)
			casts := e.CastStats().Sub(before).Operands
			for _, r := range []struct {
				name      string
				got, want []float32
			}{{"S", s2, s1}, {"O", o2, o1}, {"dK", d2, d1}} {
				sameProducts(t, r.name+" (one product per head)", r.got, r.want, c.cfg, hT)
			}
			// values read: S reads 4 rows of Q and T of K, O S and V, dK S and Q
			read := int64(hN * hH * (4*hD + hT*hD + hT*hT + hT*hD + hT*hT + hT*hD))
			if c.hold {
				read = 2*hN*hH*hT*hT + hN*hT*3*hC // S twice (not held) and qkv once, by Hold
			}
			want := map[bool]int64{true: read, false: 0}[c.cfg.Precision == gemm.BF16 && e.CUBLAS() && c.cfg.BF16Cast == ""]
			if casts != want {
				t.Errorf("%d values cast, want %d", casts, want)
			}
			if d2[0] != 0 || d2[3*hC-1] != 0 || fmt.Sprint(d2[hC]) == "0" {
				t.Errorf("dqkv: the queries' and values' columns written, or the keys' not: %v", d2[:3*hC])
			}
		})
	}
}

// Two-level C matrices that overlap are refused.
func TestMatMulBatched2Overlap(t *testing.T) {
	e := engine(t, gemm.Config{})
	p := devtest.Upload(t, dev, make([]float32, 256))
	err := e.MatMulBatched2(false, false, 2, 4, 2, 1, p, 2, gemm.Strides2{}, p, 4, gemm.Strides2{}, 0, p+512, 8, gemm.Strides2{Outer: 16, Inner: 2}, 2, 3)
	if err == nil {
		t.Fatal("overlapping C matrices were accepted")
	}
	t.Log(err)
}

// The pointer arrays are kept across products and, past their limit,
// dropped once the stream is done and built again: many distinct
// two-level products (each C at another offset) through a cache of 3
// chunks of 1 KiB give what one product per head gives, bit for bit on
// the fake, and the arrays' memory stays at the limit.
func TestMatMulBatched2PointerCache(t *testing.T) {
	defer gemm.SetPointerCache(1024, 3*1024)()
	e := engine(t, gemm.Config{})
	if !e.PointerBatches() {
		t.Skip(e.Backend())
	}
	const N, H, D = 2, 3, 2 // rows of H heads of D and 2 more values, one row a sequence
	const ld = H*D + 2
	x := devtest.Upload(t, dev, devtest.Vals(80, N*ld, 1))
	const outs = 40
	c := devtest.Upload(t, dev, make([]float32, outs*N*(H+1)))
	ref := devtest.Upload(t, dev, make([]float32, outs*N*(H+1)))
	heads := gemm.Strides2{Outer: ld, Inner: D}
	for round := 0; round < 2; round++ { // the second round: the arrays again, after resets
		for i := 0; i < outs; i++ {
			alpha := float32(i + 1)
			co := c + uintptr(4*i*N*(H+1))
			if err := e.MatMulBatched2(false, true, 1, 1, D, alpha, x, ld, heads, x, ld, heads, 0, co, 1, gemm.Strides2{Outer: H + 1, Inner: 1}, N, H); err != nil {
				t.Fatal(err)
			}
			for j := 0; j < N*H && round == 0; j++ {
				xj := x + uintptr(4*(j/H*ld+j%H*D))
				if err := e.MatMulBatched(false, true, 1, 1, D, alpha, xj, D, 0, xj, D, 0, 0, ref+uintptr(4*(i*N*(H+1)+j/H*(H+1)+j%H)), 1, 0, 1); err != nil {
					t.Fatal(err)
				}
			}
		}
		if b := e.PointerArrayBytes(); b > 3*1024 {
			t.Errorf("pointer arrays hold %d bytes, past the limit", b)
		}
		got, want := devtest.Floats(t, dev, c, outs*N*(H+1)), devtest.Floats(t, dev, ref, outs*N*(H+1))
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("round %d: C[%d] = %v, one product per head %v", round, i, got[i], want[i])
			}
		}
	}
}

// An operand shared by a sequence's heads (Inner 0) but not by the
// sequences (Outer its matrix apart: offsets not linear) gives, through
// the pointer batches under bf16, what one product per (o, i) gives:
// every head reads its sequence's cast copy.
func TestMatMulBatched2SharedInner(t *testing.T) {
	const outer, inner, m, n, k = 2, 3, 4, 5, 6
	for _, c := range []struct {
		name string
		cfg  gemm.Config
	}{
		{"fp32", gemm.Config{}},
		{"bf16", gemm.Config{Precision: gemm.BF16, NoWeightCache: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := engine(t, c.cfg)
			a := devtest.Upload(t, dev, devtest.Vals(90, outer*inner*m*k, 1))
			b := devtest.Upload(t, dev, devtest.Vals(91, outer*k*n, 1)) // one [k, n] a sequence
			sa := gemm.Strides2{Outer: inner * m * k, Inner: m * k}
			sb := gemm.Strides2{Outer: k * n, Inner: 0}
			sc := gemm.Strides2{Outer: inner * m * n, Inner: m * n}
			c2 := devtest.Alloc(t, dev, outer*inner*m*n, 4)
			c1 := devtest.Alloc(t, dev, outer*inner*m*n, 4)
			if err := e.MatMulBatched2(false, false, m, n, k, 1, a, k, sa, b, n, sb, 0, c2, n, sc, outer, inner); err != nil {
				t.Fatal(err)
			}
			f := func(p uintptr, s gemm.Strides2, o, i int) uintptr {
				return p + uintptr(4*(int64(o)*s.Outer+int64(i)*s.Inner))
			}
			for o := range outer {
				for i := range inner {
					if err := e.MatMul(false, false, m, n, k, 1, f(a, sa, o, i), f(b, sb, o, i), 0, f(c1, sc, o, i)); err != nil {
						t.Fatal(err)
					}
				}
			}
			got, want := devtest.Floats(t, dev, c2, outer*inner*m*n), devtest.Floats(t, dev, c1, outer*inner*m*n)
			sameProducts(t, "C (one product per (o, i))", got, want, c.cfg, k)
		})
	}
}

// sameProducts checks a pointer batch's results against one product per
// matrix: bit for bit on the fake, which computes both alike. On a GPU
// cuBLAS picks a kernel by the call (batched or not, the shapes), so the
// sums' order may differ (GemmTol(k)), and the compute types that let it
// round the inputs (TF32's, bf16 in cuBLAS) let it not round them too:
// PyTorch's allow_tf32 and fast-16BF mean the same "may". Tolerances are
// relative to the largest result; a wrong matrix (another head, another
// sequence) differs by about the largest result itself.
func sameProducts(t *testing.T, what string, got, want []float32, cfg gemm.Config, k int) {
	t.Helper()
	if cudafake.Mode() == "fake" {
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: [%d] = %v, want %v bit for bit", what, i, got[i], want[i])
			}
		}
		return
	}
	inputs := 0.0 // how far cuBLAS may round each input
	switch {
	case cfg.Tiled:
	case cfg.Precision == gemm.TF32:
		inputs = gemm.TF32Tol
	case cfg.Precision == gemm.BF16 && cfg.BF16Cast == gemm.CastInCUBLAS:
		inputs = gemm.BF16Tol
	}
	scale := 0.0
	for _, w := range want {
		scale = math.Max(scale, math.Abs(float64(w)))
	}
	allowed := 2 * float64(k) * (2*inputs + kernels.GemmTol(k)) * scale
	for i := range got {
		if d := math.Abs(float64(got[i]) - float64(want[i])); !(d <= allowed) {
			t.Fatalf("%s: [%d] = %v, want %v (difference %.3g, allowed %.3g)", what, i, got[i], want[i], d, allowed)
		}
	}
}
