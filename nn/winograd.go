package nn

import (
	"github.com/gdist/gdist/internal/winograd"
	"gonum.org/v1/gonum/blas"
)

// Winograd convolutions: 3x3, pad 1, stride 1, NCHW float32, with the
// contracts of conv2dForward, conv2dBackwardX and conv2dBackwardW (each
// overwrites its output), in fewer multiplications (F(2x2, 3x3): 16 per
// 2x2 outputs instead of 36; F(4x4, 3x3): 36 per 4x4 instead of 144).
// Images go a chunk at a time (winogradChunkBytes of transformed values,
// which stay in L2): the inputs' tiles are transformed (internal/winograd,
// AVX-512 where the CPU has it), the A*A element-wise products summed
// over channels are A*A sgemms over the whole chunk's tiles (M = output
// channels, K = input channels, N = tiles), and the products are
// transformed back into the output. The filter gradient is the same
// algorithm transposed: per A*A position an sgemm over the tiles (K =
// tiles) of the transformed dy and x, then G^T (.) G.
//
// conv2dForward, conv2dBackwardX, conv2dBackwardW and the fused
// conv+ReLU+pool ops (convpool.go: the forward a chunk of images at a
// time, pooled while in cache; backward, winogradBackward: the filter and
// input gradients together a chunk at a time, from the chunk's output
// gradient pooled back while in cache) take this path where winogradTile
// says it wins. Measured
// at batch 64 on one Zen 4 core (OPENBLAS_NUM_THREADS=1, load ~2 on 2
// cores, medians of 7), ms per call, im2col / F(2x2) / F(4x4):
//
//	cnn conv2 (32->64, 14x14)  forward 5.73 / 3.13 / 2.99
//	                           input gradient 5.66 / 3.34 / 3.15
//	                           filter gradient 6.04 / 4.14 / 3.65
//	cnn conv1 (1->32, 28x28)   forward 0.43 / 1.14 / 1.15, input gradient
//	                           0.34 / 1.42 / 1.62, filter gradient 0.35 /
//	                           1.21 / 1.45 (one input channel: im2col wins)
//	conv2's fused block (BenchmarkWinogradConvPool): forward 5.9 / 3.5 /
//	3.2, backward 11.8 / 7.8 / 7.2.
//
// (Those numbers are from OpenBLAS's Haswell sgemm, at its peak: forward
// ~95 GFLOP/s, the filter gradient's, K = tiles, ~75. The products now
// go to its AVX-512 small-matrix kernels where they run, convgemm.go:
// 2.2x faster on the forward's and the input gradient's chunks, 1.5x on
// the filter gradient's.) The rest is the transforms (input ~0.8 ns,
// output ~0.45 ns per pixel and channel for F(2x2) with AVX-512; the Go
// kernels are about 12x slower, and then im2col wins: conv2 forward
// 15 ms).
//
// Accuracy (TestWinograd*, against float64): F(2x2, 3x3) is as accurate
// as im2col (max |err| / max |y| 2-4e-7 at the cnn's shapes; im2col 1-6e-7);
// F(4x4, 3x3) is 10 to 40 times less (3-8e-6): its transforms scale by
// up to 8 and its filter transform by 1/24.
//
// winogradScratch is kept between calls (one per op, like convScratch):
// the transformed filters, inputs and products, and the chunk plans.
// Not safe for concurrent use.
type winogradScratch struct {
	u, v, mm, s []float32
	dy          []float32 // a chunk's output gradient (winogradBackward)
	plans       []*winograd.Plan
}

// winogradChunkBytes is the size of a chunk's transformed inputs and
// products (A*A x (cin + cout) values a tile): about half of a Zen 4
// core's L2, so that the sgemms read what the input transform wrote, and
// the output transform what the sgemms wrote, from L2. (Measured at the
// cnn's second convolution: F(2x2) is fastest from 64 to 256 tiles a
// chunk, F(4x4) from 32 to 64; 1024 costs 30-50% more.)
const winogradChunkBytes = 512 << 10

// winogradChunkTiles, if not 0, is the chunk's tiles instead (tests).
var winogradChunkTiles = 0

// winogradOK reports whether the Winograd functions compute g: a 3x3
// kernel with padding 1 (stride is always 1 here).
func winogradOK(g convGeom) bool {
	return g.k == 3 && g.pad == 1 && g.ho == g.h && g.wo == g.w
}

// winogradTile is the output tile side where Winograd beats im2col on
// g (BenchmarkWinogradShapes, one Zen 4 core): 0 (use im2col) unless
// winogradOK, the AVX-512 transforms run and both channel counts are at
// least 16 (the sgemms' K is the input channels forward and the output
// channels backward, M the other: below 16 they run far from peak and
// the transforms, which cost per channel and pixel, dominate; at 28x28
// and above 8 channels already win). F(2x2, 3x3) then: as accurate as
// im2col, and at 14x14 as fast as F(4x4, 3x3), which is up to 1.3x
// faster on larger planes (28x28) but ten times less accurate.
func winogradTile(g convGeom) int {
	if !winogradOK(g) || !winograd.Vectorized() || g.cin < 16 || g.cout < 16 {
		return 0
	}
	return 2
}

func (s *winogradScratch) plan(m, h, w, n int) *winograd.Plan {
	for _, p := range s.plans {
		if p.M == m && p.H == h && p.W == w && p.N == n {
			return p
		}
	}
	p := winograd.NewPlan(m, h, w, n)
	if len(s.plans) >= 4 {
		s.plans = s.plans[1:]
	}
	s.plans = append(s.plans, p)
	return p
}

// winogradChunk is the number of images a chunk holds: enough for
// winogradChunkBytes (at least 32 tiles, at most 1024), at least one.
func winogradChunk(m, h, w, n, cin, cout int) int {
	tiles := ((h + m - 1) / m) * ((w + m - 1) / m)
	want := winogradChunkTiles
	if want == 0 {
		want = min(max(winogradChunkBytes/((m+2)*(m+2)*(cin+cout)*4), 32), 1024)
	}
	return min(n, max(1, (want+tiles/2)/tiles))
}

// winogradForward is conv2dForward for winogradOK(g) with m x m output
// tiles (m = 2 or 4): y = conv(x, w) (+ b, one value per output channel,
// unless b is nil), overwriting y.
func winogradForward(m int, g convGeom, x, w, b, y []float32, s *winogradScratch) {
	s.forwardFilters(m, g, w)
	s.forwardImages(m, g, x, b, y, 0, g.n)
}

// forwardFilters transforms the filters w for forwardImages (kept in s
// until a later call of the Winograd functions with s).
func (s *winogradScratch) forwardFilters(m int, g convGeom, w []float32) {
	s.u = grow(s.u, (m+2)*(m+2)*g.cout*g.cin)
	winograd.Filter(m, s.u, g.cout*g.cin, g.cin, w, g.cout, g.cin, g.cin, 1, false)
}

// forwardImages is winogradForward for images [s0, s1) only (x, b and y
// the whole batch's), with the filters forwardFilters transformed: for
// a fused op that pools a few images' output while it is in cache
// (winogradChunk images at a time are as fast as the whole batch).
func (s *winogradScratch) forwardImages(m int, g convGeom, x, b, y []float32, s0, s1 int) {
	hw := g.hw()
	s.run(m, s1-s0, g.h, g.w, g.cin, g.cout, x[s0*g.cin*hw:s1*g.cin*hw], s.u, b, y[s0*g.cout*hw:s1*g.cout*hw])
}

// winogradBackwardX is conv2dBackwardX for winogradOK(g): dx = the
// gradient w.r.t. x of sum(dy * conv(x, w)), overwriting dx (as
// conv2dBackwardX does). It is the forward convolution of dy with the
// filters turned by 180 degrees and their channels swapped.
func winogradBackwardX(m int, g convGeom, w, dy, dx []float32, s *winogradScratch) {
	a2 := (m + 2) * (m + 2)
	s.u = grow(s.u, a2*g.cout*g.cin)
	winograd.Filter(m, s.u, g.cout*g.cin, g.cout, w, g.cin, g.cout, 1, g.cin, true)
	s.run(m, g.n, g.h, g.w, g.cout, g.cin, dy, s.u, nil, dx)
}

// run convolves x (n, cin, h, w) with the transformed filters u [A*A]
// [cout][cin] into y (n, cout, h, w) (+ b).
func (s *winogradScratch) run(m, n, h, w, cin, cout int, x, u, b, y []float32) {
	impl := convBLAS()
	a2 := (m + 2) * (m + 2)
	hw := h * w
	nb := winogradChunk(m, h, w, n, cin, cout)
	for s0 := 0; s0 < n; s0 += nb {
		p := s.plan(m, h, w, min(nb, n-s0))
		s.v = grow(s.v, a2*cin*p.PP)
		s.mm = grow(s.mm, a2*cout*p.PP)
		v, mm := s.v, s.mm
		for c := 0; c < cin; c++ {
			p.Input(v[c*p.PP:], cin*p.PP, x[(s0*cin+c)*hw:], cin*hw)
		}
		for xi := 0; xi < a2; xi++ {
			impl.Sgemm(blas.NoTrans, blas.NoTrans, cout, p.P, cin, 1, u[xi*cout*cin:], cin, v[xi*cin*p.PP:], p.PP, 0, mm[xi*cout*p.PP:], p.PP)
		}
		for k := 0; k < cout; k++ {
			var bk float32
			if b != nil {
				bk = b[k]
			}
			p.Output(y[(s0*cout+k)*hw:], cout*hw, mm[k*p.PP:], cout*p.PP, bk)
		}
	}
}

// winogradBackwardW is conv2dBackwardW for winogradOK(g): dw = the
// gradient w.r.t. w of sum(dy * conv(x, w)), overwriting dw. The
// gradient w.r.t. the transformed filter G g G^T is, per A*A position,
// the sum over tiles of (A dy A^T) times (B^T x B): A*A sgemms with K =
// tiles (M = output channels, N = input channels), summed over chunks;
// G^T (that) G is dw.
func winogradBackwardW(m int, g convGeom, x, dy, dw []float32, s *winogradScratch) {
	impl := convBLAS()
	a2 := (m + 2) * (m + 2)
	hw := g.hw()
	kc := g.cout * g.cin
	s.s = grow(s.s, a2*kc)
	nb := winogradChunk(m, g.h, g.w, g.n, g.cin, g.cout)
	var beta float32
	for s0 := 0; s0 < g.n; s0 += nb {
		p := s.plan(m, g.h, g.w, min(nb, g.n-s0))
		s.v = grow(s.v, a2*g.cin*p.PP)
		s.mm = grow(s.mm, a2*g.cout*p.PP)
		v, q := s.v, s.mm
		for c := 0; c < g.cin; c++ {
			p.Input(v[c*p.PP:], g.cin*p.PP, x[(s0*g.cin+c)*hw:], g.cin*hw)
		}
		for k := 0; k < g.cout; k++ {
			p.GradOutput(q[k*p.PP:], g.cout*p.PP, dy[(s0*g.cout+k)*hw:], g.cout*hw)
		}
		for xi := 0; xi < a2; xi++ {
			impl.Sgemm(blas.NoTrans, blas.Trans, g.cout, g.cin, p.P, 1, q[xi*g.cout*p.PP:], p.PP, v[xi*g.cin*p.PP:], p.PP, beta, s.s[xi*kc:], g.cin)
		}
		beta = 1
	}
	winograd.FilterGrad(m, dw, s.s, kc, g.cin, g.cout, g.cin)
}

// winogradBackward is winogradBackwardW and, unless dx is nil,
// winogradBackwardX in one pass over the batch, a chunk of images at a
// time, with the gradient w.r.t. the output made a chunk at a time too:
// dyChunk(s0, s1, dy) sets dy to images [s0, s1)'s (s1-s0 of (cout, h,
// w), a buffer of s's that stays in cache). The chunk's dy is read while
// in cache by both gradients' transforms, x's chunk is transformed
// once, and the batch's dy never goes to memory. The chunks, the sgemms
// and the transforms are those of winogradBackwardW and winogradBackwardX
// (the two take the same chunks), in the same order: dw and dx are theirs
// bit for bit (TestConvPoolMatchesUnfused).
func winogradBackward(m int, g convGeom, x, w []float32, dyChunk func(s0, s1 int, dy []float32), dw, dx []float32, s *winogradScratch) {
	impl := convBLAS()
	a2 := (m + 2) * (m + 2)
	hw := g.hw()
	kc := g.cout * g.cin
	s.s = grow(s.s, a2*kc)
	if dx != nil {
		s.u = grow(s.u, a2*kc)
		winograd.Filter(m, s.u, kc, g.cout, w, g.cin, g.cout, 1, g.cin, true)
	}
	nb := winogradChunk(m, g.h, g.w, g.n, g.cin, g.cout)
	s.dy = grow(s.dy, min(nb, g.n)*g.cout*hw)
	var beta float32
	for s0 := 0; s0 < g.n; s0 += nb {
		s1 := min(s0+nb, g.n)
		p := s.plan(m, g.h, g.w, s1-s0)
		s.v = grow(s.v, a2*g.cin*p.PP)
		s.mm = grow(s.mm, a2*g.cout*p.PP)
		v, q, dy := s.v, s.mm, s.dy[:(s1-s0)*g.cout*hw]
		dyChunk(s0, s1, dy)
		// The filter gradient (winogradBackwardW's chunk).
		for c := 0; c < g.cin; c++ {
			p.Input(v[c*p.PP:], g.cin*p.PP, x[(s0*g.cin+c)*hw:], g.cin*hw)
		}
		for k := 0; k < g.cout; k++ {
			p.GradOutput(q[k*p.PP:], g.cout*p.PP, dy[k*hw:], g.cout*hw)
		}
		for xi := 0; xi < a2; xi++ {
			impl.Sgemm(blas.NoTrans, blas.Trans, g.cout, g.cin, p.P, 1, q[xi*g.cout*p.PP:], p.PP, v[xi*g.cin*p.PP:], p.PP, beta, s.s[xi*kc:], g.cin)
		}
		beta = 1
		if dx == nil {
			continue
		}
		// The input gradient (run's chunk for winogradBackwardX: dy
		// convolved with the turned filters), in the same buffers.
		vx, mx := q, v // the chunk's transformed dy, the products
		for k := 0; k < g.cout; k++ {
			p.Input(vx[k*p.PP:], g.cout*p.PP, dy[k*hw:], g.cout*hw)
		}
		for xi := 0; xi < a2; xi++ {
			impl.Sgemm(blas.NoTrans, blas.NoTrans, g.cin, p.P, g.cout, 1, s.u[xi*kc:], g.cout, vx[xi*g.cout*p.PP:], p.PP, 0, mx[xi*g.cin*p.PP:], p.PP)
		}
		for c := 0; c < g.cin; c++ {
			p.Output(dx[(s0*g.cin+c)*hw:], g.cin*hw, mx[c*p.PP:], g.cin*p.PP, 0)
		}
	}
	winograd.FilterGrad(m, dw, s.s, kc, g.cin, g.cout, g.cin)
}
