package vecmath

import (
	"math"
	"math/rand"
	"testing"
)

// rowVec is n random float32 values around 0 (a few of them exactly 0 or
// large), followed by 8 rowGuard values that no kernel may touch.
func rowVec(rng *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n+8)
	for i := range v[:n] {
		switch rng.Intn(20) {
		case 0:
			v[i] = 0
		case 1:
			v[i] = float32(rng.NormFloat64()) * 1e4
		default:
			v[i] = float32(rng.NormFloat64()) * scale
		}
	}
	for i := n; i < len(v); i++ {
		v[i] = rowGuard
	}
	return v
}

const rowGuard = float32(-12345.678)

func rowSame(t *testing.T, what string, n int, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s n=%d: %d values, want %d", what, n, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s n=%d (kernels %s, assembly %v): [%d] = %v (%#x), want %v (%#x)", what, n, KernelSet(), rowAsm, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

func rowClone(v []float32) []float32 { return append([]float32(nil), v...) }

// TestRowKernels runs every row kernel, as the exported functions run it
// (assembly for the whole groups of 8 where the active set is avx2 or
// avx512), against its Go definition on the whole row, bit for bit, on
// lengths with and without a partial last group, guards after each row.
func TestRowKernels(t *testing.T) {
	t.Logf("kernels %s, row assembly %v", KernelSet(), rowAsm)
	rng := rand.New(rand.NewSource(1))
	for n := 0; n <= 75; n++ {
		a, b, d := rowVec(rng, n, 1), rowVec(rng, n, 1), rowVec(rng, n, 1)

		got, want := rowClone(d), rowClone(d)
		AddTo(got[:n], a)
		addToGo(want[:n], a[:n])
		rowSame(t, "AddTo", n, got, want)

		got, want = rowClone(d), rowClone(d)
		Add(got[:n], a, b)
		addGo(want[:n], a[:n], b[:n])
		rowSame(t, "Add", n, got, want)
		got = rowClone(a)
		Add(got[:n], got, b) // in place
		rowSame(t, "Add in place", n, got[:n], want[:n])

		got, want = rowClone(d), rowClone(d)
		Mul(got[:n], a, b)
		mulGo(want[:n], a[:n], b[:n])
		rowSame(t, "Mul", n, got, want)

		got, want = rowClone(d), rowClone(d)
		AddMulTo(got[:n], a, b)
		addMulToGo(want[:n], a[:n], b[:n])
		rowSame(t, "AddMulTo", n, got, want)

		var s [8]float32
		dotGo(a[:n], b[:n], &s)
		rowSame(t, "Dot32", n, []float32{Dot32(a[:n], b)}, []float32{sumLanes32(&s)})
		if n > 0 {
			var ref float32
			for i := range a[:n] {
				ref += a[i] * b[i]
			}
			if x := Dot32(a[:n], b); math.Abs(float64(x-ref)) > 1e-3*(1+math.Abs(float64(ref))) {
				t.Fatalf("Dot32 n=%d = %v, the plain sum %v", n, x, ref)
			}
		}

		m := float32(rng.NormFloat64())
		s = [8]float32{}
		sqDevGo(a[:n], m, &s)
		rowSame(t, "SqDev32", n, []float32{SqDev32(a[:n], m)}, []float32{sumLanes32(&s)})

		gamma, beta := rowVec(rng, n, 1), rowVec(rng, n, 1)
		inv := float32(rng.Float64() + 0.5)
		y, xh := rowClone(d), rowClone(d)
		y2, xh2 := rowClone(d), rowClone(d)
		LayerNormRow(y, xh, a[:n], gamma, beta, m, inv)
		lnRowGo(y2[:n], xh2[:n], a[:n], gamma[:n], beta[:n], m, inv)
		rowSame(t, "LayerNormRow y", n, y, y2)
		rowSame(t, "LayerNormRow xhat", n, xh, xh2)

		dx, g := rowClone(d), rowClone(d)
		dx2, g2 := rowClone(d), rowClone(d)
		invC := 1 / float32(max(n, 1))
		LayerNormGradRow(dx, g, b[:n], gamma, xh, inv, invC)
		var s1, s2 [8]float32
		lnGradSumsGo(g2[:n], b[:n], gamma[:n], xh[:n], &s1, &s2)
		lnGradApplyGo(dx2[:n], g2[:n], xh[:n], sumLanes32(&s1)*invC, sumLanes32(&s2)*invC, inv)
		rowSame(t, "LayerNormGradRow dx", n, dx, dx2)
		rowSame(t, "LayerNormGradRow g", n, g, g2)

		r, r2 := rowVec(rng, n, 3), []float32(nil)
		r2 = rowClone(r)
		Softmax(r[:n])
		softmaxRef(r2[:n])
		rowSame(t, "Softmax", n, r, r2)
		if n > 0 {
			var tot float64
			for _, v := range r[:n] {
				tot += float64(v)
			}
			if math.Abs(tot-1) > 1e-5 {
				t.Fatalf("Softmax n=%d sums to %v", n, tot)
			}
		}

		p := rowClone(r)
		dd, dd2 := rowClone(b), rowClone(b)
		SoftmaxGradRow(dd, p[:n], 0.125)
		s = [8]float32{}
		dotGo(p[:n], dd2[:n], &s)
		softmaxGradGo(dd2[:n], p[:n], sumLanes32(&s), 0.125)
		rowSame(t, "SoftmaxGradRow", n, dd, dd2)
	}
}

// softmaxRef is Softmax by its definition, in Go alone.
func softmaxRef(r []float32) {
	if len(r) == 0 {
		return
	}
	mx := r[0]
	for _, v := range r {
		mx = max(mx, v)
	}
	var s [8]float32
	expSubSumGo(r, mx, &s)
	inv := 1 / sumLanes32(&s)
	for i := range r {
		r[i] *= inv
	}
}

// TestExp32 checks Exp32 against float64's exp (within 3 ulp from -87 to
// 0 and e^-87 below, NaN for NaN; relative error at most 2.5e-7 on a
// dense sweep of [-87, 0], e^0 exactly 1) and the assembly's
// exponentials against it bit for bit.
func TestExp32(t *testing.T) {
	var maxRel float64
	for y := -87.0; y <= 0; y += 1.0 / 4096 {
		y32 := float32(y)
		want := math.Exp(float64(y32))
		maxRel = max(maxRel, math.Abs(float64(Exp32(y32))-want)/want)
	}
	if maxRel > 2.5e-7 { // 2 ulp
		t.Errorf("Exp32 on [-87, 0]: max relative error %.3g, want <= 2.5e-7", maxRel)
	}
	if got := Exp32(0); got != 1 {
		t.Errorf("Exp32(0) = %g, want 1", got)
	}
	if got, want := Exp32(-1000), Exp32(-87); got != want || got <= 0 || got > 1e-37 {
		t.Errorf("Exp32(-1000) = %g, want Exp32(-87) = %g, about 1.6e-38", got, want)
	}
	var ys []float32
	for y := float32(-90); y <= 0; y += 0.00731 {
		ys = append(ys, y)
	}
	ys = append(ys, 0, float32(math.Copysign(0, -1)), -87, -86.99, -1e-30, float32(math.Inf(-1)))
	for _, y := range ys {
		got := Exp32(y)
		want := math.Exp(float64(max(y, -87)))
		if y < -87 {
			want = math.Exp(-87)
		}
		ulp := float64(math.Nextafter32(float32(want), float32(math.Inf(1))) - float32(want))
		if d := math.Abs(float64(got) - want); d > 3*ulp {
			t.Fatalf("Exp32(%v) = %v, e^y = %v: %.1f ulp off", y, got, want, d/ulp)
		}
	}
	if v := Exp32(float32(math.NaN())); !math.IsNaN(float64(v)) {
		t.Fatalf("Exp32(NaN) = %v", v)
	}
	// the assembly, through Softmax's exponentials with mx = 0
	for i := 0; i+8 <= len(ys); i += 8 {
		r := rowClone(ys[i : i+8])
		var s [8]float32
		if rowAsm {
			expSubSumAVX(rp(r), 8, 0, &expTable, &s)
		} else {
			expSubSumGo(r, 0, &s)
		}
		for j, y := range ys[i : i+8] {
			if math.Float32bits(r[j]) != math.Float32bits(Exp32(y)) {
				t.Fatalf("assembly e^%v = %v, Exp32 %v", y, r[j], Exp32(y))
			}
		}
	}
}

// TestSoftmaxNaN: a NaN anywhere makes the whole row NaN, as the Go
// definition's does.
func TestSoftmaxNaN(t *testing.T) {
	for n := 1; n <= 20; n++ {
		for at := 0; at < n; at++ {
			r := make([]float32, n)
			for i := range r {
				r[i] = float32(i)
			}
			r[at] = float32(math.NaN())
			Softmax(r)
			for i, v := range r {
				if !math.IsNaN(float64(v)) {
					t.Fatalf("n=%d, NaN at %d: [%d] = %v", n, at, i, v)
				}
			}
		}
	}
}

// TestTranspose: Transpose against its definition on shapes with and
// without whole 8 x 8 blocks and leading dimensions wider than the
// matrices, nothing else in dst written.
func TestTranspose(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	for _, s := range [][2]int{{1, 1}, {8, 8}, {16, 64}, {128, 64}, {13, 21}, {24, 9}, {7, 40}} {
		r, c := s[0], s[1]
		lds, ldd := c+3, r+5
		src := rowVec(rng, r*lds, 1)
		dst := make([]float32, c*ldd)
		for i := range dst {
			dst[i] = rowGuard
		}
		Transpose(dst, ldd, src, lds, r, c)
		for j := 0; j < c; j++ {
			for i := 0; i < ldd; i++ {
				want := rowGuard
				if i < r {
					want = src[i*lds+j]
				}
				if math.Float32bits(dst[j*ldd+i]) != math.Float32bits(want) {
					t.Fatalf("%dx%d: dst[%d][%d] = %v, want %v", r, c, j, i, dst[j*ldd+i], want)
				}
			}
		}
	}
}
