package nn

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/gdist/gdist/data"
	"github.com/gdist/gdist/internal/winograd"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func randSlice(r *rng, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(2*r.float64() - 1)
	}
	return out
}

// relErr is max |a-b| over max |b|: the error relative to the reference's
// scale.
func relErr(t *testing.T, what string, a, b []float32) float64 {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d values, want %d", what, len(a), len(b))
	}
	var d, s float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
		s = math.Max(s, math.Abs(float64(b[i])))
	}
	if s == 0 {
		return d
	}
	return d / s
}

// opResult is a forward value and the gradients of sum(y^2) w.r.t. each input.
type opResult struct {
	y     []float32
	yS    tensor.Shape
	grads [][]float32
}

// runOp builds y = f(inputs) and loss = sum(y^2) in a fresh graph, runs
// forward and backward on a tape machine and returns y and the gradients.
func runOp(t *testing.T, f func(in ...*G.Node) (*G.Node, error), vals [][]float32, shapes []tensor.Shape) opResult {
	t.Helper()
	g := G.NewGraph()
	in := make([]*G.Node, len(vals))
	for i, v := range vals {
		tv := tensor.New(tensor.WithShape(shapes[i]...), tensor.WithBacking(append([]float32(nil), v...)))
		in[i] = G.NewTensor(g, tensor.Float32, len(shapes[i]), G.WithShape(shapes[i]...), G.WithName(fmt.Sprint("in", i)), G.WithValue(tv))
	}
	y, err := f(in...)
	if err != nil {
		t.Fatal(err)
	}
	loss, err := G.Sum(G.Must(G.Square(y)))
	if err != nil {
		t.Fatal(err)
	}
	grads, err := G.Grad(loss, in...)
	if err != nil {
		t.Fatal(err)
	}
	// TraceExec keeps a copy of each node's value: the machine reuses the
	// memory of dead values, y's included, later in the run.
	vm := G.NewTapeMachine(g, G.TraceExec())
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	res := opResult{y: append([]float32(nil), y.Value().Data().([]float32)...), yS: y.Shape().Clone()}
	for _, gn := range grads {
		res.grads = append(res.grads, append([]float32(nil), gn.Value().Data().([]float32)...))
	}
	return res
}

func compareOps(t *testing.T, name string, mine, ref opResult) {
	t.Helper()
	if !mine.yS.Eq(ref.yS) {
		t.Fatalf("%s: output shape %v, gorgonia %v", name, mine.yS, ref.yS)
	}
	if e := relErr(t, name+" y", mine.y, ref.y); e > 1e-4 {
		t.Errorf("%s: forward relative error %.3g > 1e-4", name, e)
	}
	for i := range ref.grads {
		if e := relErr(t, name+" grad", mine.grads[i], ref.grads[i]); e > 1e-3 {
			t.Errorf("%s: gradient %d relative error %.3g > 1e-3", name, i, e)
		}
	}
}

type convCase struct{ n, cin, h, w, cout, k, pad int }

var convCases = []convCase{
	{1, 1, 5, 7, 2, 3, 1},   // Cin 1, odd sizes, batch 1, "same"
	{3, 4, 9, 6, 5, 3, 0},   // no padding
	{3, 2, 7, 7, 3, 3, 1},   // batch 3, "same"
	{2, 3, 6, 5, 4, 5, 2},   // 5x5 "same"
	{2, 3, 6, 8, 2, 1, 0},   // 1x1: no im2col
	{2, 2, 5, 6, 3, 3, 2},   // padding beyond "same"
	{2, 2, 5, 4, 3, 2, 1},   // even kernel
	{1, 1, 28, 28, 4, 3, 1}, // the model's first layer, small
}

// winogradCases are convolutions that take the Winograd path where the
// CPU has AVX-512 (winogradTile): 3x3, pad 1, 16+ channels each way.
var winogradCases = []convCase{
	{3, 16, 7, 6, 16, 3, 1},   // odd height, batch 3: partial tiles
	{2, 32, 14, 14, 24, 3, 1}, // the model's second layer, small
	{5, 32, 14, 14, 64, 3, 1}, // its channels: chunks of 2, 2 and 1 images
}

func TestConv2dMatchesGorgonia(t *testing.T) {
	r := newRNG(7)
	for _, c := range append(convCases, winogradCases...) {
		name := fmt.Sprintf("%+v", c)
		xs := tensor.Shape{c.n, c.cin, c.h, c.w}
		ws := tensor.Shape{c.cout, c.cin, c.k, c.k}
		vals := [][]float32{randSlice(r, xs.TotalSize()), randSlice(r, ws.TotalSize())}
		shapes := []tensor.Shape{xs, ws}
		mine := runOp(t, func(in ...*G.Node) (*G.Node, error) {
			return G.ApplyOp(newConv2d(c.k, c.pad), in[0], in[1])
		}, vals, shapes)
		ref := runOp(t, func(in ...*G.Node) (*G.Node, error) {
			return G.Conv2d(in[0], in[1], tensor.Shape{c.k, c.k}, []int{c.pad, c.pad}, []int{1, 1}, []int{1, 1})
		}, vals, shapes)
		compareOps(t, name, mine, ref)
	}
}

func TestMaxPool2x2MatchesGorgonia(t *testing.T) {
	r := newRNG(8)
	for _, s := range []tensor.Shape{{1, 1, 5, 7}, {3, 4, 8, 6}, {2, 3, 9, 9}, {1, 2, 2, 3}} {
		vals := [][]float32{randSlice(r, s.TotalSize())}
		shapes := []tensor.Shape{s}
		mine := runOp(t, func(in ...*G.Node) (*G.Node, error) {
			return G.ApplyOp(newMaxPool2x2(), in[0])
		}, vals, shapes)
		ref := runOp(t, func(in ...*G.Node) (*G.Node, error) {
			return G.MaxPool2D(in[0], tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2})
		}, vals, shapes)
		compareOps(t, fmt.Sprint(s), mine, ref)
	}
}

// TestConv2dFiniteDifference checks the gradient kernels against central
// differences of L = sum(R * conv(x, w)). L is linear in each input, so
// central differences are exact up to rounding.
func TestConv2dFiniteDifference(t *testing.T) {
	for _, c := range []convCase{{2, 2, 4, 5, 3, 3, 1}, {1, 2, 5, 4, 2, 3, 0}} {
		xs := tensor.Shape{c.n, c.cin, c.h, c.w}
		ws := tensor.Shape{c.cout, c.cin, c.k, c.k}
		g, err := newConvGeom(xs, ws, c.k, c.pad)
		if err != nil {
			t.Fatal(err)
		}
		r := newRNG(9)
		x, w := randSlice(r, xs.TotalSize()), randSlice(r, ws.TotalSize())
		rr := randSlice(r, g.outShape().TotalSize())
		sc := &convScratch{}
		loss := func() float64 {
			y := make([]float32, len(rr))
			conv2dForward(g, x, w, nil, y, sc)
			var s float64
			for i := range y {
				s += float64(y[i]) * float64(rr[i])
			}
			return s
		}
		dx := make([]float32, len(x))
		conv2dBackwardX(g, w, rr, dx, sc)
		dw := make([]float32, len(w))
		conv2dBackwardW(g, x, rr, dw, sc)
		const eps = 0.05
		for _, p := range []struct {
			name string
			v, d []float32
		}{{"x", x, dx}, {"w", w, dw}} {
			for i := range p.v {
				old := p.v[i]
				p.v[i] = old + eps
				lp := loss()
				p.v[i] = old - eps
				lm := loss()
				p.v[i] = old
				fd := (lp - lm) / (2 * eps)
				if math.Abs(fd-float64(p.d[i])) > 1e-3*math.Max(1, math.Abs(fd)) {
					t.Errorf("%+v: d%s[%d] = %g, finite difference %g", c, p.name, i, p.d[i], fd)
				}
			}
		}
	}
}

// TestPoolReLUMatchesUnfused checks the fused ReLU + max-pool op bit for
// bit against reluOp followed by maxPool2x2Op, values and gradients, on
// inputs full of ties, zeros of both signs, negative windows and odd
// sizes.
func TestPoolReLUMatchesUnfused(t *testing.T) {
	r := newRNG(12)
	negZero := float32(math.Copysign(0, -1))
	for _, s := range []tensor.Shape{{1, 1, 2, 2}, {2, 3, 5, 7}, {3, 2, 8, 6}, {1, 4, 9, 9}, {2, 2, 28, 28}} {
		x := make([]float32, s.TotalSize())
		for i := range x {
			switch r.next() % 6 {
			case 0:
				x[i] = 0
			case 1:
				x[i] = negZero
			case 2: // few distinct values: many ties
				x[i] = float32(int(r.next()%5)-2) * 0.5
			default:
				x[i] = float32(2*r.float64() - 1)
			}
		}
		shapes := []tensor.Shape{s}
		fused := runOp(t, func(in ...*G.Node) (*G.Node, error) {
			return G.ApplyOp(newPoolReLU(), in[0])
		}, [][]float32{x}, shapes)
		ref := runOp(t, func(in ...*G.Node) (*G.Node, error) {
			h, err := G.ApplyOp(&reluOp{baseOp: baseOp{nextID(), "relu"}}, in[0])
			if err != nil {
				return nil, err
			}
			return G.ApplyOp(newMaxPool2x2(), h)
		}, [][]float32{x}, shapes)
		if !fused.yS.Eq(ref.yS) {
			t.Fatalf("%v: shape %v, unfused %v", s, fused.yS, ref.yS)
		}
		same := func(what string, a, b []float32) {
			for i := range b {
				if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
					t.Errorf("%v: %s[%d] = %g, unfused %g", s, what, i, a[i], b[i])
					return
				}
			}
		}
		same("y", fused.y, ref.y)
		same("dx", fused.grads[0], ref.grads[0])
	}
}

// TestPoolReLUArgMatches checks the kernels that record which input each
// output is (convPoolOp's) against poolReLU and poolReLUGrad, bit for bit,
// on inputs full of ties and zeros of both signs.
func TestPoolReLUArgMatches(t *testing.T) {
	r := newRNG(15)
	negZero := float32(math.Copysign(0, -1))
	for _, s := range []tensor.Shape{{1, 1, 2, 2}, {2, 3, 5, 7}, {1, 4, 9, 9}, {2, 2, 28, 28}} {
		x := make([]float32, s.TotalSize())
		for i := range x {
			switch r.next() % 6 {
			case 0:
				x[i] = 0
			case 1:
				x[i] = negZero
			case 2:
				x[i] = float32(int(r.next()%5)-2) * 0.5
			default:
				x[i] = float32(2*r.float64() - 1)
			}
		}
		ys, _ := poolShape(s)
		planes, h, w := s[0]*s[1], s[2], s[3]
		y, y2 := make([]float32, ys.TotalSize()), make([]float32, ys.TotalSize())
		arg := make([]uint8, len(y))
		poolReLU(x, planes, h, w, y)
		poolReLUArg(x, planes, h, w, y2, arg)
		dy := randSlice(r, len(y))
		dx, dx2 := make([]float32, len(x)), make([]float32, len(x))
		for i := range dx2 {
			dx2[i] = 7 // every element must be written
		}
		poolReLUGrad(x, y, dy, planes, h, w, dx)
		poolReLUArgGrad(arg, dy, planes, h, w, dx2)
		for i := range y {
			if math.Float32bits(y[i]) != math.Float32bits(y2[i]) {
				t.Fatalf("%v: y[%d] = %g, want %g", s, i, y2[i], y[i])
			}
		}
		for i := range dx {
			if math.Float32bits(dx[i]) != math.Float32bits(dx2[i]) {
				t.Fatalf("%v: dx[%d] = %g, want %g", s, i, dx2[i], dx[i])
			}
		}
	}
}

// TestSequentialFusesReLUPool checks that a Sequential builds ReLU then
// MaxPool2d as the fused op, and nothing else as it.
func TestSequentialFusesReLUPool(t *testing.T) {
	for _, c := range []struct {
		name            string
		net             *Sequential
		fused, convPool int
	}{
		{"conv, relu, pool", Seq(&Conv2d{In: 1, Out: 2, K: 3, Pad: 1}, ReLU{}, MaxPool2d{}, Flatten{}), 0, 1},
		{"relu, pool", Seq(&Conv2d{In: 1, Out: 2, K: 3, Pad: 1}, Tanh{}, ReLU{}, MaxPool2d{}, Flatten{}), 1, 0},
		{"pointers", Seq(&Conv2d{In: 1, Out: 2, K: 3, Pad: 1}, Tanh{}, &ReLU{}, &MaxPool2d{}, Flatten{}), 1, 0},
		{"pool, relu", Seq(&Conv2d{In: 1, Out: 2, K: 3, Pad: 1}, MaxPool2d{}, ReLU{}, Flatten{}), 0, 0},
	} {
		m, err := New(c.name, c.net, []int{1, 6, 6}, 1)
		if err != nil {
			t.Fatal(err)
		}
		gr, err := m.NewGraph(2, false)
		if err != nil {
			t.Fatal(err)
		}
		var fused, convPool int
		for _, n := range gr.g.AllNodes() {
			switch n.Op().(type) {
			case *poolReLUOp:
				fused++
			case *convPoolOp:
				convPool++
			}
		}
		gr.Close()
		if fused != c.fused || convPool != c.convPool {
			t.Errorf("%s: %d relu+pool and %d conv+relu+pool ops, want %d and %d", c.name, fused, convPool, c.fused, c.convPool)
		}
	}
}

// TestConvPoolMatchesUnfused checks the fused convolution, bias, ReLU and
// pooling bit for bit against the convolution with bias followed by the
// fused ReLU and pooling, values and the gradients of x, w and b.
func TestConvPoolMatchesUnfused(t *testing.T) {
	for _, c := range winogradCases {
		g, err := newConvGeom(tensor.Shape{c.n, c.cin, c.h, c.w}, tensor.Shape{c.cout, c.cin, c.k, c.k}, c.k, c.pad)
		if err != nil {
			t.Fatal(err)
		}
		if winograd.Vectorized() && winogradTile(g) == 0 {
			t.Fatalf("%+v: not a Winograd convolution here", c)
		}
	}
	r := newRNG(14)
	for _, c := range append(convCases, winogradCases...) {
		xs := tensor.Shape{c.n, c.cin, c.h, c.w}
		ws := tensor.Shape{c.cout, c.cin, c.k, c.k}
		vals := [][]float32{randSlice(r, xs.TotalSize()), randSlice(r, ws.TotalSize()), randSlice(r, c.cout)}
		shapes := []tensor.Shape{xs, ws, {c.cout}}
		name := fmt.Sprintf("%+v", c)
		fused := runOp(t, func(in ...*G.Node) (*G.Node, error) {
			return G.ApplyOp(newConvPool(c.k, c.pad, false), in...)
		}, vals, shapes)
		ref := runOp(t, func(in ...*G.Node) (*G.Node, error) {
			op := newConv2d(c.k, c.pad)
			op.bias = true
			y, err := G.ApplyOp(op, in...)
			if err != nil {
				return nil, err
			}
			return G.ApplyOp(newPoolReLU(), y)
		}, vals, shapes)
		if !fused.yS.Eq(ref.yS) {
			t.Fatalf("%s: shape %v, unfused %v", name, fused.yS, ref.yS)
		}
		same := func(what string, a, b []float32) {
			for i := range b {
				if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
					t.Errorf("%s: %s[%d] = %g, unfused %g", name, what, i, a[i], b[i])
					return
				}
			}
		}
		same("y", fused.y, ref.y)
		for i, what := range []string{"dx", "dw", "db"} {
			same(what, fused.grads[i], ref.grads[i])
		}
	}
}

// TestConv2dBias checks the convolution with its bias input against the
// convolution followed by biasOp, values and all three gradients.
func TestConv2dBias(t *testing.T) {
	r := newRNG(13)
	for _, c := range convCases {
		xs := tensor.Shape{c.n, c.cin, c.h, c.w}
		ws := tensor.Shape{c.cout, c.cin, c.k, c.k}
		vals := [][]float32{randSlice(r, xs.TotalSize()), randSlice(r, ws.TotalSize()), randSlice(r, c.cout)}
		shapes := []tensor.Shape{xs, ws, {c.cout}}
		mine := runOp(t, func(in ...*G.Node) (*G.Node, error) {
			op := newConv2d(c.k, c.pad)
			op.bias = true
			return G.ApplyOp(op, in...)
		}, vals, shapes)
		ref := runOp(t, func(in ...*G.Node) (*G.Node, error) {
			y, err := G.ApplyOp(newConv2d(c.k, c.pad), in[0], in[1])
			if err != nil {
				return nil, err
			}
			return G.ApplyOp(&biasOp{baseOp: baseOp{nextID(), "bias"}, dims: 4}, y, in[2])
		}, vals, shapes)
		compareOps(t, fmt.Sprintf("%+v", c), mine, ref)
	}
}

func TestMaxPool2x2FiniteDifference(t *testing.T) {
	s := tensor.Shape{2, 2, 5, 4}
	n := s.TotalSize()
	// Distinct values 0.01 apart, shuffled: no ties, no switch within eps.
	x := make([]float32, n)
	r := newRNG(10)
	for i := range x {
		x[i] = float32(i) * 0.01
	}
	for i := n - 1; i > 0; i-- {
		j := int(r.next() % uint64(i+1))
		x[i], x[j] = x[j], x[i]
	}
	op := newMaxPool2x2()
	ys, _ := poolShape(s)
	rr := randSlice(r, ys.TotalSize())
	loss := func() float64 {
		y := make([]float32, len(rr))
		arg := make([]int32, len(rr))
		maxPool2x2(x, s[0]*s[1], s[2], s[3], y, arg)
		var l float64
		for i := range y {
			l += float64(y[i]) * float64(rr[i])
		}
		return l
	}
	xT := tensor.New(tensor.WithShape(s...), tensor.WithBacking(x))
	if _, err := op.Do(xT); err != nil {
		t.Fatal(err)
	}
	dxV, err := (&maxPool2x2GradOp{baseOp: baseOp{nextID(), "t"}, fwd: op}).Do(xT, tensor.New(tensor.WithShape(ys...), tensor.WithBacking(rr)))
	if err != nil {
		t.Fatal(err)
	}
	dx := dxV.Data().([]float32)
	const eps = 1e-3
	for i := range x {
		old := x[i]
		x[i] = old + eps
		lp := loss()
		x[i] = old - eps
		lm := loss()
		x[i] = old
		fd := (lp - lm) / (2 * eps)
		if math.Abs(fd-float64(dx[i])) > 1e-3*math.Max(1, math.Abs(fd)) {
			t.Errorf("dx[%d] = %g, finite difference %g", i, dx[i], fd)
		}
	}
}

func TestMaxPool2x2GradWithoutForward(t *testing.T) {
	op := newMaxPool2x2()
	x := tensor.New(tensor.WithShape(1, 1, 2, 2), tensor.WithBacking(make([]float32, 4)))
	dy := tensor.New(tensor.WithShape(1, 1, 1, 1), tensor.WithBacking(make([]float32, 1)))
	if _, err := (&maxPool2x2GradOp{baseOp: baseOp{nextID(), "t"}, fwd: op}).Do(x, dy); err == nil {
		t.Fatal("gradient without a forward pass: no error")
	}
}

func TestConv2dBadShapes(t *testing.T) {
	for _, c := range []struct{ x, w tensor.Shape }{
		{tensor.Shape{1, 2, 5, 5}, tensor.Shape{3, 1, 3, 3}}, // Cin mismatch
		{tensor.Shape{1, 2, 5, 5}, tensor.Shape{3, 2, 5, 5}}, // kernel != k
		{tensor.Shape{1, 2, 1, 5}, tensor.Shape{3, 2, 3, 3}}, // no output rows
		{tensor.Shape{2, 5, 5}, tensor.Shape{3, 2, 3, 3}},    // 3-d input
	} {
		if _, err := newConv2d(3, 0).InferShape(c.x, c.w); err == nil {
			t.Errorf("x %v, w %v: no error", c.x, c.w)
		}
	}
}

// TestCNNSkipsInputGrad checks that the first convolution, whose input is
// the data, gets no input-gradient op, and the second one does.
func TestCNNSkipsInputGrad(t *testing.T) {
	m, err := newZoo("cnn", 1)
	if err != nil {
		t.Fatal(err)
	}
	gr, err := m.NewGraph(2, true)
	if err != nil {
		t.Fatal(err)
	}
	defer gr.Close()
	var convs, dxs, dws, dbs, other int
	for _, n := range gr.g.AllNodes() {
		switch n.Op().(type) {
		case *convPoolOp:
			convs++
		case *convPoolGradW:
			dws++
		case *convPoolGradX:
			dxs++
		case *convPoolGradB:
			dbs++
		case *conv2dOp, *conv2dGradOp, *poolReLUOp, *maxPool2x2Op:
			other++
		}
	}
	// Each Conv2d, ReLU, MaxPool2d triple is one fused op.
	if convs != 2 || dws != 2 || dxs != 1 || dbs != 2 || other != 0 {
		t.Errorf("got %d conv+pool, %d dw, %d dx, %d db, %d unfused ops; want 2, 2, 1, 2, 0", convs, dws, dxs, dbs, other)
	}
}

// TestConv2dNoDXIsLoud checks that asking for the input gradient of a
// convolution built with noDX fails at Grad time instead of giving zeros.
func TestConv2dNoDXIsLoud(t *testing.T) {
	g := G.NewGraph()
	x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, 1, 4, 4), G.WithName("x"), G.WithInit(G.Zeroes()))
	w := G.NewTensor(g, tensor.Float32, 4, G.WithShape(2, 1, 3, 3), G.WithName("w"), G.WithInit(G.Zeroes()))
	op := newConv2d(3, 1)
	op.noDX = true
	y := G.Must(G.ApplyOp(op, x, w))
	loss := G.Must(G.Sum(y))
	if _, err := G.Grad(loss, x, w); err == nil {
		t.Fatal("Grad w.r.t. the input of a noDX convolution: no error")
	}
	if _, err := G.Grad(loss, w); err != nil {
		t.Fatal(err)
	}
}

// TestCNNLearns trains the CNNs for a few SGD steps on synthetic data and
// checks that the loss falls, and that the evaluation graph agrees with the
// training graph's loss.
func TestCNNLearns(t *testing.T) {
	for _, c := range []struct {
		name string
		lr   float32
	}{{"cnn", 0.1}, {"cnn-bn", 0.02}} {
		name, lr := c.name, c.lr
		t.Run(name, func(t *testing.T) {
			const batch, steps = 16, 20
			m, err := newZoo(name, 1)
			if err != nil {
				t.Fatal(err)
			}
			gr, err := m.NewGraph(batch, true)
			if err != nil {
				t.Fatal(err)
			}
			defer gr.Close()
			ds := data.Synthetic(batch*4, 2)
			x := make([]float32, batch*m.InputSize())
			y := make([]int32, batch)
			idx := make([]int, batch)
			var first, last float64
			for s := 0; s < steps; s++ {
				for i := range idx {
					idx[i] = (s*batch + i) % ds.N
				}
				if err := ds.Batch(idx, x, y); err != nil {
					t.Fatal(err)
				}
				m.ZeroGrad()
				loss, err := gr.Step(context.Background(), x, y)
				if err != nil {
					t.Fatal(err)
				}
				if math.IsNaN(float64(loss)) {
					t.Fatalf("step %d: loss is NaN", s)
				}
				if s < 4 {
					first += float64(loss) / 4
				}
				if s >= steps-4 {
					last += float64(loss) / 4
				}
				for i, g := range m.Flat.Grad {
					m.Flat.Value[i] -= lr * g
				}
			}
			t.Logf("%s: mean loss of the first 4 steps %.4f, of the last 4 %.4f", name, first, last)
			if !(last < 0.7*first) {
				t.Errorf("loss did not fall: first steps %.4f, last steps %.4f", first, last)
			}
			if name != "cnn" {
				return
			}
			ev, err := m.NewGraph(batch, false)
			if err != nil {
				t.Fatal(err)
			}
			defer ev.Close()
			lg, err := ev.Logits(x)
			if err != nil {
				t.Fatal(err)
			}
			want := CrossEntropy(lg, y, m.Classes())
			m.ZeroGrad()
			got, err := gr.Step(context.Background(), x, y)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(float64(got)-want) > 1e-4*math.Max(1, want) {
				t.Errorf("training loss %.6f, evaluation graph's %.6f", got, want)
			}
		})
	}
}

func benchStep(b *testing.B, name string) {
	m, err := newZoo(name, 1)
	if err != nil {
		b.Fatal(err)
	}
	const batch = 64
	gr, err := m.NewGraph(batch, true)
	if err != nil {
		b.Fatal(err)
	}
	defer gr.Close()
	ds := data.Synthetic(batch, 1)
	x := make([]float32, batch*m.InputSize())
	y := make([]int32, batch)
	idx := make([]int, batch)
	for i := range idx {
		idx[i] = i
	}
	if err := ds.Batch(idx, x, y); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.ZeroGrad()
		if _, err := gr.Step(context.Background(), x, y); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStepCNN times one training step (forward, loss, backward) of
// "cnn" at batch 64. Run with OPENBLAS_NUM_THREADS=1 for per-rank numbers.
func BenchmarkStepCNN(b *testing.B) { benchStep(b, "cnn") }

// BenchmarkStepMLP is BenchmarkStepCNN for "mlp".
func BenchmarkStepMLP(b *testing.B) { benchStep(b, "mlp") }

// BenchmarkStepCNNBN is BenchmarkStepCNN for "cnn-bn".
func BenchmarkStepCNNBN(b *testing.B) { benchStep(b, "cnn-bn") }

// BenchmarkKernels times the conv and pool kernels at the shapes of the
// "cnn" model's second block at batch 64.
func BenchmarkKernels(b *testing.B) {
	g := convGeom{n: 64, cin: 32, h: 14, w: 14, cout: 64, k: 3, pad: 1, ho: 14, wo: 14}
	r := newRNG(11)
	x := randSlice(r, g.n*g.cin*g.hw())
	w := randSlice(r, g.cout*g.ckk())
	dy := randSlice(r, g.n*g.cout*g.howo())
	y := make([]float32, len(dy))
	dx := make([]float32, len(x))
	dw := make([]float32, len(w))
	sc := &convScratch{noWinograd: true} // the im2col path (BenchmarkWinograd has Winograd's)
	b.Run("conv-forward", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			conv2dForward(g, x, w, nil, y, sc)
		}
	})
	b.Run("conv-dx", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			clear(dx)
			conv2dBackwardX(g, w, dy, dx, sc)
		}
	})
	b.Run("conv-dw", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			conv2dBackwardW(g, x, dy, dw, sc)
		}
	})
	col := make([]float32, g.ckk()*g.howo())
	b.Run("im2col", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			for n := 0; n < g.n; n++ {
				sc.im2col(g, x[n*g.cin*g.hw():(n+1)*g.cin*g.hw()], col)
			}
		}
	})
	b.Run("col2im", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			for n := 0; n < g.n; n++ {
				sc.col2im(g, col, dx[n*g.cin*g.hw():(n+1)*g.cin*g.hw()])
			}
		}
	})
	p := randSlice(r, 64*32*28*28)
	py := make([]float32, len(p)/4)
	arg := make([]int32, len(py))
	b.Run("maxpool-forward", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			maxPool2x2(p, 64*32, 28, 28, py, arg)
		}
	})
	b.Run("relu+maxpool-forward", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			poolReLU(p, 64*32, 28, 28, py)
		}
	})
	pdy := randSlice(r, len(py))
	pdx := make([]float32, len(p))
	b.Run("relu+maxpool-backward", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			poolReLUGrad(p, py, pdy, 64*32, 28, 28, pdx)
		}
	})
	parg := make([]uint8, len(py))
	b.Run("relu+maxpool-arg-forward", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			poolReLUArg(p, 64*32, 28, 28, py, parg)
		}
	})
	b.Run("relu+maxpool-arg-backward", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			poolReLUArgGrad(parg, pdy, 64*32, 28, 28, pdx)
		}
	})
}
