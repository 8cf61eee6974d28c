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
// sums differ from the CPU's in order only), over three steps.
func TestBatchNorm(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	for _, sh := range [][3]int{{4, 3, 25}, {2, 5, 64}, {16, 7, 1}, {1, 2, 1}, {3, 1, 300}} {
		n, c, inner := sh[0], sh[1], sh[2]
		t.Run(fmt.Sprintf("%dx%dx%d", n, c, inner), func(t *testing.T) {
			l := nn.BatchNorm2d(c).State()
			total := n * c * inner
			gamma, beta := vals(80, c, 1), vals(81, c, 1)
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
				x := vals(82+step, total, 2)
				for i := range x {
					x[i] += 3 // a mean far from 0
				}
				dy := vals(90+step, total, 1)
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
			x := vals(99, total, 2)
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
			g0 := vals(98, c, 1)
			devtest.Put(t, dev, dgamma, g0)
			devtest.Put(t, dev, dbeta, g0)
			dy := vals(97, total, 1)
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
