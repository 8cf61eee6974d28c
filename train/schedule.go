package train

// The learning-rate schedule (Config.Warmup, Config.LRSchedule) and the
// run's length in steps it spans.

import (
	"fmt"

	"github.com/gdist/gdist/optim"
)

// LRSetter is a Strategy whose optimizer's learning rate Run can change
// between steps (Config.Warmup, Config.LRSchedule). The built-in
// strategies are LRSetters; Run refuses a schedule for a strategy that
// is not one.
type LRSetter interface {
	// SetLR sets the learning rate of the next Update (on this rank's
	// optimizer, or its shard or stage of it). Local.
	SetLR(lr float64)
}

// FinalLR is the fraction of -lr that -lr-schedule cosine ends at.
const FinalLR = 0.1

// runSteps is the run's length in optimizer steps: Epochs epochs of nb
// batches, or Steps if fewer. It depends on the configuration and the
// data alone, not on where a resumed run starts, so the schedule it
// spans goes on unchanged after a resume (MaxSteps, which counts only
// this run's steps, does not shorten it).
func (c *Config) runSteps(nb int) int64 {
	total := int64(c.Epochs) * int64(nb)
	if c.Steps > 0 {
		total = min(total, c.Steps)
	}
	return total
}

// schedule is c's learning-rate schedule over a run of total steps.
func (c *Config) schedule(total int64) (optim.Schedule, error) {
	s := optim.Schedule{Kind: c.LRSchedule, LR: c.LR, Warmup: int64(c.Warmup), Total: total, Final: FinalLR}
	if s.Kind == "" {
		s.Kind = "constant"
	}
	if c.Warmup > 0 && int64(c.Warmup) >= total {
		return s, fmt.Errorf("%w: -warmup %d is not shorter than the run's %d steps: lower -warmup (or raise -steps or -epochs)", ErrConfig, c.Warmup, total)
	}
	if err := s.Check(); err != nil {
		return s, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return s, nil
}
