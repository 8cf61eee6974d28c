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
