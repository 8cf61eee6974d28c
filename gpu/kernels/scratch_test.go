package kernels

import (
	"testing"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/internal/devtest"
)

// Close frees the device scratch of the two-stage sums (a Model that is
// closed gives its memory back), and the kernels still work after it.
func TestCloseFreesScratch(t *testing.T) {
	cudafake.RequireCUDA(t)
	k, err := Load(0)
	if err != nil {
		t.Fatal(err)
	}
	s := devtest.Stream(t, 0)
	const rows, cols = 1000, 8 // more than 64 rows: partial sums in the scratch
	dy := devtest.Upload(t, 0, devtest.Vals(1, rows*cols, 1))
	db := devtest.Alloc(t, 0, cols, 4)
	sum := func() []float32 {
		t.Helper()
		if err := k.BiasGrad(s, db, dy, rows, cols, false); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		return devtest.Floats(t, 0, db, cols)
	}
	want := sum()
	sc := k.scr.m[s]
	if sc == nil || sc.ptr == 0 {
		t.Fatal("BiasGrad of 1000 rows used no scratch")
	}
	p := sc.ptr
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cuda.Free(0, p); err == nil { // freed already: refused
		t.Fatalf("the scratch at %#x is still allocated after Close", p)
	}
	got := sum()
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("after Close, sum %d = %v, want %v", i, got[i], want[i])
		}
	}
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
}
