package nn

import (
	"fmt"
	"math"

	"github.com/chewxy/hm"
	"github.com/gdist/gdist/internal/vecmath"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// GELU is x * Phi(x), Phi the standard normal CDF (PyTorch's nn.GELU with
// its default, exact form).
type GELU struct{}

func (GELU) Params() []Param { return nil }
func (GELU) Fwd(b *Builder, x *G.Node) (*G.Node, error) {
	return G.ApplyOp(&geluOp{baseOp: baseOp{nextID(), "gelu"}}, x)
}

// geluOp is y = x Phi(x) elementwise. When a gradient is wanted (SymDiff
// was called), forward also keeps the derivative Phi(x) + x phi(x) of each
// element, so backward is one multiply per element.
type geluOp struct {
	baseOp
	out   outBuf
	grad  bool      // SymDiff was called: keep deriv
	deriv []float32 // d gelu / dx of the last forward pass
}

func (op *geluOp) Arity() int { return 1 }
func (op *geluOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a)
}
func (op *geluOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}
func (op *geluOp) ReturnsPtr() bool { return false }
func (op *geluOp) Do(v ...G.Value) (G.Value, error) {
	x, shape, err := f32(v[0])
	if err != nil {
		return nil, err
	}
	t, y := op.out.get(shape, x)
	if !op.grad {
		geluForward(y, nil, x)
		return t, nil
	}
	if cap(op.deriv) < len(x) {
		op.deriv = make([]float32, len(x))
	}
	op.deriv = op.deriv[:len(x)]
	geluForward(y, op.deriv, x)
	return t, nil
}
func (op *geluOp) DiffWRT(int) []bool { return []bool{true} }
func (op *geluOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	op.grad = true
	d, err := G.ApplyOp(&geluGradOp{baseOp: baseOp{nextID(), "gelu'"}, fwd: op}, inputs[0], grad)
	return G.Nodes{d}, err
}

// geluGradOp: (x, dy) -> dx = dy * gelu'(x), gelu' from the forward pass.
// x is an input only to order it after the forward pass and for its shape.
type geluGradOp struct {
	baseOp
	fwd *geluOp
	out outBuf
}

func (op *geluGradOp) Arity() int { return 2 }
func (op *geluGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a, a)
}
func (op *geluGradOp) InferShape(ds ...G.DimSizer) (tensor.Shape, error) {
	return ds[0].(tensor.Shape).Clone(), nil
}
func (op *geluGradOp) ReturnsPtr() bool { return false }
func (op *geluGradOp) Do(v ...G.Value) (G.Value, error) {
	x, shape, err := f32(v[0])
	if err != nil {
		return nil, err
	}
	dy, _, err := f32(v[1])
	if err != nil {
		return nil, err
	}
	d := op.fwd.deriv
	if len(d) != len(x) || len(dy) != len(x) {
		return nil, fmt.Errorf("nn: gelu gradient of %d values for an input of %d after a forward pass over %d", len(dy), len(x), len(d))
	}
	t, dx := op.out.get(shape, x, dy)
	vecmath.Mul(dx, dy, d)
	return t, nil
}

// geluForward sets y[i] = x[i] Phi(x[i]) and, if deriv is not nil,
// deriv[i] = Phi(x[i]) + x[i] phi(x[i]) (phi the standard normal density).
// y, deriv and x have equal lengths. Inside [-geluT, geluT) it reads both
// from geluTable's piecewise polynomials; outside (rare: activations are
// mostly within a few units of 0) from normCDF.
//
// The inputs are widened to float64 a chunk at a time, in a loop of their
// own: CVTSS2SD writes only the low half of its register, so inside the
// main loop it would wait for that register's last use in the previous
// element, chaining every element's whole computation to the next (3.5x
// slower here).
func geluForward(y, deriv, x []float32) {
	if n := geluAsm(y, deriv, x); n > 0 {
		x, y = x[n:], y[n:]
		if deriv != nil {
			deriv = deriv[n:]
		}
	}
	geluForwardGo(y, deriv, x)
}

// geluForwardGo is geluForward in Go, for the elements geluAsm leaves.
func geluForwardGo(y, deriv, x []float32) {
	var buf [256]float64
	for len(x) > 0 {
		n := min(len(x), len(buf))
		xs := buf[:n]
		for i, v := range x[:n] {
			xs[i] = float64(v)
		}
		if deriv == nil {
			geluChunk(y[:n], xs)
		} else {
			geluDerivChunk(y[:n], deriv[:n], xs)
			deriv = deriv[n:]
		}
		x, y = x[n:], y[n:]
	}
}

func geluChunk(y []float32, xs []float64) {
	y = y[:len(xs)]
	tab := &geluTable
	for i, x := range xs {
		if !(x >= -geluT && x < geluT) { // NaN included
			p, _ := normCDF(x)
			y[i] = float32(x * p)
			continue
		}
		s := (x + geluT) * (1 / geluH)
		k := int(s)
		z := 2*(s-float64(k)) - 1
		c := &tab[k].phi
		z2 := z * z
		y[i] = float32(x * ((c[0] + c[1]*z) + (c[2]+c[3]*z)*z2 + (c[4]+c[5]*z)*(z2*z2)))
	}
}

func geluDerivChunk(y, deriv []float32, xs []float64) {
	y, deriv = y[:len(xs)], deriv[:len(xs)]
	tab := &geluTable
	for i, x := range xs {
		if !(x >= -geluT && x < geluT) {
			p, e := normCDF(x)
			y[i] = float32(x * p)
			deriv[i] = float32(p + x*e*invSqrt2Pi)
			continue
		}
		s := (x + geluT) * (1 / geluH)
		k := int(s)
		z := 2*(s-float64(k)) - 1
		c, d := &tab[k].phi, &tab[k].deriv
		z2 := z * z
		z4 := z2 * z2
		y[i] = float32(x * ((c[0] + c[1]*z) + (c[2]+c[3]*z)*z2 + (c[4]+c[5]*z)*z4))
		deriv[i] = float32((d[0] + d[1]*z) + (d[2]+d[3]*z)*z2 + (d[4]+d[5]*z)*z4)
	}
}

// geluTable holds, for each interval [-geluT + k geluH, -geluT + (k+1)
// geluH), polynomials of degree geluDeg in z in [-1, 1] (z -1 at the
// interval's start, 1 at its end; coefficients lowest degree first) for
// Phi and for GELU's derivative Phi(x) + x phi(x): the interpolants at
// Chebyshev nodes of the float64 references from math.Erfc and math.Exp,
// within about 1e-9 of them (TestGELUFloat32 checks the end result).
const (
	geluT   = 6.0
	geluH   = 0.125
	geluDeg = 5
)

type geluPiece struct{ phi, deriv [geluDeg + 1]float64 }

var geluTable = func() (tab [int(2 * geluT / geluH)]geluPiece) {
	const n = geluDeg + 1
	// cheb[j] is the Chebyshev polynomial T_j's monomial coefficients
	var cheb [n][n]float64
	cheb[0][0] = 1
	cheb[1][1] = 1
	for j := 2; j < n; j++ {
		for m := range n {
			if m > 0 {
				cheb[j][m] += 2 * cheb[j-1][m-1]
			}
			cheb[j][m] -= cheb[j-2][m]
		}
	}
	fit := func(f func(float64) float64, lo float64) (out [n]float64) {
		var fz [n]float64
		var zs [n]float64
		for k := range n {
			zs[k] = math.Cos(math.Pi * (float64(k) + 0.5) / n)
			fz[k] = f(lo + (zs[k]+1)/2*geluH)
		}
		for j := range n {
			var c float64
			for k := range n {
				c += fz[k] * math.Cos(math.Pi*float64(j)*(float64(k)+0.5)/n)
			}
			c *= 2.0 / n
			if j == 0 {
				c /= 2
			}
			for m := range n {
				out[m] += c * cheb[j][m]
			}
		}
		return out
	}
	phi := func(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }
	dgelu := func(x float64) float64 { return phi(x) + x*math.Exp(-x*x/2)*invSqrt2Pi }
	for k := range tab {
		lo := -geluT + float64(k)*geluH
		tab[k] = geluPiece{fit(phi, lo), fit(dgelu, lo)}
	}
	return tab
}()

const invSqrt2Pi = 0.3989422804014327 // 1/sqrt(2 pi)

// Mills-ratio fit of normCDF: for t >= 0, Phi(-t) = exp(-t^2/2) u S(u) with
// u = 1/(1 + millsK t) and S the polynomial with coefficients millsS
// (lowest degree first), fitted here (weighted least squares iterated to
// equal relative error on Chebyshev nodes in u for t in [0, 15]) to a
// relative error below 4e-9. S(0) is millsK/sqrt(2 pi): Phi(-t) ~ phi(t)/t.
const millsK = 0.24

var millsS = [...]float64{
	0.09574191954997546, 0.0958599210153723, 0.08891431435376891,
	0.08784878790636118, 0.02791988337131288, 0.14186521950961223,
	-0.1447440379111764, 0.20581896739665398, -0.1247755696109543,
	0.025550596009470215,
}

// normCDF returns Phi(x) and exp(-x^2/2), both to a relative error below
// about 1e-8 (so Phi keeps its relative accuracy in the far negative
// tail, where it is tiny). No branches; NaN gives NaN.
func normCDF(x float64) (p, e float64) {
	t := math.Abs(x)
	e = expNeg(-0.5 * t * t)
	u := 1 / (1 + millsK*t)
	// S(u) by Estrin's scheme: a shorter chain of dependent operations
	// than Horner's, so more of the loop's elements overlap in the CPU.
	c := &millsS
	u2 := u * u
	u4 := u2 * u2
	s := (c[0] + c[1]*u + (c[2]+c[3]*u)*u2) + (c[4]+c[5]*u+(c[6]+c[7]*u)*u2)*u4 + (c[8]+c[9]*u)*(u4*u4)
	q := e * u * s // Phi(-t)
	// q if x < 0, else 1 - q, by the sign bit: the sign of activations is
	// a coin toss that a branch predictor loses.
	neg := uint64(int64(math.Float64bits(x)) >> 63)
	p = math.Float64frombits(math.Float64bits(q)&neg | math.Float64bits(1-q)&^neg)
	return p, e
}

// expNeg returns e^y for y <= 0 to a relative error below 1e-9 (0 for
// y below -700: e^-700 is 1e-304, beyond what any caller keeps in
// float32). Range reduction to r in [-ln2/2, ln2/2], a degree-9 Taylor
// polynomial, then the power of two by its bits.
func expNeg(y float64) float64 {
	const (
		log2e = 1.4426950408889634
		ln2   = 0.6931471805599453
		round = 0x1.8p52 // adding it rounds to an integer (|v| < 2^51)
	)
	y = max(y, -700) // max(NaN, c) is NaN
	nf := (y*log2e + round) - round
	r := y - nf*ln2
	// the Taylor polynomial to r^9/9!, by Estrin's scheme
	r2 := r * r
	r4 := r2 * r2
	p := (1 + r + (1.0/2+r/6)*r2) + (1.0/24+r/120+(1.0/720+r/5040)*r2)*r4 + (1.0/40320+r/362880)*(r4*r4)
	return p * math.Float64frombits(uint64(int64(nf)+1023)<<52)
}
