package pipeline

import "fmt"

// Schedule names.
const (
	GPipe    = "gpipe" // all forwards, then all backwards
	OneFOneB = "1f1b"  // warm-up forwards, then one forward and one backward
)

// Op is one step of a stage's schedule: the forward or the backward pass of
// one micro-batch.
type Op struct {
	Backward bool
	Micro    int
}

func (o Op) String() string {
	if o.Backward {
		return fmt.Sprintf("B%d", o.Micro)
	}
	return fmt.Sprintf("F%d", o.Micro)
}

// Ops returns the order in which stage (of k) runs the forward and backward
// passes of micro micro-batches under the named schedule.
//
// The last stage runs each micro-batch's forward, loss and backward as one
// pass (no Backward ops), so both schedules are the same there: it never
// holds more than one micro-batch input. On the other stages:
//
//   - GPipe: F0 .. F(M-1), then B0 .. B(M-1). Each stage holds the inputs
//     of all M micro-batches at its peak.
//   - 1F1B: w = min(k-stage-1, M) warm-up forwards, then alternately one
//     forward and one backward (F(w+i), B(i)) until the forwards run out,
//     then the remaining backwards. Stage s holds at most min(k-s, M)
//     micro-batch inputs.
//
// Backwards run in micro-batch order on every stage, the order in which the
// next stage sends their gradients, so no stage waits for a message that is
// queued behind one it has not asked for.
func Ops(schedule string, k, stage, micro int) ([]Op, error) {
	if k < 1 || stage < 0 || stage >= k || micro < 1 {
		return nil, fmt.Errorf("pipeline: bad schedule arguments: %d stages, stage %d, %d micro-batches", k, stage, micro)
	}
	var ops []Op
	if stage == k-1 {
		switch schedule {
		case GPipe, OneFOneB:
		default:
			return nil, fmt.Errorf("pipeline: unknown schedule %q (%s, %s)", schedule, GPipe, OneFOneB)
		}
		for i := 0; i < micro; i++ {
			ops = append(ops, Op{Micro: i})
		}
		return ops, nil
	}
	switch schedule {
	case GPipe:
		for i := 0; i < micro; i++ {
			ops = append(ops, Op{Micro: i})
		}
		for i := 0; i < micro; i++ {
			ops = append(ops, Op{Backward: true, Micro: i})
		}
	case OneFOneB:
		w := min(k-stage-1, micro)
		for i := 0; i < w; i++ {
			ops = append(ops, Op{Micro: i})
		}
		for i := 0; i < micro-w; i++ {
			ops = append(ops, Op{Micro: w + i}, Op{Backward: true, Micro: i})
		}
		for i := micro - w; i < micro; i++ {
			ops = append(ops, Op{Backward: true, Micro: i})
		}
	default:
		return nil, fmt.Errorf("pipeline: unknown schedule %q (%s, %s)", schedule, GPipe, OneFOneB)
	}
	return ops, nil
}

// MaxHeld is the largest number of micro-batch inputs a stage holds at once
// when it runs ops (an input is held from its forward to its backward; the
// last stage's fused pass holds one).
func MaxHeld(ops []Op, last bool) int {
	held, peak := 0, 0
	for _, o := range ops {
		if o.Backward {
			held--
			continue
		}
		held++
		peak = max(peak, held)
		if last {
			held--
		}
	}
	return peak
}

// SplitBatch splits a batch of batch samples into micro micro-batches as
// every pipeline does (the CPU's and train/pp's on the device alike): the
// first batch%micro of them one sample larger. sizes[i] is micro-batch
// i's sample count, starts[i] its first sample in the batch.
func SplitBatch(batch, micro int) (sizes, starts []int) {
	start := 0
	for i := 0; i < micro; i++ {
		sz := batch / micro
		if i < batch%micro {
			sz++
		}
		sizes = append(sizes, sz)
		starts = append(starts, start)
		start += sz
	}
	return sizes, starts
}
