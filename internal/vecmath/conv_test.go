package vecmath

import (
	"math"
	"math/rand"
	"testing"
)

// guard is what the tests put around every buffer: a kernel that writes
// outside its rows changes it.
const guard = float32(-12345)

// guarded returns a slice of n values with pad guard values on each side
// (in the same array), filled by fill.
func guarded(n, pad int, fill func(i int) float32) (inner, all []float32) {
	all = make([]float32, n+2*pad)
	for i := range all {
		all[i] = guard
	}
	inner = all[pad : pad+n]
	for i := range inner {
		inner[i] = fill(i)
	}
	return inner, all
}

func checkGuards(t *testing.T, all []float32, pad int, what string) {
	t.Helper()
	for i := 0; i < pad; i++ {
		if all[i] != guard || all[len(all)-1-i] != guard {
			t.Fatalf("%s: wrote outside its buffer", what)
		}
	}
}

// TestConvPlane, on every kernel set: Im2col and Col2im against their
// definitions, bit for bit (Col2im adding each element's taps in row
// order to what dx held), for plane sizes around the 16-lane chunks,
// kernels 1, 3, 5 and paddings 0-2 (kernels wider than the plane
// included), and nothing written outside their buffers.
func TestConvPlane(t *testing.T) { eachSet(t, testConvPlane) }

func testConvPlane(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	for _, hw := range [][2]int{{1, 1}, {2, 7}, {14, 14}, {5, 15}, {3, 16}, {4, 17}, {28, 28}, {6, 33}} {
		h, w := hw[0], hw[1]
		for _, k := range []int{1, 3, 5, 7} {
			for _, pad := range []int{0, 1, 2} {
				p := NewConvPlane(h, w, k, pad)
				if p == nil {
					if h+2*pad-k+1 >= 1 && w+2*pad-k+1 >= 1 {
						t.Fatalf("%dx%d k %d pad %d: no plane", h, w, k, pad)
					}
					continue
				}
				ho, wo := p.Ho, p.Wo
				const g = 20
				x, xAll := guarded(h*w, g, func(int) float32 { return float32(r.NormFloat64()) })
				col, colAll := guarded(k*k*ho*wo, g, func(int) float32 { return float32(r.NormFloat64()) })
				p.Im2col(col, x)
				checkGuards(t, colAll, g, "Im2col")
				for ki := 0; ki < k; ki++ {
					for kj := 0; kj < k; kj++ {
						for oy := 0; oy < ho; oy++ {
							for ox := 0; ox < wo; ox++ {
								iy, ix := oy+ki-pad, ox+kj-pad
								want := float32(0)
								if iy >= 0 && iy < h && ix >= 0 && ix < w {
									want = x[iy*w+ix]
								}
								if got := col[((ki*k+kj)*ho+oy)*wo+ox]; math.Float32bits(got) != math.Float32bits(want) {
									t.Fatalf("%dx%d k %d pad %d: Im2col tap (%d, %d) at (%d, %d) = %v, want %v", h, w, k, pad, ki, kj, oy, ox, got, want)
								}
							}
						}
					}
				}
				// Col2im adds into a copy of x, tap by tap in the definition.
				for i := range col {
					col[i] = float32(r.NormFloat64())
				}
				dx := append([]float32(nil), xAll...)
				want := append([]float32(nil), xAll...)
				for ki := 0; ki < k; ki++ {
					for kj := 0; kj < k; kj++ {
						for oy := 0; oy < ho; oy++ {
							for ox := 0; ox < wo; ox++ {
								iy, ix := oy+ki-pad, ox+kj-pad
								if iy >= 0 && iy < h && ix >= 0 && ix < w {
									want[g+iy*w+ix] += col[((ki*k+kj)*ho+oy)*wo+ox]
								}
							}
						}
					}
				}
				p.Col2im(dx[g:g+h*w], col)
				for i := range want {
					if math.Float32bits(dx[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%dx%d k %d pad %d: Col2im value %d = %v, want %v", h, w, k, pad, i-g, dx[i], want[i])
					}
				}
			}
		}
	}
}

// TestConvPlaneShort: buffers shorter than the plane panic instead of
// being read or written past their end.
func TestConvPlaneShort(t *testing.T) {
	p := NewConvPlane(14, 14, 3, 1)
	for name, f := range map[string]func(){
		"Im2col short x":   func() { p.Im2col(make([]float32, 9*196), make([]float32, 195)) },
		"Im2col short col": func() { p.Im2col(make([]float32, 9*196-1), make([]float32, 196)) },
		"Col2im short dx":  func() { p.Col2im(make([]float32, 195), make([]float32, 9*196)) },
		"Col2im short col": func() { p.Col2im(make([]float32, 196), make([]float32, 9*196-1)) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// TestPoolArgGrad, on every kernel set: the kernel against its
// definition, bit for bit, for every code (4: no gradient), lengths with
// and without a partial last group, and nothing written past the two
// rows.
func TestPoolArgGrad(t *testing.T) { eachSet(t, testPoolArgGrad) }

func testPoolArgGrad(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	for _, n := range []int{1, 7, 8, 9, 14, 16, 23} {
		arg := make([]uint8, n)
		for i := range arg {
			arg[i] = uint8(r.Intn(5))
		}
		dy, _ := guarded(n, 0, func(int) float32 { return float32(r.NormFloat64()) })
		const p = 16
		top, topAll := guarded(2*n, p, func(int) float32 { return 7 })
		bot, botAll := guarded(2*n, p, func(int) float32 { return 7 })
		PoolArgGrad(arg, dy, top, bot)
		checkGuards(t, topAll, p, "PoolArgGrad top")
		checkGuards(t, botAll, p, "PoolArgGrad bottom")
		for i, a := range arg {
			got := [4]float32{top[2*i], top[2*i+1], bot[2*i], bot[2*i+1]}
			var want [4]float32
			if a < 4 {
				want[a] = dy[i]
			}
			if got != want {
				t.Fatalf("n %d output %d code %d: %v, want %v", n, i, a, got, want)
			}
		}
	}
}

// TestSum32AddScalar, on every kernel set: Sum32 is the eight running
// sums of its definition, bit for bit; AddScalar adds to every element and
// no further.
func TestSum32AddScalar(t *testing.T) { eachSet(t, testSum32AddScalar) }

func testSum32AddScalar(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	for _, n := range []int{0, 3, 8, 15, 196, 785} {
		v, all := guarded(n, 16, func(int) float32 { return float32(r.NormFloat64() * 1e3) })
		if got, want := Sum32(v), sum32Def(v); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("n %d: Sum32 %v, want %v", n, got, want)
		}
		old := append([]float32(nil), v...)
		AddScalar(v, 0.25)
		checkGuards(t, all, 16, "AddScalar")
		for i := range v {
			if v[i] != old[i]+0.25 {
				t.Fatalf("n %d: AddScalar element %d = %v, want %v", n, i, v[i], old[i]+0.25)
			}
		}
	}
}
