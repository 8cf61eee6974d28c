package kernels_test

import (
	"fmt"
	"math"
	"testing"
	"unsafe"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
)

// clipShardFactor is devmodel's ClipShard's factor on the host: with
// norm = sqrt(sq) and coef = max / (norm + 1e-6), ClipGradNorm with the
// bound coef * (local + 1e-6) applies float32(bound / (local + 1e-6))
// when that is below 1; nothing when coef is not below 1, the norm is
// not finite or local is 0.
func clipShardFactor(local, sq, max float64) (norm float64, f float32) {
	norm = math.Sqrt(sq)
	coef := max / (norm + 1e-6)
	if !(coef < 1) || math.IsInf(norm, 0) || math.IsNaN(norm) || local == 0 {
		return norm, 1
	}
	c := coef * (local + 1e-6) / (local + 1e-6)
	if c < 1 && !math.IsInf(local, 0) && !math.IsNaN(local) {
		return norm, float32(c)
	}
	return norm, 1
}

// ClipSquare squares the shard's norm (bit for bit Go's), and
// ClipGlobal leaves the global norm and scales the shard by ClipShard's
// factor, bit for bit, or not at all when it is 1 (no clipping, a norm
// that is not finite, a shard of zeros).
func TestClipGlobal(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	ws := devtest.Alloc(t, dev, kernels.ClipWorkspace, 1)
	sq := devtest.Alloc(t, dev, 1, 8)
	put := func(p uintptr, v float64) {
		if err := cuda.CopyHtoD(dev, p, unsafe.Slice((*byte)(unsafe.Pointer(&v)), 8)); err != nil {
			t.Fatal(err)
		}
	}
	get := func(p uintptr) float64 {
		if err := cuda.DeviceSynchronize(dev); err != nil {
			t.Fatal(err)
		}
		var v [1]float64
		if err := copyD(dev, &v, p); err != nil {
			t.Fatal(err)
		}
		return v[0]
	}
	x := math.E // a float64 variable: x*x rounds once (Go's constant arithmetic would not)
	put(ws, x)
	if err := k.ClipSquare(s, sq, ws); err != nil {
		t.Fatal(err)
	}
	if got, want := get(sq), x*x; math.Float64bits(got) != math.Float64bits(want) {
		t.Errorf("ClipSquare: %v, want %v", got, want)
	}
	for _, c := range []struct {
		n               int
		local, sum, max float64
	}{
		{1000, 1.25, 7.3, 0.5}, {1000, 0.001, 0.3, 0.01}, {7, 3, 25, 1}, {7, 3, 25, 10}, // clip, clip, clip, none
		{7, 0, 25, 1}, {7, 3, math.Inf(1), 1}, {7, 3, math.NaN(), 1}, {0, 3, 25, 1},
	} {
		what := fmt.Sprintf("n %d local %v sum %v max %v", c.n, c.local, c.sum, c.max)
		g := devtest.Vals(161, c.n, 0.5)
		dg := devtest.Upload(t, dev, g)
		put(ws, c.local)
		put(sq, c.sum)
		if err := k.ClipGlobal(s, dg, c.n, c.max, ws, sq); err != nil {
			t.Fatal(err)
		}
		norm, f := clipShardFactor(c.local, c.sum, c.max)
		if got := get(ws); math.Float64bits(got) != math.Float64bits(norm) && !(math.IsNaN(got) && math.IsNaN(norm)) {
			t.Errorf("%s: norm %v, want %v", what, got, norm)
		}
		if got := get(ws + 8); got != float64(f) {
			t.Errorf("%s: factor %v, want %v", what, got, f)
		}
		want := append([]float32(nil), g...)
		if f != 1 {
			for i := range want {
				want[i] *= f
			}
		}
		same(t, what, devtest.Floats(t, dev, dg, c.n), want)
	}
}

// ClipGlobalExact scales by float32(max / (norm + 1e-6)) itself, the
// CPU's factor (train.ClipGradNorm's, devmodel Stage's ClipGrads'), where
// ClipGlobal's factor may round otherwise; nothing when it is 1.
func TestClipGlobalExact(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	ws := devtest.Alloc(t, dev, kernels.ClipWorkspace, 1)
	sq := devtest.Alloc(t, dev, 1, 8)
	put := func(p uintptr, v float64) {
		if err := cuda.CopyHtoD(dev, p, unsafe.Slice((*byte)(unsafe.Pointer(&v)), 8)); err != nil {
			t.Fatal(err)
		}
	}
	get := func(p uintptr) float64 {
		if err := cuda.DeviceSynchronize(dev); err != nil {
			t.Fatal(err)
		}
		var v [1]float64
		if err := copyD(dev, &v, p); err != nil {
			t.Fatal(err)
		}
		return v[0]
	}
	for _, c := range []struct {
		n               int
		local, sum, max float64
	}{
		{1000, 1.25, 7.3, 0.5}, {1000, 0.001, 0.3, 0.01}, {7, 3, 25, 1}, {7, 3, 25, 10}, // clip, clip, clip, none
		{7, 0, 25, 1}, {7, 3, math.Inf(1), 1}, {7, 3, math.NaN(), 1}, {0, 3, 25, 1},
	} {
		what := fmt.Sprintf("n %d local %v sum %v max %v", c.n, c.local, c.sum, c.max)
		g := devtest.Vals(162, c.n, 0.5)
		dg := devtest.Upload(t, dev, g)
		put(ws, c.local)
		put(sq, c.sum)
		if err := k.ClipGlobalExact(s, dg, c.n, c.max, ws, sq); err != nil {
			t.Fatal(err)
		}
		norm := math.Sqrt(c.sum)
		f := float32(1)
		if coef := c.max / (norm + 1e-6); coef < 1 && !math.IsInf(norm, 0) && !math.IsNaN(norm) && c.local != 0 {
			f = float32(coef)
		}
		if got := get(ws); math.Float64bits(got) != math.Float64bits(norm) && !(math.IsNaN(got) && math.IsNaN(norm)) {
			t.Errorf("%s: norm %v, want %v", what, got, norm)
		}
		if got := get(ws + 8); got != float64(f) {
			t.Errorf("%s: factor %v, want %v", what, got, f)
		}
		want := append([]float32(nil), g...)
		if f != 1 {
			for i := range want {
				want[i] *= f
			}
		}
		same(t, what, devtest.Floats(t, dev, dg, c.n), want)
	}
}
