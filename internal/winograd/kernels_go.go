package winograd

// The "go" kernel set: the transforms in portable Go, a tile at a time,
// the reference of the assembly (which computes the same sums on 16 tiles
// a register, with fused multiply-adds and in another order: equal to
// float32 rounding, not bit for bit), and the only set on other
// architectures or with the purego build tag.

var goKernels = &kernelSet{name: "go", input: inputGo, output: outputGo, gradOutput: gradOutputGo}

// columns sets v[xi*vstride+t], for xi < A*A and t < PP, to the values
// tile(t, d) leaves in d[:A*A] for the tiles t < P, and to 0 past them.
func (p *Plan) columns(v []float32, vstride int, tile func(t int, d *[36]float32)) {
	var d [36]float32
	a2 := p.A * p.A
	for t := 0; t < p.PP; t++ {
		if t < p.P {
			tile(t, &d)
		} else {
			clear(d[:a2])
		}
		for xi := 0; xi < a2; xi++ {
			v[xi*vstride+t] = d[xi]
		}
	}
}

// inputGo is Plan.Input: B^T d B of each tile.
func inputGo(p *Plan, v []float32, vstride int, x []float32, stride int) {
	a := p.A
	p.columns(v, vstride, func(t int, d *[36]float32) {
		s, y0, x0 := p.tile(t)
		pl := x[s*stride:][:p.H*p.W]
		for i := 0; i < a; i++ {
			y := y0 + i
			for j := 0; j < a; j++ {
				xx := x0 + j
				var e float32
				if y >= 0 && y < p.H && xx >= 0 && xx < p.W {
					e = pl[y*p.W+xx]
				}
				d[i*a+j] = e
			}
		}
		if p.M == 2 {
			inputTile2((*[16]float32)(d[:16]))
		} else {
			inputTile4(d)
		}
	})
}

// outputGo is Plan.Output: A^T m A + bias of each tile, the outputs in
// the plane.
func outputGo(p *Plan, y []float32, stride int, mm []float32, mstride int, bias float32) {
	var d [36]float32
	a, m := p.A, p.M
	for t := 0; t < p.P; t++ {
		for xi := 0; xi < a*a; xi++ {
			d[xi] = mm[xi*mstride+t]
		}
		var o [16]float32
		if m == 2 {
			outputTile2((*[16]float32)(d[:16]), &o)
		} else {
			outputTile4(&d, &o)
		}
		s, y0, x0 := p.tile(t)
		y0, x0 = y0+1, x0+1
		pl := y[s*stride:][:p.H*p.W]
		for i := 0; i < m && y0+i < p.H; i++ {
			for j := 0; j < m && x0+j < p.W; j++ {
				pl[(y0+i)*p.W+x0+j] = o[i*m+j] + bias
			}
		}
	}
}

// gradOutputGo is Plan.GradOutput: A e A^T of each tile of dy.
func gradOutputGo(p *Plan, q []float32, qstride int, dy []float32, stride int) {
	m := p.M
	p.columns(q, qstride, func(t int, d *[36]float32) {
		s, y0, x0 := p.tile(t)
		y0, x0 = y0+1, x0+1
		pl := dy[s*stride:][:p.H*p.W]
		var e [16]float32
		for i := 0; i < m; i++ {
			for j := 0; j < m; j++ {
				if y0+i < p.H && x0+j < p.W {
					e[i*m+j] = pl[(y0+i)*p.W+x0+j]
				}
			}
		}
		if m == 2 {
			gradTile2(&e, (*[16]float32)(d[:16]))
		} else {
			gradTile4(&e, d)
		}
	})
}

// ---- 1-d transforms ----

// F(2, 3): B^T (4x4), A^T (2x4), G (4x3).
func bt2(d0, d1, d2, d3 float32) (r0, r1, r2, r3 float32) {
	return d0 - d2, d1 + d2, d2 - d1, d1 - d3
}

func at2(m0, m1, m2, m3 float32) (y0, y1 float32) {
	return m0 + m1 + m2, m1 - m2 - m3
}

// a2 is A (4x2), the transpose of A^T.
func a2(e0, e1 float32) (r0, r1, r2, r3 float32) {
	return e0, e0 + e1, e0 - e1, -e1
}

// F(4, 3): B^T (6x6), A^T (4x6), G (6x3); interpolation points 0, -1, 1,
// -2, 2 and infinity.
func bt4(d0, d1, d2, d3, d4, d5 float32) (r0, r1, r2, r3, r4, r5 float32) {
	s12, s34 := d1+d2, d3+d4
	u12, u43 := d1-d2, d4-d3
	q, w := d4-d2, d3-d1
	return 4*d0 - 5*d2 + d4, s34 - 4*s12, u43 + 4*u12, q + 2*w, q - 2*w, 4*d1 - 5*d3 + d5
}

func at4(m0, m1, m2, m3, m4, m5 float32) (y0, y1, y2, y3 float32) {
	s12, s34 := m1+m2, m3+m4
	u12, u34 := m1-m2, m3-m4
	return m0 + s12 + s34, u12 + 2*u34, s12 + 4*s34, u12 + 8*u34 + m5
}

func a4(e0, e1, e2, e3 float32) (r0, r1, r2, r3, r4, r5 float32) {
	s02, s13 := e0+e2, e1+e3
	f02, f13 := e0+4*e2, 2*e1+8*e3
	return e0, s02 + s13, s02 - s13, f02 + f13, f02 - f13, e3
}

// ---- 2-d tile transforms ----

func inputTile2(d *[16]float32) {
	for i := 0; i < 4; i++ {
		r := d[i*4 : i*4+4 : i*4+4]
		r[0], r[1], r[2], r[3] = bt2(r[0], r[1], r[2], r[3])
	}
	for j := 0; j < 4; j++ {
		d[j], d[4+j], d[8+j], d[12+j] = bt2(d[j], d[4+j], d[8+j], d[12+j])
	}
}

func inputTile4(d *[36]float32) {
	for i := 0; i < 6; i++ {
		r := d[i*6 : i*6+6 : i*6+6]
		r[0], r[1], r[2], r[3], r[4], r[5] = bt4(r[0], r[1], r[2], r[3], r[4], r[5])
	}
	for j := 0; j < 6; j++ {
		d[j], d[6+j], d[12+j], d[18+j], d[24+j], d[30+j] = bt4(d[j], d[6+j], d[12+j], d[18+j], d[24+j], d[30+j])
	}
}

func outputTile2(d *[16]float32, o *[16]float32) {
	var t [8]float32 // 4 rows x 2
	for i := 0; i < 4; i++ {
		t[i*2], t[i*2+1] = at2(d[i*4], d[i*4+1], d[i*4+2], d[i*4+3])
	}
	for j := 0; j < 2; j++ {
		o[j], o[2+j] = at2(t[j], t[2+j], t[4+j], t[6+j])
	}
}

func outputTile4(d *[36]float32, o *[16]float32) {
	var t [24]float32 // 6 rows x 4
	for i := 0; i < 6; i++ {
		r := d[i*6 : i*6+6 : i*6+6]
		t[i*4], t[i*4+1], t[i*4+2], t[i*4+3] = at4(r[0], r[1], r[2], r[3], r[4], r[5])
	}
	for j := 0; j < 4; j++ {
		o[j], o[4+j], o[8+j], o[12+j] = at4(t[j], t[4+j], t[8+j], t[12+j], t[16+j], t[20+j])
	}
}

func gradTile2(e *[16]float32, d *[16]float32) {
	var t [8]float32 // 2 rows x 4
	for i := 0; i < 2; i++ {
		t[i*4], t[i*4+1], t[i*4+2], t[i*4+3] = a2(e[i*2], e[i*2+1])
	}
	for j := 0; j < 4; j++ {
		d[j], d[4+j], d[8+j], d[12+j] = a2(t[j], t[4+j])
	}
}

func gradTile4(e *[16]float32, d *[36]float32) {
	var t [24]float32 // 4 rows x 6
	for i := 0; i < 4; i++ {
		r := e[i*4 : i*4+4 : i*4+4]
		t[i*6], t[i*6+1], t[i*6+2], t[i*6+3], t[i*6+4], t[i*6+5] = a4(r[0], r[1], r[2], r[3])
	}
	for j := 0; j < 6; j++ {
		d[j], d[6+j], d[12+j], d[18+j], d[24+j], d[30+j] = a4(t[j], t[6+j], t[12+j], t[18+j])
	}
}
