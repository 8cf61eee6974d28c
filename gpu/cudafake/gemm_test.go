package cudafake_test

import (
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/gdist/gdist/gpu/cublas"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/internal/devtest"
)

func TestMain(m *testing.M) { os.Exit(cudafake.Main(m)) }

// bitsFill is n float32 bit patterns: ordinary values of mixed signs and
// magnitudes, with zeros of both signs, subnormals, infinities, NaN and
// values whose products overflow among them.
func bitsFill(seed, n int) []float32 {
	v := make([]float32, n)
	x := uint32(seed)*2654435761 + 12345
	special := []float32{0, float32(math.Copysign(0, -1)), 1e-40, -3e-39, float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), 3e38, -2e38, 1e-30}
	for i := range v {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		if x%97 == 0 {
			v[i] = special[(x>>8)%uint32(len(special))]
			continue
		}
		v[i] = (float32(x%(1<<24))/(1<<23) - 1) * float32(math.Ldexp(1, int(x>>24)%9-4))
	}
	return v
}

// halves is n 16-bit patterns (every pattern possible: NaNs, infinities and
// subnormals of bf16 and fp16 included), an even count.
func halves(seed, n int) []uint16 {
	v := make([]uint16, n+n%2)
	x := uint32(seed)*2246822519 + 777
	for i := range v {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		v[i] = uint16(x >> 7)
	}
	return v
}

// sameBits is the first word where a and b differ (-1 if none): each
// float (or each half of the word, for 16-bit data) the same bits, or both
// a NaN (the sign and payload of a NaN depend on the host's operand order;
// a GPU's are canonical anyway).
func sameBits(a, b []float32, dt cublas.DataType) int {
	for i := range a {
		x, y := math.Float32bits(a[i]), math.Float32bits(b[i])
		if x == y {
			continue
		}
		switch dt {
		case cublas.F32:
			if a[i] != a[i] && b[i] != b[i] {
				continue
			}
		default:
			if halfSame(uint16(x), uint16(y), dt) && halfSame(uint16(x>>16), uint16(y>>16), dt) {
				continue
			}
		}
		return i
	}
	return -1
}

func halfSame(x, y uint16, dt cublas.DataType) bool {
	nan := func(h uint16) bool {
		if dt == cublas.BF16 {
			return h&0x7f80 == 0x7f80 && h&0x7f != 0
		}
		return h&0x7c00 == 0x7c00 && h&0x3ff != 0
	}
	return x == y || nan(x) && nan(y)
}

// TestGemmBitsMatchReference: the fake cuBLAS's fast GEMM (packed panels,
// 8x4 blocks of C summed side by side) gives C bit for bit as its
// reference loop (one float sum over k in order per element) does, for
// every transpose, sizes off the block sizes, alpha 0, beta 0 or not,
// fp32 (with and without TF32 rounding), bf16 and fp16 inputs (C in fp32
// or in the input type), strided batches, with specials (NaN, infinities,
// subnormals, overflow) among the inputs. A NaN only has to stay a NaN.
func TestGemmBitsMatchReference(t *testing.T) {
	cudafake.RequireFake(t)
	const dev = 0
	s := devtest.Stream(t, dev)
	h, err := cublas.New(dev, s)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	sizes := [][3]int{{1, 1, 1}, {7, 5, 3}, {8, 4, 16}, {9, 7, 12}, {17, 6, 33}, {33, 13, 70}, {3, 9, 0}, {16, 1, 5}}
	types := []struct {
		name    string
		in, out cublas.DataType
		compute cublas.ComputeType
	}{
		{"f32", cublas.F32, cublas.F32, cublas.Compute32F},
		{"tf32", cublas.F32, cublas.F32, cublas.Compute32FFastTF32},
		{"f32-as-bf16", cublas.F32, cublas.F32, cublas.Compute32FFast16BF},
		{"f32-as-f16", cublas.F32, cublas.F32, cublas.Compute32FFast16F},
		{"bf16", cublas.BF16, cublas.F32, cublas.Compute32F},
		{"bf16-out", cublas.BF16, cublas.BF16, cublas.Compute32F},
		{"f16-out", cublas.F16, cublas.F16, cublas.Compute32F},
	}
	upload := func(dt cublas.DataType, seed, n int) uintptr {
		if dt == cublas.F32 {
			return devtest.Upload(t, dev, bitsFill(seed, n))
		}
		return devtest.Upload(t, dev, halves(seed, n))
	}
	words := func(dt cublas.DataType, n int) int {
		if dt == cublas.F32 {
			return n
		}
		return (n + 1) / 2
	}
	cases := 0
	for _, sz := range sizes {
		m, n, k := sz[0], sz[1], sz[2]
		for _, ty := range types {
			for _, ta := range []cublas.Op{cublas.NoTrans, cublas.Trans} {
				for _, tb := range []cublas.Op{cublas.NoTrans, cublas.Trans} {
					for _, ab := range [][2]float32{{1.5, 0}, {-0.75, 1.25}, {0, 2}} {
						const batch = 2
						ar, ac, br, bc := m, k, k, n
						if ta == cublas.Trans {
							ar, ac = k, m
						}
						if tb == cublas.Trans {
							br, bc = n, k
						}
						lda, ldb, ldc := max(ar, 1)+1, max(br, 1)+2, m+1
						sa, sb, sc := int64(lda*max(ac, 1)+3), int64(ldb*max(bc, 1)+1), int64(ldc*n+2)
						seed := cases * 3
						da, db := upload(ty.in, seed+1, int(sa)*batch), upload(ty.in, seed+2, int(sb)*batch)
						cn := words(ty.out, int(sc)*batch)
						name := fmt.Sprintf("%dx%dx%d/%s/%v%v/alpha%v-beta%v", m, n, k, ty.name, ta, tb, ab[0], ab[1])
						var got [2][]float32
						for ref := 0; ref < 2; ref++ {
							dc := upload(ty.out, seed+3, int(sc)*batch)
							cudafake.ReferenceGEMM(t, ref == 1)
							err := h.GemmStridedBatchedEx(ta, tb, m, n, k, ab[0], cublas.Matrix{Ptr: da, Type: ty.in, LD: lda}, sa,
								cublas.Matrix{Ptr: db, Type: ty.in, LD: ldb}, sb, ab[1], cublas.Matrix{Ptr: dc, Type: ty.out, LD: ldc},
								sc, batch, ty.compute)
							if err != nil {
								t.Fatalf("%s: %v", name, err)
							}
							if err := s.Synchronize(); err != nil {
								t.Fatal(err)
							}
							got[ref] = devtest.Floats(t, dev, dc, cn)
						}
						if i := sameBits(got[0], got[1], ty.out); i >= 0 {
							t.Errorf("%s: word %d of C: %#x (fast) vs %#x (reference)", name, i,
								math.Float32bits(got[0][i]), math.Float32bits(got[1][i]))
						}
						cases++
					}
				}
			}
		}
	}
	t.Logf("%d GEMMs equal to the reference bit for bit", cases)
}
