package devmodel_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

// shardRun trains the zoo's mlp for steps steps of AdamW with clipping
// twice on device 0: whole (one placed model) and as two ranks of ZeRO
// would, two placed models each updating its half of the flat buffers
// (Config.Shard) after clipping it by the global norm (ClipShard, the
// two halves' norms combined as an all-reduce would), each then taking
// the other's half of the parameters (the all-gather). It returns the
// whole model's parameters, the halves' put together, and the largest
// relative difference of the gradient norms.
func shardRun(tb testing.TB, steps int) (whole, halves []float32, normDiff float64) {
	opt := optim.Config{Name: "adamw", LR: 1e-3, WeightDecay: 0.01}
	const clip = 0.5
	place := func(sh devmodel.Range) *devmodel.Model {
		m, err := models.New("mlp", 1)
		if err != nil {
			tb.Fatal(err)
		}
		d, err := devmodel.Place(m, devmodel.Config{Device: 0, Batch: 16, Optim: opt, ClipGrad: clip, Shard: sh})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { d.Close() })
		return d
	}
	w := place(devmodel.Range{})
	n := w.N
	s := (n + 1) / 2
	a, b := place(devmodel.Range{Lo: 0, Hi: s}), place(devmodel.Range{Lo: s, Hi: n})
	if got := a.Shard(); got != (devmodel.Range{Lo: 0, Hi: s}) || w.Shard() != (devmodel.Range{Lo: 0, Hi: n}) {
		tb.Fatalf("shards: %v, %v", got, w.Shard())
	}
	for i := 0; i < steps; i++ {
		x, y := devtest.Images(i%4, 16, 784)
		for _, d := range []*devmodel.Model{w, a, b} {
			if _, err := d.ForwardBackward(x, y); err != nil {
				tb.Fatal(err)
			}
		}
		if err := w.Update(); err != nil {
			tb.Fatal(err)
		}
		wn, err := w.GradNorm()
		if err != nil {
			tb.Fatal(err)
		}
		if i == 0 && !(wn > clip) {
			tb.Fatalf("the first step's gradient norm %v does not exceed %v: nothing checks ClipShard's scaling", wn, clip)
		}
		// The halves' norms: b's first (an infinite bound clips nothing),
		// then each clips with the other's.
		nb, err := b.ClipShard(math.Inf(1), func(l float64) (float64, error) { return l, nil })
		if err != nil {
			tb.Fatal(err)
		}
		var na float64
		for _, c := range []struct {
			d     *devmodel.Model
			other *float64
			mine  *float64
		}{{a, &nb, &na}, {b, &na, &nb}} {
			norm, err := c.d.ClipShard(clip, func(l float64) (float64, error) {
				*c.mine = l
				return math.Sqrt(l*l + *c.other**c.other), nil
			})
			if err != nil {
				tb.Fatal(err)
			}
			normDiff = max(normDiff, math.Abs(norm-wn)/wn)
			if err := c.d.Update(); err != nil {
				tb.Fatal(err)
			}
		}
		// The all-gather.
		devtest.Put(tb, 0, a.Params+uintptr(4*s), devtest.Floats(tb, 0, b.Params+uintptr(4*s), n-s))
		devtest.Put(tb, 0, b.Params, devtest.Floats(tb, 0, a.Params, s))
		for _, d := range []*devmodel.Model{w, a, b} {
			if err := d.ZeroGrad(); err != nil {
				tb.Fatal(err)
			}
		}
	}
	whole = devtest.Floats(tb, 0, w.Params, n)
	halves = append(devtest.Floats(tb, 0, a.Params, s), devtest.Floats(tb, 0, b.Params+uintptr(4*s), n-s)...)
	// The optimizer state of each half is the whole's over its range.
	for _, name := range []string{"exp_avg", "exp_avg_sq"} {
		ws := devtest.Floats(tb, 0, w.StateBuffers()[name], n)
		hs := append(devtest.Floats(tb, 0, a.StateBuffers()[name], s), devtest.Floats(tb, 0, b.StateBuffers()[name], n-s)...)
		for i := range ws {
			if d := math.Abs(float64(ws[i] - hs[i])); d > 1e-6*max(1, math.Abs(float64(ws[i]))) {
				tb.Fatalf("%s[%d]: %v (halves) vs %v (whole)", name, i, hs[i], ws[i])
			}
		}
	}
	return whole, halves, normDiff
}

// TestShardsMatchWhole: two shards of the mlp (Config.Shard), clipped by
// the global norm (ClipShard) and updated with AdamW as two ZeRO ranks
// would, hold after 4 steps the parameters and optimizer state of the
// whole model trained alike, within 1e-6, and report its gradient norm
// within 1e-6 (relative).
func TestShardsMatchWhole(t *testing.T) {
	whole, halves, normDiff := shardRun(t, 4)
	var worst float64
	for i := range whole {
		worst = max(worst, math.Abs(float64(whole[i]-halves[i]))/max(1, math.Abs(float64(whole[i]))))
	}
	if worst > 1e-6 || normDiff > 1e-6 {
		t.Fatalf("parameters within %v, gradient norms within %v (relative); want 1e-6", worst, normDiff)
	}
	t.Logf("parameters within %v, gradient norms within %v", worst, normDiff)
}

// TestShardRefused: a shard that is not a range of the flat buffers is
// refused when the model is placed, naming it.
func TestShardRefused(t *testing.T) {
	m, err := models.New("mlp", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range []devmodel.Range{{Lo: -1, Hi: 4}, {Lo: 5, Hi: 5}, {Lo: 0, Hi: len(m.Flat.Value) + 1}} {
		_, err := devmodel.Place(m, devmodel.Config{Device: 0, Batch: 4, Optim: optim.Config{Name: "sgd", LR: 0.1}, Shard: sh})
		if want := fmt.Sprintf("shard [%d, %d) is not a range", sh.Lo, sh.Hi); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("shard %v: %v, want an error saying %q", sh, err, want)
		}
	}
}

// panicTB is a testing.TB for an Example: Fatal panics, Cleanup runs at
// done.
type panicTB struct {
	testing.TB
	cleanups []func()
}

func (p *panicTB) Helper()                   {}
func (p *panicTB) Fatal(args ...any)         { panic(fmt.Sprint(args...)) }
func (p *panicTB) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (p *panicTB) Cleanup(f func())          { p.cleanups = append(p.cleanups, f) }
func (p *panicTB) done() {
	for i := len(p.cleanups) - 1; i >= 0; i-- {
		p.cleanups[i]()
	}
}

// Two halves of a model's flat buffers updated apart (Config.Shard, as
// ZeRO's ranks do, each clipping its half by the whole gradient's norm
// with ClipShard) hold what the whole model updated at once holds.
func ExampleModel_ClipShard() {
	if cudafake.Mode() == "none" {
		fmt.Println("halves == whole: true") // no CUDA here: what it prints with one
		return
	}
	tb := &panicTB{}
	defer tb.done()
	whole, halves, _ := shardRun(tb, 2)
	same := true
	for i := range whole {
		same = same && math.Abs(float64(whole[i]-halves[i])) <= 1e-6
	}
	fmt.Println("halves == whole:", same)
	// Output: halves == whole: true
}
