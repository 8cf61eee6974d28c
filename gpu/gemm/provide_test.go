package gemm_test

import (
	"math"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/internal/devtest"
)

// bf16Bits is the engine's rounding of v to bf16 (nearest even, NaN
// kept), as its bits: what a producer kernel writes beside v.
func bf16Bits(v float32) uint16 {
	u := math.Float32bits(v)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// A bf16 copy given by Provide serves the products that read the
// region (a Linear's forward x W and its weight gradient x^T dy, a block
// of its rows) with no cast, bit for bit the products that cast x; the
// products read the copy (a copy of other values changes them: a stale
// copy is not caught by the engine, so its producer must write it with
// the values); a product that writes into the region is refused;
// Withdraw ends it (x is cast again).
func TestProvide(t *testing.T) {
	e := engine(t, gemm.Config{Precision: gemm.BF16, NoWeightCache: true})
	if !e.UsesCopies() {
		t.Skip(e.Backend())
	}
	const rows, in, out = 7, 5, 3
	x, w, dy := devtest.Vals(70, rows*in, 1), devtest.Vals(71, in*out, 1), devtest.Vals(72, rows*out, 1)
	x16 := make([]uint16, len(x))
	for i, v := range x {
		x16[i] = bf16Bits(v)
	}
	X, W, DY := devtest.Upload(t, dev, x), devtest.Upload(t, dev, w), devtest.Upload(t, dev, dy)
	X16 := devtest.Upload(t, dev, x16)
	run := func() (y, dw []float32, casts int64) {
		Y, DW := devtest.Alloc(t, dev, rows*out, 4), devtest.Alloc(t, dev, in*out, 4)
		before := e.Casts()
		if err := e.MatMul(false, false, rows, out, in, 1, X, W, 0, Y); err != nil {
			t.Fatal(err)
		}
		if err := e.MatMul(true, false, in, out, rows, 1, X, DY, 0, DW); err != nil {
			t.Fatal(err)
		}
		// rows 2..5 of x: a block inside the region
		if err := e.MatMul(false, false, 3, out, in, 1, X+4*2*in, W, 0, Y); err != nil {
			t.Fatal(err)
		}
		return devtest.Floats(t, dev, Y, rows*out), devtest.Floats(t, dev, DW, in*out), e.Casts() - before
	}
	y0, dw0, c0 := run()
	if err := e.Provide(X, X16, rows, in); err != nil {
		t.Fatal(err)
	}
	y1, dw1, c1 := run()
	if want := c0 - (2*rows*in + 3*in); c1 != want {
		t.Errorf("with x provided: %d values cast, want %d (%d without: x's casts saved)", c1, want, c0)
	}
	if k, ok := same(y0, y1); !ok {
		t.Errorf("y[%d]: %v with x provided, %v cast", k, y1[k], y0[k])
	}
	if k, ok := same(dw0, dw1); !ok {
		t.Errorf("dW[%d]: %v with x provided, %v cast", k, dw1[k], dw0[k])
	}
	// a stale copy (other values) is what the products read
	stale := append([]uint16(nil), x16...)
	stale[2*in] = bf16Bits(x[2*in] + 1)
	devtest.Put(t, dev, X16, stale)
	y2, _, _ := run()
	if _, ok := same(y0, y2); ok {
		t.Error("a provided copy of other values changed nothing: the products do not read it")
	}
	if err := e.MatMul(false, false, rows, in, out, 1, DY, W, 0, X); err == nil || !strings.Contains(err.Error(), "Withdraw") {
		t.Errorf("a product writing into a provided region: %v, want refused naming Withdraw", err)
	}
	e.Withdraw(X)
	y3, _, c3 := run()
	if c3 != c0 {
		t.Errorf("after Withdraw: %d values cast, want %d", c3, c0)
	}
	if k, ok := same(y0, y3); !ok {
		t.Errorf("after Withdraw y[%d]: %v, want %v", k, y3[k], y0[k])
	}
	if err := e.Provide(0, X16, rows, in); err == nil {
		t.Error("Provide of a null region: no error")
	}
}

func same(a, b []float32) (int, bool) {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i, false
		}
	}
	return 0, true
}
