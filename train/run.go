package train

// Run in phases: set-up (the data, the model, the checks every rank
// shares, the strategy), resume (the checkpoint to go on from, and what
// the loop needs from there on), the loop (epochs of steps, evaluations,
// saves) and the finish (the last evaluation and save, the summary). The
// phases share a run; the steps' mechanics are a stepper's, rank 0's
// output a Reporter's (report.go).

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/data"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/syncbn"
)

// Run trains on c. Every rank calls it with the same cfg; rank 0 writes the
// progress, events and checkpoints. It returns the summary (on every rank).
//
// A strategy that fails to close (Strategy.Close: a collective still
// pending on its device aborted, device memory not freed) fails the run
// even when everything before went well: Run then returns the summary,
// already reported, with Close's error, which says that the run itself
// ended well and where its checkpoint is (saved before Close, never
// touched by it). When the run failed too, the error is both, joined
// (errors.Join), the run's first.
func Run(ctx context.Context, c comm.Comm, cfg Config) (s *Summary, err error) {
	r := &run{c: c, lead: c.Rank() == 0}
	defer func() { err = r.close(err) }()
	if err := r.setUp(ctx, cfg); err != nil {
		return nil, err
	}
	if err := r.resume(ctx); err != nil {
		return nil, err
	}
	if err := r.loop(ctx); err != nil {
		return nil, err
	}
	return r.finish(ctx)
}

// run is one rank's training run: what Run's phases share.
type run struct {
	c        comm.Comm
	cfg      Config // validated: cfg.World is c's size
	lead     bool   // rank 0: reports, commits the saves
	start    time.Time
	undo     []func() // what close releases, in reverse order
	closeErr error    // the strategy's Close's (closeStrategy)

	// Set up.
	train, test Samples
	m           *models.Model
	from        string // the checkpoint to resume from, "" for none
	syncer      *syncbn.Syncer
	strat       Strategy

	// Resumed.
	pos       Position // where training stands
	nb        int      // batches per epoch
	dataWorld int      // the model's replicas
	st        *stepper
	ev        *models.Graph // the evaluation graph
	sv        *saver
	prog      *progressFile // rank 0's, for restarts; nil: none
	rep       Reporter
	info      RunInfo
	byStep    bool // the run ends within its epochs: the bar counts steps

	tally
}

// tally is what the loop counts.
type tally struct {
	steps        int64 // taken, counted over resumes
	resumedStep  int64
	stepsThisRun int
	samples      int           // trained this run, all replicas
	trainTime    time.Duration // inside the steps
	stepTimes    []float64     // ms
	loopStart    time.Time
	lastTrain    float64    // the last epoch's mean training loss
	lastEval     [2]float64 // the last evaluation's loss and accuracy
	// The training loss since the last "eval" event.
	sinceSum           float64
	sinceN             int
	stopped, preempted bool // within an epoch (MaxSteps, Config.Stop)
}

// atClose has close call f.
func (r *run) atClose(f func()) { r.undo = append(r.undo, f) }

// close releases what the phases took, the last first, and returns the
// run's error, runErr, joined with the strategy's Close error (runErr
// first), or either alone. The strategy's error names the rank and,
// after a run that ended well, says so and where its checkpoint is.
func (r *run) close(runErr error) error {
	for i := len(r.undo) - 1; i >= 0; i-- {
		r.undo[i]()
	}
	if r.closeErr == nil {
		return runErr
	}
	if runErr != nil {
		return errors.Join(runErr, fmt.Errorf("train: rank %d: closing -strategy %s: %w", r.c.Rank(), r.cfg.Strategy, r.closeErr))
	}
	note := "nothing was saved (no -save)"
	if r.cfg.Save != "" {
		note = fmt.Sprintf("its checkpoint at %s is complete", r.cfg.Save)
	}
	return fmt.Errorf("train: rank %d: the run ended well (step %d; %s), but closing -strategy %s failed: %w",
		r.c.Rank(), r.steps, note, r.cfg.Strategy, r.closeErr)
}

// closeStrategy closes the strategy, keeping its error for close.
func (r *run) closeStrategy() {
	if testHookClose != nil {
		r.closeErr = testHookClose(r.c.Rank(), r.strat)
		return
	}
	r.closeErr = r.strat.Close()
}

// testHookClose, when a test sets it, closes each rank's strategy in
// place of Strategy.Close (a test's Close that fails).
var testHookClose func(rank int, s Strategy) error

// setUp validates cfg, loads the data, builds the model and checks, with
// every rank, that they all run the same settings; rank 0 locks the save
// path; then -syncbn converts the model and the strategy is built.
// Collective.
func (r *run) setUp(ctx context.Context, cfg Config) (err error) {
	cfg.World = r.c.Size()
	if err := cfg.Validate(); err != nil {
		return err
	}
	r.cfg, r.start = cfg, time.Now()
	if cfg.Data != nil {
		r.train, r.test = cfg.Data.Train, cfg.Data.Test
	} else if r.train, r.test, err = LoadData(cfg); err != nil {
		return err
	}
	r.train = limit(r.train, cfg.Limit)
	if r.m, err = models.New(cfg.Model, cfg.Seed); err != nil {
		return err
	}
	if r.train.SampleSize() != r.m.InputSize() || r.train.LabelsPerSample() != r.m.LabelsPerSample() {
		return fmt.Errorf("%w: the data has samples of %d values and %d labels; model %s takes %d and %d", ErrConfig,
			r.train.SampleSize(), r.train.LabelsPerSample(), cfg.Model, r.m.InputSize(), r.m.LabelsPerSample())
	}
	r.from = resumePath(cfg)
	// The first collective: every rank runs the same configuration, on
	// the same data, from the same checkpoint (fingerprint.go).
	if err := checkSameConfig(ctx, r.c, &r.cfg, fmt.Sprintf("(training-samples) %d", r.train.Len()),
		fmt.Sprintf("(test-samples) %d", r.test.Len()), "(resuming-from) "+checkpointName(r.from)); err != nil {
		return err
	}
	if err := r.holdSaveLock(ctx); err != nil {
		return err
	}
	if cfg.SyncBN {
		// Before the strategy: its broadcast of rank 0's state then covers
		// the running statistics, which SyncBN keeps identical from there on.
		if r.syncer, err = syncbn.Convert(ctx, r.m, r.c); err != nil {
			return err
		}
		r.atClose(func() { r.syncer.Close() })
	}
	if r.strat, err = NewStrategy(ctx, r.c, r.m, r.cfg); err != nil {
		return err
	}
	r.atClose(r.closeStrategy)
	return nil
}

// resumePath is the checkpoint cfg goes on from ("": none): Resume, or
// for "auto" (which a restarted generation with Save implies) Save's
// checkpoint if there is one.
func resumePath(cfg Config) string {
	resume := cfg.Resume
	if resume == "" && cfg.Restarts > 0 && cfg.Save != "" {
		resume = "auto"
	}
	if resume == "auto" {
		resume = ""
		if _, err := os.Stat(cfg.Save); err == nil {
			resume = cfg.Save
		}
	}
	return resume
}

// checkpointName says which checkpoint path holds, for the ranks to
// compare.
func checkpointName(path string) string {
	if path == "" {
		return "(none)"
	}
	if meta, err := readMeta(path); err == nil {
		return "step " + meta["step"] + ", save " + meta["save_id"]
	}
	return "(unreadable)"
}

// holdSaveLock: one job per -save path. Rank 0, which removes stale files
// and commits every save, holds its lock for the whole run and checks its
// file system's room; every rank learns whether it could. Collective.
func (r *run) holdSaveLock(ctx context.Context) error {
	if r.cfg.Save == "" {
		return nil
	}
	var lerr error
	if r.lead {
		var release func()
		if release, lerr = lockSave(r.cfg.Save); lerr == nil {
			r.atClose(release)
			lerr = checkSaveSpace(r.cfg, r.m)
		}
	}
	if err := comm.Agree(ctx, r.c, lerr); err != nil {
		var re *comm.RankError
		if errors.As(err, &re) {
			return fmt.Errorf("%w: %s", ErrConfig, re.Msg)
		}
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return nil
}

// resume loads the checkpoint to go on from, if any, into the strategy,
// and readies what the loop needs from there: this rank's sampler (its
// replica's), the evaluation graph, the saver, rank 0's progress file for
// restarts, the steps (schedule, clipping) and the reporter. Collective.
func (r *run) resume(ctx context.Context) (err error) {
	cfg := r.cfg
	if r.from != "" {
		// Every rank reads the checkpoint, of either format.
		if r.pos, err = r.strat.Load(ctx, r.from); err != nil {
			return err
		}
	}
	// The data-parallel world: every rank, or, for a pipeline, its
	// replicas (the K ranks of one pipeline share each batch).
	rank, world := r.strat.DataRank()
	smp := data.Sampler{N: r.train.Len(), World: world, Rank: rank, Batch: cfg.Batch, Seed: cfg.Seed, Pad: cfg.Pad}
	if err := smp.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	r.nb, r.dataWorld = smp.NumBatches(), world
	if r.ev, err = r.m.NewGraph(cfg.EvalBatch, false); err != nil {
		return err
	}
	r.atClose(func() { r.ev.Close() })
	r.sv = newSaver(r.strat, r.c, cfg, map[string]string{"seed": strconv.FormatInt(cfg.Seed, 10)}, r.m)
	r.atClose(r.sv.abandon)
	if r.lead && cfg.Save != "" && (cfg.Restartable || cfg.Restarts > 0) {
		if r.prog, err = openProgress(cfg.Save, r.pos.Step, cfg.Restarts > 0); err != nil {
			return err
		}
		r.atClose(r.prog.close)
		if cfg.Restarts > 0 && cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "restart %d: resumed at step %d (%d step(s) recomputed in all)\n", cfg.Restarts, r.pos.Step, r.prog.recomputed)
		}
	}
	total := cfg.runSteps(r.nb)
	if r.st, err = newStepper(r, smp, total); err != nil {
		return err
	}
	r.byStep = total < int64(cfg.Epochs)*int64(r.nb)
	r.steps, r.resumedStep = r.pos.Step, r.pos.Step
	r.info = RunInfo{Steps: total, Epochs: cfg.Epochs, Tokens: r.m.LabelsPerSample() > 1, UnigramBPB: unigram(r.test)}
	r.rep = newReporter(cfg, r.lead)
	return nil
}

// loop trains epoch after epoch from r.pos until the epochs or the step
// budget are done or the run stops within an epoch (MaxSteps,
// Config.Stop). Collective.
func (r *run) loop(ctx context.Context) error {
	r.loopStart = time.Now()
	for epoch := r.pos.Epoch; epoch < r.cfg.Epochs && !r.stopped && !(r.cfg.Steps > 0 && r.steps >= r.cfg.Steps); epoch++ {
		if err := r.epoch(ctx, epoch); err != nil {
			return err
		}
	}
	return nil
}

// epochState is one epoch's counts.
type epochState struct {
	first   int // the first batch (a resumed epoch's)
	start   time.Time
	train   time.Duration // the steps' time, evaluation excluded
	lossSum float64
	lossN   int
	samples int
}

// epoch trains epoch's batches and, unless the run stopped within it,
// evaluates it, saves and reports it. Collective.
func (r *run) epoch(ctx context.Context, epoch int) error {
	e := &epochState{start: time.Now()}
	if epoch == r.pos.Epoch {
		e.first = r.pos.Batch
	}
	for k := e.first; k < r.nb; k++ {
		end, err := r.step(ctx, e, epoch, k)
		if err != nil {
			return err
		}
		if end {
			break
		}
	}
	if e.lossN > 0 {
		// Mean training loss over the epoch, over all ranks.
		v := []float64{e.lossSum, float64(e.lossN)}
		if err := comm.Run(ctx)(r.c.AllReduce(ctx, comm.FromSlice(v), comm.Sum)); err != nil {
			return err
		}
		r.lastTrain = v[0] / v[1]
	}
	if r.stopped {
		return nil
	}
	r.pos = Position{Epoch: epoch + 1, Step: r.steps}
	if err := syncBuffers(ctx, r.c, r.m); err != nil {
		return err
	}
	loss, acc, err := r.evaluate(ctx)
	if err != nil {
		return err
	}
	r.lastEval = [2]float64{loss, acc}
	ev := EpochEvent{Event: "epoch", Epoch: epoch + 1, Steps: r.steps, TrainLoss: r.lastTrain, EvalLoss: loss,
		TestAccuracy: acc, SamplesPerSec: float64(e.samples) / math.Max(e.train.Seconds(), 1e-9), Seconds: time.Since(e.start).Seconds(), Run: r.info}
	if r.info.Tokens {
		ev.TokensPerSec = ev.SamplesPerSec * float64(r.m.LabelsPerSample())
		ev.EvalBPB = loss / math.Ln2
	}
	// The same on every rank: the losses and accuracy are all-reduced.
	bad := nonFiniteFields(ev)
	if bad == nil {
		if err := r.sv.save(ctx, r.pos); err != nil {
			return err
		}
	} else if err := r.sv.finish(ctx); err != nil {
		return err
	}
	r.rep.Epoch(ev)
	if bad != nil {
		return metricError(fmt.Sprintf("epoch %d", epoch+1), bad, lastCheckpointNote(r.cfg.Save, r.steps))
	}
	return nil
}

// step trains batch k of epoch, has every rank agree on it (a finite
// loss, a stop asked for, the saves under way: checkStep), counts it,
// reports it, and evaluates or saves when due. end says the epoch's loop
// ends with it: the run's end, or a stop. Collective.
func (r *run) step(ctx context.Context, e *epochState, epoch, k int) (end bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	t0 := time.Now()
	loss, err := r.st.step(ctx, epoch, k, r.steps)
	if err != nil {
		return false, err
	}
	// Stop at the first non-finite loss, on every rank alike, with
	// nothing saved (saves check the state too: finite.go).
	stop, saving, err := checkStep(ctx, r.c, loss, stopRequested(r.cfg.Stop), r.sv.status(), r.steps+1, epoch, k)
	if err != nil {
		if errors.Is(err, ErrDiverged) {
			// A save under way holds an earlier, checked state: let it
			// end, then say where the last checkpoint is.
			r.sv.abandon()
			err = fmt.Errorf("%w. %s", err, lastCheckpointNote(r.cfg.Save, r.steps+1))
		}
		return false, err
	}
	if err := r.sv.advance(ctx, saving); err != nil {
		return false, err
	}
	if r.cfg.AfterStep != nil {
		r.cfg.AfterStep(r.c.Rank(), r.steps+1)
	}
	dt := time.Since(t0)
	r.trainTime += dt
	e.train += dt
	r.stepTimes = append(r.stepTimes, dt.Seconds()*1e3)
	r.steps++
	r.stepsThisRun++
	r.samples += r.cfg.Batch * r.dataWorld
	e.samples += r.cfg.Batch * r.dataWorld
	e.lossSum += float64(loss)
	e.lossN++
	if err := r.prog.step(r.steps); err != nil {
		return false, err
	}
	r.sinceSum += float64(loss)
	r.sinceN++
	end = stop || r.cfg.MaxSteps > 0 && r.stepsThisRun >= r.cfg.MaxSteps || r.cfg.Steps > 0 && r.steps >= r.cfg.Steps
	if r.lead {
		r.rep.Step(r.progress(e, epoch, k, end))
	}
	// Not at the end of an epoch or of the run: their own evaluation
	// reports that step.
	if r.cfg.EvalEvery > 0 && r.steps%int64(r.cfg.EvalEvery) == 0 && !end && k+1 < r.nb {
		if err := r.evalEvery(ctx, epoch); err != nil {
			return false, err
		}
	}
	if end {
		r.preempted = stop
		r.pos = nextPos(epoch, k, r.nb, r.steps)
		r.stopped = true
		return true, nil
	}
	if r.cfg.SaveEvery > 0 && r.steps%int64(r.cfg.SaveEvery) == 0 {
		if err := r.sv.save(ctx, nextPos(epoch, k, r.nb, r.steps)); err != nil {
			return false, err
		}
	}
	return false, nil
}

// progress is where the run stands after batch k of epoch (end: the
// epoch's loop ends there), for the Reporter.
func (r *run) progress(e *epochState, epoch, k int, end bool) StepProgress {
	p := StepProgress{Run: r.info, Step: r.steps, Epoch: epoch + 1, Batch: k + 1, Batches: r.nb,
		Loss: e.lossSum / float64(e.lossN), ByStep: r.byStep, Last: end || k+1 == r.nb}
	lps := r.m.LabelsPerSample()
	if r.byStep {
		el := time.Since(r.loopStart).Seconds()
		p.Rate = float64(r.stepsThisRun*r.cfg.Batch*r.dataWorld*lps) / el
		p.ETA = el / float64(r.stepsThisRun) * float64(r.info.Steps-r.steps)
	} else {
		el := time.Since(e.start).Seconds()
		p.Rate = float64(e.samples*lps) / el
		p.ETA = el / float64(k+1-e.first) * float64(r.nb-k-1)
	}
	return p
}

// evalEvery evaluates between the epochs' ends (Config.EvalEvery): the
// mean training loss since the last such evaluation, and the held-out
// set's. Collective.
func (r *run) evalEvery(ctx context.Context, epoch int) error {
	v := []float64{r.sinceSum, float64(r.sinceN)}
	if err := comm.Run(ctx)(r.c.AllReduce(ctx, comm.FromSlice(v), comm.Sum)); err != nil {
		return err
	}
	r.sinceSum, r.sinceN = 0, 0
	if err := syncBuffers(ctx, r.c, r.m); err != nil {
		return err
	}
	loss, acc, err := r.evaluate(ctx)
	if err != nil {
		return err
	}
	e := EvalEvent{Event: "eval", Step: r.steps, Epoch: epoch + 1, TrainLoss: v[0] / math.Max(v[1], 1), EvalLoss: loss, TestAccuracy: acc,
		LR: r.st.lastLR, Seconds: time.Since(r.start).Seconds(), Run: r.info}
	if r.info.Tokens {
		e.EvalBPB = loss / math.Ln2
	}
	// The same on every rank: the losses and accuracy are all-reduced.
	bad := nonFiniteFields(e)
	r.rep.Eval(e)
	if bad != nil {
		return metricError(fmt.Sprintf("step %d", r.steps), bad, lastCheckpointNote(r.cfg.Save, r.steps))
	}
	return nil
}

// evaluate runs one evaluation of the held-out set, inside the
// strategy's Eval. Collective.
func (r *run) evaluate(ctx context.Context) (loss, acc float64, err error) {
	if be, ok := r.strat.(BatchEvaluator); ok {
		c := r.c
		if es, ok := r.strat.(EvalSharder); ok {
			c = es.EvalComm()
		}
		err = be.EvalBatches(ctx, func(batch EvalBatch) (err error) {
			loss, acc, err = EvaluateBatches(ctx, c, r.m, r.ev.Batch, r.test, batch)
			return err
		})
		return loss, acc, err
	}
	err = r.strat.Eval(ctx, func() (err error) {
		loss, acc, err = Evaluate(ctx, r.c, r.ev, r.test)
		return err
	})
	return loss, acc, err
}

// finish ends the run: the last evaluation and save (final), the saves
// written to the end, the summary, reported. A non-finite metric in it is
// an error, and so is a failed write of the reports. Collective.
func (r *run) finish(ctx context.Context) (*Summary, error) {
	evalBad, err := r.final(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.sv.finish(ctx); err != nil {
		return nil, err
	}
	s, err := r.summary(ctx)
	if err != nil {
		return nil, err
	}
	bad := nonFiniteFields(s)
	werr := r.rep.Summary(s)
	if bad != nil {
		note := ""
		if evalBad {
			note = lastCheckpointNote(r.cfg.Save, r.steps)
		}
		return nil, metricError("the end of the run", bad, note)
	}
	if werr != nil {
		return nil, fmt.Errorf("train: writing the results: %w", werr)
	}
	r.prog.remove() // done: no restart will need it
	return s, nil
}

// final evaluates and saves a run stopped within an epoch (MaxSteps,
// Config.Stop: unless preempted, evaluate, so the summary is complete;
// save where it stands), and evaluates one resumed at its very end. A
// non-finite evaluation (evalBad) skips the save: the summary then
// reports it, and Run fails. A preempted run returns ErrPreempted.
// Collective.
func (r *run) final(ctx context.Context) (evalBad bool, err error) {
	if !r.stopped {
		if r.lastEval == [2]float64{} {
			// Resumed at the very end: nothing trained, still report.
			l, a, err := r.evaluate(ctx)
			if err != nil {
				return false, err
			}
			r.lastEval = [2]float64{l, a}
		}
		return false, nil
	}
	if err := syncBuffers(ctx, r.c, r.m); err != nil {
		return false, err
	}
	if !r.preempted {
		l, a, err := r.evaluate(ctx)
		if err != nil {
			return false, err
		}
		r.lastEval = [2]float64{l, a}
		evalBad = !finite(l) || !finite(a)
	}
	if !evalBad {
		if err := r.sv.save(ctx, r.pos); err != nil {
			return false, err
		}
	}
	if err := r.sv.finish(ctx); err != nil {
		return false, err
	}
	switch {
	case !r.preempted:
		return evalBad, nil
	case r.cfg.Save == "":
		return false, fmt.Errorf("%w after step %d (no -save: nothing saved)", ErrPreempted, r.steps)
	}
	return false, fmt.Errorf("%w after step %d, saved to %s: go on with -resume %s (or -resume auto)", ErrPreempted, r.steps, r.cfg.Save, r.cfg.Save)
}

// summary gathers the run's summary: its figures, the memory and rate
// over the ranks (the most any rank held, the slowest rank's rate), the
// saves', the strategy's own (Strategy.Report) and SyncBN's time.
// Collective.
func (r *run) summary(ctx context.Context) (*Summary, error) {
	cfg := r.cfg
	var sentPerStep float64
	var byRoute map[string]float64
	if r.stepsThisRun > 0 {
		sentPerStep = float64(r.st.sent) / float64(r.stepsThisRun)
		for t, n := range r.st.byRoute {
			if byRoute == nil {
				byRoute = map[string]float64{}
			}
			byRoute[t] = float64(n) / float64(r.stepsThisRun)
		}
	}
	if r.st.clip > 0 && r.st.upClip != nil && r.st.normLog != nil {
		norms, err := r.st.normLog.GradNorms() // the steps' norms, never waited for
		if err != nil {
			return nil, err
		}
		for _, n := range norms {
			r.st.countNorm(n)
		}
	}
	held, transient := r.strat.Memory()
	mem := []int64{held.Params, held.Grads, held.Optimizer, peakRSS(), held.Params + held.Grads + held.Optimizer + transient}
	if err := comm.Run(ctx)(r.c.AllReduce(ctx, comm.FromSlice(mem), comm.Max)); err != nil {
		return nil, err
	}
	rate := []float64{float64(r.samples) / math.Max(r.trainTime.Seconds(), 1e-9)}
	// The loop's throughput is set by the slowest rank.
	if err := comm.Run(ctx)(r.c.AllReduce(ctx, comm.FromSlice(rate), comm.Min)); err != nil {
		return nil, err
	}
	s := &Summary{Event: "summary", WorldSize: r.c.Size(), Backend: cfg.Backend, Strategy: cfg.Strategy, SyncBN: cfg.SyncBN, Model: cfg.Model,
		NumParams: r.m.NumParams(), Optimizer: cfg.Optimizer, Batch: cfg.Batch, GlobalBatch: cfg.Batch * r.dataWorld, Epochs: cfg.Epochs,
		Steps: r.steps, TrainSamples: r.train.Len(), SamplesPerSec: rate[0], StepMsP50: median(r.stepTimes), TrainLoss: r.lastTrain,
		EvalLoss: r.lastEval[0], TestAccuracy: r.lastEval[1],
		ModelStateBytes: MemoryBytes{Params: mem[0], Grads: mem[1], Optimizer: mem[2]}, ModelStatePeakBytes: mem[4], PeakRSSBytes: mem[3], CommBytesPerStep: sentPerStep, CommBytesByTransport: byRoute,
		Overlap: true, BLAS: models.BLAS, WallSeconds: time.Since(r.start).Seconds(),
		ClippedSteps: r.st.clipped, GradNormP50: median(r.st.norms), LR: r.st.lastLR, Device: cfg.DeviceName(), Run: r.info}
	if s.Device != "cpu" {
		s.Precision = cfg.Precision
	}
	if s.StepMsP50 > 0 {
		s.LoopSamplesPerSec = float64(s.GlobalBatch) / (s.StepMsP50 / 1e3)
	}
	s.BLASThreads, s.BLASThreadsFrom = models.BLASThreads(), cfg.BLASThreadsFrom
	if r.info.Tokens {
		s.TokensPerSec = rate[0] * float64(r.m.LabelsPerSample())
		s.EvalBPB = r.lastEval[0] / math.Ln2
		s.UnigramBPB = r.info.UnigramBPB
	}
	r.sv.report(s)
	s.Restarts = cfg.Restarts
	s.ResumedStep = r.resumedStep
	if r.prog != nil {
		s.StepsRecomputed = r.prog.recomputed
	}
	if err := r.strat.Report(ctx, s); err != nil {
		return nil, err
	}
	if r.syncer != nil && r.stepsThisRun > 0 {
		spent, _ := r.syncer.Spent()
		s.SyncBNMsPerStep = spent.Seconds() * 1e3 / float64(r.stepsThisRun)
	}
	return s, nil
}

// stepper runs the training steps of one rank: its batches, and the
// learning-rate schedule and gradient clipping around the strategy's
// Step and Update.
type stepper struct {
	strat   Strategy
	set     Samples
	smp     data.Sampler
	sched   optim.Schedule
	setLR   LRSetter    // used when the rate is not constant
	clipper GradClipper // used with clip > 0, unless upClip
	upClip  UpdateClipper
	normLog GradNormLogger // with upClip: its norms read at the end
	clip    float64
	traffic comm.TrafficCounter // nil: not counted
	mover   comm.MovedCounter   // preferred: counts zero-copy collectives too
	rank    int
	m       *models.Model
	x       []float32
	y       []int32
	idx     []int

	lastLR  float64   // the last step's learning rate
	norms   []float64 // the gradient norms before clipping
	clipped int64     // steps whose norm was clipped
	sent    int64     // bytes the steps moved (evaluations and saves excluded)
	byRoute map[string]int64
}

// newStepper readies r's steps over a run of total steps; it refuses a
// schedule or clipping that r's strategy cannot do.
func newStepper(r *run, smp data.Sampler, total int64) (*stepper, error) {
	cfg := r.cfg
	sched, err := cfg.schedule(total)
	if err != nil {
		return nil, err
	}
	s := &stepper{strat: r.strat, set: r.train, smp: smp, sched: sched, clip: cfg.ClipGrad, rank: r.c.Rank(), m: r.m,
		x: make([]float32, cfg.Batch*r.m.InputSize()), y: make([]int32, cfg.Batch*r.m.LabelsPerSample()),
		lastLR: sched.At(max(r.pos.Step-1, 0))}
	s.traffic, _ = r.c.(comm.TrafficCounter)
	s.mover, _ = r.c.(comm.MovedCounter)
	var ok bool
	if s.setLR, ok = r.strat.(LRSetter); !ok && !sched.Constant() {
		return nil, fmt.Errorf("%w: -strategy %s cannot change its learning rate (it is no train.LRSetter): drop -warmup and -lr-schedule", ErrConfig, cfg.Strategy)
	}
	s.upClip, _ = r.strat.(UpdateClipper)
	s.normLog, _ = r.strat.(GradNormLogger)
	if s.clipper, ok = r.strat.(GradClipper); !ok && s.upClip == nil && cfg.ClipGrad > 0 {
		return nil, fmt.Errorf("%w: -strategy %s cannot clip gradients (it is no train.GradClipper): drop -clip-grad", ErrConfig, cfg.Strategy)
	}
	return s, nil
}

// sentNow is what this rank has moved on the training Comm so far, in
// all and per transport (comm.Moved: sent, and read from or written into
// peers' shared buffers by zero-copy collectives); a Comm that counts only
// what it sends gives that (0 if it does not count).
func (s *stepper) sentNow() (int64, []comm.Moved) {
	if s.mover != nil {
		ms := s.mover.Moved()
		return comm.MovedBytes(ms), ms
	}
	if s.traffic == nil {
		return 0, nil
	}
	n, _ := s.traffic.Traffic()
	return n, nil
}

// step trains on batch k of epoch as global step step (0-based: the
// schedule's rate there, so a resumed run goes on where the schedule
// was) and returns this rank's loss. Collective.
func (s *stepper) step(ctx context.Context, epoch, k int, step int64) (float32, error) {
	s0, m0 := s.sentNow()
	s.idx = s.smp.Indices(epoch, k, s.idx)
	if err := s.set.Batch(s.idx, s.x, s.y); err != nil {
		return 0, err
	}
	loss, err := s.strat.Step(ctx, s.x, s.y)
	if err != nil {
		return 0, fmt.Errorf("train: epoch %d batch %d: %w", epoch+1, k, err)
	}
	if s.clip > 0 && s.upClip == nil {
		norm, err := s.clipper.ClipGrads(ctx, s.clip)
		if err != nil {
			return 0, fmt.Errorf("train: epoch %d batch %d: %w", epoch+1, k, err)
		}
		s.countNorm(norm)
	}
	if !s.sched.Constant() {
		s.lastLR = s.sched.At(step)
		s.setLR.SetLR(s.lastLR)
	}
	if err := s.strat.Update(ctx); err != nil {
		return 0, fmt.Errorf("train: epoch %d batch %d: %w", epoch+1, k, err)
	}
	if s.clip > 0 && s.upClip != nil && s.normLog == nil {
		norm, err := s.upClip.LastGradNorm()
		if err != nil {
			return 0, fmt.Errorf("train: epoch %d batch %d: %w", epoch+1, k, err)
		}
		s.countNorm(norm)
	}
	if testHookUpdate != nil {
		testHookUpdate(s.rank, step+1, s.m)
	}
	s1, m1 := s.sentNow()
	s.sent += s1 - s0
	for _, m := range m1 {
		if s.byRoute == nil {
			s.byRoute = map[string]int64{}
		}
		s.byRoute[m.Transport] += m.Bytes()
	}
	for _, m := range m0 {
		s.byRoute[m.Transport] -= m.Bytes()
	}
	return loss, nil
}

// countNorm counts a step's gradient norm before clipping.
func (s *stepper) countNorm(norm float64) {
	s.norms = append(s.norms, norm)
	if norm > s.clip {
		s.clipped++
	}
}
