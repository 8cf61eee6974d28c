package nn

import (
	"math"
	"testing"

	"gorgonia.org/tensor"
)

func TestPositiveMask(t *testing.T) {
	for _, c := range []struct {
		x    float32
		want bool
	}{{1, true}, {1e-40, true}, {0, false}, {float32(math.Copysign(0, -1)), false}, {-1e-40, false}, {-3, false}, {float32(math.Inf(1)), true}, {float32(math.Inf(-1)), false}} {
		if got := positive(math.Float32bits(c.x)) != 0; got != c.want {
			t.Errorf("positive(%v) = %v", c.x, got)
		}
	}
}

// outBuf hands out the same memory run after run, reshaped as asked, and a
// new buffer when the size changes or the old one shares memory with an
// input.
func TestOutBuf(t *testing.T) {
	var b outBuf
	t1, d1 := b.get(tensor.Shape{2, 3})
	t2, d2 := b.get(tensor.Shape{3, 2})
	if t1 != t2 || &d1[0] != &d2[0] || !t2.Shape().Eq(tensor.Shape{3, 2}) {
		t.Fatalf("not reused or not reshaped: %v", t2.Shape())
	}
	if _, d3 := b.get(tensor.Shape{6}, d2[4:]); &d3[0] == &d2[0] {
		t.Fatal("reused a buffer that overlaps an input")
	}
	if _, d4 := b.get(tensor.Shape{7}); len(d4) != 7 {
		t.Fatalf("size 7: got %d", len(d4))
	}
}

// maskPositive keeps v where x > 0 (NaNs with the sign bit clear
// included, as the branch-free mask defines) and gives +0 elsewhere, for
// any length.
func TestMaskPositive(t *testing.T) {
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 1e-45, -1e-45}
	for n := 0; n < 40; n++ {
		x, v, out := make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range x {
			x[i] = special[i%len(special)]
			v[i] = float32(i) + 0.5
		}
		maskPositive(out, v, x)
		for i := range x {
			b := math.Float32bits(x[i])
			want := float32(0)
			if int32(b) > 0 {
				want = v[i]
			}
			if math.Float32bits(out[i]) != math.Float32bits(want) {
				t.Fatalf("n=%d: x=%v: got %v, want %v", n, x[i], out[i], want)
			}
		}
	}
}
