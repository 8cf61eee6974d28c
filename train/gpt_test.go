package train_test

import (
	"bytes"
	"encoding/json"
	"github.com/gdist/gdist/train"
	"github.com/gdist/gdist/train/pp"
	"math"
	"path/filepath"
	"strings"
	"testing"
)

// gptSGD is textConfig's tiny GPT trained with plain SGD for a few steps
// (Steps caps the epoch).
func gptSGD(t *testing.T) train.Config {
	cfg := textConfig(t)
	cfg.Optimizer, cfg.LR, cfg.Momentum, cfg.Steps = "sgd", 0.5, 0.9, 6
	return cfg
}

func relClose(a, b, tol float64) bool { return math.Abs(a-b) <= tol*math.Abs(b) }

// TestGPTEquivalence: a tiny GPT trained with SGD through Run ends with
// the same held-out loss (within 1e-4 relative) on 2 ranks at batch B as
// on 1 rank at batch 2B, with every ZeRO stage as with DDP, and on a
// 2-stage pipeline as the unsplit model.
func TestGPTEquivalence(t *testing.T) {
	cfg := gptSGD(t)
	one := cfg
	one.Batch = 2 * cfg.Batch
	ref, err := runRanks(t, 1, one)
	if err != nil {
		t.Fatal(err)
	}
	if ref[0].Steps != cfg.Steps {
		t.Fatalf("one rank ran %d steps, want -steps %d", ref[0].Steps, cfg.Steps)
	}
	for _, tc := range []struct {
		strategy string
		n, batch int
	}{
		{"ddp", 2, cfg.Batch},
		{"zero1", 2, cfg.Batch},
		{"zero2", 2, cfg.Batch},
		{"zero3", 2, cfg.Batch},
		{"pipeline", 2, 2 * cfg.Batch}, // 2 stages, one replica: the global batch is its batch
	} {
		c := cfg
		c.Strategy, c.Batch = tc.strategy, tc.batch
		got, err := runRanks(t, tc.n, c)
		if err != nil {
			t.Fatalf("%s: %v", tc.strategy, err)
		}
		if !relClose(got[0].EvalLoss, ref[0].EvalLoss, 1e-4) || got[0].Steps != ref[0].Steps {
			t.Errorf("%s on %d ranks: eval loss %v after %d steps; 1 rank at batch %d: %v after %d",
				tc.strategy, tc.n, got[0].EvalLoss, got[0].Steps, one.Batch, ref[0].EvalLoss, ref[0].Steps)
		}
	}
	// Control: training moved the model (the untrained loss is ln 256).
	if ref[0].EvalLoss > 0.9*math.Log(256) {
		t.Errorf("eval loss %v: SGD barely trained", ref[0].EvalLoss)
	}
}

// TestClipGradShardedMatchesDDP: with -clip-grad small enough that every
// step clips, ZeRO 1/2/3 and pipelines (4 stages; 2 stages x 2 replicas,
// whose replicas must not count the norm twice) end where DDP with
// clipping does (eval loss within 1e-5 relative, same median norm), and
// DDP without clipping does not.
func TestClipGradShardedMatchesDDP(t *testing.T) {
	cfg := gptSGD(t)
	cfg.Batch = 2
	cfg.ClipGrad = 0.3
	const n = 4
	ref, err := runRanks(t, n, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := ref[0]
	if r.ClippedSteps != r.Steps || r.GradNormP50 <= cfg.ClipGrad {
		t.Fatalf("ddp clipped %d of %d steps (median norm %v): -clip-grad %v does not trigger", r.ClippedSteps, r.Steps, r.GradNormP50, cfg.ClipGrad)
	}
	free := cfg
	free.ClipGrad = 0
	unclipped, err := runRanks(t, n, free)
	if err != nil {
		t.Fatal(err)
	}
	if relClose(unclipped[0].EvalLoss, r.EvalLoss, 1e-3) || unclipped[0].ClippedSteps != 0 {
		t.Fatalf("clipping changed nothing: eval loss %v with, %v without", r.EvalLoss, unclipped[0].EvalLoss)
	}
	for _, tc := range []struct {
		strategy      string
		stages, batch int
	}{
		{"zero1", 0, cfg.Batch},
		{"zero2", 0, cfg.Batch},
		{"zero3", 0, cfg.Batch},
		{"pipeline", 4, n * cfg.Batch},
		{"pipeline", 2, 2 * cfg.Batch},
	} {
		c := cfg
		c.Strategy, c.Batch = tc.strategy, tc.batch
		if tc.stages > 0 {
			c.Options = &pp.Options{Stages: tc.stages}
		}
		got, err := runRanks(t, n, c)
		if err != nil {
			t.Fatalf("%s: %v", tc.strategy, err)
		}
		g := got[0]
		if !relClose(g.EvalLoss, r.EvalLoss, 1e-5) || !relClose(g.GradNormP50, r.GradNormP50, 1e-5) || g.ClippedSteps != r.ClippedSteps {
			t.Errorf("%s (stages %d): eval loss %v, median norm %v, %d steps clipped; ddp: %v, %v, %d",
				tc.strategy, tc.stages, g.EvalLoss, g.GradNormP50, g.ClippedSteps, r.EvalLoss, r.GradNormP50, r.ClippedSteps)
		}
	}
}

// TestScheduleEveryStrategy: warm-up and cosine decay apply with every
// strategy (each ends where DDP does, within 1e-4), change the training
// (a constant rate ends elsewhere) and end at FinalLR of -lr.
func TestScheduleEveryStrategy(t *testing.T) {
	cfg := base()
	cfg.Epochs, cfg.Steps, cfg.Warmup, cfg.LRSchedule = 2, 30, 5, "cosine"
	ref, err := runRanks(t, 2, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := cfg.LR * (train.FinalLR + (1-train.FinalLR)*0.5*(1+math.Cos(math.Pi*24/25))); !relClose(ref[0].LR, want, 1e-12) || ref[0].Steps != 30 {
		t.Fatalf("last step's lr %v after %d steps, want %v after 30", ref[0].LR, ref[0].Steps, want)
	}
	flat := cfg
	flat.Warmup, flat.LRSchedule = 0, "constant"
	cst, err := runRanks(t, 2, flat)
	if err != nil {
		t.Fatal(err)
	}
	if relClose(cst[0].EvalLoss, ref[0].EvalLoss, 1e-3) || cst[0].LR != cfg.LR {
		t.Fatalf("the schedule changed nothing: eval loss %v with it, %v without (lr %v)", ref[0].EvalLoss, cst[0].EvalLoss, cst[0].LR)
	}
	for _, st := range []string{"zero1", "zero2", "zero3", "pipeline"} {
		c := cfg
		c.Strategy = st
		if st == "pipeline" {
			c.Batch *= 2 // 2 stages: one replica
		}
		got, err := runRanks(t, 2, c)
		if err != nil {
			t.Fatalf("%s: %v", st, err)
		}
		if math.Abs(got[0].EvalLoss-ref[0].EvalLoss) > 1e-4 || got[0].LR != ref[0].LR {
			t.Errorf("%s: eval loss %v, lr %v; ddp %v, %v", st, got[0].EvalLoss, got[0].LR, ref[0].EvalLoss, ref[0].LR)
		}
	}
}

// TestScheduleResumes: a run with warm-up, cosine decay and a step budget
// stopped mid-way (in the warm-up, and after it) and resumed, with DDP or
// ZeRO, ends exactly where the uninterrupted run does: the rate is a
// function of the global step, which the checkpoint keeps.
func TestScheduleResumes(t *testing.T) {
	for _, tc := range []struct {
		strategy string
		stop     int
	}{{"ddp", 3}, {"zero2", 13}} {
		t.Run(tc.strategy, func(t *testing.T) {
			dir := t.TempDir()
			full := base()
			full.Strategy, full.Steps, full.Warmup, full.LRSchedule, full.ClipGrad = tc.strategy, 30, 5, "cosine", 1
			want, err := runRanks(t, 2, full)
			if err != nil {
				t.Fatal(err)
			}
			part := full
			part.Save, part.MaxSteps = filepath.Join(dir, "part.safetensors"), tc.stop
			if _, err := runRanks(t, 2, part); err != nil {
				t.Fatal(err)
			}
			rest := full
			rest.Resume = part.Save
			got, err := runRanks(t, 2, rest)
			if err != nil {
				t.Fatal(err)
			}
			if got[0].EvalLoss != want[0].EvalLoss || got[0].Steps != 30 || got[0].LR != want[0].LR {
				t.Fatalf("resumed at step %d: eval loss %v after %d steps (lr %v); uninterrupted: %v after %d (lr %v)",
					tc.stop, got[0].EvalLoss, got[0].Steps, got[0].LR, want[0].EvalLoss, want[0].Steps, want[0].LR)
			}
		})
	}
}

// TestEvalEvery: -eval-every N prints an "eval" event every N steps (not
// at an epoch's end, which its epoch event reports), each the evaluation
// of the model at that step (a run stopped there evaluates the same), and
// a progress line; -steps ends the run mid-epoch and the bar counts steps.
func TestEvalEvery(t *testing.T) {
	var out, prog bytes.Buffer
	cfg := base() // 20 steps per epoch on 2 ranks
	cfg.EvalEvery, cfg.Steps, cfg.JSON, cfg.Out, cfg.Progress = 6, 33, true, &out, &prog
	sums, err := runRanks(t, 2, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var evals []train.EvalEvent
	var events []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var e train.EvalEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatal(err)
		}
		events = append(events, e.Event)
		if e.Event == "eval" {
			evals = append(evals, e)
		}
	}
	// Steps 6, 12, 18, 24, 30; the epoch ends at 20; the run at 33.
	if got := strings.Join(events, " "); got != "eval eval eval epoch eval eval summary" {
		t.Fatalf("events: %s", got)
	}
	for i, e := range evals {
		if e.Step != int64(6*(i+1)) || e.Epoch != 1+int(e.Step)/20 || !(e.EvalLoss > 0) || !(e.TrainLoss > 0) || e.LR != cfg.LR {
			t.Errorf("eval event %d: %+v", i, e)
		}
	}
	if sums[0].Steps != 33 {
		t.Errorf("-steps 33: ran %d", sums[0].Steps)
	}
	stop := base()
	stop.MaxSteps = 12
	at12, err := runRanks(t, 2, stop)
	if err != nil {
		t.Fatal(err)
	}
	if at12[0].EvalLoss != evals[1].EvalLoss || at12[0].TestAccuracy != evals[1].TestAccuracy {
		t.Errorf("eval event at step 12: loss %v, accuracy %v; a run stopped there: %v, %v", evals[1].EvalLoss, evals[1].TestAccuracy, at12[0].EvalLoss, at12[0].TestAccuracy)
	}
	p := prog.String()
	if !strings.Contains(p, "step 12/33: train loss") || !strings.Contains(p, "step [") || !strings.Contains(p, "33/33") {
		t.Errorf("progress output lacks the eval lines or the step bar:\n%s", p)
	}
}
