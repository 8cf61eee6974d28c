package comm

import (
	"errors"
	"math"
	"testing"
)

func TestHalfConversions(t *testing.T) {
	for _, f := range []float32{0, 1, -2.5, 65504, 1e-7, 3.140625, -0.0001, 1 << 20} {
		if g := ToBF16(f).Float32(); math.Abs(float64(g-f)) > math.Abs(float64(f))/128 {
			t.Errorf("bf16(%v) = %v", f, g)
		}
	}
	for _, f := range []float32{0, 1, -2.5, 65504, 0.000061035156, 3.140625, 2048, -1000.5} {
		if g := ToF16(f).Float32(); g != f {
			t.Errorf("f16(%v) = %v", f, g)
		}
	}
	if g := ToF16(1e6).Float32(); !math.IsInf(float64(g), 1) {
		t.Errorf("f16 overflow gave %v", g)
	}
	if g := ToF16(5.96e-8).Float32(); g != 5.9604645e-08 { // smallest subnormal
		t.Errorf("f16 subnormal gave %v", g)
	}
	if g := ToBF16(float32(math.NaN())).Float32(); !math.IsNaN(float64(g)) {
		t.Errorf("bf16 NaN gave %v", g)
	}
	// Every F16 value survives a round trip through float32.
	for v := 0; v < 1<<16; v++ {
		h := F16(v)
		f := h.Float32()
		if f != f {
			continue
		}
		if back := ToF16(f); back != h {
			t.Fatalf("f16 %#x -> %v -> %#x", v, f, back)
		}
	}
}

func TestCheckReduce(t *testing.T) {
	if err := CheckReduce(Float32, BXor); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("bxor on float32: %v", err)
	}
	if err := CheckReduce(Int32, BXor); err != nil {
		t.Errorf("bxor on int32: %v", err)
	}
	if err := CheckReduce(BFloat16, BAnd); err == nil {
		t.Errorf("band on bfloat16 accepted")
	}
}

func TestBufferChecks(t *testing.T) {
	x := make([]float32, 8)
	a := FromSlice(x)
	if !Overlap(a.Slice(0, 4), a.Slice(3, 8)) || Overlap(a.Slice(0, 4), a.Slice(4, 8)) {
		t.Error("Overlap wrong")
	}
	if !Same(a.Slice(2, 4), FromSlice(x[2:4])) {
		t.Error("Same wrong")
	}
	if _, err := FromBytes(Float32, make([]byte, 7)); !errors.Is(err, ErrInvalidArgument) {
		t.Error("FromBytes accepted 7 bytes of float32")
	}
	if err := (Buffer{}).Validate(); err == nil {
		t.Error("zero Buffer validated")
	}
}
