package main

import (
	"io"
	"strings"
	"testing"

	"github.com/gdist/gdist/models"
)

// TestGPTFlags: the shape flags name the model (starting from the -model
// preset); bad shapes and shape flags on other models are errors naming
// the flag; -model gpt alone takes the gpt defaults, flags given win, and
// mlp keeps its own defaults.
func TestGPTFlags(t *testing.T) {
	parseOK := func(args ...string) options {
		t.Helper()
		o, err := parse(append(args, "-nproc", "1"), io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return o
	}
	o := parseOK("-model", "gpt", "-layers", "2", "-dmodel", "64", "-heads", "8", "-context", "32")
	if want := (models.GPT{Layers: 2, Dim: 64, Heads: 8, Context: 32}).Name(); o.cfg.Model != want {
		t.Errorf("model %q, want %q", o.cfg.Model, want)
	}
	if o := parseOK("-model", "gpt-large", "-layers", "2"); o.cfg.Model != "gpt-L2-D256-H8-T128" {
		t.Errorf("gpt-large with -layers 2: %q", o.cfg.Model)
	}
	if o := parseOK("-model", "gpt", "-layers", "4"); o.cfg.Model != "gpt" {
		t.Errorf("the preset's own shape: %q, want gpt", o.cfg.Model)
	}
	c := parseOK("-model", "gpt").cfg
	if c.Steps != gptSteps || c.Batch != gptBatch || c.Optimizer != "adamw" || c.LR != gptLR || c.LRSchedule != "cosine" ||
		c.Warmup != gptWarmup || c.ClipGrad != gptClipGrad || c.EvalEvery != gptEvalEvery || c.WeightDecay != gptWeightDec || c.EvalBatch != gptEvalBatch {
		t.Errorf("gpt defaults: %+v", c)
	}
	// Evaluation is forward only (a pass holds a few layers' activations
	// whatever the depth: gpt-large at 64 peaks at 0.4 GB), so only much
	// wider models evaluate in smaller batches; -eval-batch wins.
	if c := parseOK("-model", "gpt-large").cfg; c.EvalBatch != gptEvalBatch {
		t.Errorf("gpt-large default eval batch %d, want %d", c.EvalBatch, gptEvalBatch)
	}
	if c := parseOK("-model", "gpt", "-layers", "64").cfg; c.EvalBatch != gptEvalBatch {
		t.Errorf("a 64-block gpt's default eval batch %d, want %d", c.EvalBatch, gptEvalBatch)
	}
	if c := parseOK("-model", "gpt-L2-D2048-H16-T512").cfg; c.EvalBatch >= gptEvalBatch || c.EvalBatch < 1 {
		t.Errorf("a D 2048, T 512 gpt's default eval batch %d, want below %d", c.EvalBatch, gptEvalBatch)
	}
	if c := parseOK("-model", "gpt-large", "-eval-batch", "64").cfg; c.EvalBatch != 64 {
		t.Errorf("-eval-batch 64 given: %d", c.EvalBatch)
	}
	c = parseOK("-model", "gpt", "-epochs", "1", "-optimizer", "sgd", "-lr-schedule", "constant", "-clip-grad", "0", "-batch", "4").cfg
	if c.Steps != 0 || c.Optimizer != "sgd" || c.LR != 0.05 || c.LRSchedule != "constant" || c.ClipGrad != 0 || c.Batch != 4 || c.WeightDecay != 0 {
		t.Errorf("gpt with flags given: %+v", c)
	}
	if c := parseOK("-model", "gpt", "-max-steps", "50").cfg; c.Steps != 0 || c.MaxSteps != 50 {
		t.Errorf("-max-steps 50: -steps %d", c.Steps)
	}
	c = parseOK("-model", "mlp").cfg
	if c.Steps != 0 || c.Batch != 64 || c.Optimizer != "sgd" || c.LR != 0.05 || c.LRSchedule != "constant" || c.Warmup != 0 || c.ClipGrad != 0 || c.EvalEvery != 0 || c.EvalBatch != 500 {
		t.Errorf("mlp defaults changed: %+v", c)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-model", "gpt", "-heads", "7"}, "-heads 7 does not divide -dmodel 160"},
		{[]string{"-model", "gpt", "-layers", "0"}, "-layers 0: want at least 1"},
		{[]string{"-model", "mlp", "-dmodel", "64"}, "size a -model gpt"},
		{[]string{"-model", "gpt", "-lr-schedule", "step"}, "-lr-schedule \"step\""},
		{[]string{"-model", "gpt", "-clip-grad", "-1"}, "-clip-grad -1"},
		{[]string{"-model", "gpt", "-warmup", "-2"}, "-warmup -2"},
		{[]string{"-model", "gpt", "-eval-every", "-5"}, "-eval-every -5"},
		{[]string{"-model", "gpt", "-steps", "-1"}, "-steps -1"},
	} {
		_, err := parse(append(tc.args, "-nproc", "1"), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error mentioning %q", tc.args, err, tc.want)
		}
	}
}
