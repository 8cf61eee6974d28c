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

// putF64 writes v at the device address p.
func putF64(t *testing.T, dev int, p uintptr, v float64) {
	t.Helper()
	if err := cuda.CopyHtoD(dev, p, unsafe.Slice((*byte)(unsafe.Pointer(&v)), 8)); err != nil {
		t.Fatal(err)
	}
}

// getF64 reads the float64 at the device address p once the device is idle.
func getF64(t *testing.T, dev int, p uintptr) float64 {
	t.Helper()
	if err := cuda.DeviceSynchronize(dev); err != nil {
		t.Fatal(err)
	}
	var v [1]float64
	if err := copyD(dev, &v, p); err != nil {
		t.Fatal(err)
	}
	return v[0]
}

// clipGlobalCases runs clip (ClipGlobal or ClipGlobalExact) with the
// shard's norm local in ws and the ranks' sum of squares in sq over a
// table of shards (clipping, none, a zero norm, a sum not finite, an
// empty shard) and checks the norm and factor it leaves in ws, bit for
// bit factor's, and the shard scaled by that factor, or untouched when
// it is 1. seed picks the shards' values.
func clipGlobalCases(t *testing.T, dev int, ws, sq uintptr, seed int,
	clip func(g uintptr, n int, max float64) error,
	factor func(local, sum, max float64) (norm float64, f float32)) {
	t.Helper()
	for _, c := range []struct {
		n               int
		local, sum, max float64
	}{
		{1000, 1.25, 7.3, 0.5}, {1000, 0.001, 0.3, 0.01}, {7, 3, 25, 1}, {7, 3, 25, 10}, // clip, clip, clip, none
		{7, 0, 25, 1}, {7, 3, math.Inf(1), 1}, {7, 3, math.NaN(), 1}, {0, 3, 25, 1},
		// coef on a float32 midpoint: ClipShard's round trip through the
		// bound moves it by an ulp of float64 across it (float32 0.21480913,
		// the exact factor 0.21480915), so ClipGlobal and ClipGlobalExact
		// part here and each test fails with the other's kernel
		{7, 0.0076155780569465556, 1.390138438246594, 0.253269069566018},
	} {
		what := fmt.Sprintf("n %d local %v sum %v max %v", c.n, c.local, c.sum, c.max)
		g := devtest.Vals(seed, c.n, 0.5)
		dg := devtest.Upload(t, dev, g)
		putF64(t, dev, ws, c.local)
		putF64(t, dev, sq, c.sum)
		if err := clip(dg, c.n, c.max); err != nil {
			t.Fatal(err)
		}
		norm, f := factor(c.local, c.sum, c.max)
		if got := getF64(t, dev, ws); math.Float64bits(got) != math.Float64bits(norm) && !(math.IsNaN(got) && math.IsNaN(norm)) {
			t.Errorf("%s: norm %v, want %v", what, got, norm)
		}
		if got := getF64(t, dev, ws+8); got != float64(f) {
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

// ClipSquare squares the shard's norm (bit for bit Go's), and
// ClipGlobal leaves the global norm and scales the shard by ClipShard's
// factor, bit for bit, or not at all when it is 1 (no clipping, a norm
// that is not finite, a shard of zeros).
func TestClipGlobal(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	ws := devtest.Alloc(t, dev, kernels.ClipWorkspace, 1)
	sq := devtest.Alloc(t, dev, 1, 8)
	x := math.E // a float64 variable: x*x rounds once (Go's constant arithmetic would not)
	putF64(t, dev, ws, x)
	if err := k.ClipSquare(s, sq, ws); err != nil {
		t.Fatal(err)
	}
	if got, want := getF64(t, dev, sq), x*x; math.Float64bits(got) != math.Float64bits(want) {
		t.Errorf("ClipSquare: %v, want %v", got, want)
	}
	clipGlobalCases(t, dev, ws, sq, 161, func(g uintptr, n int, max float64) error {
		return k.ClipGlobal(s, g, n, max, ws, sq)
	}, clipShardFactor)
}

// ClipGlobalExact scales by float32(max / (norm + 1e-6)) itself, the
// CPU's factor (train.ClipGradNorm's, devmodel Stage's ClipGrads'), where
// ClipGlobal's factor may round otherwise; nothing when it is 1.
func TestClipGlobalExact(t *testing.T) {
	const dev = 0
	k, s := setup(t, dev)
	ws := devtest.Alloc(t, dev, kernels.ClipWorkspace, 1)
	sq := devtest.Alloc(t, dev, 1, 8)
	clipGlobalCases(t, dev, ws, sq, 162, func(g uintptr, n int, max float64) error {
		return k.ClipGlobalExact(s, g, n, max, ws, sq)
	}, func(local, sum, max float64) (float64, float32) {
		norm := math.Sqrt(sum)
		if coef := max / (norm + 1e-6); coef < 1 && !math.IsInf(norm, 0) && !math.IsNaN(norm) && local != 0 {
			return norm, float32(coef)
		}
		return norm, 1
	})
}
