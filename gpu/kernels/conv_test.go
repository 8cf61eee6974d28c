package kernels_test

import (
	"fmt"
	"math"
	"testing"
	"unsafe"

	"github.com/gdist/gdist/gpu/cublas"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
	"github.com/gdist/gdist/nn"
)

// cpuLayer is nn's layer l on the CPU path (gorgonia, nn's ops), alone:
// layer 1 of Seq(LayerNorm, l, Flatten), compiled as a pipeline stage for
// batch samples of shape in (the stage's input is l's; layer 0, never
// run, gives the model parameters when l has none). l's parameters are
// m.Params[1+i], set with set(i, ...); backward returns dx and leaves
// parameter i's gradient in grads[i].
type cpuLayer struct {
	m     *nn.Model
	st    *nn.StageGraph
	grads map[int][]float32
}

func newCPULayer(t *testing.T, l nn.Layer, in []int, batch int) *cpuLayer {
	t.Helper()
	m, err := nn.New("layer", nn.Seq(&nn.LayerNorm{C: in[len(in)-1]}, l, nn.Flatten{}), in, 1)
	if err != nil {
		t.Fatal(err)
	}
	st, err := m.NewStage(1, 2, batch, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c := &cpuLayer{m: m, st: st, grads: map[int][]float32{}}
	st.OnGrad = func(i int, g []float32) { c.grads[i-2] = append([]float32(nil), g...) }
	return c
}

// set gives parameter i (in l's Params order) the values v.
func (c *cpuLayer) set(i int, v []float32) {
	p := c.m.Params[2+i]
	copy(c.m.Flat.Value[p.Offset:p.Offset+p.Size], v)
}

func (c *cpuLayer) forward(t *testing.T, x []float32) []float32 {
	t.Helper()
	y, err := c.st.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	return y
}

func (c *cpuLayer) backward(t *testing.T, x, dy []float32) []float32 {
	t.Helper()
	clear(c.grads)
	dx, err := c.st.Backward(x, dy)
	if err != nil {
		t.Fatal(err)
	}
	return dx
}

// u is float32's unit roundoff.
const u = 0x1p-24

// near checks got against the float64 values want within tol[i] each;
// it reports the worst error in units of tol.
func near(t *testing.T, what string, got []float32, want, tol []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	bad, worst := 0, 0.0
	for i := range got {
		d := math.Abs(float64(got[i]) - want[i])
		if r := d / math.Max(tol[i], 1e-300); r > worst {
			worst = r
		}
		if !(d <= tol[i]) {
			if bad++; bad <= 5 {
				t.Errorf("%s[%d] = %v, want %v (difference %.3g, allowed %.3g)", what, i, got[i], want[i], d, tol[i])
			}
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d of %d wrong", what, bad, len(got))
	}
	t.Logf("%s: worst error %.3g of the tolerance", what, worst)
}

// same checks got against want bit for bit, NaN payloads aside.
func same(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	bad := 0
	for i := range got {
		// NaN payloads aside: a GPU's NaN is its canonical 0x7fffffff
		// where the CPU's keeps the sign of its operands (gelu(-Inf) on
		// the H200, 2026-11-27); NaN where the CPU has NaN is the match.
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
			if bad++; bad <= 5 {
				t.Errorf("%s[%d] = %v, CPU %v", what, i, got[i], want[i])
			}
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d of %d differ", what, bad, len(got))
	}
}

func f32to64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// conv64 is the convolution, its gradients and the magnitudes that bound
// their errors, in float64, straight from the definition.
type conv64 struct {
	y, dx, dw, db     []float64
	ay, adx, adw, adb []float64 // sums of the terms' magnitudes
	ky, kdx, kdw, kdb int       // terms per element (at most)
	ho, wo            int
}

func refConv(g kernels.ConvGeom, x, w, b, dy []float32) *conv64 {
	s := g.Stride
	if s == 0 {
		s = 1
	}
	ho, wo := g.Out()
	r := &conv64{ho: ho, wo: wo,
		y: make([]float64, g.N*g.Cout*ho*wo), ay: make([]float64, g.N*g.Cout*ho*wo),
		dx: make([]float64, len(x)), adx: make([]float64, len(x)),
		dw: make([]float64, len(w)), adw: make([]float64, len(w)),
		db: make([]float64, g.Cout), adb: make([]float64, g.Cout),
		ky: g.C*g.K*g.K + 1, kdx: g.Cout * g.K * g.K, kdw: g.N * ho * wo, kdb: g.N * ho * wo}
	for n := 0; n < g.N; n++ {
		for co := 0; co < g.Cout; co++ {
			for oy := 0; oy < ho; oy++ {
				for ox := 0; ox < wo; ox++ {
					o := ((n*g.Cout+co)*ho+oy)*wo + ox
					r.y[o], r.ay[o] = float64(b[co]), math.Abs(float64(b[co]))
					d := float64(dy[o])
					r.db[co] += d
					r.adb[co] += math.Abs(d)
					for c := 0; c < g.C; c++ {
						for ki := 0; ki < g.K; ki++ {
							for kj := 0; kj < g.K; kj++ {
								iy, ix := oy*s+ki-g.Pad, ox*s+kj-g.Pad
								if iy < 0 || iy >= g.H || ix < 0 || ix >= g.W {
									continue
								}
								xi := ((n*g.C+c)*g.H+iy)*g.W + ix
								wi := ((co*g.C+c)*g.K+ki)*g.K + kj
								xv, wv := float64(x[xi]), float64(w[wi])
								r.y[o] += xv * wv
								r.ay[o] += math.Abs(xv * wv)
								r.dx[xi] += d * wv
								r.adx[xi] += math.Abs(d * wv)
								r.dw[wi] += d * xv
								r.adw[wi] += math.Abs(d * xv)
							}
						}
					}
				}
			}
		}
	}
	return r
}

// tols is the tolerance k terms summed in float32 in any order allow,
// kernels.GemmTol(k) times each sum of magnitudes.
func tols(abs []float64, k int) []float64 {
	out := make([]float64, len(abs))
	for i, a := range abs {
		out[i] = kernels.GemmTol(k) * a
	}
	return out
}

func cublasHandle(t *testing.T, dev int, s *cuda.Stream) *cublas.Handle {
	t.Helper()
	h, err := cublas.New(dev, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// gemmEngine is gemm.New(dev, s, cfg) for t, closed when t ends.
func gemmEngine(t *testing.T, dev int, s *cuda.Stream, cfg gemm.Config) *gemm.Engine {
	t.Helper()
	e, err := gemm.New(dev, s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

var convGeoms = []kernels.ConvGeom{
	{N: 2, C: 3, H: 7, W: 6, Cout: 4, K: 3, Pad: 1}, // the cnn's 3x3, padding 1
	{N: 3, C: 2, H: 5, W: 5, Cout: 3, K: 1},         // 1x1
	{N: 2, C: 2, H: 6, W: 7, Cout: 5, K: 3},         // no padding
	{N: 1, C: 1, H: 12, W: 11, Cout: 6, K: 5, Pad: 2},
	{N: 2, C: 3, H: 9, W: 8, Cout: 4, K: 3, Pad: 1, Stride: 2}, // stride 2 (not in nn)
	{N: 2, C: 2, H: 4, W: 4, Cout: 2, K: 3, Pad: 2, Stride: 3},
	{N: 2, C: 16, H: 14, W: 14, Cout: 16, K: 3, Pad: 1}, // Winograd on the CPU path (16+ channels)
	{N: 3, C: 2, H: 20, W: 21, Cout: 3, K: 3, Pad: 1},   // db's rows of 1260 in two chunks
}

// Conv2d's forward and backward (im2col, cuBLAS, col2im) against the
// float64 definition within kernels.GemmTol of the terms' magnitudes, and
// against nn's Conv2d on the CPU path (gorgonia; im2col or Winograd) within
// twice that (both are that close to the exact value); accumulate adds the
// filter's and bias's gradients to what is there.
func TestConv2d(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	h := cublasHandle(t, dev, s)
	for gi, g := range convGeoms {
		t.Run(fmt.Sprintf("%d:%dx%dx%dx%d-k%dp%ds%d-%d", gi, g.N, g.C, g.H, g.W, g.K, g.Pad, g.Stride, g.Cout), func(t *testing.T) {
			ho, wo := g.Out()
			ny := g.N * g.Cout * ho * wo
			x, w, b := devtest.Vals(20+gi, g.N*g.C*g.H*g.W, 1), devtest.Vals(30+gi, g.Cout*g.C*g.K*g.K, 0.5), devtest.Vals(40+gi, g.Cout, 0.5)
			dy := devtest.Vals(50+gi, ny, 1)
			dX, dW, dB, dDY := devtest.Upload(t, dev, x), devtest.Upload(t, dev, w), devtest.Upload(t, dev, b), devtest.Upload(t, dev, dy)
			ws := devtest.Alloc(t, dev, g.Workspace(), 4)
			y, gx := devtest.Alloc(t, dev, ny, 4), devtest.Alloc(t, dev, len(x), 4)
			gw, gb := devtest.Upload(t, dev, devtest.Vals(60, len(w), 1)), devtest.Upload(t, dev, devtest.Vals(61, len(b), 1))
			if err := kernels.Conv2dForward(h, k, y, dX, dW, dB, ws, g); err != nil {
				t.Fatal(err)
			}
			if err := kernels.Conv2dBackward(h, k, gx, gw, gb, dX, dW, dDY, ws, g, false); err != nil {
				t.Fatal(err)
			}
			r := refConv(g, x, w, b, dy)
			gotY, gotDX := devtest.Floats(t, dev, y, ny), devtest.Floats(t, dev, gx, len(x))
			gotDW, gotDB := devtest.Floats(t, dev, gw, len(w)), devtest.Floats(t, dev, gb, len(b))
			near(t, "y", gotY, r.y, tols(r.ay, r.ky))
			near(t, "dx", gotDX, r.dx, tols(r.adx, r.kdx))
			near(t, "dw", gotDW, r.dw, tols(r.adw, r.kdw))
			near(t, "db", gotDB, r.db, tols(r.adb, r.kdb))

			// accumulate: the parameters' gradients add up
			if err := kernels.Conv2dBackward(h, k, 0, gw, gb, dX, dW, dDY, ws, g, true); err != nil {
				t.Fatal(err)
			}
			twice := func(v, a []float64) ([]float64, []float64) {
				o, oa := make([]float64, len(v)), make([]float64, len(v))
				for i := range v {
					o[i], oa[i] = 2*v[i], 4*a[i]
				}
				return o, oa
			}
			w2, aw2 := twice(r.dw, r.adw)
			b2, ab2 := twice(r.db, r.adb)
			near(t, "dw accumulated", devtest.Floats(t, dev, gw, len(w)), w2, tols(aw2, r.kdw))
			near(t, "db accumulated", devtest.Floats(t, dev, gb, len(b)), b2, tols(ab2, r.kdb))

			if g.Stride > 1 {
				return // nn's Conv2d has stride 1
			}
			cpu := newCPULayer(t, &nn.Conv2d{In: g.C, Out: g.Cout, K: g.K, Pad: g.Pad}, []int{g.C, g.H, g.W}, g.N)
			cpu.set(0, w)
			cpu.set(1, b)
			twoTol := func(abs []float64, k int) []float64 {
				o := tols(abs, k)
				for i := range o {
					o[i] *= 2
				}
				return o
			}
			near(t, "y vs CPU", gotY, f32to64(cpu.forward(t, x)), twoTol(r.ay, r.ky))
			near(t, "dx vs CPU", gotDX, f32to64(cpu.backward(t, x, dy)), twoTol(r.adx, r.kdx))
			near(t, "dw vs CPU", gotDW, f32to64(cpu.grads[0]), twoTol(r.adw, r.kdw))
			near(t, "db vs CPU", gotDB, f32to64(cpu.grads[1]), twoTol(r.adb, r.kdb))
		})
	}
}

// MaxPool2d and its gradient, bit for bit nn's (ties to the first
// maximum in row-major order, -0 below +0, an odd last row or column
// dropped), on values with many ties.
func TestMaxPool2d(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	for _, sh := range [][4]int{{2, 3, 6, 8}, {1, 2, 7, 5}, {3, 1, 2, 2}, {1, 1, 9, 9}} {
		n, c, hh, ww := sh[0], sh[1], sh[2], sh[3]
		planes, ny := n*c, n*c*(hh/2)*(ww/2)
		x := devtest.Vals(70, n*c*hh*ww, 2)
		for i := range x {
			x[i] = float32(math.Round(float64(x[i]))) // -2..2: many ties
			if i%7 == 3 {
				x[i] = float32(math.Copysign(0, -1))
			}
		}
		dy := devtest.Vals(71, ny, 1)
		dX, dDY := devtest.Upload(t, dev, x), devtest.Upload(t, dev, dy)
		y, arg, dx := devtest.Alloc(t, dev, ny, 4), devtest.Alloc(t, dev, ny, 1), devtest.Upload(t, dev, devtest.Vals(72, len(x), 1))
		if err := k.MaxPool2d(s, y, arg, dX, planes, hh, ww); err != nil {
			t.Fatal(err)
		}
		if err := k.MaxPool2dBackward(s, dx, dDY, arg, planes, hh, ww); err != nil {
			t.Fatal(err)
		}
		cpu := newCPULayer(t, nn.MaxPool2d{}, []int{c, hh, ww}, n)
		what := fmt.Sprintf("%v", sh)
		same(t, what+" y", devtest.Floats(t, dev, y, ny), cpu.forward(t, x))
		same(t, what+" dx", devtest.Floats(t, dev, dx, len(x)), cpu.backward(t, x, dy))
	}
}

// copyD reads *v's bytes from device address p.
func copyD[T any](dev int, v *T, p uintptr) error {
	return cuda.CopyDtoH(dev, unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v)), p)
}
