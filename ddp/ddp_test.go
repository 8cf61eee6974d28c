package ddp_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/comm/rendezvous"
	_ "github.com/gdist/gdist/comm/shm"
	_ "github.com/gdist/gdist/comm/tcp"
	"github.com/gdist/gdist/data"
	"github.com/gdist/gdist/ddp"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

func inprocWorld(t *testing.T, n int) []comm.Comm {
	cs, err := inproc.New(n, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return cs
}

func tcpWorld(t *testing.T, n int) []comm.Comm {
	token := []byte("ddp-test-token")
	srv, err := rendezvous.NewServer("127.0.0.1:0", token, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs := make([]comm.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			st, err := rendezvous.Dial(ctx, srv.Addr(), token)
			if err != nil {
				errs[r] = err
				return
			}
			t.Cleanup(func() { st.Close() })
			cs[r], errs[r] = comm.New(ctx, "tcp", comm.Config{Rank: r, Size: n, Store: st, Token: token, Job: t.Name(), Logf: t.Logf})
		}(r)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return cs
}

type setup struct {
	model string
	opt   optim.Config
	steps int
	batch int // per rank
	ds    *data.Dataset
	seed  int64
}

// reference trains one rank at batch n*B over the same global batches.
func reference(t *testing.T, s setup, n int) *models.Model {
	m, err := models.New(s.model, s.seed)
	if err != nil {
		t.Fatal(err)
	}
	gr, err := m.NewGraph(n*s.batch, true)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := optim.New(s.opt, m.NumParams())
	if err != nil {
		t.Fatal(err)
	}
	smp := data.Sampler{N: s.ds.N, World: 1, Rank: 0, Batch: n * s.batch, Seed: s.seed}
	x := make([]float32, n*s.batch*m.InputSize())
	y := make([]int32, n*s.batch)
	for k := 0; k < s.steps; k++ {
		if err := s.ds.Batch(smp.Indices(0, k, nil), x, y); err != nil {
			t.Fatal(err)
		}
		if _, err := gr.Step(context.Background(), x, y); err != nil {
			t.Fatal(err)
		}
		opt.Step(m.Flat.Value, m.Flat.Grad)
		m.ZeroGrad()
	}
	return m
}

// distributed trains every rank with DDP and returns the models.
func distributed(t *testing.T, s setup, cs []comm.Comm, opts ddp.Options, checks ...func(*ddp.DDP) error) []*models.Model {
	n := len(cs)
	ms := make([]*models.Model, n)
	err := commtest.RunRanks(context.Background(), cs, 2*time.Minute, func(ctx context.Context, c comm.Comm) error {
		r := c.Rank()
		// Different seeds per rank: DDP's broadcast must make them equal.
		m, err := models.New(s.model, s.seed+int64(r)*1000)
		if err != nil {
			return err
		}
		ms[r] = m
		d, err := ddp.New(ctx, c, m, opts)
		if err != nil {
			return err
		}
		defer d.Close()
		for _, check := range checks {
			if err := check(d); err != nil {
				return err
			}
		}
		gr, err := m.NewGraph(s.batch, true)
		if err != nil {
			return err
		}
		opt, err := optim.New(s.opt, m.NumParams())
		if err != nil {
			return err
		}
		smp := data.Sampler{N: s.ds.N, World: n, Rank: r, Batch: s.batch, Seed: s.seed}
		x := make([]float32, s.batch*m.InputSize())
		y := make([]int32, s.batch)
		for k := 0; k < s.steps; k++ {
			if err := s.ds.Batch(smp.Indices(0, k, nil), x, y); err != nil {
				return err
			}
			if _, err := trainStep(ctx, d, gr, x, y); err != nil {
				return err
			}
			opt.Step(m.Flat.Value, m.Flat.Grad)
			m.ZeroGrad()
		}
		return d.CheckParams(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// tensorRelDiff is the largest, over parameter tensors, of |a-b| / |b|
// (Euclidean norms): Adam divides each update by the running RMS of its
// gradient, so an element whose gradient is a near-cancelling sum moves by
// a rounding-sized fraction of a step differently in the two runs; over a
// whole tensor that stays far below 1e-5.
func tensorRelDiff(m *models.Model, a, b []float32) (float64, string) {
	worst, name := 0.0, ""
	for _, p := range m.Params {
		var num, den float64
		for i := p.Offset; i < p.Offset+p.Size; i++ {
			d := float64(a[i]) - float64(b[i])
			num += d * d
			den += float64(b[i]) * float64(b[i])
		}
		if r := math.Sqrt(num / den); r > worst {
			worst, name = r, p.Name
		}
	}
	return worst, name
}

func maxRelDiff(a, b []float32) (float64, int) {
	worst, at := 0.0, -1
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		rel := d / math.Max(math.Abs(float64(b[i])), 1e-2)
		if rel > worst {
			worst, at = rel, i
		}
	}
	return worst, at
}

// TestEquivalence: N ranks at batch B with DDP end with the same parameters
// as one rank at batch N*B, for SGD with momentum and Adam, on inproc and tcp.
func TestEquivalence(t *testing.T) {
	ds := data.Synthetic(2048, 7)
	worlds := map[string]func(*testing.T, int) []comm.Comm{"inproc": inprocWorld, "tcp": tcpWorld, "shm": shmWorld}
	for _, backend := range []string{"inproc", "tcp", "shm"} {
		for _, opt := range []optim.Config{{Name: "sgd", LR: 0.05, Momentum: 0.9}, {Name: "adam", LR: 1e-3}} {
			for _, n := range []int{2, 3} {
				name := fmt.Sprintf("%s/%s/n=%d", backend, opt.Name, n)
				t.Run(name, func(t *testing.T) {
					s := setup{model: "mlp", opt: opt, steps: 6, batch: 16, ds: ds, seed: 42}
					want := reference(t, s, n)
					// Small buckets: several all-reduces per step, overlapping backward.
					got := distributed(t, s, worlds[backend](t, n), ddp.Options{FirstBucketMB: 0.05, BucketMB: 0.2})
					for r, m := range got {
						if d, name := tensorRelDiff(m, m.Flat.Value, want.Flat.Value); d > 1e-5 {
							t.Fatalf("rank %d: tensor %s differs from the 1-rank reference by %.3g relative", r, name, d)
						}
						if opt.Name == "sgd" { // element-wise too
							if d, at := maxRelDiff(m.Flat.Value, want.Flat.Value); d > 1e-5 {
								t.Fatalf("rank %d: parameter %d differs from the 1-rank reference by %.3g relative (%v vs %v)", r, at, d, m.Flat.Value[at], want.Flat.Value[at])
							}
						}
						d, name := tensorRelDiff(m, m.Flat.Value, want.Flat.Value)
						t.Logf("rank %d: worst tensor %s at %.2g relative", r, name, d)
					}
				})
			}
		}
	}
}

func shmWorld(t *testing.T, n int) []comm.Comm {
	t.Setenv("GDIST_SHM_DIR", t.TempDir())
	return commtest.RegistryWorld("shm", commtest.OneStore(func() comm.Store { return rendezvous.NewMemStore() }),
		comm.Config{Token: []byte("ddp-test-token"), Logf: t.Logf})(t, n)
}

// TestSharedGrads: on shm, DDP moves the gradient buffer into the Comm's
// shared memory (every bucket of 64 KiB or more is then all-reduced
// zero-copy), and training gives bit for bit the parameters it gives
// with the gradients in ordinary memory (2 ranks: a sum of two is the
// same whichever rank adds).
func TestSharedGrads(t *testing.T) {
	ds := data.Synthetic(1024, 7)
	s := setup{model: "mlp", opt: optim.Config{Name: "sgd", LR: 0.05, Momentum: 0.9}, steps: 4, batch: 16, ds: ds, seed: 42}
	opts := ddp.Options{FirstBucketMB: 0.05, BucketMB: 0.2}
	shared := func(want bool) func(d *ddp.DDP) error {
		return func(d *ddp.DDP) error {
			if d.SharedGrads() != want {
				return fmt.Errorf("SharedGrads() = %v, want %v", d.SharedGrads(), want)
			}
			if err := d.SharedGradsErr(); err != nil {
				return fmt.Errorf("SharedGradsErr() = %v, want nil", err)
			}
			return nil
		}
	}
	got := distributed(t, s, shmWorld(t, 2), opts, shared(true))
	opts.OrdinaryGrads = true
	want := distributed(t, s, shmWorld(t, 2), opts, shared(false))
	for r := range got {
		for i, v := range got[r].Flat.Value {
			if math.Float32bits(v) != math.Float32bits(want[r].Flat.Value[i]) {
				t.Fatalf("rank %d: parameter %d is %v with shared gradients, %v without", r, i, v, want[r].Flat.Value[i])
			}
		}
	}
	// Elsewhere the gradients stay in ordinary memory.
	distributed(t, s, inprocWorld(t, 2), ddp.Options{}, shared(false))
	// An area too small for them: ordinary memory, the same training, and
	// SharedGradsErr names the setting that makes room.
	t.Setenv("GDIST_SHM_AREA_BYTES", "131072")
	opts.OrdinaryGrads = false
	small := distributed(t, s, shmWorld(t, 2), opts, func(d *ddp.DDP) error {
		if err := d.SharedGradsErr(); d.SharedGrads() || err == nil || !strings.Contains(err.Error(), "GDIST_SHM_AREA_BYTES") {
			return fmt.Errorf("128 KiB area: SharedGrads() = %v, SharedGradsErr() = %v; want false and an error naming GDIST_SHM_AREA_BYTES", d.SharedGrads(), err)
		}
		return nil
	})
	for i, v := range small[0].Flat.Value {
		if math.Float32bits(v) != math.Float32bits(want[0].Flat.Value[i]) {
			t.Fatalf("parameter %d is %v with a small area, %v with ordinary gradients", i, v, want[0].Flat.Value[i])
		}
	}
}

// TestEquivalenceCNN covers convolutions and no-overlap mode.
func TestEquivalenceCNN(t *testing.T) {
	if testing.Short() {
		t.Skip("slow in -short mode: the cnn step is ~10x the mlp's")
	}
	ds := data.Synthetic(256, 3)
	s := setup{model: "cnn", opt: optim.Config{Name: "sgd", LR: 0.05, Momentum: 0.9}, steps: 3, batch: 8, ds: ds, seed: 5}
	want := reference(t, s, 2)
	got := distributed(t, s, inprocWorld(t, 2), ddp.Options{NoOverlap: true})
	if d, at := maxRelDiff(got[0].Flat.Value, want.Flat.Value); d > 1e-5 {
		t.Fatalf("parameter %d differs by %.3g relative", at, d)
	}
}

// TestOverlap: with several buckets, the first bucket's all-reduce starts
// before backward has produced the last gradient.
func TestOverlap(t *testing.T) {
	cs := inprocWorld(t, 2)
	ds := data.Synthetic(256, 1)
	type result struct {
		events  []ddp.Event
		bwdDone time.Time
		nb      int
	}
	res := make([]result, 2)
	err := commtest.RunRanks(context.Background(), cs, time.Minute, func(ctx context.Context, c comm.Comm) error {
		m, _ := models.New("mlp", 1)
		d, err := ddp.New(ctx, c, m, ddp.Options{FirstBucketMB: 0.01, BucketMB: 0.3})
		if err != nil {
			return err
		}
		gr, _ := m.NewGraph(32, true)
		gr.OnGrad = d.AddGrad
		x := make([]float32, 32*784)
		y := make([]int32, 32)
		smp := data.Sampler{N: ds.N, World: 2, Rank: c.Rank(), Batch: 32, Seed: 1}
		ds.Batch(smp.Indices(0, 0, nil), x, y)
		var done time.Time
		if err := d.Backward(ctx, func() error { // buckets launch inside
			_, err := gr.Step(context.Background(), x, y)
			done = time.Now()
			return err
		}); err != nil {
			return err
		}
		res[c.Rank()] = result{d.Events(), done, len(d.Buckets())}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for r, rs := range res {
		if rs.nb < 3 {
			t.Fatalf("rank %d: %d buckets, want several", r, rs.nb)
		}
		if len(rs.events) != rs.nb {
			t.Fatalf("rank %d: %d events for %d buckets", r, len(rs.events), rs.nb)
		}
		early := 0
		for _, e := range rs.events {
			if e.Start.Before(rs.bwdDone) {
				early++
			}
		}
		if early == 0 {
			t.Errorf("rank %d: no bucket all-reduce started before backward ended", r)
		}
		t.Logf("rank %d: %d of %d bucket all-reduces started during backward", r, early, rs.nb)
	}
}

// TestNoOverlapStartsAfterBackward is the control for TestOverlap.
func TestNoOverlapStartsAfterBackward(t *testing.T) {
	cs := inprocWorld(t, 2)
	err := commtest.RunRanks(context.Background(), cs, time.Minute, func(ctx context.Context, c comm.Comm) error {
		m, _ := models.New("mlp", 1)
		d, err := ddp.New(ctx, c, m, ddp.Options{FirstBucketMB: 0.01, BucketMB: 0.3, NoOverlap: true})
		if err != nil {
			return err
		}
		gr, _ := m.NewGraph(8, true)
		gr.OnGrad = d.AddGrad
		var done time.Time
		if err := d.Backward(ctx, func() error {
			_, err := gr.Step(context.Background(), make([]float32, 8*784), make([]int32, 8))
			done = time.Now()
			return err
		}); err != nil {
			return err
		}
		for _, e := range d.Events() {
			if e.Start.Before(done) {
				return fmt.Errorf("bucket %d started during backward in no-overlap mode", e.Bucket)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNoSync: two accumulation steps without sync and one with equal one
// synced step over the three batches' summed gradients.
func TestNoSync(t *testing.T) {
	cs := inprocWorld(t, 2)
	ds := data.Synthetic(512, 2)
	grads := make([][]float32, 2)
	err := commtest.RunRanks(context.Background(), cs, time.Minute, func(ctx context.Context, c comm.Comm) error {
		m, _ := models.New("mlp", 3)
		d, err := ddp.New(ctx, c, m, ddp.Options{})
		if err != nil {
			return err
		}
		gr, _ := m.NewGraph(8, true)
		x := make([]float32, 8*784)
		y := make([]int32, 8)
		smp := data.Sampler{N: ds.N, World: 2, Rank: c.Rank(), Batch: 8, Seed: 9}
		for k := 0; k < 3; k++ {
			d.SetNoSync(k < 2)
			ds.Batch(smp.Indices(0, k, nil), x, y)
			if _, err := trainStep(ctx, d, gr, x, y); err != nil {
				return err
			}
		}
		grads[c.Rank()] = append([]float32(nil), m.Flat.Grad...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Reference: one model, sum over ranks and steps of per-batch mean
	// gradients, divided by 2 ranks.
	m, _ := models.New("mlp", 3)
	gr, _ := m.NewGraph(8, true)
	x := make([]float32, 8*784)
	y := make([]int32, 8)
	for r := 0; r < 2; r++ {
		smp := data.Sampler{N: ds.N, World: 2, Rank: r, Batch: 8, Seed: 9}
		for k := 0; k < 3; k++ {
			ds.Batch(smp.Indices(0, k, nil), x, y)
			gr.Step(context.Background(), x, y)
		}
	}
	for i := range m.Flat.Grad {
		m.Flat.Grad[i] /= 2
	}
	for r := range grads {
		if d, at := maxRelDiff(grads[r], m.Flat.Grad); d > 1e-4 {
			t.Fatalf("rank %d: gradient %d differs by %.3g relative", r, at, d)
		}
	}
}

// TestCompression: fp16 and bf16 hooks average within their precision.
func TestCompression(t *testing.T) {
	for _, name := range []string{"fp16", "bf16"} {
		t.Run(name, func(t *testing.T) {
			hook, err := ddp.HookByName(name)
			if err != nil {
				t.Fatal(err)
			}
			cs := inprocWorld(t, 3)
			err = commtest.RunRanks(context.Background(), cs, time.Minute, func(ctx context.Context, c comm.Comm) error {
				g := make([]float32, 1000)
				for i := range g {
					g[i] = float32(c.Rank()+1) * float32(i%17-8) * 0.01
				}
				w, err := hook.Start(ctx, c, g)
				if err != nil {
					return err
				}
				if err := w.Wait(ctx); err != nil {
					return err
				}
				tol := 1e-3
				if name == "bf16" {
					tol = 1e-2
				}
				for i, v := range g {
					want := 2 * float64(i%17-8) * 0.01 // mean of (1+2+3)/3 = 2
					if math.Abs(float64(v)-want) > tol*math.Max(1, math.Abs(want)) {
						return fmt.Errorf("element %d: %v, want %v", i, v, want)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
	if _, err := ddp.HookByName("int4"); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Fatalf("unknown hook: %v", err)
	}
}

// TestDebugDetectsDivergence: CheckParams names the rank whose parameters
// differ.
func TestDebugDetectsDivergence(t *testing.T) {
	cs := inprocWorld(t, 3)
	errs := make([]error, 3)
	commtest.RunRanks(context.Background(), cs, time.Minute, func(ctx context.Context, c comm.Comm) error {
		m, _ := models.New("mlp", 1)
		d, err := ddp.New(ctx, c, m, ddp.Options{Debug: true})
		if err != nil {
			return err
		}
		if c.Rank() == 2 {
			m.Flat.Value[10] += 1e-3
		}
		errs[c.Rank()] = d.CheckParams(ctx)
		return nil
	})
	for r, err := range errs {
		if !errors.Is(err, ddp.ErrDiverged) {
			t.Fatalf("rank %d: %v, want ErrDiverged", r, err)
		}
	}
}

func TestBucketLayout(t *testing.T) {
	cs := inprocWorld(t, 1)
	m, _ := models.New("mlp", 1)
	d, err := ddp.New(context.Background(), cs[0], m, ddp.Options{FirstBucketMB: 0.01, BucketMB: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	bs := d.Buckets()
	// Reverse order, contiguous, covering everything, caps respected
	// (a single parameter larger than the cap gets a bucket of its own).
	hi := m.NumParams()
	for i, b := range bs {
		if b.Hi != hi || b.Lo >= b.Hi {
			t.Fatalf("bucket %d = [%d, %d), want to end at %d", i, b.Lo, b.Hi, hi)
		}
		capB := 0.3 * (1 << 20)
		if i == 0 {
			capB = 0.01 * (1 << 20)
		}
		if float64((b.Hi-b.Lo)*4) > capB && len(b.Params) > 1 {
			t.Fatalf("bucket %d holds %d bytes, cap %v", i, (b.Hi-b.Lo)*4, capB)
		}
		hi = b.Lo
	}
	if hi != 0 {
		t.Fatalf("buckets end at %d, want 0", hi)
	}
	if _, err := ddp.New(context.Background(), cs[0], m, ddp.Options{BucketMB: -1}); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Fatalf("negative bucket size: %v", err)
	}
}

// trainStep runs one training step of a built-in model's graph under a
// strategy (its AddGrad and Backward).
func trainStep(ctx context.Context, s interface {
	AddGrad(int, []float32)
	Backward(context.Context, func() error) error
}, gr *models.Graph, x []float32, y []int32) (float32, error) {
	gr.OnGrad = s.AddGrad
	return gr.StepIn(ctx, s.Backward, x, y)
}
