package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/gdist/gdist/pipeline"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/data"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

// TestOps checks every schedule: each micro-batch's forward and backward
// once, in order, within the memory bound, and free of deadlock when the
// stages run together (a simulation where an op runs once the message it
// needs has been sent).
func TestOps(t *testing.T) {
	for _, sched := range []string{pipeline.GPipe, pipeline.OneFOneB} {
		for k := 1; k <= 5; k++ {
			for m := 1; m <= 8; m++ {
				all := make([][]pipeline.Op, k)
				for s := 0; s < k; s++ {
					ops, err := pipeline.Ops(sched, k, s, m)
					if err != nil {
						t.Fatal(err)
					}
					all[s] = ops
					last := s == k-1
					fw, bw := map[int]int{}, map[int]int{}
					for j, o := range ops {
						if o.Backward {
							bw[o.Micro] = j
						} else {
							fw[o.Micro] = j
						}
					}
					for i := 0; i < m; i++ {
						if _, ok := fw[i]; !ok {
							t.Fatalf("%s k=%d s=%d m=%d: no F%d in %v", sched, k, s, m, i, ops)
						}
						if b, ok := bw[i]; ok == last || (ok && b < fw[i]) {
							t.Fatalf("%s k=%d s=%d m=%d: bad B%d in %v", sched, k, s, m, i, ops)
						}
					}
					want := 1
					switch {
					case last:
					case sched == pipeline.GPipe:
						want = m
					default:
						want = min(k-s, m)
					}
					if got := pipeline.MaxHeld(ops, last); got != want {
						t.Errorf("%s k=%d s=%d m=%d: holds %d, want %d (%v)", sched, k, s, m, got, want, ops)
					}
				}
				simulate(t, sched, all, m)
			}
		}
	}
}

func simulate(t *testing.T, sched string, all [][]pipeline.Op, m int) {
	k := len(all)
	fdone := make([][]bool, k) // F (or fused) of micro i done on stage s
	bdone := make([][]bool, k) // gradient for micro i sent by stage s
	for s := range fdone {
		fdone[s], bdone[s] = make([]bool, m), make([]bool, m)
	}
	pc := make([]int, k)
	for progress := true; progress; {
		progress = false
		for s := 0; s < k; s++ {
			for pc[s] < len(all[s]) {
				o := all[s][pc[s]]
				ready := true
				if !o.Backward && s > 0 && !fdone[s-1][o.Micro] {
					ready = false
				}
				if o.Backward && !bdone[s+1][o.Micro] {
					ready = false
				}
				if !ready {
					break
				}
				if o.Backward || s == k-1 {
					bdone[s][o.Micro] = true
				}
				if !o.Backward {
					fdone[s][o.Micro] = true
				}
				pc[s]++
				progress = true
			}
		}
	}
	for s := range pc {
		if pc[s] != len(all[s]) {
			t.Fatalf("%s k=%d m=%d: stage %d stuck at op %d of %v", sched, k, m, s, pc[s], all[s])
		}
	}
}

func TestBalance(t *testing.T) {
	m, _ := models.New("mlp", 1)
	for k := 1; k <= m.NumLayers(); k++ {
		b, err := pipeline.Balance(m, k)
		if err != nil {
			t.Fatal(err)
		}
		if err := pipeline.CheckBoundaries(m, b, k); err != nil {
			t.Fatal(err)
		}
		var mx int
		for s := 0; s < k; s++ {
			_, n := m.StageRange(b[s], b[s+1])
			mx = max(mx, n)
		}
		if k >= 2 && mx != 784*256+256 {
			t.Errorf("k=%d: %v has a stage of %d parameters", k, b, mx)
		}
	}
	b, _ := pipeline.Balance(m, 3)
	if fmt.Sprint(b) != "[0 1 3 5]" {
		t.Errorf("Balance(mlp, 3) = %v", b)
	}
	if _, err := pipeline.Balance(m, 6); err == nil {
		t.Error("6 stages of 5 layers accepted")
	}
}

const testBatch = 10

func batches(steps int) *data.Dataset { return data.Synthetic(steps*testBatch, 11) }

func sgd(n int) optim.Optimizer {
	o, err := optim.New(optim.Config{Name: "sgd", LR: 0.05, Momentum: 0.9}, n)
	if err != nil {
		panic(err)
	}
	return o
}

// reference trains the unsplit model for steps batches.
func reference(t *testing.T, name string, steps int) (*models.Model, []float64) {
	m, err := models.New(name, 3)
	if err != nil {
		t.Fatal(err)
	}
	gr, err := m.NewGraph(testBatch, true)
	if err != nil {
		t.Fatal(err)
	}
	defer gr.Close()
	d := batches(steps)
	opt := sgd(len(m.Flat.Value))
	var losses []float64
	in := m.InputSize()
	for s := 0; s < steps; s++ {
		l, err := gr.Step(context.Background(), d.Images[s*testBatch*in:(s+1)*testBatch*in], d.Labels[s*testBatch:(s+1)*testBatch])
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, float64(l))
		opt.Step(m.Flat.Value, m.Flat.Grad)
		m.ZeroGrad()
	}
	return m, losses
}

type result struct {
	m      *models.Model
	p      *pipeline.Pipeline
	losses []float64
}

func runPipeline(t *testing.T, name string, k int, cfg pipeline.Config, steps int) []result {
	cs, err := inproc.New(k, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := batches(steps)
	res := make([]result, k)
	err = commtest.RunRanks(context.Background(), cs, time.Minute, func(ctx context.Context, c comm.Comm) error {
		defer c.Close()
		m, err := models.New(name, 3)
		if err != nil {
			return err
		}
		p, err := pipeline.New(context.Background(), c, m, cfg, testBatch)
		if err != nil {
			return err
		}
		defer p.Close()
		_, n := p.Range()
		opt := sgd(n)
		r := result{m: m, p: p}
		in := m.InputSize()
		for s := 0; s < steps; s++ {
			l, err := p.Step(ctx, d.Images[s*testBatch*in:(s+1)*testBatch*in], d.Labels[s*testBatch:(s+1)*testBatch])
			if err != nil {
				return err
			}
			r.losses = append(r.losses, l)
			p.Update(opt)
		}
		res[c.Rank()] = r
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func relErr(a, b []float32) float64 {
	var d, n float64
	for i := range a {
		e := float64(a[i]) - float64(b[i])
		d += e * e
		n += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(d) / math.Max(math.Sqrt(n), 1e-30)
}

// TestEqualsUnsplit: pipeline training matches the unsplit model, for both
// schedules, 2 and 3 stages and micro-batch counts that K does not divide
// (and batch sizes that the micro-batch count does not divide).
func TestEqualsUnsplit(t *testing.T) {
	const steps = 3
	type tc struct {
		model string
		k, m  int
		bnd   []int
	}
	cases := []tc{
		{"mlp", 2, 4, nil}, {"mlp", 2, 5, nil}, {"mlp", 3, 4, nil}, {"mlp", 3, 5, nil},
		{"mlp", 3, 5, []int{0, 1, 2, 5}}, // a parameter-less middle stage
		{"cnn", 3, 5, []int{0, 4, 7, 10}},
	}
	refs := map[string]*models.Model{}
	refLoss := map[string][]float64{}
	for _, c := range cases {
		if refs[c.model] == nil {
			refs[c.model], refLoss[c.model] = reference(t, c.model, steps)
		}
	}
	for _, c := range cases {
		for _, sched := range []string{pipeline.GPipe, pipeline.OneFOneB} {
			t.Run(fmt.Sprintf("%s/k%d/m%d/%v/%s", c.model, c.k, c.m, c.bnd, sched), func(t *testing.T) {
				res := runPipeline(t, c.model, c.k, pipeline.Config{Boundaries: c.bnd, Micro: c.m, Schedule: sched}, steps)
				ref := refs[c.model]
				for s, r := range res {
					for j, l := range r.losses {
						if w := refLoss[c.model][j]; math.Abs(l-w) > 1e-5*math.Abs(w) {
							t.Errorf("stage %d step %d: loss %v, want %v", s, j, l, w)
						}
					}
					from, to := r.p.Layers()
					first, _, _ := r.m.LayerParamRange(from)
					end, _, _ := r.m.LayerParamRange(to)
					if to == r.m.NumLayers() {
						end = len(r.m.Params)
					}
					for _, p := range r.m.Params[first:end] {
						got := r.m.Flat.Value[p.Offset : p.Offset+p.Size]
						want := ref.Flat.Value[p.Offset : p.Offset+p.Size]
						if e := relErr(got, want); e > 1e-5 {
							t.Errorf("stage %d: %s differs from the unsplit model by %g", s, p.Name, e)
						}
					}
					st := r.p.Stats()
					want := 1
					switch {
					case s == c.k-1:
					case sched == pipeline.GPipe:
						want = c.m
					default:
						want = min(c.k-s, c.m)
					}
					if st.PeakHeld != want {
						t.Errorf("stage %d: held %d micro-batch inputs, want %d", s, st.PeakHeld, want)
					}
					if st.Steps != steps || st.Busy <= 0 {
						t.Errorf("stage %d: stats %+v", s, st)
					}
					var sum time.Duration
					for _, ts := range st.OpTimes {
						if len(ts) != len(r.p.Ops()) {
							t.Errorf("stage %d: %d op times for %d ops", s, len(ts), len(r.p.Ops()))
						}
						for _, d := range ts {
							sum += d
						}
					}
					if len(st.OpTimes) != steps || sum != st.Busy {
						t.Errorf("stage %d: op times of %d steps summing to %v, want %d steps summing to busy %v", s, len(st.OpTimes), sum, steps, st.Busy)
					}
				}
			})
		}
	}
}

// dying closes its Comm (as a crashed rank would) at its n-th Send.
type dying struct {
	comm.Comm
	mu    sync.Mutex
	sends int
	n     int
}

var errDied = errors.New("test: rank died")

func (d *dying) Send(ctx context.Context, buf comm.Buffer, peer, tag int) (comm.Work, error) {
	d.mu.Lock()
	d.sends++
	die := d.sends == d.n
	d.mu.Unlock()
	if die {
		d.Comm.Close()
		return nil, errDied
	}
	return d.Comm.Send(ctx, buf, peer, tag)
}

// TestStageDies: a stage that dies mid-step makes every other stage's Step
// fail with an error, well before the deadline.
func TestStageDies(t *testing.T) {
	for _, victim := range []int{0, 1, 2} {
		t.Run(fmt.Sprint(victim), func(t *testing.T) {
			const k = 3
			cs, err := inproc.New(k, comm.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			d := batches(2)
			errs := make([]error, k)
			var wg sync.WaitGroup
			t0 := time.Now()
			for r := 0; r < k; r++ {
				c := cs[r]
				if r == victim {
					c = &dying{Comm: cs[r], n: 2}
				}
				wg.Add(1)
				go func(r int, c comm.Comm) {
					defer wg.Done()
					defer c.Close()
					m, _ := models.New("mlp", 3)
					p, err := pipeline.New(context.Background(), c, m, pipeline.Config{Micro: 4}, testBatch)
					if err != nil {
						errs[r] = err
						return
					}
					defer p.Close()
					for s := 0; s < 2 && err == nil; s++ {
						_, err = p.Step(ctx, d.Images[s*testBatch*784:(s+1)*testBatch*784], d.Labels[s*testBatch:(s+1)*testBatch])
					}
					errs[r] = err
				}(r, c)
			}
			wg.Wait()
			if el := time.Since(t0); el > 10*time.Second {
				t.Errorf("took %v", el)
			}
			for r, err := range errs {
				if err == nil {
					t.Errorf("rank %d: no error", r)
				} else if errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("rank %d: hit the deadline: %v", r, err)
				}
				t.Logf("rank %d: %v", r, err)
			}
		})
	}
}

// TestBalanceTime: stages balanced by measured time, with the last stage
// charged no forward pass of its own (it fuses forward and backward).
func TestBalanceTime(t *testing.T) {
	ms := time.Millisecond
	// Seven equal layers (forward 1, training graph 3): a non-last stage
	// costs 4 per layer, the last 3, so 3 layers then 4 is even (12, 12),
	// where equal layer counts (4, 3) would give (16, 9).
	costs := make([]pipeline.LayerCost, 7)
	for i := range costs {
		costs[i] = pipeline.LayerCost{Forward: ms, Train: 3 * ms}
	}
	b, err := pipeline.BalanceTime(costs, 2)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(b) != "[0 3 7]" {
		t.Errorf("BalanceTime = %v, want [0 3 7]", b)
	}
	if c0, c1 := pipeline.StageCost(costs, 0, 3), pipeline.StageCost(costs, 3, 7); c0 != 12*ms || c1 != 12*ms {
		t.Errorf("stage costs %v, %v, want 12ms each", c0, c1)
	}
	// One slow layer gets a stage of its own.
	costs[5].Train = 40 * ms
	b, _ = pipeline.BalanceTime(costs, 3)
	if fmt.Sprint(b) != "[0 5 6 7]" {
		t.Errorf("BalanceTime with a slow layer 5 = %v", b)
	}
	if _, err := pipeline.BalanceTime(costs, 8); err == nil {
		t.Error("8 stages of 7 layers accepted")
	}
	// topSplits ranks every split: the best first, worse ones after.
	cost := func(from, to int) float64 { return float64(pipeline.StageCost(costs, from, to)) }
	top, err := pipeline.TopSplits(7, 3, 100, cost)
	if err != nil {
		t.Fatal(err)
	}
	if len(top) != 15 || fmt.Sprint(top[0]) != fmt.Sprint(b) { // C(6, 2) splits
		t.Errorf("topSplits: %d splits, first %v, want 15 and %v", len(top), top[0], b)
	}
	worst := func(b []int) float64 {
		var mx float64
		for s := 0; s+1 < len(b); s++ {
			mx = max(mx, cost(b[s], b[s+1]))
		}
		return mx
	}
	for i := 1; i < len(top); i++ {
		if worst(top[i]) < worst(top[i-1]) {
			t.Errorf("topSplits out of order at %d: %v after %v", i, top[i], top[i-1])
		}
	}
}

// TestBalanceMeasured: refining by whole-stage timings returns one of the
// candidate splits, a valid one.
func TestBalanceMeasured(t *testing.T) {
	m, _ := models.New("mlp-deep", 1)
	costs, err := pipeline.ProfileLayers(context.Background(), m, 8, 2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := pipeline.BalanceMeasured(context.Background(), m, costs, 2, 3, 8, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := pipeline.CheckBoundaries(m, b, 2); err != nil {
		t.Fatal(err)
	}
	top, _ := pipeline.TopSplits(len(costs), 2, 3, func(from, to int) float64 { return float64(pipeline.StageCost(costs, from, to)) })
	found := false
	for _, c := range top {
		found = found || fmt.Sprint(c) == fmt.Sprint(b)
	}
	if !found {
		t.Errorf("BalanceMeasured chose %v, not one of the candidates %v", b, top)
	}
	if d, err := pipeline.MeasureStage(context.Background(), m, 0, 5, 8, 1); err != nil || d <= 0 {
		t.Errorf("MeasureStage: %v, %v", d, err)
	}
}

// TestSplitByTime: the ranks, profiling together, agree on a valid split;
// a rank whose profiling fails fails them all, named.
func TestSplitByTime(t *testing.T) {
	m, _ := models.New("mlp-deep", 1)
	costs, err := pipeline.ProfileLayers(context.Background(), m, 8, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range costs {
		_, _, params := m.LayerParamRange(i)
		if params > 0 && (c.Forward <= 0 && i < len(costs)-1 || c.Train <= 0) {
			t.Errorf("layer %d: cost %+v", i, c)
		}
	}
	got := make([][]int, 2)
	cs, err := inproc.New(2, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = commtest.RunRanks(context.Background(), cs, time.Minute, func(ctx context.Context, c comm.Comm) error {
		mm, _ := models.New("mlp-deep", 1)
		b, err := pipeline.Split(ctx, c, mm, 2, pipeline.ByTime, 8)
		got[c.Rank()] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got[0]) != fmt.Sprint(got[1]) {
		t.Errorf("ranks disagree: %v vs %v", got[0], got[1])
	}
	if err := pipeline.CheckBoundaries(m, got[0], 2); err != nil {
		t.Error(err)
	}
	if _, err := pipeline.Split(context.Background(), nil, m, 2, "flops", 8); err == nil {
		t.Error("unknown balance accepted")
	}
	cs, err = inproc.New(2, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, 2)
	commtest.RunRanks(context.Background(), cs, time.Minute, func(ctx context.Context, c comm.Comm) error {
		mm, _ := models.New("mlp-deep", 1)
		_, errs[c.Rank()] = pipeline.Split(ctx, c, mm, 2, pipeline.ByTime, 8*(1-c.Rank())) // rank 1: micro-batches of 0
		return nil
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "rank 1") {
			t.Errorf("rank %d: got %v, want an error naming rank 1", r, err)
		}
	}
}

// TestSplitByTimeLanguageModel: balancing by time profiles a model whose
// first layer takes token ids and whose loss takes a label per position
// (a GPT) on valid input: ids in range, T labels per sample.
func TestSplitByTimeLanguageModel(t *testing.T) {
	g := models.GPT{Layers: 2, Dim: 16, Heads: 2, Context: 8}
	cs, err := inproc.New(2, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := make([][]int, 2)
	err = commtest.RunRanks(context.Background(), cs, time.Minute, func(ctx context.Context, c comm.Comm) error {
		m, err := models.NewGPT(g.Name(), g, 1)
		if err != nil {
			return err
		}
		got[c.Rank()], err = pipeline.Split(ctx, c, m, 2, pipeline.ByTime, 4)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := models.NewGPT(g.Name(), g, 1)
	if err := pipeline.CheckBoundaries(m, got[0], 2); err != nil || fmt.Sprint(got[0]) != fmt.Sprint(got[1]) {
		t.Errorf("splits %v and %v: %v", got[0], got[1], err)
	}
}

// TestStageComputeFails: a stage whose own compute fails (the last stage
// gets an out-of-range label) makes every other stage's Step fail too,
// while its Comm stays open: the failing Step aborts the group.
func TestStageComputeFails(t *testing.T) {
	const k = 3
	cs, err := inproc.New(k, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d := batches(2)
	bad := append([]int32(nil), d.Labels[testBatch:2*testBatch]...)
	bad[testBatch-1] = 99
	errs := make([]error, k)
	others := make(chan struct{})
	var wg, og sync.WaitGroup
	og.Add(k - 1)
	go func() { og.Wait(); close(others) }()
	t0 := time.Now()
	for r := 0; r < k; r++ {
		wg.Add(1)
		go func(r int, c comm.Comm) {
			defer wg.Done()
			defer c.Close()
			m, _ := models.New("mlp", 3)
			p, err := pipeline.New(context.Background(), c, m, pipeline.Config{Micro: 4}, testBatch)
			if err != nil {
				errs[r] = err
				return
			}
			defer p.Close()
			for s := 0; s < 2 && err == nil; s++ {
				y := d.Labels[s*testBatch : (s+1)*testBatch]
				if s == 1 && r == k-1 {
					y = bad
				}
				_, err = p.Step(ctx, d.Images[s*testBatch*784:(s+1)*testBatch*784], y)
			}
			errs[r] = err
			if r == k-1 {
				select { // keep the Comm open until the others have failed
				case <-others:
				case <-ctx.Done():
				}
			} else {
				og.Done()
			}
		}(r, cs[r])
	}
	wg.Wait()
	if el := time.Since(t0); el > 10*time.Second {
		t.Errorf("took %v", el)
	}
	for r, err := range errs {
		switch {
		case err == nil:
			t.Errorf("rank %d: no error", r)
		case errors.Is(err, context.DeadlineExceeded):
			t.Errorf("rank %d: hit the deadline: %v", r, err)
		}
		t.Logf("rank %d: %v", r, err)
	}
	if !strings.Contains(errs[k-1].Error(), "label 99") {
		t.Errorf("the last stage's error does not name the bad label: %v", errs[k-1])
	}
}
