package kernels_test

import (
	"fmt"
	"math"
	"os"
	"sync"
	"testing"

	"github.com/gdist/gdist/gpu/cublas"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
)

func TestMain(m *testing.M) { os.Exit(cudafake.Main(m)) }

func TestRealGPU(t *testing.T) {
	cudafake.RequireReal(t)
	if _, err := kernels.Load(0); err != nil {
		t.Fatal(err)
	}
}

// setup loads the kernels on dev and makes a blocking stream there.
func setup(t *testing.T, dev int) (*kernels.Kernels, *cuda.Stream) {
	t.Helper()
	cudafake.RequireCUDA(t)
	k, err := kernels.Load(dev)
	if err != nil {
		t.Fatal(err)
	}
	return k, devtest.Stream(t, dev)
}

var shapes = [][2]int{{1, 1}, {7, 13}, {300, 257}, {64, 10}}

// BiasAdd is one float32 add per element: bit for bit the CPU's. Rows
// of 4 and 12 (four values a thread), the same 4 bytes off 16-byte
// alignment (one a thread), and more rows than a grid's 65535.
func TestBiasAdd(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	for i, sh := range append(shapes, [2]int{5, 12}, [2]int{5, 12}, [2]int{3, 4}, [2]int{70000, 1}, [2]int{66000, 4}) {
		rows, cols := sh[0], sh[1]
		shift := 0
		if i == len(shapes)+1 {
			shift = 1
		}
		y, b := devtest.Vals(1, rows*cols, 2), devtest.Vals(2, cols, 1)
		dy := devtest.Alloc(t, dev, rows*cols+shift, 4) + uintptr(4*shift)
		devtest.Put(t, dev, dy, y)
		db := devtest.Upload(t, dev, b)
		if err := k.BiasAdd(s, dy, db, rows, cols); err != nil {
			t.Fatal(err)
		}
		got := devtest.Floats(t, dev, dy, rows*cols)
		for i := range got {
			if want := y[i] + b[i%cols]; got[i] != want {
				t.Fatalf("%dx%d: [%d] = %v, want %v", rows, cols, i, got[i], want)
			}
		}
	}
}

// BiasGrad sums each column (in float32, in a fixed order): within
// kernels.SumTol of the float64 sum, relative to the sum of magnitudes;
// with accumulate it adds to what is there; the same bits every run. The
// shapes cover one chunk of rows and several (two-stage), the last chunk
// short, columns not a multiple of 32, fewer rows than lanes, no rows.
func TestBiasGrad(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	for _, sh := range append(shapes, [2]int{65, 40}, [2]int{130, 1}, [2]int{1000, 33}, [2]int{5000, 3}, [2]int{3, 70}, [2]int{0, 5}) {
		rows, cols := sh[0], sh[1]
		dy, old := devtest.Vals(3, rows*cols, 1), devtest.Vals(4, cols, 1)
		ddy := devtest.Upload(t, dev, dy)
		for _, acc := range []bool{false, true} {
			ddb := devtest.Upload(t, dev, old)
			if err := k.BiasGrad(s, ddb, ddy, rows, cols, acc); err != nil {
				t.Fatal(err)
			}
			got := devtest.Floats(t, dev, ddb, cols)
			for c := 0; c < cols; c++ {
				var want, abs float64
				if acc {
					want, abs = float64(old[c]), math.Abs(float64(old[c]))
				}
				for r := 0; r < rows; r++ {
					want += float64(dy[r*cols+c])
					abs += math.Abs(float64(dy[r*cols+c]))
				}
				if d := math.Abs(float64(got[c]) - want); d > kernels.SumTol*abs {
					t.Fatalf("%dx%d accumulate=%v: column %d sums to %v, want %v", rows, cols, acc, c, got[c], want)
				}
			}
			devtest.Put(t, dev, ddb, old)
			if err := k.BiasGrad(s, ddb, ddy, rows, cols, acc); err != nil {
				t.Fatal(err)
			}
			same(t, fmt.Sprintf("%dx%d again", rows, cols), devtest.Floats(t, dev, ddb, cols), got)
		}
	}
}

// ReLU and its gradient are exact; in place works.
func TestReLU(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	for _, n := range []int{1, 1000, 70001} {
		x, dy := devtest.Vals(5, n, 1), devtest.Vals(6, n, 1)
		x[0] = 0
		dx, ddy := devtest.Upload(t, dev, x), devtest.Upload(t, dev, dy)
		dyOut := devtest.Alloc(t, dev, n, 4)
		if err := k.ReLU(s, dyOut, dx, n); err != nil {
			t.Fatal(err)
		}
		if err := k.ReLU(s, dx, dx, n); err != nil { // in place
			t.Fatal(err)
		}
		if err := k.ReLUBackward(s, ddy, ddy, dx, n); err != nil { // in place, from the output
			t.Fatal(err)
		}
		y, y2, g := devtest.Floats(t, dev, dyOut, n), devtest.Floats(t, dev, dx, n), devtest.Floats(t, dev, ddy, n)
		for i := range x {
			want, wantG := x[i], dy[i]
			if x[i] <= 0 {
				want, wantG = 0, 0
			}
			if y[i] != want || y2[i] != want || g[i] != wantG {
				t.Fatalf("n %d [%d]: relu(%v) = %v, %v (in place); grad %v, want %v, %v", n, i, x[i], y[i], y2[i], g[i], want, wantG)
			}
		}
	}
}

// The mean softmax cross-entropy against nn.CrossEntropy (float64), and
// its gradient against the float64 formula (softmax - onehot) / rows,
// within kernels.CrossEntropyTol.
func TestCrossEntropy(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	for _, sh := range [][2]int{{1, 1}, {1, 10}, {64, 10}, {33, 1000}, {5, 3001}} {
		rows, classes := sh[0], sh[1]
		logits := devtest.Vals(7, rows*classes, 8)
		labels := make([]int32, rows)
		for i := range labels {
			labels[i] = int32((i * 7919) % classes)
		}
		dl, dlab := devtest.Upload(t, dev, logits), devtest.Upload(t, dev, labels)
		loss, rowLoss, grad := devtest.Alloc(t, dev, 1, 4), devtest.Alloc(t, dev, rows, 4), devtest.Alloc(t, dev, rows*classes, 4)
		if err := k.CrossEntropy(s, loss, rowLoss, dl, dlab, rows, classes); err != nil {
			t.Fatal(err)
		}
		if err := k.CrossEntropyBackward(s, grad, dl, dlab, rows, classes, 1/float32(rows)); err != nil {
			t.Fatal(err)
		}
		want := nn.CrossEntropy(logits, labels, classes)
		got := devtest.Floats(t, dev, loss, 1)[0]
		if d := math.Abs(float64(got) - want); d > kernels.CrossEntropyTol*math.Max(1, math.Abs(want)) {
			t.Errorf("%dx%d: loss %v, want %v", rows, classes, got, want)
		}
		g := devtest.Floats(t, dev, grad, rows*classes)
		for r := 0; r < rows; r++ {
			row := logits[r*classes : (r+1)*classes]
			m := math.Inf(-1)
			for _, v := range row {
				m = math.Max(m, float64(v))
			}
			var sum float64
			for _, v := range row {
				sum += math.Exp(float64(v) - m)
			}
			for j, v := range row {
				w := math.Exp(float64(v)-m) / sum
				if int32(j) == labels[r] {
					w--
				}
				w /= float64(rows)
				if d := math.Abs(float64(g[r*classes+j]) - w); d > kernels.CrossEntropyTol/float64(rows) {
					t.Fatalf("%dx%d: dlogits[%d,%d] = %v, want %v", rows, classes, r, j, g[r*classes+j], w)
				}
			}
		}
	}
}

// CountCorrect counts the rows whose argmax is their label exactly as
// train's evaluation loop does (the first largest logit; NaNs passed over
// but a NaN first logit predicting class 0), ties across the block's
// threads included.
func TestCountCorrect(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	nan := float32(math.NaN())
	for _, sh := range [][2]int{{1, 1}, {3, 2}, {64, 10}, {33, 1000}, {5, 3001}} {
		rows, classes := sh[0], sh[1]
		logits := devtest.Vals(11, rows*classes, 4)
		for i := range logits { // coarse values: many ties
			logits[i] = float32(math.Round(float64(logits[i])))
		}
		labels := make([]int32, rows)
		for r := range labels {
			row := logits[r*classes : (r+1)*classes]
			switch r % 5 {
			case 1:
				row[0] = nan
			case 2:
				row[classes/2] = nan
			case 3: // the max at a late index and an earlier one: the earlier wins
				row[classes-1], row[classes/3] = 9, 9
			}
		}
		want := int32(0)
		for r := range labels {
			row := logits[r*classes : (r+1)*classes]
			best := 0
			for j := 1; j < classes; j++ {
				if row[j] > row[best] {
					best = j
				}
			}
			// label the prediction on every other row, a neighbour of it on the rest
			labels[r] = int32(best)
			if r%2 == 1 {
				labels[r] = int32((best + 1) % classes)
			}
			if labels[r] == int32(best) {
				want++
			}
		}
		dl, dlab := devtest.Upload(t, dev, logits), devtest.Upload(t, dev, labels)
		correct, hits := devtest.Alloc(t, dev, 1, 4), devtest.Alloc(t, dev, rows, 4)
		if err := k.CountCorrect(s, correct, hits, dl, dlab, rows, classes); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if got := devtest.Int32s(t, dev, correct, 1)[0]; got != want {
			t.Errorf("%dx%d: %d correct, want %d", rows, classes, got, want)
		}
	}
}

// SGD with momentum and weight decay is bit for bit optim's (PyTorch's
// formula, with no fused multiply-adds), over several steps; without
// momentum likewise.
func TestSGD(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	for _, mu := range []float64{0.9, 0} {
		const n = 10007
		cfg := optim.Config{Name: "sgd", LR: 0.05, Momentum: mu, WeightDecay: 1e-3}
		opt, err := optim.New(cfg, n)
		if err != nil {
			t.Fatal(err)
		}
		p := devtest.Vals(8, n, 1)
		dp, dg := devtest.Upload(t, dev, p), devtest.Alloc(t, dev, n, 4)
		var dm uintptr
		if mu != 0 {
			dm = devtest.Upload(t, dev, make([]float32, n))
		}
		for step := 0; step < 4; step++ {
			g := devtest.Vals(9+step, n, 0.5)
			devtest.Put(t, dev, dg, g)
			opt.Step(p, g)
			err := k.SGD(s, dp, dg, dm, n, kernels.SGDConfig{LR: float32(cfg.LR), Momentum: float32(mu), WeightDecay: float32(cfg.WeightDecay)})
			if err != nil {
				t.Fatal(err)
			}
		}
		got := devtest.Floats(t, dev, dp, n)
		for i := range got {
			if got[i] != p[i] {
				t.Fatalf("momentum %v: param %d = %v, CPU %v", mu, i, got[i], p[i])
			}
		}
		if mu != 0 {
			st, _ := opt.State()
			mom := devtest.Floats(t, dev, dm, n)
			for i := range mom {
				if mom[i] != st["momentum_buffer"][i] {
					t.Fatalf("momentum buffer %d = %v, CPU %v", i, mom[i], st["momentum_buffer"][i])
				}
			}
		}
	}
}

// A Linear layer's forward and backward (nn's layout: W [in, out]) against
// float64 loops: y = x W + b, dW = x^T dy, db = colsum dy, dx = dy W^T.
func TestLinear(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	h, err := cublas.New(dev, s)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	const rows, in, out = 9, 17, 5
	x, w, b, dy := devtest.Vals(10, rows*in, 1), devtest.Vals(11, in*out, 1), devtest.Vals(12, out, 1), devtest.Vals(13, rows*out, 1)
	dx, dw, db, ddy := devtest.Upload(t, dev, x), devtest.Upload(t, dev, w), devtest.Upload(t, dev, b), devtest.Upload(t, dev, dy)
	y, gx, gw, gb := devtest.Alloc(t, dev, rows*out, 4), devtest.Alloc(t, dev, rows*in, 4), devtest.Alloc(t, dev, in*out, 4), devtest.Alloc(t, dev, out, 4)
	if err := kernels.LinearForward(h, k, y, dx, dw, db, rows, in, out); err != nil {
		t.Fatal(err)
	}
	if err := kernels.LinearBackward(h, k, gx, gw, gb, dx, dw, ddy, rows, in, out, false); err != nil {
		t.Fatal(err)
	}
	near := func(what string, got []float32, want, abs []float64) {
		t.Helper()
		for i := range got {
			if d := math.Abs(float64(got[i]) - want[i]); d > 2e-6*abs[i]+1e-7 {
				t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
			}
		}
	}
	wy, ay := make([]float64, rows*out), make([]float64, rows*out)
	wgx, agx := make([]float64, rows*in), make([]float64, rows*in)
	wgw, agw := make([]float64, in*out), make([]float64, in*out)
	wgb, agb := make([]float64, out), make([]float64, out)
	for r := 0; r < rows; r++ {
		for o := 0; o < out; o++ {
			wy[r*out+o], ay[r*out+o] = float64(b[o]), math.Abs(float64(b[o]))
			wgb[o] += float64(dy[r*out+o])
			agb[o] += math.Abs(float64(dy[r*out+o]))
			for i := 0; i < in; i++ {
				xw := float64(x[r*in+i]) * float64(w[i*out+o])
				wy[r*out+o] += xw
				ay[r*out+o] += math.Abs(xw)
				xd := float64(x[r*in+i]) * float64(dy[r*out+o])
				wgw[i*out+o] += xd
				agw[i*out+o] += math.Abs(xd)
				dw := float64(dy[r*out+o]) * float64(w[i*out+o])
				wgx[r*in+i] += dw
				agx[r*in+i] += math.Abs(dw)
			}
		}
	}
	near("y", devtest.Floats(t, dev, y, rows*out), wy, ay)
	near("dx", devtest.Floats(t, dev, gx, rows*in), wgx, agx)
	near("dW", devtest.Floats(t, dev, gw, in*out), wgw, agw)
	near("db", devtest.Floats(t, dev, gb, out), wgb, agb)
}

// Sizes that do not fit the kernels' int32 indices, and negative ones, are
// refused before anything runs.
func TestBadSizes(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	d := devtest.Alloc(t, dev, 4, 4)
	for _, err := range []error{
		k.BiasAdd(s, d, d, -1, 2),
		k.ReLU(s, d, d, -3),
		k.CrossEntropy(s, d, d, d, d, 2, 0),
		k.BiasGrad(s, d, d, 1<<31, 1, false),
		k.MaxPool2d(s, d, d, d, 1<<11, 1<<10, 1<<10),         // 2^31 inputs: 32-bit indices refuse
		k.MaxPool2dBackward(s, d, d, d, 1<<11, 1<<10, 1<<10), // nothing queued
	} {
		if err == nil {
			t.Error("a bad size was accepted")
		} else {
			t.Log(err)
		}
	}
	if err := k.ReLU(s, d, d, 0); err != nil {
		t.Errorf("n 0: %v", err)
	}
}

// The two-stage column sums keep their partial sums in scratch that
// Kernels holds per stream: goroutines queueing them at once, on one
// stream and on two, each get their own columns' sums (the same bits as
// one at a time).
func TestColumnSumsConcurrent(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	s2 := devtest.Stream(t, dev)
	const rows, cols, jobs = 300, 70, 8
	want := make([][]float32, jobs)
	in := make([]uintptr, jobs)
	out := make([]uintptr, jobs)
	for j := range jobs {
		in[j] = devtest.Upload(t, dev, devtest.Vals(300+j, rows*cols, 1))
		out[j] = devtest.Alloc(t, dev, cols, 4)
		if err := k.BiasGrad(s, out[j], in[j], rows, cols, false); err != nil {
			t.Fatal(err)
		}
		want[j] = devtest.Floats(t, dev, out[j], cols)
		devtest.Put(t, dev, out[j], make([]float32, cols))
	}
	var wg sync.WaitGroup
	errs := make([]error, jobs)
	for j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := s
			if j%2 == 1 {
				st = s2
			}
			errs[j] = k.BiasGrad(st, out[j], in[j], rows, cols, false)
		}()
	}
	wg.Wait()
	for j := range jobs {
		if errs[j] != nil {
			t.Fatal(errs[j])
		}
	}
	if err := s2.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for j := range jobs {
		same(t, fmt.Sprintf("job %d", j), devtest.Floats(t, dev, out[j], cols), want[j])
	}
}
