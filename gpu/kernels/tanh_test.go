package kernels_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
	"github.com/gdist/gdist/nn"
)

// activation runs an element-wise activation on the device, forward
// (fwd: y from x) and backward (bwd: dx from dy and x or y), on x and dy
// (one sample of len(x) values), and nn's layer l on the CPU: the
// device's y and dx, then nn's.
func activation(t *testing.T, dev int, l nn.Layer, x, dy []float32, fwd func(y, x uintptr) error, bwd func(dx, dy, x, y uintptr) error) (gy, gdx, wy, wdx []float32) {
	t.Helper()
	n := len(x)
	dX, dDY := devtest.Upload(t, dev, x), devtest.Upload(t, dev, dy)
	y, dx := devtest.Alloc(t, dev, n, 4), devtest.Alloc(t, dev, n, 4)
	if err := fwd(y, dX); err != nil {
		t.Fatal(err)
	}
	if err := bwd(dx, dDY, dX, y); err != nil {
		t.Fatal(err)
	}
	cpu := newCPULayer(t, l, []int{n}, 1)
	wy, wdx = cpu.forward(t, x), cpu.backward(t, x, dy)
	return devtest.Floats(t, dev, y, n), devtest.Floats(t, dev, dx, n), wy, wdx
}

// Tanh within TanhTol of nn's (relative to max(|y|, 2^-60)) and of the
// float64 tanh; its backward bit for bit (1 - y y) dy from the device's
// y (gorgonia's operations), and within TanhTol of nn's dx (|dy| times
// 2 TanhTol relative, from the two y's).
func TestTanh(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	for _, n := range []int{64, 1003, 13} {
		x := devtest.Vals(120, n, 4)
		copy(x, []float32{0, float32(math.Copysign(0, -1)), -30, 30, -9.5, 9.5, float32(math.Inf(1)), float32(math.Inf(-1)), -0.75, 1e-30, 0.6, -0.65, 45})
		dy := devtest.Vals(121, n, 1)
		gy, gdx, wy, wdx := activation(t, dev, nn.Tanh{}, x, dy,
			func(y, x uintptr) error { return k.Tanh(s, y, x, n) },
			func(dx, dy, _, y uintptr) error { return k.TanhBackward(s, dx, dy, y, n) })
		worst := 0.0
		for i := range x {
			tol := kernels.TanhTol * math.Max(math.Abs(float64(wy[i])), 0x1p-60)
			d := math.Abs(float64(gy[i]) - float64(wy[i]))
			worst = math.Max(worst, d/tol)
			if !(d <= tol) {
				t.Errorf("n %d: tanh(%v) = %v, CPU %v", n, x[i], gy[i], wy[i])
			}
			if e := math.Abs(float64(gy[i]) - math.Tanh(float64(x[i]))); !(e <= tol) {
				t.Errorf("n %d: tanh(%v) = %v, float64 %v", n, x[i], gy[i], math.Tanh(float64(x[i])))
			}
			v := gy[i]
			if want := (1 - v*v) * dy[i]; math.Float32bits(gdx[i]) != math.Float32bits(want) {
				t.Errorf("n %d: dx[%d] = %v, want (1 - y y) dy = %v", n, i, gdx[i], want)
			}
			if d := math.Abs(float64(gdx[i]) - float64(wdx[i])); !(d <= 2*kernels.TanhTol*math.Abs(float64(dy[i]))+1e-30) {
				t.Errorf("n %d: dx[%d] = %v, CPU %v", n, i, gdx[i], wdx[i])
			}
		}
		t.Logf("n %d: worst tanh difference %.2g of TanhTol", n, worst)
	}
}

// A PositionEmbedding on its own: y = x + pos (per position, over the
// batch) and pos's gradient the batch's sum of dy, bit for bit nn's.
func TestPositionEmbedding(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	for _, c := range [][3]int{{1, 1, 1}, {3, 5, 4}, {2, 7, 33}} {
		nb, tt, dim := c[0], c[1], c[2]
		n := nb * tt * dim
		x, pos, dy := devtest.Vals(130, n, 2), devtest.Vals(131, tt*dim, 1), devtest.Vals(132, n, 1)
		cpu := newCPULayer(t, &nn.PositionEmbedding{T: tt, Dim: dim}, []int{tt, dim}, nb)
		cpu.set(0, pos)
		wy, wdx := cpu.forward(t, x), cpu.backward(t, x, dy)
		dX, dP, dDY := devtest.Upload(t, dev, x), devtest.Upload(t, dev, pos), devtest.Upload(t, dev, dy)
		y := devtest.Alloc(t, dev, n, 4)
		dpos := devtest.Upload(t, dev, make([]float32, tt*dim))
		if err := k.PositionEmbedding(s, y, dX, dP, nb*tt, dim, tt); err != nil {
			t.Fatal(err)
		}
		if err := k.PositionEmbeddingBackward(s, dpos, dDY, nb*tt, dim, tt, true); err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("N %d T %d dim %d", nb, tt, dim)
		same(t, what+": y", devtest.Floats(t, dev, y, n), wy)
		same(t, what+": dpos", devtest.Floats(t, dev, dpos, tt*dim), cpu.grads[0])
		same(t, what+": dx", dy, wdx)
	}
}
