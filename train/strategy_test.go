package train_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/checkpoint"
	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/train"
	"github.com/gdist/gdist/train/dp"
	_ "github.com/gdist/gdist/train/pp" // the pipeline, registered
)

func runOn(t *testing.T, n int, cfg train.Config) []*train.Summary {
	t.Helper()
	cs, err := inproc.New(n, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sums := make([]*train.Summary, n)
	err = commtest.RunRanks(context.Background(), cs, 3*time.Minute, func(ctx context.Context, c comm.Comm) error {
		defer c.Close()
		s, err := train.Run(ctx, c, cfg)
		sums[c.Rank()] = s
		return err
	})
	if err != nil {
		t.Fatalf("%s on %d ranks: %v", cfg.Strategy, n, err)
	}
	return sums
}

// TestRegisteredStrategy: a strategy registered from one file outside
// package train (example_strategy_test.go) trains, saves and resumes
// through train.Run: on 2 ranks it ends exactly where DDP on 1 rank does
// (the same checkpoint tensors, bit for bit; the evaluation, with the
// test set split over 2 ranks instead of 1, within rounding), and resuming it mid-epoch (from
// its own checkpoint or DDP's) changes nothing.
func TestRegisteredStrategy(t *testing.T) {
	dir := t.TempDir()
	cfg := train.Config{Model: "mlp", DataDir: "synthetic", Epochs: 2, Batch: 16, LR: 1e-3, Optimizer: "adam",
		Seed: 3, Limit: 640, Backend: "inproc"}
	ddp := cfg
	ddp.Strategy, ddp.Save = "ddp", filepath.Join(dir, "ddp.safetensors")
	want := runOn(t, 1, ddp)[0]
	rep := cfg
	rep.Strategy, rep.Save = "replicated", filepath.Join(dir, "rep.safetensors")
	got := runOn(t, 2, rep)
	for r, s := range got {
		if !near(s.EvalLoss, want.EvalLoss) || s.Steps != want.Steps || s.Strategy != "replicated" || s.GlobalBatch != 16 {
			t.Fatalf("rank %d: replicated on 2 ranks: eval loss %v after %d steps (global batch %d); ddp on 1: %v after %d",
				r, s.EvalLoss, s.Steps, s.GlobalBatch, want.EvalLoss, want.Steps)
		}
	}
	sameFiles(t, ddp.Save, rep.Save)

	for _, from := range []string{"replicated", "ddp"} {
		part := cfg
		part.Strategy, part.MaxSteps = from, 13
		part.Save = filepath.Join(dir, from+"-part.safetensors")
		runOn(t, 1, part)
		rest := cfg
		rest.Strategy, rest.Resume = "replicated", part.Save
		rest.Save = filepath.Join(dir, from+"-rest.safetensors")
		if s := runOn(t, 2, rest)[0]; !near(s.EvalLoss, want.EvalLoss) || s.Steps != want.Steps {
			t.Errorf("replicated resumed from %s: eval loss %v after %d steps, want %v after %d", from, s.EvalLoss, s.Steps, want.EvalLoss, want.Steps)
		}
		sameFiles(t, ddp.Save, rest.Save)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Abs(b) }

// sameFiles: the checkpoints at a and b (model and training state) hold
// the same tensors.
func sameFiles(t *testing.T, a, b string) {
	t.Helper()
	for _, suffix := range []string{"", ".train"} {
		fa, fb := a, b
		if suffix != "" {
			fa, fb = train.TrainStatePath(a), train.TrainStatePath(b)
		}
		ta, _, err := checkpoint.Read(fa)
		if err != nil {
			t.Fatal(err)
		}
		tb, _, err := checkpoint.Read(fb)
		if err != nil {
			t.Fatal(err)
		}
		if len(ta) != len(tb) {
			t.Errorf("%s: %d tensors, %s: %d", a+suffix, len(ta), b+suffix, len(tb))
		}
		for name, x := range ta {
			if !bytes.Equal(x.Data, tb[name].Data) {
				t.Errorf("tensor %s differs between %s and %s", name, a+suffix, b+suffix)
			}
		}
	}
}

// TestRegistry: validation goes by the registry, and a strategy's Check
// errors are configuration errors.
func TestRegistry(t *testing.T) {
	names := strings.Join(train.Strategies(), " ")
	if names != "ddp pipeline replicated zero1 zero2 zero3" {
		t.Errorf("Strategies() = %s", names)
	}
	if train.StrategyDoc("zero2") == "" || train.StrategyDoc("fsdp") != "" {
		t.Errorf("StrategyDoc")
	}
	cfg := train.Config{Model: "cnn-bn", Epochs: 1, Batch: 1, LR: 0.1, Strategy: "fsdp"}
	if err := cfg.Validate(); !errors.Is(err, train.ErrConfig) || !strings.Contains(err.Error(), `"fsdp"`) || !strings.Contains(err.Error(), "replicated") {
		t.Errorf("unknown strategy: %v", err)
	}
	cfg.Strategy, cfg.SyncBN = "replicated", true
	if err := cfg.Validate(); !errors.Is(err, train.ErrConfig) || !strings.Contains(err.Error(), "no ranks to share") {
		t.Errorf("replicated's own check: %v", err)
	}
	for _, tc := range []struct {
		name string
		f    train.Factory
	}{{"ddp", train.Factory{New: func(context.Context, train.Setup) (train.Strategy, error) { return nil, nil }}}, {"x", train.Factory{}}, {"", train.Factory{}}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q) did not panic", tc.name)
				}
			}()
			train.Register(tc.name, tc.f)
		}()
	}
}

// TestOptionalInterfaces: a strategy that is no LRSetter or GradClipper
// (the example "replicated") trains with a constant rate and no clipping,
// and -warmup, -lr-schedule or -clip-grad with it is a configuration error
// naming the flags.
func TestOptionalInterfaces(t *testing.T) {
	cfg := train.Config{Model: "mlp", DataDir: "synthetic", Epochs: 1, Steps: 2, Batch: 16, LR: 0.05, Optimizer: "sgd",
		Seed: 3, Limit: 64, Backend: "inproc", Strategy: "replicated"}
	runOn(t, 1, cfg)
	for _, tc := range []struct {
		mod  func(c *train.Config)
		want string
	}{
		{func(c *train.Config) { c.Warmup = 1 }, "drop -warmup and -lr-schedule"},
		{func(c *train.Config) { c.LRSchedule = "cosine" }, "drop -warmup and -lr-schedule"},
		{func(c *train.Config) { c.ClipGrad = 1 }, "drop -clip-grad"},
	} {
		c := cfg
		tc.mod(&c)
		cs, _ := inproc.New(1, comm.Options{})
		_, err := train.Run(context.Background(), cs[0], c)
		cs[0].Close()
		if !errors.Is(err, train.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want a configuration error saying %q", c, err, tc.want)
		}
	}
}

// TestStrategyFlags: every registered strategy's flags parse on one
// FlagSet (a flag ddp and zero share, once); the run's strategy takes
// the values given, a flag only other strategies have, given a value, is
// refused naming them, and Settings lists the strategy's options.
func TestStrategyFlags(t *testing.T) {
	parse := func(args ...string) (*train.StrategyFlags, *string) {
		fs := flag.NewFlagSet("train", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		strategy := fs.String("strategy", train.DefaultStrategy, "")
		sf := train.AddStrategyFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return sf, strategy
	}
	sf, s := parse("-strategy", "zero2", "-bucket-mb", "4", "-compress", "none")
	o, err := sf.Options(*s)
	if err != nil {
		t.Fatal(err)
	}
	if z, ok := o.(*dp.ZeroOptions); !ok || z.MB != 4 || z.FirstMB != dp.DefaultBuckets.FirstMB {
		t.Errorf("zero2's options %#v", o)
	}
	cfg := train.Config{Strategy: *s, Options: o}
	if got := strings.Join(cfg.Settings(), " "); !strings.Contains(got, "-strategy zero2 -bucket-mb 4 -first-bucket-mb 1 -syncbn") {
		t.Errorf("settings %s", got)
	}
	sf, s = parse("-no-overlap", "-stages", "2", "-verify-every", "3")
	if _, err := sf.Options(*s); !errors.Is(err, train.ErrConfig) ||
		!strings.Contains(err.Error(), "-stages applies to -strategy pipeline only (this run: ddp)") {
		t.Errorf("-stages with ddp: %v", err)
	}
	if o, err := sf.Options("replicated"); err == nil || !strings.Contains(err.Error(), "-no-overlap applies to -strategy ddp only") {
		t.Errorf("-no-overlap with replicated: %v %v", o, err)
	}
	if o, err := sf.Options("fsdp"); o != nil || err != nil {
		t.Errorf("unknown strategy: %v, %v", o, err)
	}
	// Options of another strategy's type are a configuration error.
	cfg = train.Config{Model: "mlp", Epochs: 1, Batch: 1, LR: 0.1, Strategy: "zero1", Options: dp.NewDDPOptions()}
	if err := cfg.Validate(); !errors.Is(err, train.ErrConfig) || !strings.Contains(err.Error(), "*dp.DDPOptions") {
		t.Errorf("ddp's options for zero1: %v", err)
	}
}
