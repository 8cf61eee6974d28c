package nn

import (
	"fmt"
	"math"
	"testing"

	"github.com/gdist/gdist/internal/winograd"
	"github.com/gdist/gdist/internal/winograd/wgref"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// convRef is conv2dForward (3x3, pad 1) in float64, and per output the
// sum of |w x| over its products (plus |b|): the scale of its rounding
// error in a float32 dot product.
func convRef(n, cin, cout, h, w int, x, wt, b []float32) (y, scale []float64) {
	y = make([]float64, n*cout*h*w)
	scale = make([]float64, len(y))
	for s := 0; s < n; s++ {
		for k := 0; k < cout; k++ {
			for i := 0; i < h; i++ {
				for j := 0; j < w; j++ {
					var v, a float64
					if b != nil {
						v, a = float64(b[k]), math.Abs(float64(b[k]))
					}
					for c := 0; c < cin; c++ {
						for u := 0; u < 3; u++ {
							for q := 0; q < 3; q++ {
								ii, jj := i+u-1, j+q-1
								if ii < 0 || ii >= h || jj < 0 || jj >= w {
									continue
								}
								p := float64(wt[((k*cin+c)*3+u)*3+q]) * float64(x[((s*cin+c)*h+ii)*w+jj])
								v += p
								a += math.Abs(p)
							}
						}
					}
					o := ((s*cout+k)*h+i)*w + j
					y[o], scale[o] = v, a
				}
			}
		}
	}
	return y, scale
}

// tileOf returns the a x a input tile of channel c of image s with
// origin (y0, x0), zero outside the plane.
func tileOf(x []float32, s, c, cin, h, w, y0, x0, a int) [][]float64 {
	d := make([][]float64, a)
	for i := range d {
		d[i] = make([]float64, a)
		for j := range d[i] {
			if yy, xx := y0+i, x0+j; yy >= 0 && yy < h && xx >= 0 && xx < w {
				d[i][j] = float64(x[((s*cin+c)*h+yy)*w+xx])
			}
		}
	}
	return d
}

// winogradRef is the Winograd forward in float64 with the matrices of
// wgref.Matrices, and per output the same computation on |B^T|, |G|, |A^T|, |x|,
// |w| (plus |b|): every intermediate's magnitude is within it, so a
// float32 run's error is at most (K + c) u times it, K = cin the length of
// the sums over channels and c a few roundings in the transforms.
func winogradRef(m, n, cin, cout, h, w int, x, wt, b []float32) (y, bound []float64) {
	mt := wgref.Matrices[m]
	a := m + 2
	u := make([][][][]float64, cout*cin)
	ua := make([][][][]float64, cout*cin)
	for kc := range u {
		f := make([][]float64, 3)
		for i := range f {
			f[i] = make([]float64, 3)
			for j := range f[i] {
				f[i][j] = float64(wt[kc*9+i*3+j])
			}
		}
		u[kc] = [][][]float64{wgref.Sandwich(mt.G, f, mt.G, false)}
		ua[kc] = [][][]float64{wgref.Sandwich(mt.G, f, mt.G, true)}
	}
	y = make([]float64, n*cout*h*w)
	bound = make([]float64, len(y))
	th, tw := (h+m-1)/m, (w+m-1)/m
	for s := 0; s < n; s++ {
		for ty := 0; ty < th; ty++ {
			for tx := 0; tx < tw; tx++ {
				v := make([][][]float64, cin)
				va := make([][][]float64, cin)
				for c := 0; c < cin; c++ {
					d := tileOf(x, s, c, cin, h, w, m*ty-1, m*tx-1, a)
					v[c] = wgref.Sandwich(mt.BT, d, mt.BT, false)
					va[c] = wgref.Sandwich(mt.BT, d, mt.BT, true)
				}
				for k := 0; k < cout; k++ {
					acc := make([][]float64, a)
					abs := make([][]float64, a)
					for i := range acc {
						acc[i] = make([]float64, a)
						abs[i] = make([]float64, a)
						for j := range acc[i] {
							for c := 0; c < cin; c++ {
								acc[i][j] += u[k*cin+c][0][i][j] * v[c][i][j]
								abs[i][j] += ua[k*cin+c][0][i][j] * va[c][i][j]
							}
						}
					}
					yt := wgref.Sandwich(mt.AT, acc, mt.AT, false)
					ya := wgref.Sandwich(mt.AT, abs, mt.AT, true)
					for i := 0; i < m && m*ty+i < h; i++ {
						for j := 0; j < m && m*tx+j < w; j++ {
							o := ((s*cout+k)*h+m*ty+i)*w + m*tx + j
							y[o], bound[o] = yt[i][j], ya[i][j]
							if b != nil {
								y[o] += float64(b[k])
								bound[o] += math.Abs(float64(b[k]))
							}
						}
					}
				}
			}
		}
	}
	return y, bound
}

// flipFilters returns w (cout, cin, 3, 3) turned by 180 degrees with its
// channels swapped: (cin, cout, 3, 3), the filters whose forward
// convolution is the input gradient.
func flipFilters(w []float32, cout, cin int) []float32 {
	f := make([]float32, len(w))
	for k := 0; k < cout; k++ {
		for c := 0; c < cin; c++ {
			for i := 0; i < 9; i++ {
				f[(c*cout+k)*9+i] = w[(k*cin+c)*9+8-i]
			}
		}
	}
	return f
}

// convWRef is conv2dBackwardW in float64, with per weight the sum of
// |dy x| over its products.
func convWRef(n, cin, cout, h, w int, x, dy []float32) (dw, scale []float64) {
	dw = make([]float64, cout*cin*9)
	scale = make([]float64, len(dw))
	for k := 0; k < cout; k++ {
		for c := 0; c < cin; c++ {
			for u := 0; u < 3; u++ {
				for q := 0; q < 3; q++ {
					var v, a float64
					for s := 0; s < n; s++ {
						for i := 0; i < h; i++ {
							ii := i + u - 1
							if ii < 0 || ii >= h {
								continue
							}
							for j := 0; j < w; j++ {
								jj := j + q - 1
								if jj < 0 || jj >= w {
									continue
								}
								p := float64(dy[((s*cout+k)*h+i)*w+j]) * float64(x[((s*cin+c)*h+ii)*w+jj])
								v += p
								a += math.Abs(p)
							}
						}
					}
					o := ((k*cin+c)*3+u)*3 + q
					dw[o], scale[o] = v, a
				}
			}
		}
	}
	return dw, scale
}

// winogradWBound is, per weight, |G^T| (sum over tiles of |A| |dy| |A^T|
// . |B^T| |x| |B|) |G|: the magnitude bound of winogradBackwardW's
// intermediates (its error is at most (tiles + c) u times it).
func winogradWBound(m, n, cin, cout, h, w int, x, dy []float32) []float64 {
	mt := wgref.Matrices[m]
	a := m + 2
	am := wgref.Transpose(mt.AT) // A (a x m)
	gt := wgref.Transpose(mt.G)  // G^T (3 x a)
	th, tw := (h+m-1)/m, (w+m-1)/m
	sum := make([][][]float64, cout*cin)
	for i := range sum {
		sum[i] = make([][]float64, a)
		for j := range sum[i] {
			sum[i][j] = make([]float64, a)
		}
	}
	for s := 0; s < n; s++ {
		for ty := 0; ty < th; ty++ {
			for tx := 0; tx < tw; tx++ {
				va := make([][][]float64, cin)
				for c := 0; c < cin; c++ {
					va[c] = wgref.Sandwich(mt.BT, tileOf(x, s, c, cin, h, w, m*ty-1, m*tx-1, a), mt.BT, true)
				}
				for k := 0; k < cout; k++ {
					e := tileOf(dy, s, k, cout, h, w, m*ty, m*tx, m)
					qa := wgref.Sandwich(am, e, am, true)
					for c := 0; c < cin; c++ {
						for i := 0; i < a; i++ {
							for j := 0; j < a; j++ {
								sum[k*cin+c][i][j] += qa[i][j] * va[c][i][j]
							}
						}
					}
				}
			}
		}
	}
	out := make([]float64, cout*cin*9)
	for kc := range sum {
		r := wgref.Sandwich(gt, sum[kc], gt, true)
		for i := 0; i < 3; i++ {
			for j := 0; j < 3; j++ {
				out[kc*9+i*3+j] = r[i][j]
			}
		}
	}
	return out
}

// errStats compares got with the float64 reference: the largest
// |got - ref| over max |ref| (rel) and the largest |got - ref| / scale
// (per element, 0/0 counting as 0).
func errStats(got []float32, ref, scale []float64) (rel, scaled float64) {
	var d, s float64
	for i, r := range ref {
		e := math.Abs(float64(got[i]) - r)
		d = math.Max(d, e)
		s = math.Max(s, math.Abs(r))
		if e > 0 {
			scaled = math.Max(scaled, e/scale[i])
		}
	}
	if s > 0 {
		d /= s
	}
	return d, scaled
}

const u32 = 1.0 / (1 << 24) // float32's unit roundoff

type wgCase struct{ n, cin, cout, h, w int }

// TestWinogradTile: where the wiring would use Winograd: the cnn's
// second convolution (with the AVX-512 transforms), not its first (one
// input channel), nor other kernels.
func TestWinogradTile(t *testing.T) {
	conv1 := convGeom{n: 64, cin: 1, h: 28, w: 28, cout: 32, k: 3, pad: 1, ho: 28, wo: 28}
	conv2 := convGeom{n: 64, cin: 32, h: 14, w: 14, cout: 64, k: 3, pad: 1, ho: 14, wo: 14}
	five := convGeom{n: 64, cin: 32, h: 14, w: 14, cout: 64, k: 5, pad: 2, ho: 14, wo: 14}
	want2 := 0
	if winograd.Vectorized() {
		want2 = 2
	}
	if a, b, c := winogradTile(conv1), winogradTile(conv2), winogradTile(five); a != 0 || b != want2 || c != 0 {
		t.Errorf("winogradTile: conv1 %d, conv2 %d, 5x5 %d; want 0, %d, 0", a, b, c, want2)
	}
}

// TestWinogradReference checks the float64 reference itself: Winograd
// with the paper's matrices is the convolution, to float64 rounding.
func TestWinogradReference(t *testing.T) {
	r := newRNG(41)
	for _, m := range []int{2, 4} {
		for _, c := range []wgCase{{2, 3, 2, 5, 7}, {1, 1, 1, 1, 1}, {1, 2, 3, 6, 4}} {
			x := randSlice(r, c.n*c.cin*c.h*c.w)
			w := randSlice(r, c.cout*c.cin*9)
			b := randSlice(r, c.cout)
			y, scale := convRef(c.n, c.cin, c.cout, c.h, c.w, x, w, b)
			yw, _ := winogradRef(m, c.n, c.cin, c.cout, c.h, c.w, x, w, b)
			for i := range y {
				if math.Abs(y[i]-yw[i]) > 1e-12*(1+scale[i]) {
					t.Fatalf("F(%d): %+v: output %d: winograd %v, direct %v", m, c, i, yw[i], y[i])
				}
			}
		}
	}
}

// wgShapes are the cnn model's two convolutions (at batch 16, 5 with
// -short: several chunks of images, the last one short) and odd shapes:
// planes of 1 to 13 on a side (edge tiles cut by the plane), 1 and 3
// channels.
func wgShapes() []wgCase {
	n := 16
	if testing.Short() {
		n = 5
	}
	cs := []wgCase{{n, 1, 32, 28, 28}, {n, 32, 64, 14, 14}}
	sizes := []int{1, 2, 3, 5, 7, 13}
	for i, h := range sizes {
		for j, w := range sizes {
			for _, ch := range [][2]int{{1, 1}, {1, 3}, {3, 1}, {3, 3}} {
				if (i+j+ch[0]+ch[1])%2 == 0 || h == w { // half the pairs, all squares
					cs = append(cs, wgCase{1 + (i+j)%3, ch[0], ch[1], h, w})
				}
			}
		}
	}
	return cs
}

// wgTol is the first-order bound on a float32 Winograd result's error
// relative to its magnitude bound (winogradRef, winogradWBound): K
// roundings in the sums of K products (sgemm), plus at most 8 in the input
// transform's sums (a value of B^T d B is a sum of at most 16 terms, in 8
// sequential operations along a row and a column in F(4x4, 3x3), fewer in
// F(2x2, 3x3)), 1 in the filter's (rounded once from float64), 8 in the
// output transform and 1 for the bias.
func wgTol(k int) float64 { return float64(k+18) * u32 }

func withAsm(on bool, f func()) {
	old := winograd.SetAsm(on)
	defer winograd.SetAsm(old)
	f()
}

// wgModes are the kernels to test: the assembly ones where the CPU has
// them, and the Go ones.
func wgModes() []bool {
	if winograd.SetAsm(true) {
		return []bool{true, false}
	}
	return []bool{false}
}

// TestWinogradForward: winogradForward against the float64 convolution,
// within wgTol of Winograd's magnitude bound at each output, for both
// tile sizes, the assembly and the Go kernels, the cnn's shapes and odd
// ones, with several chunks of images; every output written, nothing
// past y. It logs the largest errors relative to max |y| (and the
// im2col path's, for comparison).
// wgCheck is what TestWinogradForward, BackwardX and BackwardW share:
// each Winograd result (of an output of len(ref) values, NaN-filled,
// guarded past its end) within tol of the magnitude bound, the worst
// errors over all shapes logged at the end, the cnn's shapes' each.
type wgCheck struct {
	t     *testing.T
	what  string        // "y", "dx", "dw"
	worst [5][2]float64 // per tile side: max|err|/max|out|, of the bound
}

func (k *wgCheck) logWorst() {
	for _, m := range []int{2, 4} {
		k.t.Logf("all shapes F(%dx%d): max|err|/max|%s| %.3g, of the bound %.3g", m, m, k.what, k.worst[m][0], k.worst[m][1])
	}
}

// run runs f on a fresh output (chunk: winogradChunkTiles) and checks
// it; ci is the shape's index (0, 1: the cnn's), imRel im2col's error.
func (k *wgCheck) run(m int, asm bool, chunk, ci int, c wgCase, ref, bound []float64, tol, imRel float64, f func(out []float32)) {
	t := k.t
	t.Helper()
	winogradChunkTiles = chunk
	outs := make([]float32, len(ref)+20)
	for i := range outs {
		outs[i] = float32(math.NaN())
	}
	out := outs[:len(ref)]
	withAsm(asm, func() { f(out) })
	for i, v := range outs[len(ref):] {
		if !math.IsNaN(float64(v)) {
			t.Fatalf("F(%d) asm %v: %+v: wrote %v past %s at %d", m, asm, c, v, k.what, i)
		}
	}
	rel, scaled := errStats(out, ref, bound)
	k.worst[m][0], k.worst[m][1] = math.Max(k.worst[m][0], rel), math.Max(k.worst[m][1], scaled)
	if !(scaled <= tol) { // NaN: not written
		t.Errorf("F(%d) asm %v chunk %d: %+v: error %.3g of the bound, tolerance %.3g", m, asm, chunk, c, scaled, tol)
	}
	if ci < 2 && chunk == 0 {
		t.Logf("cnn conv %d F(%dx%d) asm %-5v: max|err|/max|%s| %.3g (im2col %.3g); of the bound %.3g (tolerance %.3g)", ci+1, m, m, asm, k.what, rel, imRel, scaled, tol)
	}
}

func TestWinogradForward(t *testing.T) {
	k := &wgCheck{t: t, what: "y"}
	defer k.logWorst()
	defer func(n int) { winogradChunkTiles = n }(winogradChunkTiles)
	r := newRNG(42)
	for ci, c := range wgShapes() {
		g := convGeom{n: c.n, cin: c.cin, h: c.h, w: c.w, cout: c.cout, k: 3, pad: 1, ho: c.h, wo: c.w}
		x := randSlice(r, c.n*c.cin*c.h*c.w)
		w := randSlice(r, c.cout*c.cin*9)
		b := randSlice(r, c.cout)
		ref, scale := convRef(c.n, c.cin, c.cout, c.h, c.w, x, w, b)
		y := make([]float32, len(ref))
		conv2dForward(g, x, w, b, y, &convScratch{noWinograd: true})
		imRel, imScaled := errStats(y, ref, scale)
		if imScaled > float64(9*c.cin+1)*u32 {
			t.Errorf("%+v: im2col: error %.3g of sum |w x|", c, imScaled)
		}
		for _, m := range []int{2, 4} {
			_, bound := winogradRef(m, c.n, c.cin, c.cout, c.h, c.w, x, w, b)
			for _, asm := range wgModes() {
				// Chunks of 1 image, of 2, of 512 tiles and the default (0).
				for _, chunk := range []int{1, 2 * c.h * c.w / (m * m), 512, 0} {
					k.run(m, asm, chunk, ci, c, ref, bound, wgTol(c.cin), imRel, func(y []float32) {
						winogradForward(m, g, x, w, b, y, &winogradScratch{})
					})
				}
			}
		}
	}
}

// TestWinogradForwardImages: forwardImages over a few images at a time
// gives winogradForward's values, bit for bit, and writes only those
// images.
func TestWinogradForwardImages(t *testing.T) {
	g := convGeom{n: 7, cin: 32, h: 14, w: 14, cout: 64, k: 3, pad: 1, ho: 14, wo: 14}
	r := newRNG(47)
	x := randSlice(r, g.n*g.cin*g.hw())
	w := randSlice(r, g.cout*g.ckk())
	b := randSlice(r, g.cout)
	for _, m := range []int{2, 4} {
		want := make([]float32, g.n*g.cout*g.howo())
		s := &winogradScratch{}
		winogradForward(m, g, x, w, b, want, s)
		nb := winogradChunk(m, g.h, g.w, g.n, g.cin, g.cout)
		got := make([]float32, len(want))
		s.forwardFilters(m, g, w)
		for s0 := 0; s0 < g.n; s0 += nb {
			s1 := min(s0+nb, g.n)
			s.forwardImages(m, g, x, b, got, s0, s1)
			for i, v := range got[s1*g.cout*g.howo():] {
				if v != 0 {
					t.Fatalf("F(%d): images %d..%d: wrote %d past them", m, s0, s1, s1*g.cout*g.howo()+i)
				}
			}
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("F(%d): output %d: %v by chunks, %v at once", m, i, got[i], want[i])
			}
		}
	}
}

// TestWinogradBackwardX: winogradBackwardX against the float64 input
// gradient (the forward convolution of dy with the flipped, transposed
// filters), like TestWinogradForward; dx is overwritten, as
// conv2dBackwardX does.
func TestWinogradBackwardX(t *testing.T) {
	k := &wgCheck{t: t, what: "dx"}
	defer k.logWorst()
	defer func(n int) { winogradChunkTiles = n }(winogradChunkTiles)
	r := newRNG(43)
	for ci, c := range wgShapes() {
		g := convGeom{n: c.n, cin: c.cin, h: c.h, w: c.w, cout: c.cout, k: 3, pad: 1, ho: c.h, wo: c.w}
		dy := randSlice(r, c.n*c.cout*c.h*c.w)
		w := randSlice(r, c.cout*c.cin*9)
		wf := flipFilters(w, c.cout, c.cin)
		ref, scale := convRef(c.n, c.cout, c.cin, c.h, c.w, dy, wf, nil)
		dx := make([]float32, len(ref))
		conv2dBackwardX(g, w, dy, dx, &convScratch{noWinograd: true})
		imRel, imScaled := errStats(dx, ref, scale)
		if imScaled > float64(9*c.cout)*u32 {
			t.Errorf("%+v: im2col: error %.3g of sum |w dy|", c, imScaled)
		}
		for _, m := range []int{2, 4} {
			_, bound := winogradRef(m, c.n, c.cout, c.cin, c.h, c.w, dy, wf, nil)
			for _, asm := range wgModes() {
				for _, chunk := range []int{1, 0} {
					k.run(m, asm, chunk, ci, c, ref, bound, wgTol(c.cout), imRel, func(dx []float32) {
						winogradBackwardX(m, g, w, dy, dx, &winogradScratch{})
					})
				}
			}
		}
	}
}

// TestWinogradBackwardW: winogradBackwardW against the float64 filter
// gradient, within (tiles + 18) u of winogradWBound (a sum over all tiles
// of all images per weight).
func TestWinogradBackwardW(t *testing.T) {
	k := &wgCheck{t: t, what: "dw"}
	defer k.logWorst()
	defer func(n int) { winogradChunkTiles = n }(winogradChunkTiles)
	r := newRNG(44)
	for ci, c := range wgShapes() {
		g := convGeom{n: c.n, cin: c.cin, h: c.h, w: c.w, cout: c.cout, k: 3, pad: 1, ho: c.h, wo: c.w}
		x := randSlice(r, c.n*c.cin*c.h*c.w)
		dy := randSlice(r, c.n*c.cout*c.h*c.w)
		ref, scale := convWRef(c.n, c.cin, c.cout, c.h, c.w, x, dy)
		dw := make([]float32, len(ref))
		conv2dBackwardW(g, x, dy, dw, &convScratch{noWinograd: true})
		imRel, imScaled := errStats(dw, ref, scale)
		if imScaled > float64(c.n*c.h*c.w)*u32 {
			t.Errorf("%+v: im2col: error %.3g of sum |dy x|", c, imScaled)
		}
		for _, m := range []int{2, 4} {
			bound := winogradWBound(m, c.n, c.cin, c.cout, c.h, c.w, x, dy)
			tol := wgTol(c.n * ((c.h + m - 1) / m) * ((c.w + m - 1) / m))
			for _, asm := range wgModes() {
				for _, chunk := range []int{1, 0} {
					k.run(m, asm, chunk, ci, c, ref, bound, tol, imRel, func(dw []float32) {
						winogradBackwardW(m, g, x, dy, dw, &winogradScratch{})
					})
				}
			}
		}
	}
}

// BenchmarkWinograd times the Winograd functions against the im2col path
// at the cnn model's two convolutions at batch 64 (the first has no
// input gradient in the model; it is timed anyway). Run with
// OPENBLAS_NUM_THREADS=1. Names: conv1|conv2 / fwd|dx|dw / im2col|F2|F4
// (|F2go|F4go: the Go transforms, no assembly).
func BenchmarkWinograd(b *testing.B) {
	for _, c := range []struct {
		name string
		g    convGeom
	}{
		{"conv1", convGeom{n: 64, cin: 1, h: 28, w: 28, cout: 32, k: 3, pad: 1, ho: 28, wo: 28}},
		{"conv2", convGeom{n: 64, cin: 32, h: 14, w: 14, cout: 64, k: 3, pad: 1, ho: 14, wo: 14}},
	} {
		g := c.g
		r := newRNG(45)
		x := randSlice(r, g.n*g.cin*g.hw())
		w := randSlice(r, g.cout*g.ckk())
		bias := randSlice(r, g.cout)
		dy := randSlice(r, g.n*g.cout*g.howo())
		y := make([]float32, len(dy))
		dx := make([]float32, len(x))
		dw := make([]float32, len(w))
		sc := &convScratch{noWinograd: true}
		ws := &winogradScratch{}
		type impl struct {
			name string
			run  func(op string)
		}
		impls := []impl{{"im2col", func(op string) {
			switch op {
			case "fwd":
				conv2dForward(g, x, w, bias, y, sc)
			case "dx":
				conv2dBackwardX(g, w, dy, dx, sc)
			case "dw":
				conv2dBackwardW(g, x, dy, dw, sc)
			}
		}}}
		for _, m := range []int{2, 4} {
			for _, asm := range []bool{true, false} {
				name := fmt.Sprintf("F%d", m)
				if !asm {
					name += "go"
				}
				impls = append(impls, impl{name, func(op string) {
					withAsm(asm, func() {
						switch op {
						case "fwd":
							winogradForward(m, g, x, w, bias, y, ws)
						case "dx":
							winogradBackwardX(m, g, w, dy, dx, ws)
						case "dw":
							winogradBackwardW(m, g, x, dy, dw, ws)
						}
					})
				}})
			}
		}
		for _, op := range []string{"fwd", "dx", "dw"} {
			for _, im := range impls {
				b.Run(c.name+"/"+op+"/"+im.name, func(b *testing.B) {
					im.run(op)
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						im.run(op)
					}
				})
			}
		}
	}
}

// BenchmarkWinogradShapes times im2col against Winograd over channel
// counts and plane sizes at batch 64, to find where Winograd starts to
// win: names hHxW/cinC-coutK/op/impl.
func BenchmarkWinogradShapes(b *testing.B) {
	for _, hw := range []int{7, 14, 28} {
		for _, ch := range [][2]int{{1, 32}, {3, 32}, {8, 32}, {16, 32}, {32, 64}, {64, 64}} {
			g := convGeom{n: 64, cin: ch[0], h: hw, w: hw, cout: ch[1], k: 3, pad: 1, ho: hw, wo: hw}
			r := newRNG(46)
			x := randSlice(r, g.n*g.cin*g.hw())
			w := randSlice(r, g.cout*g.ckk())
			dy := randSlice(r, g.n*g.cout*g.howo())
			y := make([]float32, len(dy))
			dx := make([]float32, len(x))
			dw := make([]float32, len(w))
			sc := &convScratch{noWinograd: true}
			ws := &winogradScratch{}
			for _, op := range []string{"fwd", "dx", "dw"} {
				for _, m := range []int{0, 2, 4} {
					name := fmt.Sprintf("h%dx%d/cin%d-cout%d/%s/F%d", hw, hw, g.cin, g.cout, op, m)
					if m == 0 {
						name = fmt.Sprintf("h%dx%d/cin%d-cout%d/%s/im2col", hw, hw, g.cin, g.cout, op)
					}
					b.Run(name, func(b *testing.B) {
						for i := 0; i < b.N; i++ {
							switch {
							case m == 0 && op == "fwd":
								conv2dForward(g, x, w, nil, y, sc)
							case m == 0 && op == "dx":
								conv2dBackwardX(g, w, dy, dx, sc)
							case m == 0:
								conv2dBackwardW(g, x, dy, dw, sc)
							case op == "fwd":
								winogradForward(m, g, x, w, nil, y, ws)
							case op == "dx":
								winogradBackwardX(m, g, w, dy, dx, ws)
							default:
								winogradBackwardW(m, g, x, dy, dw, ws)
							}
						}
					})
				}
			}
		}
	}
}

// BenchmarkWinogradConvPool times the cnn's second block (conv 32->64 at
// 14x14, bias, ReLU, 2x2 max pool; batch 64) as the fused op computes it
// (convpool.go: each image convolved and pooled while in cache; backward:
// pooling gradient, bias and filter gradients image by image, then the
// input gradient) against the same with the Winograd functions (forward
// a chunk of images at a time, pooled right after; backward: pooling and
// bias gradients image by image, then winogradBackwardW and
// winogradBackwardX over the batch): what wiring F(2x2) (and F(4x4))
// into convPoolOp would gain.
func BenchmarkWinogradConvPool(b *testing.B) {
	g := convGeom{n: 64, cin: 32, h: 14, w: 14, cout: 64, k: 3, pad: 1, ho: 14, wo: 14}
	r := newRNG(48)
	x := randSlice(r, g.n*g.cin*g.hw())
	w := randSlice(r, g.cout*g.ckk())
	bias := randSlice(r, g.cout)
	per, pn := g.cout*g.howo(), g.cout*g.howo()/4
	pooled := make([]float32, g.n*pn)
	dp := randSlice(r, len(pooled))
	arg := make([]uint8, len(pooled))
	y := make([]float32, g.n*per)
	dconv := make([]float32, g.n*per)
	db := make([]float32, g.cout)
	dw := make([]float32, len(w))
	dx := make([]float32, len(x))
	sc := &convScratch{noWinograd: true}
	g1 := g
	g1.n = 1
	hw := g.cin * g.hw()
	im2colFwd := func() {
		for n := 0; n < g.n; n++ {
			yn := y[:per] // one image's, in cache
			conv2dForward(g1, x[n*hw:(n+1)*hw], w, bias, yn, sc)
			poolReLUArg(yn, g.cout, g.ho, g.wo, pooled[n*pn:(n+1)*pn], arg[n*pn:(n+1)*pn])
		}
	}
	poolGrad := func(n int) {
		dn := dconv[n*per : (n+1)*per]
		poolReLUArgGrad(arg[n*pn:(n+1)*pn], dp[n*pn:(n+1)*pn], g.cout, g.ho, g.wo, dn)
		for c := range db {
			db[c] += sum32(dn[c*g.howo() : (c+1)*g.howo()])
		}
	}
	im2colBwd := func() {
		clear(db)
		col := sc.get(g.ckk() * g.howo())
		var beta float32
		for n := 0; n < g.n; n++ {
			poolGrad(n)
			sc.im2col(g, x[n*hw:(n+1)*hw], col)
			blas32.Implementation().Sgemm(blas.NoTrans, blas.Trans, g.cout, g.ckk(), g.howo(), 1, dconv[n*per:(n+1)*per], g.howo(), col, g.howo(), beta, dw, g.ckk())
			beta = 1
		}
		conv2dBackwardX(g, w, dconv, dx, sc)
	}
	for _, m := range []int{0, 2, 4} {
		ws := &winogradScratch{}
		fwd, bwd := im2colFwd, im2colBwd
		name := "im2col"
		if m != 0 {
			name = fmt.Sprintf("F%d", m)
			fwd = func() {
				ws.forwardFilters(m, g, w)
				nb := winogradChunk(m, g.h, g.w, g.n, g.cin, g.cout)
				for s0 := 0; s0 < g.n; s0 += nb {
					s1 := min(s0+nb, g.n)
					ws.forwardImages(m, g, x, bias, y, s0, s1)
					for n := s0; n < s1; n++ {
						poolReLUArg(y[n*per:(n+1)*per], g.cout, g.ho, g.wo, pooled[n*pn:(n+1)*pn], arg[n*pn:(n+1)*pn])
					}
				}
			}
			bwd = func() {
				clear(db)
				for n := 0; n < g.n; n++ {
					poolGrad(n)
				}
				winogradBackwardW(m, g, x, dconv, dw, ws)
				winogradBackwardX(m, g, w, dconv, dx, ws)
			}
		}
		b.Run("fwd/"+name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				fwd()
			}
		})
		b.Run("bwd/"+name, func(b *testing.B) {
			fwd()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				bwd()
			}
		})
	}
}
