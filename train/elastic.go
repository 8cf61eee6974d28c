package train

// Periodic saves and restarts: what a job needs to survive a lost worker.
// -save-every saves mid-epoch (a Position in the middle of an epoch
// resumes exactly: the sampler is a function of the seed, the epoch and
// the batch index), and a restarted generation (Config.Restarts > 0)
// resumes from the latest complete checkpoint by itself. In a job that
// may be restarted, rank 0 keeps the step it reached in <save>.progress,
// so a restart can say how many steps it recomputes; a run that ends
// normally removes it.

import (
	"context"
	"fmt"
	"os"
	"time"
)

// saver saves the run's checkpoints, at most once per step, and times
// them.
type saver struct {
	strat Strategy
	lead  bool // rank 0: keeps and prunes older checkpoints
	keep  int  // checkpoints to keep (Config.Keep)
	path  string
	meta  map[string]string
	last  int64 // step of the last save; -1: none yet
	n     int
	max   time.Duration
	total time.Duration
}

func newSaver(strat Strategy, lead bool, cfg Config, meta map[string]string) *saver {
	return &saver{strat: strat, lead: lead, keep: max(cfg.Keep, 1), path: cfg.Save, meta: meta, last: -1}
}

// save saves at pos unless there is no -save path or pos's step is saved
// already. Collective.
func (s *saver) save(ctx context.Context, pos Position) error {
	if s.path == "" || pos.Step == s.last {
		return nil
	}
	t0 := time.Now()
	if s.lead && s.keep > 1 {
		keepCurrent(s.path)
	}
	if err := s.strat.Save(ctx, s.path, pos, s.meta); err != nil {
		return err
	}
	if s.lead && s.keep > 1 {
		pruneKept(s.path, s.keep)
	}
	d := time.Since(t0)
	s.last = pos.Step
	s.n++
	s.total += d
	s.max = max(s.max, d)
	return nil
}

// report fills in the summary's save figures.
func (s *saver) report(sum *Summary) {
	sum.Saves = s.n
	if s.n > 0 {
		sum.SaveMsMean = s.total.Seconds() * 1e3 / float64(s.n)
		sum.SaveMsMax = s.max.Seconds() * 1e3
	}
}

// progressFile records, for restarts, the last step rank 0 completed and
// the steps recomputed so far: "<reached> <recomputed>\n", fixed width, so
// one write per step replaces it.
type progressFile struct {
	f          *os.File
	recomputed int64
	buf        []byte
}

// progressPath is the progress file of the checkpoint at save.
func progressPath(save string) string { return save + ".progress" }

// openProgress opens rank 0's progress file for a run resuming at step
// resumed; with restarted (a restarted generation) it adds the steps the
// failed generation ran past resumed to the recomputed count.
func openProgress(save string, resumed int64, restarted bool) (*progressFile, error) {
	p := &progressFile{}
	if restarted {
		var reached, before int64
		if b, err := os.ReadFile(progressPath(save)); err == nil {
			if _, err := fmt.Sscan(string(b), &reached, &before); err == nil && reached >= resumed {
				p.recomputed = before + reached - resumed
			}
		}
	}
	f, err := os.OpenFile(progressPath(save), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("train: progress file: %w", err)
	}
	p.f = f
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, fmt.Errorf("train: progress file: %w", err)
	}
	return p, p.step(resumed)
}

// step records that rank 0 completed step.
func (p *progressFile) step(step int64) error {
	if p == nil {
		return nil
	}
	p.buf = fmt.Appendf(p.buf[:0], "%20d %20d\n", step, p.recomputed)
	if _, err := p.f.WriteAt(p.buf, 0); err != nil {
		return fmt.Errorf("train: progress file: %w", err)
	}
	return nil
}

func (p *progressFile) close() {
	if p != nil {
		p.f.Close()
	}
}

// remove closes and removes the progress file: the run is over.
func (p *progressFile) remove() {
	if p != nil {
		p.f.Close()
		os.Remove(p.f.Name())
	}
}
