package gemm_test

import (
	"testing"

	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/internal/devtest"
)

// Weights registered at an address 2^63 bytes or more below an
// operand's (as TestProvideFarBelow's copy: not reachable from
// gpu/devmodel today, whose registrations are its parameters in device
// memory) do not serve that operand from the cache: before, the offset
// overflowed to a negative index that passed the bounds check, and the
// product cast into and read the cache far outside its buffer (the fake
// refused it).
func TestWeightsFarBelow(t *testing.T) {
	t.Setenv(gemm.EnvBF16Cast, "kernel")
	e := engine(t, gemm.Config{Precision: gemm.BF16})
	if !e.CUBLAS() {
		t.Skip(e.Backend())
	}
	const rows, in, out = 4, 4, 4
	X, W := devtest.Upload(t, dev, devtest.Vals(75, rows*in, 1)), devtest.Upload(t, dev, devtest.Vals(76, in*out, 1))
	Y0, Y1 := devtest.Alloc(t, dev, rows*out, 4), devtest.Alloc(t, dev, rows*out, 4)
	if err := e.MatMul(false, false, rows, out, in, 1, X, W, 0, Y0); err != nil {
		t.Fatal(err)
	}
	key := X - 1<<63 - 1<<12 // below X by more than 2^63
	if key > X {
		t.Skipf("device addresses at %#x: none 2^63 below", X)
	}
	e.Weights(key, 1<<20)
	before := e.CastStats()
	if err := e.MatMul(false, false, rows, out, in, 1, X, W, 0, Y1); err != nil {
		t.Fatalf("x, W far above the registered weights: %v", err)
	}
	if got := e.CastStats().Sub(before); got.Weights != 0 || got.WeightReuses != 0 {
		t.Errorf("casts %+v: operands outside the registered weights served from the cache", got)
	}
	a, b := devtest.Floats(t, dev, Y0, rows*out), devtest.Floats(t, dev, Y1, rows*out)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("y[%d] = %v with weights registered far below, %v without", i, b[i], a[i])
		}
	}
}
