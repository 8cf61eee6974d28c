package devmodel_test

import (
	"math"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/gpu/kernels"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
)

// sameEval checks that Eval's forward-only plan gives what evaluating
// with the training plan gave before it (EvalViaTrainingPlan: the
// training plan compiled at the batch's size, its evaluation closures)
// bit for bit on the fake: the loss, the count of correct predictions
// and every logit. On a real GPU, where cuBLAS may pick other kernels
// for a pass's smaller products, the loss and logits within evalTol
// (relative to max(1, |value|)).
func sameEval(t *testing.T, d *devmodel.Model, x []float32, y []int32) {
	t.Helper()
	batch := len(x) / d.Host.InputSize()
	loss, correct, err := d.Eval(x, y)
	if err != nil {
		t.Fatal(err)
	}
	got, err := devmodel.EvalLogits(d, batch)
	if err != nil {
		t.Fatal(err)
	}
	wl, wc, want, err := devmodel.EvalViaTrainingPlan(d, x, y)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("batch of %d: %d logits; with the training plan %d", batch, len(got), len(want))
	}
	if cudafake.Mode() == "real" {
		if !sameWithin(loss, wl) {
			t.Errorf("batch of %d: loss %v; with the training plan %v", batch, loss, wl)
		}
		for i := range got {
			if !sameWithin(got[i], want[i]) {
				t.Fatalf("batch of %d: logit %d is %v; with the training plan %v", batch, i, got[i], want[i])
			}
		}
		return
	}
	if math.Float32bits(loss) != math.Float32bits(wl) || correct != wc {
		t.Errorf("batch of %d: loss %v, %d correct; with the training plan %v, %d", batch, loss, correct, wl, wc)
	}
	if !sameFloats(got, want) {
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("batch of %d: logit %d is %v; with the training plan %v", batch, i, got[i], want[i])
			}
		}
	}
}

// sameWithin: a and b within evalTol relative to max(1, |b|).
func sameWithin(a, b float32) bool {
	return math.Abs(float64(a)-float64(b)) <= evalTol*math.Max(1, math.Abs(float64(b)))
}

// evalCases are the models of the forward-only plan's tests: every
// layer kind and every way a plan reuses memory (in place: ReLU, GELU,
// Tanh, LayerNorm, Residual's add; views: Flatten, evaluation's Dropout;
// chunked scratch: Conv2d, attention; Residuals holding their input).
func evalCases(t *testing.T) []struct {
	name  string
	mk    func() *nn.Model
	batch int
	data  func(i, n int) ([]float32, []int32)
} {
	images := func(in int) func(i, n int) ([]float32, []int32) {
		return func(i, n int) ([]float32, []int32) { return devtest.Images(i, n, in) }
	}
	shape := models.GPT{Layers: 2, Dim: 16, Heads: 2, Context: 8}
	return []struct {
		name  string
		mk    func() *nn.Model
		batch int
		data  func(i, n int) ([]float32, []int32)
	}{
		{"mlp", func() *nn.Model { return zoo(t, "mlp") }, 8, images(784)},
		{"cnn", func() *nn.Model { return zoo(t, "cnn") }, 4, images(784)},
		{"cnn-bn", func() *nn.Model { return zoo(t, "cnn-bn") }, 4, images(784)},
		{"gpt", func() *nn.Model {
			return gptModel(t, shape, 3)
		}, 2, func(i, n int) ([]float32, []int32) { return text(i, n, shape.Context) }},
		{"embedding", func() *nn.Model { // ids in: a short last pass is zero-padded with id 0
			m, err := nn.New("embedding", nn.Seq(&nn.Embedding{Num: 128, Dim: 32}, &nn.Linear{In: 32, Out: 1024}, nn.ReLU{},
				&nn.Linear{In: 1024, Out: 128}), []int{4}, 7)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}, 2, func(i, n int) ([]float32, []int32) { return text(i, n, 4) }},
		{"composed", func() *nn.Model {
			m, err := nn.New("composed", nn.Seq(&nn.Linear{In: 40, Out: 24}, nn.BatchNorm1d(24), nn.Tanh{},
				&nn.Dropout{P: 0.3, Seed: 5}, &nn.Residual{Fn: nn.Seq(&nn.LayerNorm{C: 24}, nn.GELU{}, &nn.Linear{In: 24, Out: 24})},
				&nn.Residual{Fn: &nn.Dropout{P: 0.2, Seed: 1}}, &nn.Linear{In: 24, Out: 10}), []int{40}, 4)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}, 6, images(40)},
	}
}

// TestEvalPlanSameBits: Eval's forward-only plan equals, bit for bit on
// the fake (sameEval), evaluating with the training plan at the
// evaluation's batch size (what Eval did before it), for mlp, cnn,
// cnn-bn, a gpt of 2 layers, an Embedding/Linear/ReLU model (ids in:
// passes zero-padded with id 0) and a user's model of Residuals (one
// around a Dropout: a view of its input), LayerNorm, GELU, Tanh,
// BatchNorm1d and Dropout, after 2 steps, at the placed batch, 4 and 16
// times it plus 3 (in passes, a short last one padded) and a short batch;
// and training goes on after Eval bit for bit as on a copy never
// evaluated (the training plan is kept as it was).
func TestEvalPlanSameBits(t *testing.T) {
	cudafake.RequireCUDA(t)
	sgd := optim.Config{Name: "sgd", LR: 0.03, Momentum: 0.9, WeightDecay: 1e-4}
	for _, c := range evalCases(t) {
		t.Run(c.name, func(t *testing.T) {
			cfg := devmodel.Config{Device: dev, Batch: c.batch, Optim: sgd}
			var ds [2]*devmodel.Model
			for i := range ds {
				d, err := devmodel.Place(c.mk(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				ds[i] = d
			}
			step := func(i int, d *devmodel.Model) float32 {
				x, y := c.data(i, c.batch)
				l, err := d.Step(x, y)
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			for i := 0; i < 2; i++ {
				step(i, ds[0])
				step(i, ds[1])
			}
			// the eval plan is compiled between steps; the training plan
			// stays
			x, y := c.data(100, c.batch)
			if _, _, err := ds[0].Eval(x, y); err != nil {
				t.Fatal(err)
			}
			if a, b := step(2, ds[0]), step(2, ds[1]); math.Float32bits(a) != math.Float32bits(b) {
				t.Errorf("the step after Eval: loss %v; without Eval %v", a, b)
			}
			if got, want := devtest.Floats(t, dev, ds[0].Params, ds[0].N), devtest.Floats(t, dev, ds[1].Params, ds[1].N); !sameFloats(got, want) {
				t.Errorf("the parameters after a step after Eval differ from those without Eval")
			}
			passes := map[int]int{}
			for j, n := range []int{c.batch, 4 * c.batch, 16*c.batch + 3, c.batch/2 + 1} {
				x, y := c.data(200+j, n)
				sameEval(t, ds[0], x, y)
				passes[n] = devmodel.EvalPass(ds[0], n)
			}
			t.Logf("samples per pass by batch: %v", passes)
			t.Logf("forward-only plans' arena %d bytes (largest batch %d), peak %d bytes", ds[0].EvalBytes(), 16*c.batch+3, ds[0].PeakBytes())
		})
	}
}

func sameFloats(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestEvalAllocatesOnce: once Eval has run at a batch size after
// training batches of each size (the forward-only plans borrow the
// training plan's blocks, and a short training batch plans training
// again), Eval at that size or a smaller one allocates no device memory
// (the fake's cudaMalloc is made to fail: none is called), nor does
// training after it (the training plan was kept); the results are the
// first's bit for bit; EvalBytes and PeakBytes do not move.
func TestEvalAllocatesOnce(t *testing.T) {
	cudafake.RequireCUDA(t)
	d, err := devmodel.Place(zoo(t, "mlp"), devmodel.Config{Device: dev, Batch: 8, Optim: optim.Config{Name: "sgd", LR: 0.03}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	x, y := devtest.Images(1, 8, 784)
	ex, ey := devtest.Images(2, 32, 784)
	// a training batch and a short one: the training plan is planned
	// again (the forward-only plans borrow its blocks: planned again too)
	for _, n := range []int{8, 3, 8, 3} {
		if _, err := d.Step(x[:n*784], y[:n]); err != nil {
			t.Fatal(err)
		}
		if _, _, err := d.Eval(ex, ey); err != nil {
			t.Fatal(err)
		}
	}
	l0, c0, err := d.Eval(ex, ey)
	if err != nil {
		t.Fatal(err)
	}
	arena, peak := d.EvalBytes(), d.PeakBytes()
	if arena <= 0 {
		t.Fatalf("EvalBytes %d after an Eval", arena)
	}
	if cudafake.Mode() == "fake" {
		cudafake.MemLimit(t, 1) // every cudaMalloc from now on fails
	}
	for i := 0; i < 3; i++ {
		l, c, err := d.Eval(ex, ey)
		if err != nil {
			t.Fatalf("Eval %d after the first: %v", i+2, err)
		}
		if i == 0 && (math.Float32bits(l) != math.Float32bits(l0) || c != c0) {
			t.Errorf("Eval again: %v, %d correct; the first %v, %d", l, c, l0, c0)
		}
		if _, _, err := d.Eval(ex[:5*784], ey[:5]); err != nil { // a short last batch
			t.Fatalf("Eval of a short batch: %v", err)
		}
		if _, err := d.Step(x, y); err != nil {
			t.Fatalf("a step after Eval: %v", err)
		}
		if _, err := d.Step(x[:3*784], y[:3]); err != nil {
			t.Fatalf("a short step after Eval: %v", err)
		}
		if _, _, err := d.Eval(ex, ey); err != nil {
			t.Fatalf("Eval after a short step: %v", err)
		}
	}
	if d.EvalBytes() != arena || d.PeakBytes() != peak {
		t.Errorf("EvalBytes %d, PeakBytes %d; after the first Eval %d, %d", d.EvalBytes(), d.PeakBytes(), arena, peak)
	}
}

// TestEvalPeakBelowTraining: the cnn placed for batch 4 evaluates at 16
// holding no more device memory than its training plan's blocks (which
// the forward-only plans borrow, in passes of as many samples as fit)
// and the batch's own input, labels and logits; evaluating with a
// training plan at 16, as Eval did before, grew the peak by about 4
// times the training plan. A pipeline stage of the cnn's convolutions
// (Stage.EvalForward: its own arena, one pass) holds at most, per sample,
// the input, conv1's output and half as much unrolled input (its chunked
// workspace): below the training plan's activations and gradients at a
// quarter of the batch. The bounds come from the model's activation
// sizes.
func TestEvalPeakBelowTraining(t *testing.T) {
	cudafake.RequireCUDA(t)
	const b, eb = 4, 16
	m := zoo(t, "cnn")
	// per sample, float32s: the input, conv1, relu, pool, conv2, relu,
	// pool, linear, relu, linear (Flatten is a view)
	in, c1, p1, c2, p2 := 28*28, 32*28*28, 32*14*14, 64*14*14, 64*7*7
	acts := []int{c1, c1, p1, c2, c2, p2, 128, 128, 10}
	train := 0
	for _, a := range acts {
		train += 2 * 4 * a // each activation and its gradient
	}
	evalBound := func(batch, labels int) int64 {
		// input + conv1 out + half of it unrolled; 256-byte alignment of
		// the few buffers
		return int64(4*batch*(in+c1+c1/2) + 4*2*labels + 8 + 8*256)
	}
	d, err := devmodel.Place(m, devmodel.Config{Device: dev, Batch: b, Optim: optim.Config{Name: "sgd", LR: 0.01}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	x, y := devtest.Images(1, b, in)
	if _, err := d.Step(x, y); err != nil {
		t.Fatal(err)
	}
	trainPlan, before := devmodel.TrainPlanBytes(d), d.PeakBytes()
	if trainPlan < int64(4*b*c1) { // the rest share memory (memory.go)
		t.Fatalf("the training plan holds %d bytes at batch %d; conv1's output alone is %d", trainPlan, b, 4*b*c1)
	}
	ex, ey := devtest.Images(2, eb, in)
	if _, _, err := d.Eval(ex, ey); err != nil {
		t.Fatal(err)
	}
	arena, after := d.EvalBytes(), d.PeakBytes()
	t.Logf("cnn: training plan at %d: %d bytes (peak %d); evaluating at %d: %d bytes more (passes of %d; peak %d)", b, trainPlan, before, eb, arena, devmodel.EvalPass(d, eb), after)
	batchBufs := int64(4*eb*(in+2+10) + 8 + 4*256) // input, labels, per-row losses, logits, loss words
	if arena > batchBufs {
		t.Errorf("evaluating at %d holds %d bytes beyond the training plan's blocks; want at most the batch's buffers' %d", eb, arena, batchBufs)
	}
	if after != before+arena {
		t.Errorf("peak %d after Eval, %d before: more than the arena (%d)", after, before, arena)
	}

	// a stage: the cnn's convolutions, layers [0, 6)
	st, err := devmodel.PlaceStage(zoo(t, "cnn"), 0, 6, devmodel.Config{Device: dev, Batch: b, Optim: optim.Config{Name: "sgd", LR: 0.01}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	xs := devtest.Upload(t, dev, x)
	if _, err := st.Forward(xs, b); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Backward(devtest.Upload(t, dev, make([]float32, st.OutSize(b))), b); err != nil {
		t.Fatal(err)
	}
	sb := st.PeakBytes()
	xe := devtest.Upload(t, dev, ex)
	if _, err := st.EvalForward(xe, eb); err != nil {
		t.Fatal(err)
	}
	if err := st.Stream().Synchronize(); err != nil {
		t.Fatal(err)
	}
	sa := st.PeakBytes()
	stageTrain := 0
	for _, a := range acts[:6] {
		stageTrain += 2 * 4 * a
	}
	t.Logf("cnn stage [0, 6): peak %d bytes training at %d, %d after evaluating at %d (forward-only plan %d, bound %d; activations and gradients at %d: %d)", sb, b, sa, eb, st.EvalBytes(), evalBound(eb, 0), b, b*stageTrain)
	if st.EvalBytes() > evalBound(eb, 0) || sa != sb+st.EvalBytes() || st.EvalBytes() >= int64(b*stageTrain) {
		t.Errorf("stage: forward-only plan %d bytes (want at most %d and below the training activations' %d), peak %d from %d", st.EvalBytes(), evalBound(eb, 0), b*stageTrain, sa, sb)
	}
}

// TestStageEvalForward: a stage's EvalForward equals its Forward bit for
// bit on the fake (within evalTol on a real GPU; mlp, cnn and a gpt split
// in 2, and the embeddings and first attention of a gpt of context 70
// with $GDIST_ATTENTION=fused: the fused forward in both), and leaves the activations of the
// last Forward of the same size for Backward: the input gradient and
// parameter gradients after a Forward, an EvalForward of another batch
// and a Backward equal those without the EvalForward.
func TestStageEvalForward(t *testing.T) {
	cudafake.RequireCUDA(t)
	shape := models.GPT{Layers: 2, Dim: 16, Heads: 2, Context: 8}
	for _, c := range []struct {
		name  string
		m     func() *nn.Model
		at    int
		batch int
		data  func(i, n int) ([]float32, []int32)
		env   string // $GDIST_ATTENTION
	}{
		{"mlp", func() *nn.Model { return zoo(t, "mlp") }, 2, 4, func(i, n int) ([]float32, []int32) { return devtest.Images(i, n, 784) }, ""},
		{"cnn", func() *nn.Model { return zoo(t, "cnn") }, 3, 2, func(i, n int) ([]float32, []int32) { return devtest.Images(i, n, 784) }, ""},
		{"gpt", func() *nn.Model {
			return gptModel(t, shape, 3)
		}, 2, 2, func(i, n int) ([]float32, []int32) { return text(i, n, shape.Context) }, ""},
		// layers [0, 3): the embeddings and the first attention, fused
		// (its 64-row tiles' edge): EvalForward's output the fused
		// Forward's, the log-sum-exp rows Forward kept for Backward left
		// alone
		{"gpt-fused", func() *nn.Model { m, _ := fusedGPT(t, 70); return m }, 3, 2, func(i, n int) ([]float32, []int32) { return text(i, n, 70) }, "fused"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(kernels.EnvAttention, c.env)
			m := c.m()
			cfg := devmodel.Config{Device: dev, Batch: c.batch, Optim: optim.Config{Name: "sgd", LR: 0.01}}
			var st [2]*devmodel.Stage
			for i := range st {
				s, err := devmodel.PlaceStage(m, 0, c.at, cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				st[i] = s
			}
			read := func(s *devmodel.Stage, p uintptr, n int) []float32 {
				if err := s.Stream().Synchronize(); err != nil {
					t.Fatal(err)
				}
				return devtest.Floats(t, dev, p, n)
			}
			// EvalForward == Forward, at the placed batch and others
			for _, n := range []int{c.batch, 3 * c.batch, 1} {
				x, _ := c.data(n, n)
				xd := devtest.Upload(t, dev, x)
				fo, err := st[1].Forward(xd, n)
				if err != nil {
					t.Fatal(err)
				}
				want := read(st[1], fo, st[1].OutSize(n))
				eo, err := st[0].EvalForward(xd, n)
				if err != nil {
					t.Fatal(err)
				}
				got := read(st[0], eo, st[0].OutSize(n))
				same := sameFloats(got, want)
				if cudafake.Mode() == "real" { // cuBLAS may pick other kernels for the chunks' products
					same = len(got) == len(want)
					for i := range got {
						same = same && sameWithin(got[i], want[i])
					}
				}
				if !same {
					t.Errorf("batch %d: EvalForward's output differs from Forward's", n)
				}
			}
			// Forward, (EvalForward), Backward
			x, _ := c.data(7, c.batch)
			xe, _ := c.data(8, 2*c.batch)
			dOut := devtest.Upload(t, dev, devtest.Vals(3, st[0].OutSize(c.batch), 0.1))
			var dx [2][]float32
			for i, s := range st {
				if err := s.ZeroGrad(); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Forward(devtest.Upload(t, dev, x), c.batch); err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					if _, err := s.EvalForward(devtest.Upload(t, dev, xe), 2*c.batch); err != nil {
						t.Fatal(err)
					}
					if _, err := s.EvalForward(devtest.Upload(t, dev, x), c.batch); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := s.Backward(dOut, c.batch); err != nil {
					t.Fatal(err)
				}
				dx[i] = read(s, s.Grads, s.N)
			}
			if !sameFloats(dx[0], dx[1]) {
				t.Errorf("the gradients of a Backward after EvalForward differ from those without")
			}
		})
	}
}
