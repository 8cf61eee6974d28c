package cublas_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/gdist/gdist/gpu/cublas"
	"github.com/gdist/gdist/gpu/internal/devtest"
)

// SgemmStridedBatched is Sgemm on each product of the batch: column-major
// matrices with leading dimensions larger than the rows, strides larger
// than a matrix (the gaps stay untouched), a shared A (stride 0), both
// transposes, alpha and beta not 0 or 1.
func TestSgemmStridedBatched(t *testing.T) {
	const dev = 0
	h, s := handle(t, dev)
	const batch = 3
	for _, sz := range sizes {
		m, n, k := sz[0], sz[1], sz[2]
		for _, ta := range []cublas.Op{cublas.NoTrans, cublas.Trans} {
			for _, tb := range []cublas.Op{cublas.NoTrans, cublas.Trans} {
				name := fmt.Sprintf("%dx%dx%d/%v%v", m, n, k, ta, tb)
				ar, ac, br, bc := operandShapes(m, n, k, ta, tb)
				lda, ldb, ldc := ar+1, br+2, m+3
				sa, sb, sc := 0, ldb*bc+5, ldc*n+7 // A shared by the products
				a, b, c := fill(7, lda*ac), fill(8, sb*batch), fill(9, sc*batch)
				da, db, dc := devtest.Upload(t, dev, a), devtest.Upload(t, dev, b), devtest.Upload(t, dev, c)
				const alpha, beta = -1.25, 0.5
				if err := h.SgemmStridedBatched(ta, tb, m, n, k, alpha, da, lda, int64(sa), db, ldb, int64(sb), beta, dc, ldc, int64(sc), batch); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if err := s.Synchronize(); err != nil {
					t.Fatal(err)
				}
				got := devtest.Floats(t, dev, dc, len(c))
				for i := 0; i < batch; i++ {
					ci := c[i*sc : i*sc+ldc*n]
					want, bound := refGemm(ta, tb, m, n, k, alpha, a, lda, b[i*sb:], ldb, beta, ci, ldc)
					gi := got[i*sc : i*sc+ldc*n]
					for j := 0; j < n; j++ {
						for r := m; r < ldc; r++ {
							want[r+j*ldc], bound[r+j*ldc] = float64(ci[r+j*ldc]), 0
						}
					}
					check(t, fmt.Sprintf("%s product %d", name, i), gi, want, bound, fp32Tol)
					for r := i*sc + ldc*n; r < (i+1)*sc; r++ {
						if got[r] != c[r] {
							t.Fatalf("%s: the gap after product %d changed at %d", name, i, r)
						}
					}
				}
			}
		}
	}
}

// MatMulBatched is the row-major batched product over strided views: the
// heads of an attention layer, each a [t, d] block of rows of length 3c
// (lda 3c, stride d between heads), times another head's transposed.
func TestMatMulBatched(t *testing.T) {
	const dev = 0
	h, _ := handle(t, dev)
	const heads, tt, d = 3, 5, 4
	const c = heads * d
	x := fill(10, tt*3*c) // [t, 3c]: queries | keys | values
	out := devtest.Alloc(t, dev, heads*tt*tt, 4)
	dx := devtest.Upload(t, dev, x)
	// S_h [t, t] = Q_h K_h^T, Q_h at x + h d, K_h at x + c + h d
	if err := h.MatMulBatched(false, true, tt, tt, d, 0.5, dx, 3*c, d, dx+4*c, 3*c, d, 0, out, tt, tt*tt, heads); err != nil {
		t.Fatal(err)
	}
	got := devtest.Floats(t, dev, out, heads*tt*tt)
	want, bound := make([]float64, len(got)), make([]float64, len(got))
	for hd := 0; hd < heads; hd++ {
		for i := 0; i < tt; i++ {
			for j := 0; j < tt; j++ {
				var s, abs float64
				for p := 0; p < d; p++ {
					v := float64(x[i*3*c+hd*d+p]) * float64(x[j*3*c+c+hd*d+p])
					s += v
					abs += math.Abs(v)
				}
				want[(hd*tt+i)*tt+j], bound[(hd*tt+i)*tt+j] = 0.5*s, 0.5*abs
			}
		}
	}
	check(t, "heads", got, want, bound, fp32Tol)
}

// Negative strides and overlapping outputs are refused.
func TestBatchedInvalid(t *testing.T) {
	const dev = 0
	h, _ := handle(t, dev)
	d := devtest.Alloc(t, dev, 64, 4)
	if err := h.SgemmStridedBatched(cublas.NoTrans, cublas.NoTrans, 2, 2, 2, 1, d, 2, -4, d, 2, 4, 0, d, 2, 4, 2); err == nil {
		t.Error("a negative stride was accepted")
	}
	if err := h.SgemmStridedBatched(cublas.NoTrans, cublas.NoTrans, 4, 4, 2, 1, d, 4, 0, d, 2, 0, 0, d+128, 4, 8, 2); err == nil {
		t.Error("overlapping outputs were accepted")
	} else {
		t.Log(err)
	}
}

// GemmStridedBatchedEx with bfloat16 inputs, float32 output and fp32
// accumulation (bf16 autocast's batched product): each product is that of
// the rounded inputs to fp32 rounding; a shared B (stride 0), both
// transposes of A.
func TestGemmStridedBatchedExBF16(t *testing.T) {
	const dev = 0
	h, s := handle(t, dev)
	const m, n, k, batch = 9, 7, 12, 3
	for _, ta := range []cublas.Op{cublas.NoTrans, cublas.Trans} {
		ar, ac, _, _ := operandShapes(m, n, k, ta, cublas.NoTrans)
		lda, ldc := ar, m+1
		sa, sc := int64(lda*ac+3), int64(ldc*n+2)
		a, b := fill(21, int(sa)*batch), fill(22, k*n)
		a16, b16 := roundBF16(a), roundBF16(b)
		da, db := devtest.Upload(t, dev, a16), devtest.Upload(t, dev, b16)
		dc := devtest.Upload(t, dev, make([]float32, int(sc)*batch))
		err := h.GemmStridedBatchedEx(ta, cublas.NoTrans, m, n, k, 1.5,
			cublas.Matrix{Ptr: da, Type: cublas.BF16, LD: lda}, sa, cublas.Matrix{Ptr: db, Type: cublas.BF16, LD: k}, 0,
			0, cublas.Matrix{Ptr: dc, Type: cublas.F32, LD: ldc}, sc, batch, cublas.Compute32F)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		got := devtest.Floats(t, dev, dc, int(sc)*batch)
		for i := 0; i < batch; i++ {
			want, bound := refGemm(ta, cublas.NoTrans, m, n, k, 1.5, a[int64(i)*sa:], lda, b, k, 0, make([]float32, ldc*n), ldc)
			check(t, fmt.Sprintf("%v product %d", ta, i), got[int64(i)*sc:int64(i)*sc+int64(ldc*n)], want, bound, fp32Tol)
		}
	}
}
