package train

// What rank 0 shows of a run: a Reporter. The two built in write text
// lines or, with Config.JSON, JSON lines (events.go) to Config.Out, both
// with the progress bar (progress.go) on Config.Progress.

import (
	"fmt"
	"io"
)

// A Reporter shows a run's progress and results. Run calls it on rank 0
// only, from the goroutine that called Run, with values that are the
// same on every rank (all-reduced) but for StepProgress's. By default
// (Config.Reporter nil) text lines, or JSON lines with Config.JSON, go to
// Config.Out, and a progress bar to Config.Progress.
type Reporter interface {
	// Step: a training step ended.
	Step(p StepProgress)
	// Eval: an evaluation every Config.EvalEvery steps.
	Eval(e EvalEvent)
	// Epoch: an epoch ended, evaluated (and saved, with Config.Save).
	Epoch(e EpochEvent)
	// Summary: the run ended. It returns the first error that writing
	// any of the run's reports met (Run then fails with it, once the
	// training and its saves are done).
	Summary(s *Summary) error
}

// RunInfo is what the reports of one run share (not in the JSON lines).
type RunInfo struct {
	Steps  int64 // the run's length in steps (Config.Steps, or the epochs')
	Epochs int
	// Tokens says a language model trains: rates count tokens (bytes),
	// evaluations report bits per byte beside UnigramBPB, the unigram
	// model's on the same held-out text.
	Tokens     bool
	UnigramBPB float64
}

// StepProgress is where a run stands after a training step: this rank's
// view, for a progress bar.
type StepProgress struct {
	Run   RunInfo
	Step  int64 // steps taken, counted over resumes
	Epoch int   // the epoch under way, from 1
	Batch int   // the epoch's batches done
	// Batches is the epoch's number of batches.
	Batches int
	// Loss is the epoch's mean training loss so far, Rate the samples
	// (tokens with Run.Tokens) per second and ETA the seconds left: of
	// the epoch, or of the run with ByStep (a step budget shorter than
	// the epochs: the bar counts steps).
	Loss, Rate, ETA float64
	ByStep          bool
	// Last: the epoch's loop ends with this step (the epoch's end, or the
	// run's).
	Last bool
}

// newReporter is cfg's Reporter on rank 0 (lead), a silent one elsewhere.
func newReporter(cfg Config, lead bool) Reporter {
	switch {
	case !lead:
		return silent{}
	case cfg.Reporter != nil:
		return cfg.Reporter
	}
	w := lines{out: &errWriter{w: cfg.Out}, bar: newBar(cfg.Progress), progress: cfg.Progress}
	if cfg.JSON {
		return jsonReporter{w}
	}
	return textReporter{w}
}

// silent reports nothing (ranks other than 0).
type silent struct{}

func (silent) Step(StepProgress)      {}
func (silent) Eval(EvalEvent)         {}
func (silent) Epoch(EpochEvent)       {}
func (silent) Summary(*Summary) error { return nil }

// lines is what the text and JSON reporters share: where the lines go,
// keeping the first write error, and the progress bar.
type lines struct {
	out      *errWriter
	bar      *bar
	progress io.Writer // nil: none
}

// Step draws the bar.
func (l lines) Step(p StepProgress) {
	if p.Run.Tokens {
		l.bar.unit = "tokens"
	}
	if p.ByStep {
		l.bar.update("step", int(p.Step), int(p.Run.Steps), p.Rate, p.Loss, p.ETA)
	} else {
		l.bar.update(fmt.Sprintf("epoch %d/%d", p.Epoch, p.Run.Epochs), p.Batch, p.Batches, p.Rate, p.Loss, p.ETA)
	}
	if p.Last {
		l.bar.done()
	}
}

// textReporter writes a line per evaluation, epoch and run.
type textReporter struct{ lines }

func (r textReporter) Eval(e EvalEvent) {
	r.bar.done()
	fmt.Fprintln(r.out, evalLine(e))
}

func (r textReporter) Epoch(e EpochEvent) {
	if e.Run.Tokens {
		fmt.Fprintf(r.out, "epoch %d/%d: train loss %.4f, held-out %.4f bits per byte (unigram %.3f), next-byte accuracy %.4f, %.0f tokens/s\n",
			e.Epoch, e.Run.Epochs, e.TrainLoss, e.EvalBPB, e.Run.UnigramBPB, e.TestAccuracy, e.TokensPerSec)
		return
	}
	fmt.Fprintf(r.out, "epoch %d/%d: train loss %.4f, test loss %.4f, test accuracy %.4f, %.0f samples/s\n",
		e.Epoch, e.Run.Epochs, e.TrainLoss, e.EvalLoss, e.TestAccuracy, e.SamplesPerSec)
}

func (r textReporter) Summary(s *Summary) error {
	if s.Run.Tokens {
		fmt.Fprintf(r.out, "done: %s on %d rank(s), %d steps, %.0f tokens/s, step p50 %.2f ms, held-out %.4f bits per byte (unigram %.3f), next-byte accuracy %.4f\n",
			s.Model, s.WorldSize, s.Steps, s.TokensPerSec, s.StepMsP50, s.EvalBPB, s.UnigramBPB, s.TestAccuracy)
	} else {
		fmt.Fprintf(r.out, "done: %s on %d rank(s), %d steps, %.0f samples/s, step p50 %.2f ms, test loss %.4f, test accuracy %.4f\n",
			s.Model, s.WorldSize, s.Steps, s.SamplesPerSec, s.StepMsP50, s.EvalLoss, s.TestAccuracy)
	}
	if s.Device != "" && s.Device != "cpu" {
		fmt.Fprintf(r.out, "device %s (%s): peak device memory %.1f MiB\n", s.Device, s.Precision, float64(s.PeakDeviceBytes)/(1<<20))
	}
	if s.Pipeline != nil {
		fmt.Fprintln(r.out, s.Pipeline.Text())
	}
	return r.out.err
}

// jsonReporter writes a JSON line per evaluation, epoch and run (events.go:
// null for a NaN or infinite number), and the evaluations' text lines
// to the progress stream too.
type jsonReporter struct{ lines }

func (r jsonReporter) Eval(e EvalEvent) {
	r.bar.done()
	writeEvent(r.out, e)
	if r.progress != nil {
		fmt.Fprintln(r.progress, evalLine(e))
	}
}

func (r jsonReporter) Epoch(e EpochEvent) { writeEvent(r.out, e) }

func (r jsonReporter) Summary(s *Summary) error {
	writeEvent(r.out, s)
	return r.out.err
}

// evalLine is an evaluation's text line.
func evalLine(e EvalEvent) string {
	if e.Run.Tokens {
		return fmt.Sprintf("step %d/%d: train loss %.4f, held-out %.4f bits per byte (unigram %.3f), next-byte accuracy %.4f, lr %.3g",
			e.Step, e.Run.Steps, e.TrainLoss, e.EvalBPB, e.Run.UnigramBPB, e.TestAccuracy, e.LR)
	}
	return fmt.Sprintf("step %d/%d: train loss %.4f, test loss %.4f, test accuracy %.4f, lr %.3g", e.Step, e.Run.Steps, e.TrainLoss, e.EvalLoss, e.TestAccuracy, e.LR)
}
