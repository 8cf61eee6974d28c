package devmodel

import (
	"fmt"
	"math"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/kernels"
	"github.com/gdist/gdist/nn"
)

// EvalViaTrainingPlan is Eval as it ran before forward-only plans (the
// reference of TestEvalPlanSameBits): the training plan compiled at the
// batch's size (its evaluation closures: batch norm on the running
// statistics, Dropout a copy), the loss, the count and the logits.
func EvalViaTrainingPlan(d *Model, x []float32, y []int32) (loss float32, correct int, logits []float32, err error) {
	p, err := d.load(x, y)
	if err != nil {
		return 0, 0, nil, err
	}
	for _, o := range p.ops {
		f := o.eval
		if f == nil {
			f = o.fwd
		}
		if f == nil {
			continue
		}
		if err := f(); err != nil {
			return 0, 0, nil, fmt.Errorf("layer %s: %w", o.name, err)
		}
	}
	if err := d.k.CrossEntropy(d.s, p.loss, p.rowLoss, p.out.val, p.labels, p.rows, p.classes); err != nil {
		return 0, 0, nil, err
	}
	if err := d.k.CountCorrect(d.s, p.loss+4, p.rowLoss, p.out.val, p.labels, p.rows, p.classes); err != nil {
		return 0, 0, nil, err
	}
	var res [2]float32
	if err := d.download(bytesOf(res[:]), p.loss); err != nil {
		return 0, 0, nil, err
	}
	logits = make([]float32, p.out.size())
	if err := cuda.CopyDtoH(d.dev, bytesOf(logits), p.out.val); err != nil {
		return 0, 0, nil, err
	}
	return res[0], int(math.Float32bits(res[1])), logits, nil
}

// EvalLogits are the logits of the last Eval of batch samples.
func EvalLogits(d *Model, batch int) ([]float32, error) {
	p := d.evalPlans[batch]
	if p == nil {
		return nil, fmt.Errorf("no evaluation plan for %d", batch)
	}
	out := make([]float32, p.rows*p.classes)
	if err := d.s.Synchronize(); err != nil {
		return nil, err
	}
	return out, cuda.CopyDtoH(d.dev, bytesOf(out), p.logits)
}

// EvalPass is the samples per pass of the forward-only plan for batches
// of full samples.
func EvalPass(d *Model, full int) int {
	if p := d.evalPlans[full]; p != nil {
		return p.batch
	}
	return 0
}

// TrainPlanBytes is the memory held by the training plan (its region).
func TrainPlanBytes(d *Model) int64 {
	var n int64
	sizes, _ := d.plan.borrowed()
	for _, b := range sizes {
		n += int64(b)
	}
	return n
}

// EvalLayoutBytes is the arena a forward-only plan of the whole of m for
// batches of batch samples lays out in one pass, borrowing nothing (as
// compileEval sizes it; no device: the layout only).
func EvalLayoutBytes(m *nn.Model, batch int) (int, error) {
	d := &Model{Host: m}
	_, top, err := d.layoutEval(evalSpec{batch: batch, full: batch, inShape: append([]int{batch}, m.InputShape()...), loss: true,
		walk: func(c *compiler, in *act) (*act, error) { return c.layer(m.Net, "", in) }}, make([]uintptr, 1))
	return top, err
}

// EvalAttentionScratch is the float32s of scratch a forward-only plan's
// attention takes for n sequences of g.
func EvalAttentionScratch(g kernels.AttentionGeom, n int, fused bool) int {
	return evalAttentionScratch(g, n, fused)
}
