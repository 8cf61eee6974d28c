package gemm_test

import (
	"testing"

	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/internal/devtest"
)

// A copy given at an address 2^63 bytes or more below an operand's (a
// key outside device memory, as gpu/devmodel gives for values kept as
// their bf16 copy only, with the fake's devices at 0xd000...) does not
// serve that operand: before, the offset overflowed to a negative row
// and the product read far outside the copy (the fake refused it).
func TestProvideFarBelow(t *testing.T) {
	e := engine(t, gemm.Config{Precision: gemm.BF16, NoWeightCache: true})
	if !e.UsesCopies() {
		t.Skip(e.Backend())
	}
	const rows, in, out = 4, 4, 4
	X, W := devtest.Upload(t, dev, devtest.Vals(73, rows*in, 1)), devtest.Upload(t, dev, devtest.Vals(74, in*out, 1))
	Y0, Y1 := devtest.Alloc(t, dev, rows*out, 4), devtest.Alloc(t, dev, rows*out, 4)
	if err := e.MatMul(false, false, rows, out, in, 1, X, W, 0, Y0); err != nil {
		t.Fatal(err)
	}
	key := X - 1<<63 - 1<<12 // a row of in values apart, below X by more than 2^63
	if key > X {
		t.Skipf("device addresses at %#x: none 2^63 below", X)
	}
	if err := e.Provide(key, devtest.Alloc(t, dev, rows*in, 2), rows, in); err != nil {
		t.Fatal(err)
	}
	if err := e.MatMul(false, false, rows, out, in, 1, X, W, 0, Y1); err != nil {
		t.Fatalf("x, W far above a given copy: %v", err)
	}
	a, b := devtest.Floats(t, dev, Y0, rows*out), devtest.Floats(t, dev, Y1, rows*out)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("y[%d] = %v with a copy given far below, %v without", i, b[i], a[i])
		}
	}
}
