package gemm_test

import (
	"math"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/internal/devtest"
)

// linearStep runs a Linear's products as gpu/kernels does, on the weight
// at w (in x out) inside registered parameters: y = x W, then dW = x^T dy
// and dx = dy W^T with dy kept between them. It returns y, dW and dx.
func linearStep(t *testing.T, e *gemm.Engine, x, w, dy uintptr, rows, in, out int) (y, dw, dx []float32) {
	t.Helper()
	dY, dW, dX := devtest.Alloc(t, dev, rows*out, 4), devtest.Alloc(t, dev, in*out, 4), devtest.Alloc(t, dev, rows*in, 4)
	if err := e.MatMul(false, false, rows, out, in, 1, x, w, 0, dY); err != nil {
		t.Fatal(err)
	}
	e.KeepNext(dy)
	if err := e.MatMul(true, false, in, out, rows, 1, x, dy, 0, dW); err != nil {
		t.Fatal(err)
	}
	if err := e.MatMul(false, true, rows, in, out, 1, dy, w, 0, dX); err != nil {
		t.Fatal(err)
	}
	if err := e.Stream().Synchronize(); err != nil {
		t.Fatal(err)
	}
	return devtest.Floats(t, dev, dY, rows*out), devtest.Floats(t, dev, dW, in*out), devtest.Floats(t, dev, dX, rows*in)
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %v, want %v (the uncached engine's)", what, i, got[i], want[i])
		}
	}
}

// The weight cache (bf16 through cuBLAS): two Linears' weights in one
// registered parameter buffer, each read by its forward product and its
// backward's input-gradient product, twice (two micro-batches): every
// output the same bits as an engine without the cache, each weight cast
// once (CastStats.Weights = the weights' sizes), the other reads served
// from the cache (WeightReuses), the activations and gradients cast as
// before. After the parameters change and WeightsChanged, the next
// products read the new values (and, without WeightsChanged, the old
// copy: the cache is what the products read).
func TestWeightCache(t *testing.T) {
	const rows, in, mid, out = 5, 7, 12, 3
	t.Setenv(gemm.EnvBF16Cast, "kernel")
	cached := engine(t, gemm.Config{Precision: gemm.BF16})
	plain := engine(t, gemm.Config{Precision: gemm.BF16, NoWeightCache: true})
	if !cached.CUBLAS() {
		t.Skip(cached.Backend())
	}
	// the flat parameters: w1 [in, mid], a bias, w2 [mid, out]
	n1, nb, n2 := in*mid, mid, mid*out
	params := devtest.Vals(50, n1+nb+n2, 1)
	P := devtest.Upload(t, dev, params)
	w1, w2 := P, P+uintptr(4*(n1+nb))
	cached.Weights(P, len(params))
	plain.Weights(P, len(params)) // NoWeightCache: ignored
	x, dy1 := devtest.Upload(t, dev, devtest.Vals(51, rows*in, 1)), devtest.Upload(t, dev, devtest.Vals(52, rows*mid, 1))
	h, dy2 := devtest.Upload(t, dev, devtest.Vals(53, rows*mid, 1)), devtest.Upload(t, dev, devtest.Vals(54, rows*out, 1))

	step := func(e *gemm.Engine) [][]float32 {
		var r [][]float32
		for range 2 { // micro-batches: one cast per change, not per pass
			y1, dw1, dx1 := linearStep(t, e, x, w1, dy1, rows, in, mid)
			y2, dw2, dx2 := linearStep(t, e, h, w2, dy2, rows, mid, out)
			r = append(r, y1, dw1, dx1, y2, dw2, dx2)
		}
		return r
	}
	check := func(what string) {
		t.Helper()
		c0, p0 := cached.CastStats(), plain.CastStats()
		got, want := step(cached), step(plain)
		for i := range want {
			sameBits(t, what, got[i], want[i])
		}
		c, p := cached.CastStats().Sub(c0), plain.CastStats().Sub(p0)
		if c.Weights != int64(n1+n2) || c.WeightReuses != int64(3*(n1+n2)) {
			t.Errorf("%s: weights cast %d, read from the cache %d; want %d and %d", what, c.Weights, c.WeightReuses, n1+n2, 3*(n1+n2))
		}
		if p.Weights != 0 || p.WeightReuses != 0 || p.Operands-c.Operands != int64(4*(n1+n2)) {
			t.Errorf("%s: without the cache %+v, with %+v: want %d more operand values cast, none in a cache", what, p, c, 4*(n1+n2))
		}
		t.Logf("%s: %d values cast (%d bytes) with the cache, %d without", what, c.Values(), c.Bytes(), p.Values())
	}
	check("first step")

	// an update: new parameters; the cache must be told
	params2 := devtest.Vals(60, len(params), 1)
	devtest.Put(t, dev, P, params2)
	cached.WeightsChanged()
	check("after WeightsChanged")

	// stale: a write not announced is not seen (the cache serves the
	// products), which is why every writer must announce it
	devtest.Put(t, dev, P, params)
	y, _, _ := linearStep(t, cached, x, w1, dy1, rows, in, mid)
	ys, _, _ := linearStep(t, plain, x, w1, dy1, rows, in, mid)
	devtest.Put(t, dev, P, params2)
	yn, _, _ := linearStep(t, plain, x, w1, dy1, rows, in, mid)
	sameBits(t, "y from the cache after an unannounced write", y, yn)
	if sameBitsQuiet(y, ys) {
		t.Error("the products read the new parameters with no WeightsChanged: the cache is not used")
	}
	cached.WeightsChanged()
}

func sameBitsQuiet(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// The cache's edges: an operand only partly inside the registered values
// is cast for its product; a product whose output C lies in them drops
// their copies (the next read casts again and sees what it wrote); a
// span covering a cached weight and an uncached one casts only the
// latter; Weights(0, 0) unregisters.
func TestWeightCacheEdges(t *testing.T) {
	t.Setenv(gemm.EnvBF16Cast, "kernel")
	e := engine(t, gemm.Config{Precision: gemm.BF16})
	if !e.CUBLAS() {
		t.Skip(e.Backend())
	}
	const r, k, c = 4, 6, 5
	vals := devtest.Vals(70, 3*k*c, 1)
	P := devtest.Upload(t, dev, vals)
	x := devtest.Upload(t, dev, devtest.Vals(71, r*k, 1))
	y := devtest.Alloc(t, dev, r*2*c, 4)
	e.Weights(P, 2*k*c) // the third matrix is outside
	mm := func(w uintptr, n int) gemm.CastStats {
		t.Helper()
		before := e.CastStats()
		if err := e.MatMul(false, false, r, n, k, 1, x, w, 0, y); err != nil {
			t.Fatal(err)
		}
		return e.CastStats().Sub(before)
	}
	if s := mm(P+uintptr(8*k*c), c); s.Weights != 0 || s.Operands != int64(r*k+k*c) {
		t.Errorf("a weight outside the registered values: %+v, want all %d cast as operands", s, r*k+k*c)
	}
	// [k, 2c] from the start of the second matrix reaches past the end
	// of the registered values: not cached
	if s := mm(P+uintptr(4*k*c), 2*c); s.Weights != 0 {
		t.Errorf("a weight partly outside: %+v, want no cache", s)
	}
	if s := mm(P, c); s.Weights != int64(k*c) {
		t.Errorf("first matrix: %+v, want %d weights cast", s, k*c)
	}
	// both registered matrices read as one [2k, c]
	x2 := devtest.Upload(t, dev, devtest.Vals(72, r*2*k, 1))
	before := e.CastStats()
	if err := e.MatMul(false, false, r, c, 2*k, 1, x2, P, 0, y); err != nil {
		t.Fatal(err)
	}
	if s := e.CastStats().Sub(before); s.Weights != int64(k*c) || s.WeightReuses != int64(k*c) {
		t.Errorf("a span over a cached and an uncached matrix: %+v, want %d cast and %d reused", s, k*c, k*c)
	}
	// a product writing the second registered matrix: its copy is dropped
	if err := e.MatMul(false, false, k, c, r, 1, devtest.Upload(t, dev, devtest.Vals(73, k*r, 1)), devtest.Upload(t, dev, devtest.Vals(74, r*c, 1)), 0, P+uintptr(4*k*c)); err != nil {
		t.Fatal(err)
	}
	if s := mm(P+uintptr(4*k*c), c); s.Weights != int64(k*c) {
		t.Errorf("after a product wrote a registered matrix: %+v, want it cast again", s)
	}
	if s := mm(P, c); s.Weights != 0 || s.WeightReuses != int64(k*c) {
		t.Errorf("the matrix not written: %+v, want it from the cache", s)
	}
	e.Weights(0, 0)
	if s := mm(P, c); s.Weights != 0 || s.Operands != int64(r*k+k*c) {
		t.Errorf("unregistered: %+v", s)
	}
}

// A registered weight read as a block of a wider matrix (ldb larger than
// the columns the product reads: a fused layer's weight, one part of it)
// is served from the cache with every row it reads cast: the same bits as
// an engine without the cache.
func TestWeightCacheBlock(t *testing.T) {
	t.Setenv(gemm.EnvBF16Cast, "kernel")
	cached := engine(t, gemm.Config{Precision: gemm.BF16})
	plain := engine(t, gemm.Config{Precision: gemm.BF16, NoWeightCache: true})
	if !cached.CUBLAS() {
		t.Skip(cached.Backend())
	}
	const r, k, n, ldw = 3, 8, 4, 12 // W is [k, ldw]; the product reads its first n columns
	P := devtest.Upload(t, dev, devtest.Vals(80, k*ldw, 1))
	x := devtest.Upload(t, dev, devtest.Vals(81, r*k, 1))
	cached.Weights(P, k*ldw)
	run := func(e *gemm.Engine) []float32 {
		y := devtest.Alloc(t, dev, r*n, 4)
		if err := e.MatMulBatched(false, false, r, n, k, 1, x, k, 0, P, ldw, 0, 0, y, n, 0, 1); err != nil {
			t.Fatal(err)
		}
		if err := e.Stream().Synchronize(); err != nil {
			t.Fatal(err)
		}
		return devtest.Floats(t, dev, y, r*n)
	}
	sameBits(t, "y = x W[:, :n] from the cache", run(cached), run(plain))
	if s := cached.CastStats(); s.Weights == 0 {
		t.Errorf("the block was not served from the cache: %+v", s)
	}
}

// A bad $GDIST_AUTOCAST_CACHE is refused by New, naming the variable and
// the values it takes, rather than read as "on"; 0 and 1 are taken.
func TestAutocastCacheEnv(t *testing.T) {
	cudafake.RequireCUDA(t)
	for _, v := range []string{"off", "false", "no"} {
		t.Setenv(gemm.EnvAutocastCache, v)
		e, err := gemm.New(dev, devtest.Stream(t, dev), gemm.Config{Precision: gemm.BF16})
		if err == nil {
			e.Close()
			t.Fatalf("%s=%s: New made an engine", gemm.EnvAutocastCache, v)
		}
		if !strings.Contains(err.Error(), gemm.EnvAutocastCache) || !strings.Contains(err.Error(), v) {
			t.Errorf("%s=%s: %v: want the variable and its value named", gemm.EnvAutocastCache, v, err)
		}
	}
	for _, v := range []string{"0", "1", ""} {
		t.Setenv(gemm.EnvAutocastCache, v)
		engine(t, gemm.Config{Precision: gemm.BF16})
	}
}
