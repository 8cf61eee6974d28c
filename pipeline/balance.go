package pipeline

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/gdist/gdist/comm"
)

// How Balance weighs a stage.
const (
	// ByParams balances the stages' parameter counts.
	ByParams = "params"
	// ByTime balances the stages' measured compute time per micro-batch
	// (ProfileLayers, StageCost).
	ByTime = "time"
)

// Balance splits m's layers into k non-empty contiguous stages and returns
// the k+1 boundaries (0 = b[0] < b[1] < ... < b[k] = m.NumLayers()). It
// minimises the largest stage's parameter count; among splits that tie, it
// takes the one with the smallest sum of squared stage counts (the most
// even), then the first found.
func Balance(m Layers, k int) ([]int, error) {
	n := m.NumLayers()
	pre := make([]float64, n+1) // prefix sums of parameter counts
	for i := 0; i < n; i++ {
		_, _, s := m.LayerParamRange(i)
		pre[i+1] = pre[i] + float64(s)
	}
	return balance(n, k, func(from, to int) float64 { return pre[to] - pre[from] })
}

// LayerCost is one layer's measured compute time for one micro-batch.
type LayerCost struct {
	// Forward is the forward pass alone (what a stage that is not the
	// last runs when the activation arrives).
	Forward time.Duration
	// Train is one run of the training graph: forward (recomputed, on
	// stages that are not the last) plus backward.
	Train time.Duration
}

// StageCost is the compute time per micro-batch of a stage running layers
// [from, to) of len(costs) layers: forward plus training graph, or only
// the training graph on the last stage (which fuses forward and backward).
func StageCost(costs []LayerCost, from, to int) time.Duration {
	var t time.Duration
	for i := from; i < to; i++ {
		t += costs[i].Train
		if to < len(costs) {
			t += costs[i].Forward
		}
	}
	return t
}

// BalanceTime is Balance by measured time: it minimises the slowest
// stage's StageCost (the pipeline's steady-state period), then the sum of
// squared stage costs.
func BalanceTime(costs []LayerCost, k int) ([]int, error) {
	return balance(len(costs), k, func(from, to int) float64 {
		return float64(StageCost(costs, from, to))
	})
}

// ProfileLayers measures each layer of m on micro-batches of micro samples
// of random data: its forward graph and its training graph, each compiled
// on its own (the last layer's with the loss), timed as the fastest of reps
// runs after a warm-up run (the least disturbed by other work). Parameter
// gradients are discarded; m is not changed. It stops with ctx's error
// between runs once ctx is done.
func ProfileLayers[S Stage](ctx context.Context, m Model[S], micro, reps int) ([]LayerCost, error) {
	return profileLayers(ctx, erase(m), micro, reps)
}

func profileLayers(ctx context.Context, m model, micro, reps int) ([]LayerCost, error) {
	n := m.NumLayers()
	if reps < 1 {
		reps = 1
	}
	costs := make([]LayerCost, n)
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("pipeline: profiling layer %d: %w", i, err)
		}
		last := i == n-1
		g, err := m.newStage(i, i+1, micro, last)
		if err != nil {
			return nil, err
		}
		g.DropGrads()
		x, y := probe(m, g, i, micro)
		var fwd, trn []time.Duration
		if last {
			for r := 0; r <= reps; r++ {
				t0 := time.Now()
				if _, _, err = g.Step(x, y); err != nil {
					break
				}
				trn = append(trn, time.Since(t0))
			}
		} else {
			gy := make([]float32, g.OutSize())
			fillRandom(gy, 2)
			for r := 0; r <= reps && err == nil; r++ {
				t0 := time.Now()
				if _, err = g.Forward(x); err != nil {
					break
				}
				t1 := time.Now()
				if _, err = g.Backward(x, gy); err != nil {
					break
				}
				fwd = append(fwd, t1.Sub(t0))
				trn = append(trn, time.Since(t1))
			}
		}
		g.Close()
		if err != nil {
			return nil, fmt.Errorf("pipeline: profiling layer %d: %w", i, err)
		}
		// The first run warms up (allocations, caches): drop it. The
		// fastest of the rest is the least disturbed by other work on the
		// machine (the other ranks start up meanwhile).
		costs[i] = LayerCost{Forward: fastest(fwd[min(1, len(fwd)):]), Train: fastest(trn[1:])}
	}
	return costs, nil
}

// probe is the input and labels to profile stage g (layers from.., for
// micro-batches of micro samples) on: the model's own samples (Sampler)
// where the stage starts at the first layer or ends in the loss, uniform
// floats for activations in between.
func probe(m model, g Stage, from, micro int) ([]float32, []int32) {
	var sx []float32
	y := make([]int32, micro)
	if s, ok := m.sampler(); ok {
		sx, y = s.Sample(micro, 1)
	}
	if from == 0 && sx != nil {
		return sx, y
	}
	x := make([]float32, g.InSize())
	fillRandom(x, 1)
	return x, y
}

// fillRandom fills v with values in [-0.5, 0.5) from seed.
func fillRandom(v []float32, seed uint64) {
	for i := range v {
		seed = seed*6364136223846793005 + 1442695040888963407
		v[i] = float32(seed>>40)/(1<<24) - 0.5
	}
}

// fastest is the smallest of d (0 if empty).
func fastest(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return slices.Min(d)
}

// balance splits n layers into k non-empty contiguous stages minimising
// the largest cost(from, to), then the sum of squared costs, then taking
// the first found.
func balance(n, k int, cost func(from, to int) float64) ([]int, error) {
	best, err := topSplits(n, k, 1, cost)
	if err != nil {
		return nil, err
	}
	return best[0], nil
}

// topSplits returns the best (at most) top splits of n layers into k
// stages, best first, by the largest cost(from, to), then the sum of
// squared costs, then the order found.
func topSplits(n, k, top int, cost func(from, to int) float64) ([][]int, error) {
	if k < 1 || k > n {
		return nil, fmt.Errorf("pipeline: cannot split %d layers into %d stages", n, k)
	}
	type cand struct {
		b      []int
		mx, sq float64
	}
	var best []cand
	better := func(a, b cand) bool { return a.mx < b.mx || a.mx == b.mx && a.sq < b.sq }
	cur := make([]int, k+1)
	cur[k] = n
	var rec func(j, from int)
	rec = func(j, from int) {
		if j == k {
			c := cand{}
			for s := 0; s < k; s++ {
				v := cost(cur[s], cur[s+1])
				c.mx = max(c.mx, v)
				c.sq += v * v
			}
			if len(best) == top && !better(c, best[top-1]) {
				return
			}
			c.b = append([]int(nil), cur...)
			i := len(best)
			for i > 0 && better(c, best[i-1]) {
				i--
			}
			best = append(best[:i], append([]cand{c}, best[i:]...)...)
			if len(best) > top {
				best = best[:top]
			}
			return
		}
		// stage j starts at from; choose where it ends (leaving a layer
		// for each later stage).
		for end := from + 1; end <= n-(k-1-j); end++ {
			if j == k-1 && end != n {
				continue
			}
			cur[j+1] = end
			rec(j+1, end)
		}
		cur[k] = n
	}
	cur[0] = 0
	rec(0, 0)
	out := make([][]int, len(best))
	for i, c := range best {
		out[i] = c.b
	}
	return out, nil
}

// MeasureStage times a whole stage of m, layers [from, to), on
// micro-batches of micro samples of random data: the median of reps runs
// (after a warm-up run) of its forward pass plus its training graph (the
// training graph alone on the last stage). Parameter gradients are
// discarded. It stops with ctx's error between runs once ctx is done.
func MeasureStage[S Stage](ctx context.Context, m Model[S], from, to, micro, reps int) (time.Duration, error) {
	d, err := measureStages(ctx, erase(m), [][2]int{{from, to}}, micro, reps)
	if err != nil {
		return 0, err
	}
	return d[0], nil
}

// MeasureStages is MeasureStage for several stages, timed in interleaved
// rounds (each stage once per round) so that a slow spell of the machine
// falls on all of them alike; each gets the median of its rounds. The
// stages are compiled a group at a time, as many as fit in
// measureBudget bytes of graphs and activations by what each added to the
// heap in its warm-up run (a large model's candidate stages, all at once,
// would not fit in memory): interleaving holds within a group.
func MeasureStages[S Stage](ctx context.Context, m Model[S], stages [][2]int, micro, reps int) ([]time.Duration, error) {
	return measureStages(ctx, erase(m), stages, micro, reps)
}

func measureStages(ctx context.Context, m model, stages [][2]int, micro, reps int) ([]time.Duration, error) {
	out := make([]time.Duration, len(stages))
	for next := 0; next < len(stages); {
		group, err := measureGroup(ctx, m, stages[next:], micro, reps)
		if err != nil {
			return nil, err
		}
		next += copy(out[next:], group)
	}
	return out, nil
}

// measureBudget bounds the memory MeasureStages holds at once.
var measureBudget uint64 = 1 << 30

// measureGroup compiles and warms up stages in order until measureBudget
// is reached (at least one), times them in interleaved rounds and returns
// their medians.
func measureGroup(ctx context.Context, m model, stages [][2]int, micro, reps int) ([]time.Duration, error) {
	type timed struct {
		g       Stage
		last    bool
		x, gy   []float32
		y       []int32
		samples []time.Duration
	}
	var ts []*timed
	defer func() {
		for _, t := range ts {
			t.g.Close()
		}
	}()
	run := func(i int, t *timed) error {
		var err error
		if t.last {
			_, _, err = t.g.Step(t.x, t.y)
		} else if _, err = t.g.Forward(t.x); err == nil {
			_, err = t.g.Backward(t.x, t.gy)
		}
		if err != nil {
			return fmt.Errorf("pipeline: timing stage [%d, %d): %w", stages[i][0], stages[i][1], err)
		}
		return nil
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	start := ms.HeapAlloc
	for i, st := range stages {
		if i > 0 {
			runtime.ReadMemStats(&ms)
			// Another stage like the i so far would pass the budget.
			if grown := ms.HeapAlloc - min(start, ms.HeapAlloc); grown*uint64(i+1) > measureBudget*uint64(i) {
				break
			}
		}
		last := st[1] == m.NumLayers()
		g, err := m.newStage(st[0], st[1], micro, last)
		if err != nil {
			return nil, err
		}
		g.DropGrads()
		t := &timed{g: g, last: last, gy: make([]float32, g.OutSize())}
		t.x, t.y = probe(m, g, st[0], micro)
		fillRandom(t.gy, 2)
		ts = append(ts, t)
		if err := run(i, t); err != nil { // the warm-up run
			return nil, err
		}
	}
	for r := 0; r < max(reps, 1); r++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("pipeline: timing stages: %w", err)
		}
		for i, t := range ts {
			t0 := time.Now()
			if err := run(i, t); err != nil {
				return nil, err
			}
			t.samples = append(t.samples, time.Since(t0))
		}
	}
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		slices.Sort(t.samples)
		out[i] = t.samples[len(t.samples)/2]
	}
	return out, nil
}

// candidateStages returns the top splits of len(costs) layers into k stages
// by StageCost, the distinct stages among them, and each split's stages as
// indices into that list.
func candidateStages(costs []LayerCost, k, top int) (cands [][]int, stages [][2]int, idx [][]int, err error) {
	cands, err = topSplits(len(costs), k, top, func(from, to int) float64 {
		return float64(StageCost(costs, from, to))
	})
	if err != nil {
		return nil, nil, nil, err
	}
	index := map[[2]int]int{}
	for _, b := range cands {
		var ix []int
		for s := 0; s < k; s++ {
			key := [2]int{b[s], b[s+1]}
			j, ok := index[key]
			if !ok {
				j = len(stages)
				index[key] = j
				stages = append(stages, key)
			}
			ix = append(ix, j)
		}
		idx = append(idx, ix)
	}
	return cands, stages, idx, nil
}

// slowest picks the candidate whose slowest stage is fastest (the first
// among equals).
func slowest(cands [][]int, idx [][]int, times []int64) []int {
	var best []int
	var bestMax int64
	for c, b := range cands {
		var mx int64
		for _, j := range idx[c] {
			mx = max(mx, times[j])
		}
		if best == nil || mx < bestMax {
			best, bestMax = b, mx
		}
	}
	return best
}

// BalanceMeasured refines BalanceTime: it takes the top splits that the
// per-layer costs rank best and times each of their distinct stages as a
// whole (MeasureStages), which also catches what per-layer sums miss (the
// first stage computes no input gradient, a stage's weights outgrow the
// cache that held one layer's, graph overheads), and returns the split
// whose slowest stage is fastest.
func BalanceMeasured[S Stage](ctx context.Context, m Model[S], costs []LayerCost, k, top, micro, reps int) ([]int, error) {
	cands, stages, idx, err := candidateStages(costs, k, top)
	if err != nil {
		return nil, err
	}
	if len(cands) == 1 {
		return cands[0], nil
	}
	d, err := measureStages(ctx, erase(m), stages, micro, reps)
	if err != nil {
		return nil, err
	}
	times := make([]int64, len(d))
	for i := range d {
		times[i] = int64(d[i])
	}
	return slowest(cands, idx, times), nil
}

// checkBoundaries validates explicit stage boundaries for k stages of m.
func checkBoundaries(m Layers, b []int, k int) error {
	n := m.NumLayers()
	if len(b) != k+1 {
		return fmt.Errorf("pipeline: %d boundaries for %d stages, want %d", len(b), k, k+1)
	}
	if b[0] != 0 || b[k] != n {
		return fmt.Errorf("pipeline: boundaries %v must run from 0 to %d (the layer count)", b, n)
	}
	for i := 0; i < k; i++ {
		if b[i+1] <= b[i] {
			return fmt.Errorf("pipeline: boundaries %v not strictly increasing", b)
		}
	}
	return nil
}

// splitByTime is Split's ByTime: see there.
func splitByTime(ctx context.Context, c comm.Comm, m model, k, micro int) ([]int, error) {
	const reps, top = 7, 6
	runtime.GC()
	if err := comm.Run(ctx)(c.Barrier(ctx)); err != nil {
		return nil, fmt.Errorf("pipeline: before profiling: %w", err)
	}
	costs, err := profileLayers(ctx, m, micro, reps)
	if err := comm.Agree(ctx, c, err); err != nil {
		return nil, fmt.Errorf("pipeline: profiling: %w", err)
	}
	n := len(costs)
	v := make([]int64, 2*n)
	for i, lc := range costs {
		v[2*i], v[2*i+1] = int64(lc.Forward), int64(lc.Train)
	}
	if err := comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(v), comm.Min)); err != nil {
		return nil, fmt.Errorf("pipeline: combining layer timings: %w", err)
	}
	for i := range costs {
		costs[i] = LayerCost{Forward: time.Duration(v[2*i]), Train: time.Duration(v[2*i+1])}
	}
	cands, stages, idx, err := candidateStages(costs, k, top)
	if err != nil {
		return nil, err
	}
	if len(cands) == 1 {
		return cands[0], nil
	}
	d, merr := measureStages(ctx, m, stages, micro, reps)
	if err := comm.Agree(ctx, c, merr); err != nil {
		return nil, fmt.Errorf("pipeline: profiling: %w", err)
	}
	// The mean over ranks of each stage's median.
	times := make([]int64, len(d))
	for i := range d {
		times[i] = int64(d[i])
	}
	if err := comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(times), comm.Sum)); err != nil {
		return nil, fmt.Errorf("pipeline: combining stage timings: %w", err)
	}
	return slowest(cands, idx, times), nil
}
