package optim

import (
	"fmt"
	"math"
)

// Schedule is a learning rate as a function of the optimizer step: a
// linear warm-up over the first Warmup steps (step s, counting from 0,
// runs at LR*(s+1)/Warmup), then LR ("constant"), or a cosine decay from
// LR at the end of the warm-up to LR*Final at step Total ("cosine"; as
// torch.optim.lr_scheduler.CosineAnnealingLR with eta_min = LR*Final,
// after the warm-up), held there after Total. Its value depends on the
// step alone, so a run resumed at step s goes on with the rate it would
// have had.
type Schedule struct {
	Kind   string  // "constant" (or "") or "cosine"
	LR     float64 // the peak (and constant) rate
	Warmup int64   // warm-up steps; 0: none
	Total  int64   // the run's length in steps (cosine)
	Final  float64 // cosine's last rate, as a fraction of LR (e.g. 0.1)
}

// Schedules are the Kind values Schedule takes.
var Schedules = []string{"constant", "cosine"}

// Check reports a bad schedule.
func (s Schedule) Check() error {
	switch {
	case s.Kind != "" && s.Kind != "constant" && s.Kind != "cosine":
		return fmt.Errorf("optim: unknown schedule %q (constant, cosine)", s.Kind)
	case !(s.LR > 0) || math.IsInf(s.LR, 0):
		return fmt.Errorf("optim: learning rate %v must be positive", s.LR)
	case s.Warmup < 0:
		return fmt.Errorf("optim: %d warm-up steps", s.Warmup)
	case s.Final < 0 || s.Final > 1 || math.IsNaN(s.Final):
		return fmt.Errorf("optim: final rate %v of the peak: want 0 to 1", s.Final)
	case s.Kind == "cosine" && s.Total <= s.Warmup:
		return fmt.Errorf("optim: cosine schedule over %d steps with %d warm-up steps: the warm-up must be shorter than the run", s.Total, s.Warmup)
	}
	return nil
}

// Constant reports whether the rate is LR at every step.
func (s Schedule) Constant() bool { return s.Warmup == 0 && s.Kind != "cosine" }

// At is the learning rate of step (the number of steps taken before it).
func (s Schedule) At(step int64) float64 {
	if step < s.Warmup {
		return s.LR * float64(step+1) / float64(s.Warmup)
	}
	if s.Kind != "cosine" {
		return s.LR
	}
	p := math.Min(1, float64(step-s.Warmup)/float64(max(s.Total-s.Warmup, 1)))
	return s.LR * (s.Final + (1-s.Final)*0.5*(1+math.Cos(math.Pi*p)))
}
