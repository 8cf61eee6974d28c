package syncbn

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/models"
)

func newLayer(c int) *models.BNLayer {
	l := &models.BNLayer{Prefix: "1", C: c, Momentum: 0.1, Eps: 1e-5,
		RunningMean: make([]float32, c), RunningVar: make([]float32, c)}
	for i := range l.RunningVar {
		l.RunningVar[i] = 1
	}
	return l
}

// gen fills n*c*inner values: channel means far from zero, different per
// channel, plus a deterministic wobble.
func gen(n, c, inner int, offset float64, seed int) []float32 {
	x := make([]float32, n*c*inner)
	for i := range x {
		ch := (i / inner) % c
		x[i] = float32(offset + float64(ch)*3 + math.Sin(float64(i*7+seed))*(1+float64(ch)))
	}
	return x
}

type refOut struct {
	y, dx, dg, db, rm, rv []float32
	yEval                 []float32
}

func close(a, b float32, tol float64) bool {
	return math.Abs(float64(a)-float64(b)) <= tol*math.Max(math.Abs(float64(b)), 1e-3)
}

// slice returns samples [lo, hi) of an (n, c, inner) array.
func slice(x []float32, lo, hi, c, inner int) []float32 {
	return x[lo*c*inner : hi*c*inner]
}

// TestEquivalence: N ranks with SyncBN at batches b_r give, per rank, the
// outputs and input gradients of one plain batch norm over the
// concatenated batch, scale/shift gradients that sum to its, and the same
// running statistics — 1-D and 2-D inputs, equal, uneven and empty batches.
func TestEquivalence(t *testing.T) {
	const c = 3
	for _, shape := range []struct {
		name  string
		inner int
	}{{"1d (N,C)", 1}, {"2d (N,C,4,5)", 20}} {
		for _, batches := range [][]int{{4, 4}, {2, 5, 3}, {3, 0, 5}, {1, 1, 1, 1}} {
			t.Run(fmt.Sprintf("%s/%v", shape.name, batches), func(t *testing.T) {
				inner := shape.inner
				total := 0
				for _, b := range batches {
					total += b
				}
				x := gen(total, c, inner, 100, 1)
				dy := gen(total, c, inner, 0.01, 2)
				gamma, beta := []float32{1.5, 0.5, -1}, []float32{0.1, -0.2, 0.3}

				// Reference: one rank, plain batch norm, two steps.
				ref := newLayer(c)
				var want refOut
				st := &models.BNState{}
				for step := 0; step < 2; step++ {
					y, err := ref.Forward(context.Background(), x, total, inner, gamma, beta, true, st)
					if err != nil {
						t.Fatal(err)
					}
					dx, dg, db, err := ref.Backward(context.Background(), dy, inner, gamma, st)
					if err != nil {
						t.Fatal(err)
					}
					want = refOut{y: y, dx: dx, dg: dg, db: db}
				}
				want.rm, want.rv = ref.RunningMean, ref.RunningVar
				want.yEval, _ = ref.Forward(context.Background(), x, total, inner, gamma, beta, false, nil)

				cs, err := inproc.New(len(batches), comm.Options{})
				if err != nil {
					t.Fatal(err)
				}
				dgSum := make([]float64, c)
				dbSum := make([]float64, c)
				results := make([]refOut, len(batches))
				err = commtest.RunRanks(context.Background(), cs, 30*time.Second, func(ctx context.Context, cm comm.Comm) error {
					r := cm.Rank()
					lo := 0
					for _, b := range batches[:r] {
						lo += b
					}
					hi := lo + batches[r]
					l := newLayer(c)
					l.Sync = (&Syncer{C: cm}).Hook()
					st := &models.BNState{}
					xs, dys := slice(x, lo, hi, c, inner), slice(dy, lo, hi, c, inner)
					var out refOut
					for step := 0; step < 2; step++ {
						y, err := l.Forward(context.Background(), xs, hi-lo, inner, gamma, beta, true, st)
						if err != nil {
							return err
						}
						dx, dg, db, err := l.Backward(context.Background(), dys, inner, gamma, st)
						if err != nil {
							return err
						}
						out = refOut{y: y, dx: dx, dg: dg, db: db}
					}
					out.rm, out.rv = l.RunningMean, l.RunningVar
					out.yEval, _ = l.Forward(context.Background(), xs, hi-lo, inner, gamma, beta, false, nil)
					results[r] = out
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				lo := 0
				for r, b := range batches {
					got := results[r]
					for name, pair := range map[string][2][]float32{
						"output":         {got.y, slice(want.y, lo, lo+b, c, inner)},
						"input gradient": {got.dx, slice(want.dx, lo, lo+b, c, inner)},
						"eval output":    {got.yEval, slice(want.yEval, lo, lo+b, c, inner)},
						"running mean":   {got.rm, want.rm},
						"running var":    {got.rv, want.rv},
					} {
						if len(pair[0]) != len(pair[1]) {
							t.Fatalf("rank %d %s: %d values, want %d", r, name, len(pair[0]), len(pair[1]))
						}
						for i := range pair[0] {
							if !close(pair[0][i], pair[1][i], 1e-5) {
								t.Fatalf("rank %d %s[%d] = %v, want %v", r, name, i, pair[0][i], pair[1][i])
							}
						}
					}
					for ch := 0; ch < c; ch++ {
						dgSum[ch] += float64(got.dg[ch])
						dbSum[ch] += float64(got.db[ch])
					}
					lo += b
				}
				for ch := 0; ch < c; ch++ {
					if !close(float32(dgSum[ch]), want.dg[ch], 1e-5) || !close(float32(dbSum[ch]), want.db[ch], 1e-5) {
						t.Fatalf("channel %d: scale/shift gradients sum to %v/%v, want %v/%v", ch, dgSum[ch], dbSum[ch], want.dg[ch], want.db[ch])
					}
				}
			})
		}
	}
}

// TestCombineLargeMean: Chan's combination keeps the variance of data with
// a mean of 1e6 and unit spread, split unevenly over ranks with different
// local means, to 1e-9 relative of a two-pass float64 reference.
func TestCombineLargeMean(t *testing.T) {
	parts := [][]float64{}
	var all []float64
	for r, n := range []int{5, 1, 0, 17, 8} {
		var p []float64
		for i := 0; i < n; i++ {
			p = append(p, 1e6+float64(r)*0.5+math.Sin(float64(i*13+r)))
		}
		parts = append(parts, p)
		all = append(all, p...)
	}
	var rec []float64
	for _, p := range parts {
		n := float64(len(p))
		var s float64
		for _, v := range p {
			s += v
		}
		mean := 0.0
		if n > 0 {
			mean = s / n
		}
		var m2 float64
		for _, v := range p {
			m2 += (v - mean) * (v - mean)
		}
		rec = append(rec, n, mean, m2)
	}
	count, mean, m2 := Combine(rec, len(parts), 1)
	var s float64
	for _, v := range all {
		s += v
	}
	wantMean := s / float64(len(all))
	var wantM2 float64
	for _, v := range all {
		wantM2 += (v - wantMean) * (v - wantMean)
	}
	if count != float64(len(all)) || math.Abs(mean[0]-wantMean) > 1e-9*wantMean || math.Abs(m2[0]-wantM2) > 1e-9*wantM2 {
		t.Fatalf("count %v mean %v M2 %v; want %v %v %v", count, mean[0], m2[0], len(all), wantMean, wantM2)
	}
	// What sum(x^2) - n mean^2 would have given, for contrast.
	var sq float64
	for _, v := range all {
		sq += v * v
	}
	naive := sq - float64(len(all))*wantMean*wantMean
	t.Logf("M2: Chan %.9g, two-pass %.9g, naive sum of squares %.9g", m2[0], wantM2, naive)
}

// TestDeadRank: a rank that is gone before the forward pass makes the
// others' forward fail with an error, not hang.
func TestDeadRank(t *testing.T) {
	cs, _ := inproc.New(3, comm.Options{})
	cs[2].Close()
	errs := make(chan error, 2)
	for r := 0; r < 2; r++ {
		go func(r int) {
			l := newLayer(2)
			l.Sync = (&Syncer{C: cs[r]}).Hook()
			_, err := l.Forward(context.Background(), gen(4, 2, 1, 0, r), 4, 1, []float32{1, 1}, []float32{0, 0}, true, &models.BNState{})
			errs <- err
		}(r)
	}
	for i := 0; i < 2; i++ {
		select {
		case err := <-errs:
			if err == nil || !strings.Contains(err.Error(), "rank 2") {
				t.Fatalf("forward with a dead rank: %v, want an error naming the closed rank", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("forward hung with a dead rank")
		}
	}
}

// TestAllEmpty: if every rank's batch is empty there are no statistics.
func TestAllEmpty(t *testing.T) {
	cs, _ := inproc.New(2, comm.Options{})
	err := commtest.RunRanks(context.Background(), cs, 10*time.Second, func(ctx context.Context, c comm.Comm) error {
		l := newLayer(2)
		l.Sync = (&Syncer{C: c}).Hook()
		_, err := l.Forward(context.Background(), nil, 0, 1, []float32{1, 1}, []float32{0, 0}, true, &models.BNState{})
		if err == nil {
			return fmt.Errorf("no error")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestConvert(t *testing.T) {
	cs, _ := inproc.New(2, comm.Options{})
	err := commtest.RunRanks(context.Background(), cs, 10*time.Second, func(ctx context.Context, c comm.Comm) error {
		m, _ := models.New("cnn-bn", 1)
		s, err := Convert(ctx, m, c)
		if err != nil {
			return err
		}
		defer s.Close()
		if s.Layers != 2 || m.BNs[0].Sync == nil || m.BNs[1].Sync == nil {
			return fmt.Errorf("converted %d layers", s.Layers)
		}
		gr, _ := m.NewGraph(2, true)
		if _, err := gr.Step(context.Background(), make([]float32, 2*784), []int32{1, 2}); err != nil {
			return err
		}
		if _, calls := s.Spent(); calls != 4 { // 2 layers x (forward + backward)
			return fmt.Errorf("%d SyncBN collectives in one step, want 4", calls)
		}
		Revert(m)
		if m.BNs[0].Sync != nil {
			return fmt.Errorf("Revert left Sync set")
		}
		mlp, _ := models.New("mlp", 1)
		if s, err := Convert(ctx, mlp, c); err != nil || s.Layers != 0 {
			return fmt.Errorf("mlp: %+v %v", s, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
