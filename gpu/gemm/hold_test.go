package gemm_test

import (
	"math"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
)

// block is a product whose A and B are blocks of larger matrices (rows
// ld apart, matrices stride apart, gaps between): attention's block
// products.
type block struct {
	name            string
	ta, tb          bool
	m, n, k         int
	lda, ldb        int
	sa, sb          int64
	offA, offB      int // values from the buffer's start
	batch           int
	castA, castB    int64 // values each operand's cast reads
	bufA, bufB, ldc int
	sc              int64
}

func blocks() []block {
	return []block{
		// S_i = Q_i K_{0..i}^T: rows 4..8 of 3 heads of 12 x 8, keys 0..8
		{name: "S block", tb: true, m: 4, n: 8, k: 8, lda: 8, ldb: 8, sa: 96, sb: 96, offA: 32, batch: 3,
			castA: 3 * 4 * 8, castB: 3 * 8 * 8, bufA: 3 * 96, bufB: 3 * 96, ldc: 12, sc: 144},
		// O_i = P_i V_{0..i}: P rows 4..8, keys 0..8 of 12 x 12, V 8 x 4 of 12 x 4
		{name: "PV block", m: 4, n: 4, k: 8, lda: 12, ldb: 4, sa: 144, sb: 48, offA: 48, batch: 3,
			castA: 3 * 4 * 8, castB: 3 * 8 * 4, bufA: 3 * 144, bufB: 3 * 48, ldc: 4, sc: 16},
		// dK_j = dS_{j..,j}^T Q_{j..}: the block column j = 1 of 13 x 13
		// (keys 4..8, queries 4..13), odd widths (one value a thread)
		{name: "block column", ta: true, m: 4, n: 3, k: 9, lda: 13, ldb: 3, sa: 169, sb: 39, offA: 4*13 + 4, offB: 12, batch: 2,
			castA: 2 * 9 * 4, castB: 2 * 9 * 3, bufA: 2 * 169, bufB: 2 * 39, ldc: 3, sc: 12},
		// rows longer than a block's threads: 300 one a thread, 1100 four
		{name: "wide rows", m: 3, n: 2, k: 300, lda: 301, ldb: 2, sa: 3 * 301, sb: 600, batch: 2,
			castA: 2 * 3 * 300, castB: 2 * 600, bufA: 2 * 3 * 301, bufB: 1200, ldc: 2, sc: 6},
		{name: "wide rows, aligned", m: 2, n: 2, k: 1100, lda: 1104, ldb: 2, sa: 2 * 1104, sb: 2200, batch: 2,
			castA: 2 * 2 * 1100, castB: 2 * 2200, bufA: 2 * 2 * 1104, bufB: 4400, ldc: 2, sc: 4},
		// one matrix shared by the batch (stride 0), padded rows
		{name: "shared padded", m: 5, n: 6, k: 7, lda: 9, ldb: 6, sa: 0, sb: 42, batch: 2,
			castA: 5 * 7, castB: 2 * 7 * 6, bufA: 45, bufB: 84, ldc: 6, sc: 30},
	}
}

// bf16 autocast's cast of a strided operand (a block of a larger
// matrix, padded rows, gaps between the batch's matrices) casts only the
// values the product reads into a compact copy: the values cast are
// exactly those, and the products are, on the fake, bit for bit what
// cuBLAS's own rounding of the fp32 operands gives (CastInCUBLAS), and
// within BF16Tol + GemmTol(k) of the float64 product anywhere.
func TestStridedOperands(t *testing.T) {
	kern := engine(t, gemm.Config{Precision: gemm.BF16, NoWeightCache: true})
	in := engine(t, gemm.Config{Precision: gemm.BF16, BF16Cast: gemm.CastInCUBLAS})
	if !kern.CUBLAS() {
		t.Skip(kern.Backend())
	}
	for _, p := range blocks() {
		a, b := devtest.Vals(60, p.bufA, 1), devtest.Vals(61, p.bufB, 1)
		A, B := devtest.Upload(t, dev, a), devtest.Upload(t, dev, b)
		nc := int(int64(p.batch-1)*p.sc) + (p.m-1)*p.ldc + p.n
		c1, c2 := devtest.Alloc(t, dev, nc, 4), devtest.Alloc(t, dev, nc, 4)
		before := kern.Casts()
		if err := kern.MatMulBatched(p.ta, p.tb, p.m, p.n, p.k, 1, A+uintptr(4*p.offA), p.lda, p.sa, B+uintptr(4*p.offB), p.ldb, p.sb, 0, c1, p.ldc, p.sc, p.batch); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		if got := kern.Casts() - before; got != p.castA+p.castB {
			t.Errorf("%s: %d values cast, want the %d + %d the product reads", p.name, got, p.castA, p.castB)
		}
		if err := in.MatMulBatched(p.ta, p.tb, p.m, p.n, p.k, 1, A+uintptr(4*p.offA), p.lda, p.sa, B+uintptr(4*p.offB), p.ldb, p.sb, 0, c2, p.ldc, p.sc, p.batch); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		got, ref := devtest.Floats(t, dev, c1, nc), devtest.Floats(t, dev, c2, nc)
		for z := 0; z < p.batch; z++ {
			for i := 0; i < p.m; i++ {
				for j := 0; j < p.n; j++ {
					var s, mag float64
					for q := 0; q < p.k; q++ {
						ia := int64(p.offA) + int64(z)*p.sa + int64(i*p.lda+q)
						if p.ta {
							ia = int64(p.offA) + int64(z)*p.sa + int64(q*p.lda+i)
						}
						ib := int64(p.offB) + int64(z)*p.sb + int64(q*p.ldb+j)
						if p.tb {
							ib = int64(p.offB) + int64(z)*p.sb + int64(j*p.ldb+q)
						}
						v := float64(a[ia]) * float64(b[ib])
						s += v
						mag += math.Abs(v)
					}
					at := int64(z)*p.sc + int64(i*p.ldc+j)
					if d := math.Abs(float64(got[at]) - s); d > (gemm.BF16Tol+kernels.GemmTol(p.k))*mag {
						t.Errorf("%s: C[%d][%d][%d] = %v, want %v", p.name, z, i, j, got[at], s)
					}
					if cudafake.Mode() == "fake" && math.Float32bits(got[at]) != math.Float32bits(ref[at]) {
						t.Fatalf("%s: C[%d][%d][%d] = %v cast compact, %v rounded by cuBLAS", p.name, z, i, j, got[at], ref[at])
					}
				}
			}
		}
	}
}

// Hold (bf16 through cuBLAS): a dense region and a staircase (the lower
// blocks of 10 x 10 score matrices in blocks of 4) are cast once, the
// values Hold names and no more; products whose operands lie inside
// them (a block row, a block column, rows of the dense one) cast nothing
// and give the bits of an engine that casts each operand; an operand
// reaching past the staircase is cast as usual; a product writing into a
// held region is refused; after Release the products cast again; bad
// regions are refused naming the problem.
func TestHold(t *testing.T) {
	held := engine(t, gemm.Config{Precision: gemm.BF16})
	plain := engine(t, gemm.Config{Precision: gemm.BF16})
	if !held.CUBLAS() {
		t.Skip(held.Backend())
	}
	const T, tb, d, batch = 10, 4, 4, 2
	steps := make([]int, T)
	for r := range steps {
		steps[r] = min((r/tb+1)*tb, T)
	}
	dense := make([]int, T)
	for r := range dense {
		dense[r] = d
	}
	tt, td := int64(T*T), int64(T*d)
	ds, q := devtest.Upload(t, dev, devtest.Vals(70, batch*T*T, 1)), devtest.Upload(t, dev, devtest.Vals(71, batch*T*d, 1))
	before := held.Casts()
	if err := held.Hold(q, d, td, batch, dense); err != nil {
		t.Fatal(err)
	}
	if err := held.Hold(ds, T, tt, batch, steps); err != nil {
		t.Fatal(err)
	}
	lower := 4*4 + 4*8 + 2*10 // the staircase's values a matrix
	if got, want := held.Casts()-before, int64(batch*(T*d+lower)); got != want {
		t.Errorf("Hold cast %d values, want %d", got, want)
	}
	f := func(n int) uintptr { return uintptr(4 * n) }
	type prod struct {
		name   string
		ta     bool
		m, k   int
		a      uintptr
		b      uintptr
		inside bool
	}
	prods := []prod{
		{"block row 1 of dS times K", false, 4, 8, ds + f(4*T), q, true},
		{"block column 1 of dS, transposed, times Q", true, 4, 6, ds + f(4*T+4), q + f(4*d), true},
		{"block row 2 (the short one)", false, 2, 10, ds + f(8*T), q, true},
		{"rows 0..4 of dS past their block", false, 4, 8, ds, q, false},
	}
	for _, p := range prods {
		c1, c2 := devtest.Alloc(t, dev, batch*p.m*d, 4), devtest.Alloc(t, dev, batch*p.m*d, 4)
		before := held.Casts()
		if err := held.MatMulBatched(p.ta, false, p.m, d, p.k, 1, p.a, T, tt, p.b, d, td, 0, c1, d, int64(p.m*d), batch); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		want := int64(0)
		if !p.inside {
			want = int64(batch * p.m * p.k) // A cast (compact); B (K) held
		}
		if got := held.Casts() - before; got != want {
			t.Errorf("%s: %d values cast, want %d", p.name, got, want)
		}
		if err := plain.MatMulBatched(p.ta, false, p.m, d, p.k, 1, p.a, T, tt, p.b, d, td, 0, c2, d, int64(p.m*d), batch); err != nil {
			t.Fatal(err)
		}
		got, ref := devtest.Floats(t, dev, c1, batch*p.m*d), devtest.Floats(t, dev, c2, batch*p.m*d)
		for i := range ref {
			if math.Float32bits(got[i]) != math.Float32bits(ref[i]) {
				t.Fatalf("%s: [%d] = %v held, %v cast", p.name, i, got[i], ref[i])
			}
		}
	}
	c := devtest.Alloc(t, dev, T*d, 4)
	if err := held.MatMul(false, false, T, d, T, 1, ds, q, 0, ds+f(T*T/2)); err == nil || !strings.Contains(err.Error(), "Release") {
		t.Errorf("a product into a held region: %v", err)
	}
	held.Release()
	before = held.Casts()
	if err := held.MatMul(false, false, 4, d, 8, 1, ds+f(4*T), q, 0, c); err != nil {
		t.Fatal(err)
	}
	if got := held.Casts() - before; got != 4*8+8*d {
		t.Errorf("after Release: %d values cast, want %d", got, 4*8+8*d)
	}
	if held.ScratchBytes() < 2*batch*(T*T+T*d) {
		t.Errorf("ScratchBytes %d: the held copies (%d bytes) not counted", held.ScratchBytes(), 2*batch*(T*T+T*d))
	}
	for _, bad := range []struct {
		ld     int
		stride int64
		batch  int
		widths []int
		want   string
	}{
		{4, 16, 2, []int{4, 5}, "width 5"},
		{4, 7, 2, []int{4, 4}, "overlap"},
		{4, 16, 0, []int{4}, "batch"},
	} {
		if err := held.Hold(q, bad.ld, bad.stride, bad.batch, bad.widths); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Hold(ld %d, stride %d, batch %d, %v): %v, want an error naming %q", bad.ld, bad.stride, bad.batch, bad.widths, err, bad.want)
		}
	}
}
