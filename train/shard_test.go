package train_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/checkpoint"
	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/train"
	"github.com/gdist/gdist/train/pp"
	"github.com/gdist/gdist/zero"
)

func readCk(t *testing.T, path string) (map[string]checkpoint.Tensor, map[string]string) {
	t.Helper()
	ts, meta, err := checkpoint.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	return ts, meta
}

// sameTensors: a and b hold the same tensor names with identical bytes.
func sameTensors(t *testing.T, what string, a, b map[string]checkpoint.Tensor) {
	t.Helper()
	if len(a) != len(b) {
		t.Errorf("%s: %d tensors vs %d", what, len(a), len(b))
	}
	for name, ta := range a {
		tb, ok := b[name]
		if !ok || ta.DType != tb.DType || !train.SameShape(ta.Shape, tb.Shape) || !bytes.Equal(ta.Data, tb.Data) {
			t.Errorf("%s: tensor %s differs", what, name)
		}
	}
}

// splice joins the shard files of the checkpoint at path saved by world
// ranks by hand, from each file's shard_lo: the parameters and the
// optimizer tensors, and the optimizer step.
func splice(t *testing.T, path string, world int) ([]float32, map[string][]float32, int64) {
	t.Helper()
	var params []float32
	opt := map[string][]float32{}
	var step int64
	for r := 0; r < world; r++ {
		ts, meta := readCk(t, train.ShardPath(path, r, world))
		p, _ := strconv.Atoi(meta["num_params"])
		lo, _ := strconv.Atoi(meta["shard_lo"])
		step, _ = strconv.ParseInt(meta["opt_step"], 10, 64)
		if params == nil {
			params = make([]float32, p)
		}
		for name, tt := range ts {
			v, err := tt.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			if name == "params" {
				copy(params[lo:], v)
			} else if k, ok := strings.CutPrefix(name, "optimizer."); ok {
				if opt[k] == nil {
					opt[k] = make([]float32, p)
				}
				copy(opt[k][lo:], v)
			}
		}
	}
	return params, opt, step
}

// modelFlat loads a PyTorch-layout model file into a fresh model and
// returns its flat parameters.
func modelFlat(t *testing.T, name, path string) []float32 {
	t.Helper()
	m, err := models.New(name, 99)
	if err != nil {
		t.Fatal(err)
	}
	ts, _ := readCk(t, path)
	if err := train.LoadModelTensors(m, ts, path); err != nil {
		t.Fatal(err)
	}
	return m.Flat.Value
}

func equalF32(a, b []float32) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d values vs %d", len(a), len(b))
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return fmt.Errorf("element %d: %v vs %v", i, a[i], b[i])
		}
	}
	return nil
}

// TestZeroResumeEqualsUninterrupted: with zero1 and zero2, stopping
// mid-epoch, saving and resuming ends with the same model, the same shard
// files (parameters and optimizer state) and the same evaluation as a run
// that never stopped.
func TestZeroResumeEqualsUninterrupted(t *testing.T) {
	for _, tc := range []struct{ strategy, opt string }{{"zero1", "sgd"}, {"zero2", "adam"}, {"zero3", "adam"}} {
		t.Run(tc.strategy, func(t *testing.T) {
			const n = 4 // the mlp's parameters do not split evenly over 4: padded shards
			dir := t.TempDir()
			full := base()
			full.Strategy, full.Optimizer = tc.strategy, tc.opt
			if tc.opt == "adam" {
				full.LR = 1e-3
			}
			full.Save = filepath.Join(dir, "full.safetensors")
			want, err := runRanks(t, n, full)
			if err != nil {
				t.Fatal(err)
			}
			part := full
			part.Save = filepath.Join(dir, "part.safetensors")
			part.MaxSteps = 7 // mid-way through epoch 1 (10 steps per epoch)
			if _, err := runRanks(t, n, part); err != nil {
				t.Fatal(err)
			}
			_, meta := readCk(t, part.Save)
			if meta["format"] != zero.ShardFormat || meta["step"] != "7" || meta["world_size"] != "4" {
				t.Fatalf("part's metadata %v", meta)
			}
			rest := full
			rest.Resume = part.Save
			rest.Save = filepath.Join(dir, "resumed.safetensors")
			got, err := runRanks(t, n, rest)
			if err != nil {
				t.Fatal(err)
			}
			if got[0].EvalLoss != want[0].EvalLoss || got[0].Steps != want[0].Steps {
				t.Fatalf("resumed: eval loss %v after %d steps; uninterrupted: %v after %d", got[0].EvalLoss, got[0].Steps, want[0].EvalLoss, want[0].Steps)
			}
			a, _ := readCk(t, full.Save)
			b, _ := readCk(t, rest.Save)
			sameTensors(t, "model", a, b)
			for r := 0; r < n; r++ {
				a, ma := readCk(t, train.ShardPath(full.Save, r, n))
				b, mb := readCk(t, train.ShardPath(rest.Save, r, n))
				sameTensors(t, fmt.Sprintf("shard %d", r), a, b)
				if ma["opt_step"] != mb["opt_step"] || ma["step"] != "20" || mb["epoch"] != "2" || mb["batch"] != "0" {
					t.Errorf("shard %d metadata: %v vs %v", r, ma, mb)
				}
			}
		})
	}
}

// zeroStrategy is a ZeRO strategy: it shows its engine.
type zeroStrategy interface{ Engine() *zero.Engine }

// loadOn resumes from path on n ranks with strategy (as Run does, without
// training) and checks that every rank holds params, its part of the
// optimizer state opt (and step) and the position pos.
func loadOn(t *testing.T, cfg train.Config, path string, n int, strategy string, params []float32, opt map[string][]float32, step int64, pos train.Position) {
	t.Helper()
	cfg.Strategy, cfg.Resume = strategy, path
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cs, err := inproc.New(n, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = commtest.RunRanks(context.Background(), cs, time.Minute, func(ctx context.Context, c comm.Comm) error {
		defer c.Close()
		m, err := models.New(cfg.Model, 1000+int64(c.Rank())) // not the saved model
		if err != nil {
			return err
		}
		s, err := train.NewStrategy(ctx, c, m, cfg)
		if err != nil {
			return err
		}
		defer s.Close()
		got, err := s.Load(ctx, path)
		if err != nil {
			return err
		}
		if got != pos {
			return fmt.Errorf("position %+v, want %+v", got, pos)
		}
		var flat []float32
		if strategy == "zero3" { // sharded at rest: gather them
			if flat, err = s.(zeroStrategy).Engine().FullParams(ctx); err != nil {
				return err
			}
		} else {
			flat = m.Flat.Value[:m.NumParams()] // without ZeRO's padding
		}
		if err := equalF32(flat, params); err != nil {
			return fmt.Errorf("parameters: %v", err)
		}
		if strategy == "zero3" {
			// Per-tensor shards: rank r holds [r*s_i, (r+1)*s_i) of tensor i.
			st, gotStep := s.(zeroStrategy).Engine().Optimizer().State()
			if gotStep != step || len(st) != len(opt) {
				return fmt.Errorf("optimizer step %d with %d tensors, want %d with %d", gotStep, len(st), step, len(opt))
			}
			for k, v := range st {
				want := make([]float32, len(v))
				off := 0
				for _, p := range m.Params {
					si := (p.Size + n - 1) / n
					a, b := c.Rank()*si, min((c.Rank()+1)*si, p.Size)
					if a < b {
						copy(want[off:], opt[k][p.Offset+a:p.Offset+b])
					}
					off += si
				}
				if err := equalF32(v, want); err != nil {
					return fmt.Errorf("optimizer %s: %v", k, err)
				}
			}
			return nil
		}
		lo, p := 0, m.NumParams()
		var o optim.Optimizer
		switch s := s.(type) {
		case zeroStrategy:
			lo, _ = s.Engine().Shard()
			o = s.Engine().Optimizer()
		case interface{ Optimizer() optim.Optimizer }: // DDP's, full size
			o = s.Optimizer()
		default:
			return fmt.Errorf("strategy %T", s)
		}
		st, gotStep := o.State()
		if gotStep != step || len(st) != len(opt) {
			return fmt.Errorf("optimizer step %d with %d tensors, want %d with %d", gotStep, len(st), step, len(opt))
		}
		for k, v := range st {
			hi := min(lo+len(v), p)
			want := append(append([]float32(nil), opt[k][min(lo, p):hi]...), make([]float32, len(v)-max(0, hi-lo))...)
			if err := equalF32(v, want); err != nil {
				return fmt.Errorf("optimizer %s from %d: %v", k, lo, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("loading %s on %d ranks with %s: %v", filepath.Base(path), n, strategy, err)
	}
}

// TestZeroReshard: a checkpoint saved by 3 zero2 ranks loads on 2 zero1
// ranks, 4 zero2 ranks and 1 DDP rank with exactly the saved parameters
// and optimizer state (spliced from the shard files by hand, and the
// parameters also as in the consolidated model file), and training goes
// on from it. A DDP checkpoint loads into ZeRO exactly as well.
func TestZeroReshard(t *testing.T) {
	dir := t.TempDir()
	cfg := base()
	cfg.Optimizer, cfg.LR, cfg.Epochs = "adam", 1e-3, 1
	saved := cfg
	saved.Strategy = "zero2"
	saved.Save = filepath.Join(dir, "z3.safetensors")
	if _, err := runRanks(t, 3, saved); err != nil {
		t.Fatal(err)
	}
	params, opt, step := splice(t, saved.Save, 3)
	if err := equalF32(params, modelFlat(t, "mlp", saved.Save)); err != nil {
		t.Fatalf("shards vs the consolidated model: %v", err)
	}
	if step != 13 || len(opt) != 2 { // 640 samples / (3*16) per step
		t.Fatalf("step %d, optimizer tensors %d", step, len(opt))
	}
	pos := train.Position{Epoch: 1, Batch: 0, Step: 13}
	for _, to := range []struct {
		n        int
		strategy string
	}{{2, "zero1"}, {4, "zero2"}, {1, "ddp"}, {2, "zero3"}} {
		loadOn(t, cfg, saved.Save, to.n, to.strategy, params, opt, step, pos)
	}
	// Training goes on, and saves again, on other world sizes.
	for _, to := range []struct {
		n        int
		strategy string
	}{{2, "zero1"}, {1, "ddp"}} {
		more := cfg
		more.Strategy, more.Epochs, more.MaxSteps = to.strategy, 2, 3
		more.Resume = saved.Save
		more.Save = filepath.Join(dir, fmt.Sprintf("more-%s.safetensors", to.strategy))
		got, err := runRanks(t, to.n, more)
		if err != nil {
			t.Fatalf("%s on %d ranks: %v", to.strategy, to.n, err)
		}
		if got[0].Steps != 16 || math.IsNaN(got[0].EvalLoss) {
			t.Fatalf("%s on %d ranks: %d steps, eval loss %v", to.strategy, to.n, got[0].Steps, got[0].EvalLoss)
		}
	}

	// DDP's format into ZeRO.
	d := cfg
	d.Save = filepath.Join(dir, "ddp.safetensors")
	if _, err := runRanks(t, 2, d); err != nil {
		t.Fatal(err)
	}
	dparams := modelFlat(t, "mlp", d.Save)
	ots, tmeta := readCk(t, train.TrainStatePath(d.Save))
	dopt := map[string][]float32{}
	for name, tt := range ots {
		v, _ := tt.Float32s()
		dopt[strings.TrimPrefix(name, "optimizer.")] = v
	}
	dstep, _ := strconv.ParseInt(tmeta["opt_step"], 10, 64)
	loadOn(t, cfg, d.Save, 3, "zero1", dparams, dopt, dstep, train.Position{Epoch: 1, Step: 20})
}

// relDiff is the largest relative L2 difference over the tensors of two
// model files.
func relDiff(t *testing.T, a, b string) float64 {
	ta, _ := readCk(t, a)
	tb, _ := readCk(t, b)
	worst := 0.0
	for name, x := range ta {
		va, _ := x.Float64s()
		vb, _ := tb[name].Float64s()
		var num, den float64
		for i := range va {
			num += (va[i] - vb[i]) * (va[i] - vb[i])
			den += vb[i] * vb[i]
		}
		if den > 0 {
			worst = max(worst, math.Sqrt(num/den))
		}
	}
	return worst
}

// TestCrossStrategyResume: a DDP checkpoint taken mid-epoch resumes with
// zero1, and a zero2 one with DDP, on the same 2 ranks, and both end where
// uninterrupted DDP does (within float32 rounding: ZeRO reduces in another
// order).
func TestCrossStrategyResume(t *testing.T) {
	dir := t.TempDir()
	cfg := base()
	cfg.Optimizer, cfg.LR = "adam", 1e-3
	full := cfg
	full.Save = filepath.Join(dir, "ddp-full.safetensors")
	want, err := runRanks(t, 2, full)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ from, to string }{{"ddp", "zero1"}, {"zero2", "ddp"}} {
		part := cfg
		part.Strategy, part.MaxSteps = tc.from, 13
		part.Save = filepath.Join(dir, tc.from+"-part.safetensors")
		if _, err := runRanks(t, 2, part); err != nil {
			t.Fatal(err)
		}
		rest := cfg
		rest.Strategy, rest.Resume = tc.to, part.Save
		rest.Save = filepath.Join(dir, tc.from+"-"+tc.to+".safetensors")
		got, err := runRanks(t, 2, rest)
		if err != nil {
			t.Fatalf("%s -> %s: %v", tc.from, tc.to, err)
		}
		if got[0].Steps != want[0].Steps || math.Abs(got[0].EvalLoss-want[0].EvalLoss) > 1e-4 {
			t.Errorf("%s -> %s: eval loss %v after %d steps, uninterrupted ddp %v after %d", tc.from, tc.to, got[0].EvalLoss, got[0].Steps, want[0].EvalLoss, want[0].Steps)
		}
		if d := relDiff(t, rest.Save, full.Save); d > 1e-4 {
			t.Errorf("%s -> %s: parameters differ from uninterrupted ddp by %.3g relative", tc.from, tc.to, d)
		}
	}
}

// TestConsolidateZero: the file ConsolidateZero builds from the shards
// equals rank 0's model file (batch-norm buffers included), loads into a
// fresh model, and can be built with rank 0's model file gone.
func TestConsolidateZero(t *testing.T) {
	dir := t.TempDir()
	cfg := base()
	cfg.Model, cfg.Strategy, cfg.Epochs, cfg.Limit, cfg.Batch = "cnn-bn", "zero1", 1, 64, 8
	cfg.Save = filepath.Join(dir, "bn.safetensors")
	if _, err := runRanks(t, 2, cfg); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "torch.safetensors")
	if err := train.ConsolidateZero(cfg.Save, out); err != nil {
		t.Fatal(err)
	}
	a, _ := readCk(t, cfg.Save)
	b, meta := readCk(t, out)
	sameTensors(t, "consolidated", a, b)
	if nb, _ := b["1.num_batches_tracked"].Int64s(); len(nb) != 1 || nb[0] != 4 {
		t.Errorf("num_batches_tracked %v, want [4]", nb)
	}
	if meta["model"] != "cnn-bn" || meta["step"] != "4" || meta["world_size"] != "2" {
		t.Errorf("metadata %v", meta)
	}
	m, _ := models.New("cnn-bn", 7)
	if err := train.LoadModelTensors(m, b, out); err != nil {
		t.Fatal(err)
	}
	if m.BNs[0].NumBatches != 4 {
		t.Errorf("loaded num_batches_tracked %d", m.BNs[0].NumBatches)
	}
	if exec.Command("/usr/bin/python3", "-c", "import torch").Run() == nil {
		if b, err := exec.Command("/usr/bin/python3", "-c", torchScript, out, "cnn-bn").CombinedOutput(); err != nil {
			t.Errorf("PyTorch's load_state_dict(strict=True): %v\n%s", err, b)
		}
	}
	// Without rank 0's model file: from the shard files alone.
	if err := os.Remove(cfg.Save); err != nil {
		t.Fatal(err)
	}
	out2 := filepath.Join(dir, "torch2.safetensors")
	if err := train.ConsolidateZero(cfg.Save, out2); err != nil {
		t.Fatal(err)
	}
	c, _ := readCk(t, out2)
	sameTensors(t, "consolidated from shards alone", a, c)
	if err := train.ConsolidateZero(out, filepath.Join(dir, "x")); !errors.Is(err, train.ErrCheckpoint) || !strings.Contains(err.Error(), "not a sharded checkpoint") {
		t.Errorf("consolidating a plain file: %v", err)
	}
	if err := train.ConsolidateZero(out, out); err == nil {
		t.Error("consolidating onto itself: no error")
	}
}

// TestZeroCheckpointErrors: every way a sharded checkpoint can be wrong is
// reported (wrapping ErrCheckpoint, naming the file), and a failed save
// fails every rank and leaves no model file.
func TestZeroCheckpointErrors(t *testing.T) {
	dir := t.TempDir()
	cfg := base()
	cfg.Strategy, cfg.Epochs, cfg.Limit = "zero1", 1, 128
	mk := func(name string, momentum float64) string {
		c := cfg
		c.Momentum = momentum
		c.Save = filepath.Join(dir, name)
		if _, err := runRanks(t, 2, c); err != nil {
			t.Fatal(err)
		}
		return c.Save
	}
	good, other, plain := mk("good", cfg.Momentum), mk("other", cfg.Momentum), mk("plain-sgd", 0)
	// copyCk copies the checkpoint at src (model and shard files) to a new
	// name and returns it.
	copyCk := func(src, name string) string {
		dst := filepath.Join(dir, name)
		for _, s := range []string{"", strings.TrimPrefix(train.ShardPath(src, 0, 2), src), strings.TrimPrefix(train.ShardPath(src, 1, 2), src)} {
			b, err := os.ReadFile(src + s)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst+s, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dst
	}
	missing := copyCk(good, "missing")
	os.Remove(train.ShardPath(missing, 1, 2))
	mixed := copyCk(good, "mixed")
	b, _ := os.ReadFile(train.ShardPath(other, 1, 2))
	os.WriteFile(train.ShardPath(mixed, 1, 2), b, 0o644)
	corrupt := copyCk(good, "corrupt")
	os.Truncate(train.ShardPath(corrupt, 0, 2), 100)

	cases := []struct {
		name string
		mod  func(c *train.Config)
		want error
		text string
	}{
		{"missing shard", func(c *train.Config) { c.Resume = missing }, train.ErrCheckpoint, filepath.Base(train.ShardPath(missing, 1, 2)) + " is missing"},
		{"mixed saves", func(c *train.Config) { c.Resume = mixed }, train.ErrCheckpoint, "different saves"},
		{"corrupt shard", func(c *train.Config) { c.Resume = corrupt }, checkpoint.ErrCorrupt, filepath.Base(train.ShardPath(corrupt, 0, 2))},
		{"other model", func(c *train.Config) { c.Resume = good; c.Model = "cnn" }, train.ErrCheckpoint, `"mlp" model`},
		{"other optimizer", func(c *train.Config) { c.Resume = good; c.Optimizer = "adam" }, train.ErrCheckpoint, `optimizer "sgd"`},
		{"optimizer state absent", func(c *train.Config) { c.Resume = plain }, train.ErrCheckpoint, "lack optimizer state"},
		{"other model into ddp", func(c *train.Config) { c.Resume = good; c.Model = "cnn"; c.Strategy = "ddp" }, train.ErrCheckpoint, `"mlp" model`},
		{"mixed saves into ddp", func(c *train.Config) { c.Resume = mixed; c.Strategy = "ddp" }, train.ErrCheckpoint, "different saves"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			tc.mod(&c)
			_, err := runRanks(t, 2, c)
			if !errors.Is(err, train.ErrCheckpoint) || !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("got %v, want %v mentioning %q", err, tc.want, tc.text)
			}
			t.Log(err)
		})
	}
	if err := train.ConsolidateZero(missing, filepath.Join(dir, "out")); !errors.Is(err, train.ErrCheckpoint) || !strings.Contains(err.Error(), "is missing") {
		t.Errorf("consolidating with a shard missing: %v", err)
	}

	// A save that fails on rank 1 fails on every rank, rank 0 naming rank 1,
	// and writes no model file.
	failing := cfg
	failing.Save = filepath.Join(dir, "failing")
	*train.TestHookSave = func(rank int, stage string) error {
		if rank == 1 && stage == "shard" {
			return errors.New("disk full")
		}
		return nil
	}
	defer func() { *train.TestHookSave = nil }()
	cs, err := inproc.New(2, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, 2)
	commtest.RunRanks(context.Background(), cs, time.Minute, func(ctx context.Context, c comm.Comm) error {
		defer c.Close()
		_, errs[c.Rank()] = train.Run(ctx, c, failing)
		return nil
	})
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "rank 1 failed to save") || errs[1] == nil {
		t.Errorf("rank errors: %v", errs)
	}
	if _, err := os.Stat(failing.Save); err == nil {
		t.Error("a failed save wrote the model file")
	}
}

// TestZeroSaveReplacesDDP: a ZeRO save over a DDP checkpoint removes the
// DDP sidecar it makes stale; the path then resumes as ZeRO's, with DDP too.
func TestZeroSaveReplacesDDP(t *testing.T) {
	dir := t.TempDir()
	cfg := base()
	cfg.Epochs, cfg.Limit = 1, 128
	cfg.Save = filepath.Join(dir, "ck")
	if _, err := runRanks(t, 2, cfg); err != nil {
		t.Fatal(err)
	}
	z := cfg
	z.Strategy = "zero2"
	if _, err := runRanks(t, 2, z); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(train.TrainStatePath(cfg.Save)); err == nil {
		t.Error("the stale DDP sidecar is still there")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "ck*"))
	sort.Strings(files)
	if len(files) != 3 {
		t.Errorf("files %v", files)
	}
	r := cfg
	r.Resume, r.Save, r.Epochs = cfg.Save, "", 2
	if _, err := runRanks(t, 1, r); err != nil {
		t.Fatal(err)
	}
}

// TestPipelineResume: a pipeline checkpoint taken mid-epoch (the stages'
// parameters and Adam state gathered into DDP's format) resumes the
// pipeline to exactly where an uninterrupted run ends, and resumes on one
// rank with DDP to the same place within float32 rounding.
func TestPipelineResume(t *testing.T) {
	dir := t.TempDir()
	cfg := base()
	cfg.Strategy, cfg.Options = "pipeline", &pp.Options{Microbatches: 3, Schedule: "1f1b"}
	cfg.Optimizer, cfg.LR = "adam", 1e-3
	full := cfg
	full.Save = filepath.Join(dir, "full.safetensors")
	want, err := runRanks(t, 2, full)
	if err != nil {
		t.Fatal(err)
	}
	part := cfg
	part.MaxSteps = 13 // mid-way through epoch 1 (40 steps per epoch)
	part.Save = filepath.Join(dir, "part.safetensors")
	if _, err := runRanks(t, 2, part); err != nil {
		t.Fatal(err)
	}
	if _, meta := readCk(t, part.Save); meta["step"] != "13" {
		t.Fatalf("part's metadata %v", meta)
	}
	rest := cfg
	rest.Resume = part.Save
	rest.Save = filepath.Join(dir, "rest.safetensors")
	got, err := runRanks(t, 2, rest)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].EvalLoss != want[0].EvalLoss || got[0].Steps != want[0].Steps {
		t.Fatalf("resumed: eval loss %v after %d steps; uninterrupted: %v after %d", got[0].EvalLoss, got[0].Steps, want[0].EvalLoss, want[0].Steps)
	}
	a, _ := readCk(t, full.Save)
	b, _ := readCk(t, rest.Save)
	sameTensors(t, "model", a, b)
	a, _ = readCk(t, train.TrainStatePath(full.Save))
	b, _ = readCk(t, train.TrainStatePath(rest.Save))
	sameTensors(t, "optimizer state", a, b)

	one := cfg
	one.Strategy, one.Options = "ddp", nil
	one.Resume = part.Save
	one.Save = filepath.Join(dir, "one.safetensors")
	got, err = runRanks(t, 1, one)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Steps != want[0].Steps || math.Abs(got[0].EvalLoss-want[0].EvalLoss) > 1e-4 {
		t.Errorf("pipeline -> ddp: eval loss %v after %d steps, uninterrupted pipeline %v after %d", got[0].EvalLoss, got[0].Steps, want[0].EvalLoss, want[0].Steps)
	}
	if d := relDiff(t, one.Save, full.Save); d > 1e-4 {
		t.Errorf("pipeline -> ddp: parameters differ from the uninterrupted pipeline by %.3g relative", d)
	}
}
