package main

// The language-model flags (-model gpt): the model's shape, and the
// defaults that make `train -model gpt` a run of a few minutes that beats
// the unigram baseline.

import (
	"flag"
	"fmt"
	"strings"

	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/train"
)

// gptFlags are -layers, -dmodel, -heads and -context.
type gptFlags struct{ layers, dmodel, heads, context int }

// The defaults -model gpt (and any gpt size) takes for the flags not given.
const (
	gptSteps     = 500 // when none of -epochs, -steps, -max-steps is given
	gptBatch     = 8
	gptOptimizer = "adamw"
	gptLR        = 3e-3
	gptWeightDec = 0.01
	gptWarmup    = 30
	gptSchedule  = "cosine"
	gptClipGrad  = 1.0
	gptEvalEvery = 250
	// A forward pass at batch 500 is slower per window than at 64, and
	// the 1024 evaluation windows split over 2 ranks fill 64-window
	// batches exactly. Much wider models take a smaller power of two
	// (gptEvalBatchFor).
	gptEvalBatch = 64
	// gptEvalBudget bounds the activations an evaluation batch holds. The
	// evaluation graph is forward only and frees each activation once it
	// is read (nn/forward.go): a pass holds about 16 T x max(D, 256)
	// values per window at once (gpt-large: 2 MB a window, 0.4 GB of peak
	// RSS for a pass at batch 64, whatever the depth).
	gptEvalBudget = 512 << 20
)

// gptEvalBatchFor is the default evaluation batch of a gpt of shape g: the
// largest power of two up to gptEvalBatch whose forward-only pass, about
// 16 T x max(D, 256) float32 values per window, fits gptEvalBudget.
func gptEvalBatchFor(g models.GPT) int {
	perWindow := 4 * 16 * g.Context * max(g.Dim, models.Vocab)
	b := gptEvalBatch
	for b > 1 && b*perWindow > gptEvalBudget {
		b /= 2
	}
	return b
}

// gptDefaultsDoc lists the gpt defaults (for -help).
func gptDefaultsDoc() string {
	return fmt.Sprintf("-model gpt defaults, for the flags not given: -batch %d -optimizer %s -lr %g -weight-decay %g -warmup %d -lr-schedule %s -clip-grad %g -eval-every %d -eval-batch %d (smaller for much wider models), and -steps %d unless -epochs, -steps or -max-steps is given",
		gptBatch, gptOptimizer, gptLR, gptWeightDec, gptWarmup, gptSchedule, gptClipGrad, gptEvalEvery, gptEvalBatch, gptSteps)
}

func (g *gptFlags) register(fs *flag.FlagSet, c *train.Config) {
	fs.IntVar(&g.layers, "layers", 0, "-model gpt: transformer blocks (default: the preset's; gpt has 4)")
	fs.IntVar(&g.dmodel, "dmodel", 0, "-model gpt: embedding width (default: the preset's; gpt has 160); -heads must divide it")
	fs.IntVar(&g.heads, "heads", 0, "-model gpt: attention heads (default: the preset's; gpt has 4)")
	fs.IntVar(&g.context, "context", 0, "-model gpt: context length in bytes (default: the preset's; gpt has 64)")
	fs.Int64Var(&c.Steps, "steps", 0, "end the run at this many optimizer steps, counted across resumes, or at the end of -epochs, whichever comes first (0: -epochs); -lr-schedule spans the run, and -max-steps only stops this run early")
	fs.IntVar(&c.Warmup, "warmup", 0, "raise the learning rate linearly to -lr over this many steps")
	fs.StringVar(&c.LRSchedule, "lr-schedule", "constant", fmt.Sprintf("learning rate after -warmup: constant, or cosine (decays to %g x -lr at the run's last step)", train.FinalLR))
	fs.Float64Var(&c.ClipGrad, "clip-grad", 0, "clip each step's averaged gradient to this global L2 norm (0: no clipping)")
	fs.IntVar(&c.EvalEvery, "eval-every", 0, "also evaluate on the held-out set every this many steps (0: at the end of each epoch and of the run only)")
}

// apply builds the model name from the shape flags and fills in the gpt
// defaults for the flags not set (set: the flags given).
func (g *gptFlags) apply(set map[string]bool, c *train.Config) error {
	shape := set["layers"] || set["dmodel"] || set["heads"] || set["context"]
	if !strings.HasPrefix(c.Model, "gpt") {
		if shape {
			return fmt.Errorf("-layers, -dmodel, -heads and -context size a -model gpt; -model %s has no such shape", c.Model)
		}
		return nil
	}
	if shape {
		base, ok := models.GPTShape(c.Model)
		if !ok {
			return fmt.Errorf("-model %s: not a gpt model to resize (use -model gpt with -layers, -dmodel, -heads, -context)", c.Model)
		}
		s := base
		for _, f := range []struct {
			name string
			v    int
			dst  *int
		}{{"layers", g.layers, &s.Layers}, {"dmodel", g.dmodel, &s.Dim}, {"heads", g.heads, &s.Heads}, {"context", g.context, &s.Context}} {
			if !set[f.name] {
				continue
			}
			if f.v < 1 {
				return fmt.Errorf("-%s %d: want at least 1", f.name, f.v)
			}
			*f.dst = f.v
		}
		if s.Dim%s.Heads != 0 {
			return fmt.Errorf("-heads %d does not divide -dmodel %d: each head takes -dmodel/-heads dimensions; choose heads among %v or another -dmodel",
				s.Heads, s.Dim, divisors(s.Dim))
		}
		if s != base {
			c.Model = s.Name()
		}
	}
	def := func(name string, do func()) {
		if !set[name] {
			do()
		}
	}
	if !set["epochs"] && !set["steps"] && !set["max-steps"] {
		c.Steps = gptSteps
	}
	def("batch", func() { c.Batch = gptBatch })
	def("optimizer", func() { c.Optimizer = gptOptimizer })
	def("lr", func() {
		if c.Optimizer == gptOptimizer || c.Optimizer == "adam" {
			c.LR = gptLR
		}
	})
	def("weight-decay", func() {
		if c.Optimizer == "adamw" {
			c.WeightDecay = gptWeightDec
		}
	})
	def("warmup", func() { c.Warmup = gptWarmup })
	def("lr-schedule", func() { c.LRSchedule = gptSchedule })
	def("clip-grad", func() { c.ClipGrad = gptClipGrad })
	def("eval-every", func() { c.EvalEvery = gptEvalEvery })
	def("eval-batch", func() {
		shape, ok := models.GPTShape(c.Model)
		c.EvalBatch = gptEvalBatch
		if ok {
			c.EvalBatch = gptEvalBatchFor(shape)
		}
	})
	return nil
}

// divisors lists n's divisors up to 64 (candidate head counts).
func divisors(n int) []int {
	var out []int
	for h := 1; h <= min(n, 64); h++ {
		if n%h == 0 {
			out = append(out, h)
		}
	}
	return out
}
