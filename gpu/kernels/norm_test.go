package kernels_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
	"github.com/gdist/gdist/nn"
)

// ulps is how many float32 steps lie between a and b (0: the same bits;
// +0 and -0 are 1 apart).
func ulps(a, b float32) int64 {
	key := func(f float32) int64 {
		v := int64(int32(math.Float32bits(f)))
		if v < 0 {
			v = math.MinInt32 - v
		}
		return v
	}
	d := key(a) - key(b)
	if d < 0 {
		d = -d
	}
	return d
}

// withinULP checks got against the CPU's values to maxULP float32 steps
// each and logs how many differ at all.
func withinULP(t *testing.T, what string, got, want []float32, maxULP int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	bad, diff := 0, 0
	for i := range got {
		d := ulps(got[i], want[i])
		if d != 0 {
			diff++
		}
		if d > maxULP || math.IsNaN(float64(got[i])) != math.IsNaN(float64(want[i])) {
			if bad++; bad <= 5 {
				t.Errorf("%s[%d] = %v, CPU %v (%d ulps apart)", what, i, got[i], want[i], d)
			}
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d of %d beyond %d ulps", what, bad, len(got), maxULP)
	}
	t.Logf("%s: %d of %d differ from the CPU's", what, diff, len(got))
}

// BatchNorm2d and BatchNorm1d in training (batch statistics in float64,
// the running statistics updated with PyTorch's momentum and unbiased
// variance) and evaluation, forward and backward, against nn's BNLayer:
// within kernels.BatchNormULP float32 steps of each value (the float64
// sums differ from the CPU's in order only), over three steps. The last
// three shapes split each channel's values into chunks (the sums' two
// stages; M2 combined by Chan's formula), mid-image, and with inner 1.
func TestBatchNorm(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	for _, sh := range [][3]int{{4, 3, 25}, {2, 5, 64}, {16, 7, 1}, {1, 2, 1}, {3, 1, 300}, {5, 3, 300}, {40, 2, 61}, {1100, 2, 1}} {
		n, c, inner := sh[0], sh[1], sh[2]
		t.Run(fmt.Sprintf("%dx%dx%d", n, c, inner), func(t *testing.T) {
			l := nn.BatchNorm2d(c).State()
			total := n * c * inner
			gamma, beta := devtest.Vals(80, c, 1), devtest.Vals(81, c, 1)
			rm, rv := make([]float32, c), make([]float32, c)
			copy(rm, l.RunningMean)
			copy(rv, l.RunningVar)
			dG, dB := devtest.Upload(t, dev, gamma), devtest.Upload(t, dev, beta)
			dRM, dRV := devtest.Upload(t, dev, rm), devtest.Upload(t, dev, rv)
			ws := devtest.Alloc(t, dev, kernels.BatchNormWorkspace(c), 1)
			y, xhat, dx := devtest.Alloc(t, dev, total, 4), devtest.Alloc(t, dev, total, 4), devtest.Alloc(t, dev, total, 4)
			dgamma, dbeta := devtest.Alloc(t, dev, c, 4), devtest.Alloc(t, dev, c, 4)
			cfg := kernels.BatchNormConfig{C: c, Momentum: l.Momentum, Eps: l.Eps}
			for step := 0; step < 3; step++ {
				x := devtest.Vals(82+step, total, 2)
				for i := range x {
					x[i] += 3 // a mean far from 0
				}
				dy := devtest.Vals(90+step, total, 1)
				dX, dDY := devtest.Upload(t, dev, x), devtest.Upload(t, dev, dy)
				if err := k.BatchNormForward(s, y, xhat, dX, dG, dB, dRM, dRV, ws, n, inner, cfg, true); err != nil {
					t.Fatal(err)
				}
				if err := k.BatchNormBackward(s, dx, dgamma, dbeta, dDY, xhat, dG, ws, n, inner, cfg, false); err != nil {
					t.Fatal(err)
				}
				var st nn.BNState
				want, err := l.Forward(context.Background(), x, n, inner, gamma, beta, true, &st)
				if err != nil {
					t.Fatal(err)
				}
				wdx, wdg, wdb, err := l.Backward(context.Background(), dy, inner, gamma, &st)
				if err != nil {
					t.Fatal(err)
				}
				what := fmt.Sprintf("step %d: ", step)
				withinULP(t, what+"y", devtest.Floats(t, dev, y, total), want, kernels.BatchNormULP)
				withinULP(t, what+"xhat", devtest.Floats(t, dev, xhat, total), st.XHat, kernels.BatchNormULP)
				withinULP(t, what+"running mean", devtest.Floats(t, dev, dRM, c), l.RunningMean, kernels.BatchNormULP)
				withinULP(t, what+"running var", devtest.Floats(t, dev, dRV, c), l.RunningVar, kernels.BatchNormULP)
				withinULP(t, what+"dx", devtest.Floats(t, dev, dx, total), wdx, kernels.BatchNormULP)
				withinULP(t, what+"dgamma", devtest.Floats(t, dev, dgamma, c), wdg, kernels.BatchNormULP)
				withinULP(t, what+"dbeta", devtest.Floats(t, dev, dbeta, c), wdb, kernels.BatchNormULP)
			}
			// evaluation: the running statistics
			x := devtest.Vals(99, total, 2)
			dX := devtest.Upload(t, dev, x)
			if err := k.BatchNormForward(s, y, 0, dX, dG, dB, dRM, dRV, ws, n, inner, cfg, false); err != nil {
				t.Fatal(err)
			}
			want, err := l.Forward(context.Background(), x, n, inner, gamma, beta, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			withinULP(t, "eval y", devtest.Floats(t, dev, y, total), want, kernels.BatchNormULP)
			// accumulate adds the parameters' gradients
			g0 := devtest.Vals(98, c, 1)
			devtest.Put(t, dev, dgamma, g0)
			devtest.Put(t, dev, dbeta, g0)
			dy := devtest.Vals(97, total, 1)
			if err := k.BatchNormForward(s, y, xhat, dX, dG, dB, dRM, dRV, ws, n, inner, cfg, true); err != nil {
				t.Fatal(err)
			}
			if err := k.BatchNormBackward(s, 0, dgamma, dbeta, devtest.Upload(t, dev, dy), xhat, dG, ws, n, inner, cfg, true); err != nil {
				t.Fatal(err)
			}
			var st nn.BNState
			if _, err := l.Forward(context.Background(), x, n, inner, gamma, beta, true, &st); err != nil {
				t.Fatal(err)
			}
			wdg, wdb := l.ParamGrads(dy, inner, &st)
			for i := range wdg {
				wdg[i] += g0[i]
				wdb[i] += g0[i]
			}
			withinULP(t, "accumulated dgamma", devtest.Floats(t, dev, dgamma, c), wdg, kernels.BatchNormULP)
			withinULP(t, "accumulated dbeta", devtest.Floats(t, dev, dbeta, c), wdb, kernels.BatchNormULP)
		})
	}
}

// LayerNorm's forward and dx, bit for bit nn's (the row sums in
// vecmath.Sum32's order of eight running sums, 1/std in float64, every
// float operation rounded on its own), for rows whose length is and is
// not a multiple of 8; dgamma and dbeta (column sums over the rows: in
// dx's pass over chunks of rows, then over the chunks, for rows of up to
// 1024; in two stages, colSums, for longer rows) within kernels.SumTol of
// the float64 sums of the float32 products, relative to the sums of
// magnitudes, and the same bits on a second run with or without dx. 130,
// 600, 3100 and 3000 rows make 17, 75, 194 and 375 chunks (of 8, 8, 16
// and 8 rows): over 256 chunks a lane of gd_col_finish_w adds two rounds
// of 8 (GPT-2 small at batch 8: 342 chunks); rows of 1100 sum in two
// stages.
func TestLayerNorm(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	for _, sh := range [][3]int{{2, 3, 16}, {3, 5, 37}, {1, 1, 1}, {2, 4, 160}, {1, 2, 7}, {2, 65, 3}, {1, 130, 40}, {2, 300, 24}, {1, 3100, 8}, {1, 3000, 8}, {1, 40, 1100}} {
		n, tt, c := sh[0], sh[1], sh[2]
		t.Run(fmt.Sprintf("%dx%dx%d", n, tt, c), func(t *testing.T) {
			rows, total := n*tt, n*tt*c
			x, dy := devtest.Vals(100, total, 2), devtest.Vals(101, total, 1)
			for i := range x {
				x[i] += float32(i%c) * 0.25 // rows with a mean and a spread
			}
			gamma, beta := devtest.Vals(102, c, 1), devtest.Vals(103, c, 1)
			dX, dDY, dG, dB := devtest.Upload(t, dev, x), devtest.Upload(t, dev, dy), devtest.Upload(t, dev, gamma), devtest.Upload(t, dev, beta)
			y, xhat, inv, dx := devtest.Alloc(t, dev, total, 4), devtest.Alloc(t, dev, total, 4), devtest.Alloc(t, dev, rows, 4), devtest.Alloc(t, dev, total, 4)
			g0 := devtest.Vals(104, c, 1)
			dgamma, dbeta := devtest.Upload(t, dev, g0), devtest.Upload(t, dev, g0)
			if err := k.LayerNormForward(s, y, xhat, inv, dX, dG, dB, rows, c, 1e-5); err != nil {
				t.Fatal(err)
			}
			if err := k.LayerNormBackward(s, dx, dgamma, dbeta, dDY, xhat, inv, dG, rows, c, false); err != nil {
				t.Fatal(err)
			}
			cpu := newCPULayer(t, &nn.LayerNorm{C: c}, []int{tt, c}, n)
			cpu.set(0, gamma)
			cpu.set(1, beta)
			same(t, "y", devtest.Floats(t, dev, y, total), cpu.forward(t, x))
			same(t, "dx", devtest.Floats(t, dev, dx, total), cpu.backward(t, x, dy))
			xh := devtest.Floats(t, dev, xhat, total)
			gotG, gotB := devtest.Floats(t, dev, dgamma, c), devtest.Floats(t, dev, dbeta, c)
			colSumNear(t, "dgamma", gotG, nil, dy, xh, rows, c)
			colSumNear(t, "dbeta", gotB, nil, dy, nil, rows, c)
			colSumNear(t, "dgamma (CPU)", cpu.grads[0], nil, dy, xh, rows, c)
			// accumulate adds the parameters' gradients; dx 0 skips it;
			// the sums are the same bits again
			devtest.Put(t, dev, dgamma, g0)
			devtest.Put(t, dev, dbeta, g0)
			if err := k.LayerNormBackward(s, 0, dgamma, dbeta, dDY, xhat, inv, dG, rows, c, true); err != nil {
				t.Fatal(err)
			}
			accG, accB := devtest.Floats(t, dev, dgamma, c), devtest.Floats(t, dev, dbeta, c)
			colSumNear(t, "accumulated dgamma", accG, g0, dy, xh, rows, c)
			colSumNear(t, "accumulated dbeta", accB, g0, dy, nil, rows, c)
			wg, wb := make([]float32, c), make([]float32, c)
			for i := range wg {
				wg[i], wb[i] = g0[i]+gotG[i], g0[i]+gotB[i]
			}
			same(t, "accumulated dgamma", accG, wg)
			same(t, "accumulated dbeta", accB, wb)
			// only one of them
			devtest.Put(t, dev, dbeta, g0)
			if err := k.LayerNormBackward(s, 0, 0, dbeta, dDY, xhat, inv, dG, rows, c, false); err != nil {
				t.Fatal(err)
			}
			same(t, "dbeta alone", devtest.Floats(t, dev, dbeta, c), gotB)
		})
	}
}

// GELU (the exact form, x Phi(x)) and its gradient, bit for bit nn's on
// the elements nn computes with vecmath's kernel (the whole multiples of
// 8 of each op's input: vecmath's float32 Mills-ratio formula, fused
// multiply-adds where it fuses), within kernels.GELUTailTol of nn's
// float64 table on the last len%8 (the GELU of a transformer's MLP has
// 4 Dim values per row: a multiple of 8); far tails, zeros and
// infinities included.
func TestGELU(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	for _, n := range []int{64, 1003, 13} {
		x := devtest.Vals(110, n, 4)
		special := []float32{0, float32(math.Copysign(0, -1)), -30, 30, -9.5, 9.5, float32(math.Inf(1)), float32(math.Inf(-1)), -0.75, 1e-30, -5.5, 7}
		copy(x, special)
		dy := devtest.Vals(111, n, 1)
		gy, gdx, wy, wdx := activation(t, dev, nn.GELU{}, x, dy,
			func(y, x uintptr) error { return k.GELU(s, y, x, n) },
			func(dx, dy, x, _ uintptr) error { return k.GELUBackward(s, dx, dy, x, n) })
		body := n &^ 7
		same(t, fmt.Sprintf("n %d: y", n), gy[:body], wy[:body])
		same(t, fmt.Sprintf("n %d: dx", n), gdx[:body], wdx[:body])
		for i := body; i < n; i++ {
			ty := kernels.GELUTailTol * math.Max(1, math.Abs(float64(x[i])))
			tdx := kernels.GELUTailTol * math.Max(1, math.Abs(float64(x[i]))) * math.Abs(float64(dy[i]))
			if d := math.Abs(float64(gy[i]) - float64(wy[i])); !(d <= ty) && !(math.IsInf(float64(wy[i]), 0) && gy[i] == wy[i]) {
				t.Errorf("n %d: gelu(%v) = %v, CPU %v", n, x[i], gy[i], wy[i])
			}
			if d := math.Abs(float64(gdx[i]) - float64(wdx[i])); !(d <= tdx) {
				t.Errorf("n %d: gelu'(%v) dy = %v, CPU %v", n, x[i], gdx[i], wdx[i])
			}
		}
	}
}

// colSumNear checks got [cols] against base (nil: 0) plus the column sums
// of a [rows, cols] (times b when b is not nil, each product rounded to
// float32) in float64: within kernels.SumTol of the sum of magnitudes.
func colSumNear(t *testing.T, what string, got, base, a, b []float32, rows, cols int) {
	t.Helper()
	for c := 0; c < cols; c++ {
		var want, abs float64
		if base != nil {
			want, abs = float64(base[c]), math.Abs(float64(base[c]))
		}
		for r := 0; r < rows; r++ {
			v := a[r*cols+c]
			if b != nil {
				v *= b[r*cols+c]
			}
			want += float64(v)
			abs += math.Abs(float64(v))
		}
		if d := math.Abs(float64(got[c]) - want); d > kernels.SumTol*abs {
			t.Fatalf("%s[%d] = %v, want %v (%d rows; off by %.3g of the magnitudes)", what, c, got[c], want, rows, d/abs)
		}
	}
}
