package winograd

import "fmt"

// Plan is one chunk's geometry: N images of H x W (input and output: pad
// 1, stride 1) in TH x TW tiles of M x M outputs, P = N*TH*TW tiles in
// all, the tables the assembly kernels read, and their scratch: a Plan
// must not be used by two goroutines at once.
type Plan struct {
	M, A   int // output tile side (2 or 4), input tile side M+2
	H, W   int
	TH, TW int
	N      int
	P, PP  int // tiles; tiles rounded up to a multiple of 16

	// The assembly kernels' layout: a chunk's planes of one channel
	// split by column phase (column mod M) into the scratch, image s's
	// rows at scr[s*splane:], a row being M phase rows of QW values
	// (QW >= TW+1, a multiple of 16): input rows with the halo (row r is
	// input row r-1, (r, phase, q) input column M*q+phase-1), dy and
	// output rows without. A run of a group's tiles in one tile row is
	// one segment: (lane mask, byte offset of lane 0's value in row
	// M*ty, phase 0), segEnd[g] the end of group g's segments.
	QW, splane int
	segs       []int32 // pairs: mask, byte offset
	segEnd     []int32
	inMask     []uint16 // per q-block, M lane masks of input columns (halo: shifted by 1)
	dyMask     []uint16 // the same without the shift (dy)
	outMask    []uint16 // per q-block, M lane masks of output columns
	scr, tmp   []float32
}

// NewPlan returns the plan for chunks of n images of h x w with m x m
// output tiles (m = 2 or 4).
func NewPlan(m, h, w, n int) *Plan {
	if m != 2 && m != 4 {
		panic(fmt.Sprintf("winograd: tile side %d, want 2 or 4", m))
	}
	if h < 1 || w < 1 || n < 1 {
		panic(fmt.Sprintf("winograd: %d images of %dx%d", n, h, w))
	}
	p := &Plan{M: m, A: m + 2, H: h, W: w, N: n, TH: (h + m - 1) / m, TW: (w + m - 1) / m}
	p.P = n * p.TH * p.TW
	p.PP = (p.P + 15) &^ 15
	p.QW = (p.TW + 1 + 15) &^ 15
	p.splane = (m*p.TH + 2) * m * p.QW
	p.scr = make([]float32, n*p.splane)
	p.segEnd = make([]int32, p.PP/16)
	for g := 0; g < p.PP/16; g++ {
		for t := 16 * g; t < min(16*g+16, p.P); {
			s, y0, x0 := p.tile(t)
			ty, tx0 := (y0+1)/m, (x0+1)/m
			cnt := min(p.TW-tx0, 16*g+16-t)
			l0 := t - 16*g
			p.segs = append(p.segs, int32((1<<cnt-1)<<l0), int32(4*(s*p.splane+m*ty*m*p.QW+tx0-l0)))
			t += cnt
		}
		p.segEnd[g] = int32(len(p.segs) / 2)
	}
	nb := p.QW / 16
	p.inMask = make([]uint16, nb*m)
	p.dyMask = make([]uint16, nb*m)
	p.outMask = make([]uint16, nb*m)
	for b := 0; b < nb; b++ {
		for k := 0; k < m; k++ {
			for l := 0; l < 16; l++ {
				c := 16*m*b + 16*k + l
				if c-1 >= 0 && c-1 < w {
					p.inMask[b*m+k] |= 1 << l
				}
				if c < w {
					p.dyMask[b*m+k] |= 1 << l
					p.outMask[b*m+k] |= 1 << l
				}
			}
		}
	}
	return p
}

// tile returns tile t's image, input origin row and column (M*ty-1,
// M*tx-1).
func (p *Plan) tile(t int) (s, y0, x0 int) {
	tiles := p.TH * p.TW
	s, r := t/tiles, t%tiles
	return s, p.M*(r/p.TW) - 1, p.M*(r%p.TW) - 1
}

func (p *Plan) check(what string, dst []float32, dstride int, src []float32, stride int) {
	if dstride < p.PP || len(dst) < (p.A*p.A-1)*dstride+p.PP {
		panic(fmt.Sprintf("winograd: %s: %d transformed values at stride %d for %d rows of %d", what, len(dst), dstride, p.A*p.A, p.PP))
	}
	if stride < p.H*p.W || len(src) < (p.N-1)*stride+p.H*p.W {
		panic(fmt.Sprintf("winograd: %s: %d plane values at stride %d for %d planes of %dx%d", what, len(src), stride, p.N, p.H, p.W))
	}
}

// Input sets v[xi*vstride+t], for xi < A*A and t < PP, to B^T d B of tile
// t of one channel: image s's plane is x[s*stride:][:H*W] (x starts at
// the channel), zero outside it. Columns P to PP hold finite values of no
// meaning (an sgemm over the first P columns leaves them out).
func (p *Plan) Input(v []float32, vstride int, x []float32, stride int) {
	p.check("Input", v, vstride, x, stride)
	active.input(p, v, vstride, x, stride)
}

// Output sets, for each tile t < P, the outputs of one channel that lie
// in the plane, y[s*stride:][:H*W] (y starts at the channel), to
// A^T m A + bias, m being mm[xi*mstride+t] for xi < A*A.
func (p *Plan) Output(y []float32, stride int, mm []float32, mstride int, bias float32) {
	p.check("Output", mm, mstride, y, stride)
	active.output(p, y, stride, mm, mstride, bias)
}

// GradOutput sets q[xi*qstride+t], for xi < A*A and t < PP, to A e A^T,
// e being tile t's M x M outputs of one channel of dy (dy[s*stride:][:H*W]
// for image s, dy starting at the channel), zero outside the plane:
// the gradient w.r.t. the element-wise products (columns P to PP as in
// Input).
func (p *Plan) GradOutput(q []float32, qstride int, dy []float32, stride int) {
	p.check("GradOutput", q, qstride, dy, stride)
	active.gradOutput(p, q, qstride, dy, stride)
}

// ---- filter transforms (small: in float64, rounded once) ----

// g2 is G (4x3) of F(2, 3) applied to a filter row or column.
func g2(f0, f1, f2 float64) (r0, r1, r2, r3 float64) {
	s := f0 + f2
	return f0, (s + f1) * 0.5, (s - f1) * 0.5, f2
}

// g4 is G (6x3) of F(4, 3).
func g4(f0, f1, f2 float64) (r0, r1, r2, r3, r4, r5 float64) {
	const sixth, twelfth, tw4th = 1.0 / 6, 1.0 / 12, 1.0 / 24
	s := f0 + f2
	q, h := f0*tw4th+f2*sixth, f1*twelfth
	return f0 * 0.25, -(s + f1) * sixth, -(s - f1) * sixth, q + h, q - h, f2
}

// gt2 is G^T (3x4) of F(2, 3).
func gt2(e0, e1, e2, e3 float64) (k0, k1, k2 float64) {
	h := (e1 + e2) * 0.5
	return e0 + h, (e1 - e2) * 0.5, h + e3
}

// gt4 is G^T (3x6) of F(4, 3).
func gt4(e0, e1, e2, e3, e4, e5 float64) (k0, k1, k2 float64) {
	const sixth, twelfth, tw4th = 1.0 / 6, 1.0 / 12, 1.0 / 24
	s12, s34 := e1+e2, e3+e4
	return e0*0.25 - s12*sixth + s34*tw4th, (e2-e1)*sixth + (e3-e4)*twelfth, (s34-s12)*sixth + e5
}

// filterTile sets u to G f G^T (A x A, row-major) of the 3x3 filter f.
func filterTile(m int, f *[9]float64, u *[36]float64) {
	if m == 2 {
		var t [4][3]float64 // G f
		for k := 0; k < 3; k++ {
			t[0][k], t[1][k], t[2][k], t[3][k] = g2(f[k], f[3+k], f[6+k])
		}
		for i := 0; i < 4; i++ {
			r := u[i*4 : i*4+4 : i*4+4]
			r[0], r[1], r[2], r[3] = g2(t[i][0], t[i][1], t[i][2])
		}
		return
	}
	var t [6][3]float64
	for k := 0; k < 3; k++ {
		t[0][k], t[1][k], t[2][k], t[3][k], t[4][k], t[5][k] = g4(f[k], f[3+k], f[6+k])
	}
	for i := 0; i < 6; i++ {
		r := u[i*6 : i*6+6 : i*6+6]
		r[0], r[1], r[2], r[3], r[4], r[5] = g4(t[i][0], t[i][1], t[i][2])
	}
}

// Filter sets u[xi*ustride + r*ld + c], for xi < A*A, to G g G^T of the
// 3x3 filter f[r][c] = w[(r*ri + c*ci)*9:][:9] for r < rows, c < cols;
// with flip, of that filter turned by 180 degrees. w (cout, cin, 3, 3)
// with ri = cin, ci = 1 gives the forward's [A*A][cout][cin]; with ri = 1,
// ci = cin and flip, the input gradient's [A*A][cin][cout].
func Filter(m int, u []float32, ustride, ld int, w []float32, rows, cols, ri, ci int, flip bool) {
	if m != 2 && m != 4 {
		panic(fmt.Sprintf("winograd: tile side %d, want 2 or 4", m))
	}
	a2 := (m + 2) * (m + 2)
	if rows < 1 || cols < 1 || ld < cols || ustride < (rows-1)*ld+cols || len(u) < (a2-1)*ustride+(rows-1)*ld+cols {
		panic("winograd: Filter: output too small")
	}
	var f [9]float64
	var t [16][36]float64 // 16 filters of a row at a time: u's rows written 16 values at a time
	for r := 0; r < rows; r++ {
		for c0 := 0; c0 < cols; c0 += 16 {
			nc := min(16, cols-c0)
			for k := 0; k < nc; k++ {
				src := w[(r*ri+(c0+k)*ci)*9:][:9]
				if flip {
					for i := range f {
						f[i] = float64(src[8-i])
					}
				} else {
					for i := range f {
						f[i] = float64(src[i])
					}
				}
				filterTile(m, &f, &t[k])
			}
			for xi := 0; xi < a2; xi++ {
				dst := u[xi*ustride+r*ld+c0:][:nc]
				for k := range dst {
					dst[k] = float32(t[k][xi])
				}
			}
		}
	}
}

// FilterGrad sets dw[(r*cols+c)*9:][:9], the gradient of the 3x3 filter
// (r, c) of (rows, cols, 3, 3), to G^T s G, s being s[xi*sstride + r*ld +
// c] for xi < A*A: the gradient w.r.t. G g G^T.
func FilterGrad(m int, dw []float32, s []float32, sstride, ld, rows, cols int) {
	if m != 2 && m != 4 {
		panic(fmt.Sprintf("winograd: tile side %d, want 2 or 4", m))
	}
	a := m + 2
	if rows < 1 || cols < 1 || len(dw) < rows*cols*9 || ld < cols || len(s) < (a*a-1)*sstride+(rows-1)*ld+cols {
		panic("winograd: FilterGrad: sizes")
	}
	var eb [16][36]float64 // 16 filters of a row at a time: s's rows read 16 values at a time
	var t [3][6]float64    // (G^T e)[k][j]
	for r := 0; r < rows; r++ {
		for c0 := 0; c0 < cols; c0 += 16 {
			nc := min(16, cols-c0)
			for xi := 0; xi < a*a; xi++ {
				src := s[xi*sstride+r*ld+c0:][:nc]
				for k, v := range src {
					eb[k][xi] = float64(v)
				}
			}
			for k := 0; k < nc; k++ {
				e := &eb[k]
				out := dw[(r*cols+c0+k)*9:][:9]
				if m == 2 {
					for j := 0; j < 4; j++ {
						t[0][j], t[1][j], t[2][j] = gt2(e[j], e[4+j], e[8+j], e[12+j])
					}
					for q := 0; q < 3; q++ {
						k0, k1, k2 := gt2(t[q][0], t[q][1], t[q][2], t[q][3])
						out[q*3], out[q*3+1], out[q*3+2] = float32(k0), float32(k1), float32(k2)
					}
					continue
				}
				for j := 0; j < 6; j++ {
					t[0][j], t[1][j], t[2][j] = gt4(e[j], e[6+j], e[12+j], e[18+j], e[24+j], e[30+j])
				}
				for q := 0; q < 3; q++ {
					k0, k1, k2 := gt4(t[q][0], t[q][1], t[q][2], t[q][3], t[q][4], t[q][5])
					out[q*3], out[q*3+1], out[q*3+2] = float32(k0), float32(k1), float32(k2)
				}
			}
		}
	}
}
