//go:build amd64 && !purego

package vecmath

import (
	"math"
	"math/rand"
	"testing"
	"unsafe"
)

// TestGELUStreaming: the avx512 GELU's derivative by streaming stores
// (d 64-byte aligned) equals the go set's bit for bit, y too, over whole
// vectors and a last group of 8, nothing written past n.
func TestGELUStreaming(t *testing.T) {
	r := rand.New(rand.NewSource(13))
	for _, n := range []int{16, 24, 4096, 4096 + 8, 100000} {
		x := geluInputs(r, n)
		y, d := make([]float32, n+64), make([]float32, n+64+16)
		// d from a 64-byte boundary
		off := int((64 - uintptr(unsafe.Pointer(&d[0]))%64) % 64 / 4)
		d = d[off : off+n+8]
		if uintptr(unsafe.Pointer(&d[0]))%64 != 0 {
			t.Fatal("test: d not aligned")
		}
		for i := n; i < len(d); i++ {
			d[i] = 7
		}
		wantY, wantD := make([]float32, n), make([]float32, n)
		goKernels.gelu(wantY, wantD, x, geluConsts)
		eachSet(t, func(t *testing.T) {
			if m := GELU(y[:n], d[:n], x, geluConsts); m != n {
				t.Fatalf("n %d: did %d", n, m)
			}
			for i := 0; i < n; i++ {
				if math.Float32bits(y[i]) != math.Float32bits(wantY[i]) || math.Float32bits(d[i]) != math.Float32bits(wantD[i]) {
					if math.IsNaN(float64(wantY[i])) && math.IsNaN(float64(y[i])) {
						continue
					}
					t.Fatalf("n %d: gelu(%g) = %g, %g; go set %g, %g", n, x[i], y[i], d[i], wantY[i], wantD[i])
				}
			}
			for i := n; i < len(d); i++ {
				if d[i] != 7 {
					t.Fatalf("n %d: d[%d] written", n, i)
				}
			}
		})
	}
}
