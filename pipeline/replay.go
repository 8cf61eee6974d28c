package pipeline

import (
	"fmt"
	"time"
)

// Replay runs one step of a K-stage pipeline on paper: stage s runs
// ops[s] (its schedule, Ops) in order, op j taking dur[s][j], and every
// message arrives the instant it is sent. An op waits only for its
// inputs: a forward for the previous stage's forward of the same
// micro-batch, a backward for the next stage's backward (or fused pass)
// of it. It returns the step's length and each stage's busy time, so that
// (span-busy[s])/span is the bubble that the schedule and these compute
// times alone impose: with equal times on every stage it is
// (K-1)/(M+K-1) for both schedules. Measured against a real step, what it
// leaves out is the cost of communication and waking up.
func Replay(ops [][]Op, dur [][]time.Duration) (span time.Duration, busy []time.Duration, err error) {
	k := len(ops)
	if len(dur) != k {
		return 0, nil, fmt.Errorf("pipeline: replay: %d stages of ops, %d of durations", k, len(dur))
	}
	type key struct {
		stage int
		op    Op
	}
	done := map[key]time.Duration{}
	now := make([]time.Duration, k)
	busy = make([]time.Duration, k)
	next := make([]int, k)
	for s := range ops {
		if len(dur[s]) != len(ops[s]) {
			return 0, nil, fmt.Errorf("pipeline: replay: stage %d has %d ops and %d durations", s, len(ops[s]), len(dur[s]))
		}
	}
	left := 0
	for s := range ops {
		left += len(ops[s])
	}
	for left > 0 {
		progressed := false
		for s := 0; s < k; s++ {
			for next[s] < len(ops[s]) {
				op := ops[s][next[s]]
				ready := now[s]
				var dep key
				switch {
				case op.Backward:
					// The next stage's backward; the last stage fuses
					// forward and backward into its forward op.
					dep = key{s + 1, Op{Backward: s+1 < k-1, Micro: op.Micro}}
				case s > 0:
					dep = key{s - 1, Op{Micro: op.Micro}}
				default:
					dep = key{-1, op}
				}
				if dep.stage >= 0 {
					if dep.stage >= k {
						return 0, nil, fmt.Errorf("pipeline: replay: the last stage has a backward op %v", op)
					}
					t, ok := done[dep]
					if !ok {
						break
					}
					ready = max(ready, t)
				}
				d := dur[s][next[s]]
				now[s] = ready + d
				busy[s] += d
				done[key{s, op}] = now[s]
				next[s]++
				left--
				progressed = true
			}
		}
		if !progressed {
			return 0, nil, fmt.Errorf("pipeline: replay: the schedules deadlock (stage ops at %v)", next)
		}
	}
	for _, t := range now {
		span = max(span, t)
	}
	return span, busy, nil
}
