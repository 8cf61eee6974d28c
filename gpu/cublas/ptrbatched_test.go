package cublas_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/gdist/gdist/gpu/cublas"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/internal/devtest"
)

// ptrArray uploads device pointers as an array of 8-byte addresses.
func ptrArray(t *testing.T, dev int, ps []uintptr) uintptr {
	f := make([]float32, 2*len(ps))
	for i, p := range ps {
		f[2*i], f[2*i+1] = math.Float32frombits(uint32(p)), math.Float32frombits(uint32(uint64(p)>>32))
	}
	return devtest.Upload(t, dev, f)
}

// GemmBatchedEx reads its products' matrices from arrays of pointers:
// attention's heads in place, head h of sequence n at n T 3C + h D of
// (N T, 3C) rows (offsets no single stride gives), S = Q K^T per head into
// (N H, T, T). Each product equals the float64 reference, and, fp32 and
// bf16 alike, GemmStridedBatchedEx's bits for the same heads (one strided
// call per sequence).
func TestGemmBatchedExHeads(t *testing.T) {
	const dev = 0
	h, s := handle(t, dev)
	if !h.HasGemmBatchedEx() {
		t.Fatal("the library has no cublasGemmBatchedEx")
	}
	const N, H, T, D = 2, 3, 5, 4
	const C = H * D
	for _, typ := range []cublas.DataType{cublas.F32, cublas.BF16} {
		x := fill(31, N*T*3*C)
		var dx uintptr
		if typ == cublas.BF16 {
			dx = devtest.Upload(t, dev, roundBF16(x)) // x now the rounded values
		} else {
			dx = devtest.Upload(t, dev, x)
		}
		out := devtest.Upload(t, dev, make([]float32, N*H*T*T))
		ref := devtest.Upload(t, dev, make([]float32, N*H*T*T))
		es := uintptr(typ.Size())
		var pa, pb, pc []uintptr
		for n := 0; n < N; n++ {
			for hd := 0; hd < H; hd++ {
				q := dx + es*uintptr(n*T*3*C+hd*D)
				pa, pb, pc = append(pa, q), append(pb, q+es*C), append(pc, out+4*uintptr((n*H+hd)*T*T))
			}
		}
		// column-major: S^T [T, T] = K Q^T: A = K (op T of [D, T] ld 3C), B = Q
		A, B, Cm := ptrArray(t, dev, pb), ptrArray(t, dev, pa), ptrArray(t, dev, pc)
		if err := h.GemmBatchedEx(cublas.Trans, cublas.NoTrans, T, T, D, 0.5, cublas.Matrix{Ptr: A, Type: typ, LD: 3 * C},
			cublas.Matrix{Ptr: B, Type: typ, LD: 3 * C}, 0, cublas.Matrix{Ptr: Cm, Type: cublas.F32, LD: T}, N*H, cublas.Compute32F); err != nil {
			t.Fatal(err)
		}
		for n := 0; n < N; n++ {
			q := dx + es*uintptr(n*T*3*C)
			if err := h.GemmStridedBatchedEx(cublas.Trans, cublas.NoTrans, T, T, D, 0.5, cublas.Matrix{Ptr: q + es*C, Type: typ, LD: 3 * C}, D,
				cublas.Matrix{Ptr: q, Type: typ, LD: 3 * C}, D, 0, cublas.Matrix{Ptr: ref + 4*uintptr(n*H*T*T), Type: cublas.F32, LD: T}, T*T, H, cublas.Compute32F); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		got, same := devtest.Floats(t, dev, out, N*H*T*T), devtest.Floats(t, dev, ref, N*H*T*T)
		want, bound := make([]float64, len(got)), make([]float64, len(got))
		for n := 0; n < N; n++ {
			for hd := 0; hd < H; hd++ {
				for i := 0; i < T; i++ {
					for j := 0; j < T; j++ {
						var sum, abs float64
						for p := 0; p < D; p++ {
							v := float64(x[(n*T+i)*3*C+hd*D+p]) * float64(x[(n*T+j)*3*C+C+hd*D+p])
							sum += v
							abs += math.Abs(v)
						}
						o := ((n*H+hd)*T+i)*T + j
						want[o], bound[o] = 0.5*sum, 0.5*abs
					}
				}
			}
		}
		check(t, fmt.Sprintf("type %d", typ), got, want, bound, fp32Tol)
		if cudafake.Mode() == "fake" {
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(same[i]) {
					t.Fatalf("type %d: value %d: GemmBatchedEx %v, GemmStridedBatchedEx %v", typ, i, got[i], same[i])
				}
			}
		}
	}
}

// A null pointer in an array is not checked at the call (cuBLAS reads
// the arrays on the device); too small a leading dimension is refused at
// once.
func TestGemmBatchedExInvalid(t *testing.T) {
	const dev = 0
	h, _ := handle(t, dev)
	d := devtest.Alloc(t, dev, 64, 4)
	arr := ptrArray(t, dev, []uintptr{d, d + 64})
	M := func(ld int) cublas.Matrix { return cublas.Matrix{Ptr: arr, Type: cublas.F32, LD: ld} }
	if err := h.GemmBatchedEx(cublas.NoTrans, cublas.NoTrans, 4, 2, 2, 1, M(2), M(2), 0, M(4), 2, cublas.Compute32F); err == nil {
		t.Error("lda 2 < m 4 was accepted")
	} else {
		t.Log(err)
	}
}
