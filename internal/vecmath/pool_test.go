package vecmath

import (
	"math"
	"math/rand"
	"testing"
)

// TestPoolReLUArg, on every kernel set: the kernel against the definition
// (keys, the max with +0, the first winner in the order top-left,
// top-right, bottom-left, bottom-right, 4 for +0), bit for bit, on rows
// full of ties, zeros of both signs and NaNs, for lengths with and
// without a partial last group, and nothing written past the end.
func TestPoolReLUArg(t *testing.T) { eachSet(t, testPoolReLUArg) }

func testPoolReLUArg(t *testing.T) {
	key := func(f float32) int32 {
		v := int32(math.Float32bits(f))
		return v ^ (v>>31)&0x7fffffff
	}
	r := rand.New(rand.NewSource(3))
	val := func() float32 {
		switch r.Intn(8) {
		case 0:
			return 0
		case 1:
			return float32(math.Copysign(0, -1))
		case 2:
			return float32(r.Intn(5)-2) * 0.5
		case 3:
			if r.Intn(20) == 0 {
				return float32(math.NaN())
			}
		}
		return float32(2*r.Float64() - 1)
	}
	for _, n := range []int{0, 7, 8, 9, 14, 16, 31, 64} {
		top, bot := make([]float32, 2*n), make([]float32, 2*n)
		for i := range top {
			top[i], bot[i] = val(), val()
		}
		// Sentinels past the end: the masked last group must not touch them.
		yb, ab := make([]float32, n+8), make([]uint8, n+8)
		for i := range yb {
			yb[i], ab[i] = -1, 99
		}
		y, arg := yb[:n], ab[:n]
		PoolReLUArg(top, bot, y, arg)
		for i := 0; i < n; i++ {
			c := [4]float32{top[2*i], top[2*i+1], bot[2*i], bot[2*i+1]}
			k := max(key(c[0]), key(c[1]), key(c[2]), key(c[3]), 0)
			a := uint8(4)
			if k != 0 {
				for j := 3; j >= 0; j-- {
					if key(c[j]) == k {
						a = uint8(j)
					}
				}
			}
			if math.Float32bits(y[i]) != uint32(k) || arg[i] != a {
				t.Fatalf("n %d, output %d of window %v: y %v (bits %x) arg %d, want bits %x arg %d", n, i, c, y[i], math.Float32bits(y[i]), arg[i], uint32(k), a)
			}
		}
		for i := n; i < len(yb); i++ {
			if yb[i] != -1 || ab[i] != 99 {
				t.Fatalf("n %d: element %d past the end written", n, i)
			}
		}
	}
}

// TestPoolPlanes, on every kernel set: PoolReLUArgPlanes and
// PoolArgGradPlanes against PoolReLUArg and PoolArgGrad row by row, bit
// for bit, on planes whose pooled rows are shorter than, as long as and
// longer than a vector (with and without a partial last group), several
// planes a call, values full of ties, zeros of both signs and NaNs;
// nothing written past the outputs, every element of dx written.
func TestPoolPlanes(t *testing.T) { eachSet(t, testPoolPlanes) }

func testPoolPlanes(t *testing.T) {
	r := rand.New(rand.NewSource(31))
	val := func() float32 {
		switch r.Intn(8) {
		case 0:
			return 0
		case 1:
			return float32(math.Copysign(0, -1))
		case 2:
			return float32(r.Intn(5)-2) * 0.5
		case 3:
			if r.Intn(20) == 0 {
				return float32(math.NaN())
			}
		}
		return float32(2*r.Float64() - 1)
	}
	for _, c := range []struct{ planes, h, w int }{
		{1, 2, 2}, {3, 2, 2}, {2, 4, 14}, {3, 14, 14}, {2, 28, 28}, {1, 6, 16}, {2, 4, 18}, {2, 2, 34}, {0, 4, 4},
	} {
		n, m := c.planes*c.h*c.w, c.planes*(c.h/2)*(c.w/2)
		x := make([]float32, n)
		for i := range x {
			x[i] = val()
		}
		const pad = 16
		y, yAll := guarded(m, pad, func(int) float32 { return 5 })
		argAll := make([]uint8, m+2*pad)
		for i := range argAll {
			argAll[i] = 99
		}
		arg := argAll[pad : pad+m]
		PoolReLUArgPlanes(x, c.planes, c.h, c.w, y, arg)
		checkGuards(t, yAll, pad, "PoolReLUArgPlanes y")
		for i := 0; i < pad; i++ {
			if argAll[i] != 99 || argAll[len(argAll)-1-i] != 99 {
				t.Fatalf("%+v: PoolReLUArgPlanes wrote outside arg", c)
			}
		}
		wantY, wantArg := make([]float32, m), make([]uint8, m)
		ho, wo := c.h/2, c.w/2
		for p := 0; p < c.planes; p++ {
			for oy := 0; oy < ho; oy++ {
				r0, o := p*c.h*c.w+2*oy*c.w, (p*ho+oy)*wo
				PoolReLUArg(x[r0:r0+c.w], x[r0+c.w:r0+2*c.w], wantY[o:o+wo], wantArg[o:o+wo])
			}
		}
		for i := range wantY {
			if math.Float32bits(y[i]) != math.Float32bits(wantY[i]) || arg[i] != wantArg[i] {
				t.Fatalf("%+v: output %d: %v (code %d), row by row %v (code %d)", c, i, y[i], arg[i], wantY[i], wantArg[i])
			}
		}
		dy := make([]float32, m)
		for i := range dy {
			dy[i] = float32(r.NormFloat64())
		}
		dx, dxAll := guarded(n, pad, func(int) float32 { return 7 })
		PoolArgGradPlanes(arg, dy, c.planes, c.h, c.w, dx)
		checkGuards(t, dxAll, pad, "PoolArgGradPlanes dx")
		want := make([]float32, n)
		for p := 0; p < c.planes; p++ {
			for oy := 0; oy < ho; oy++ {
				r0, o := p*c.h*c.w+2*oy*c.w, (p*ho+oy)*wo
				PoolArgGrad(arg[o:o+wo], dy[o:o+wo], want[r0:r0+c.w], want[r0+c.w:r0+2*c.w])
			}
		}
		for i := range want {
			if math.Float32bits(dx[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%+v: dx[%d] = %v, row by row %v", c, i, dx[i], want[i])
			}
		}
	}
}

// TestPoolPlanesShape: odd sides and short buffers panic instead of being
// read or written past their end.
func TestPoolPlanesShape(t *testing.T) {
	for name, f := range map[string]func(){
		"odd h":   func() { PoolReLUArgPlanes(make([]float32, 15), 1, 3, 5, make([]float32, 2), make([]uint8, 2)) },
		"odd w":   func() { PoolArgGradPlanes(make([]uint8, 2), make([]float32, 2), 1, 4, 3, make([]float32, 12)) },
		"short x": func() { PoolReLUArgPlanes(make([]float32, 15), 1, 4, 4, make([]float32, 4), make([]uint8, 4)) },
		"short y": func() { PoolReLUArgPlanes(make([]float32, 32), 2, 4, 4, make([]float32, 7), make([]uint8, 8)) },
		"short dy": func() {
			PoolArgGradPlanes(make([]uint8, 8), make([]float32, 7), 2, 4, 4, make([]float32, 32))
		},
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
