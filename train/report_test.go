package train_test

import (
	"bytes"
	"testing"

	"github.com/gdist/gdist/train"
)

// recorder is a Reporter that keeps what it is shown.
type recorder struct {
	steps   []train.StepProgress
	evals   []train.EvalEvent
	epochs  []train.EpochEvent
	summary *train.Summary
}

func (r *recorder) Step(p train.StepProgress)      { r.steps = append(r.steps, p) }
func (r *recorder) Eval(e train.EvalEvent)         { r.evals = append(r.evals, e) }
func (r *recorder) Epoch(e train.EpochEvent)       { r.epochs = append(r.epochs, e) }
func (r *recorder) Summary(s *train.Summary) error { r.summary = s; return nil }

// TestReporter: Config.Reporter is shown rank 0's every step, evaluation,
// epoch and the summary, in order, instead of the lines on Out.
func TestReporter(t *testing.T) {
	var out bytes.Buffer
	rec := &recorder{}
	cfg := train.Config{Model: "mlp", DataDir: "synthetic", Epochs: 2, Batch: 16, LR: 0.05, Optimizer: "sgd",
		Seed: 3, Limit: 320, Backend: "inproc", EvalEvery: 4, Reporter: rec, Out: &out}
	s := runOn(t, 2, cfg)[0]
	if out.Len() != 0 {
		t.Errorf("output beside the reporter: %q", out.String())
	}
	// 320 samples, 2 ranks x 16: 10 steps an epoch.
	if len(rec.steps) != 20 || len(rec.epochs) != 2 || rec.summary == nil || rec.summary.EvalLoss != s.EvalLoss {
		t.Fatalf("%d steps, %d epochs, summary %v", len(rec.steps), len(rec.epochs), rec.summary)
	}
	for i, p := range rec.steps {
		last := i%10 == 9
		if p.Step != int64(i+1) || p.Epoch != i/10+1 || p.Batch != i%10+1 || p.Batches != 10 || p.Last != last || p.Run.Steps != 20 || p.Run.Epochs != 2 {
			t.Errorf("step %d: %+v", i+1, p)
		}
	}
	// Every 4 steps, but at an epoch's end (its own evaluation reports it).
	var at []int64
	for _, e := range rec.evals {
		at = append(at, e.Step)
	}
	if want := []int64{4, 8, 12, 16}; len(at) != len(want) || at[0] != 4 || at[1] != 8 || at[2] != 12 || at[3] != 16 {
		t.Errorf("evaluations at steps %v, want %v", at, want)
	}
	if rec.epochs[1].EvalLoss != s.EvalLoss || rec.epochs[1].Run.Epochs != 2 {
		t.Errorf("last epoch %+v, summary eval loss %v", rec.epochs[1], s.EvalLoss)
	}
}
