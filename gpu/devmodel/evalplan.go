package devmodel

import (
	"fmt"
	"math"
	"sort"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/kernels"
	"github.com/gdist/gdist/nn"
)

// Forward-only plans (evaluation: Model.Eval, Stage.EvalForward).
//
// A training plan keeps every activation for the backward pass, a
// gradient beside each, and each layer's scratch (batch norm's and layer
// norm's normalized inputs, attention's probabilities, max pooling's
// argmax) for the plan's life. Evaluating with it at the evaluation's
// batch size held all of that at that size: a pipeline stage of the cnn
// went from 14.9 MB to 685 MB of device memory once it evaluated at
// train's evaluation batch (1000).
//
// A forward-only plan is compiled by the same walk with the compiler's
// eval flag: no gradients, nothing kept for backward, and the buffers
// laid out at compile time in one arena, each span given back once its
// last reader is planned, so that later buffers reuse it (the ops run in
// order on one stream: a reuse is ordered after the last read). The
// liveness is known at compile time: a Sequential child's input dies
// after the child unless a Residual reads it again (it holds it across
// its fn); a layer's scratch dies with the layer; an activation that
// dies in the layer that reads it is overwritten in place where the
// kernel allows it (ReLU, GELU, Tanh, LayerNorm, Residual's add);
// Flatten and evaluation's Dropout are views. The convolutions' unrolled
// input and attention's scores, probabilities and heads are scratch of
// their layer and, beyond that, computed a chunk of samples (sequences)
// at a time, so that a layer's scratch stays within its output's size
// (half of it for a convolution; at least one sample): the batched
// products are per image and per sequence and head, so the values are
// the unchunked ones (bit for bit on the fake's GEMM). With
// $GDIST_ATTENTION=fused, as the training plan, attention is the fused
// forward: no scores, probabilities or workspace, a sequence's scratch
// 4 T C + H T floats against 11 T C + 2 H T^2 (GPT-2 small at one
// sample a pass: 22.1 MB of arena against 144.7 MB,
// TestEvalFusedAttentionPeak; the values those of the fused training
// plan's forward, TestEvalFusedAttention).
//
// Evaluation runs between training steps, when the training plan's
// activations are dead (a step's values are all in Params, Grads and the
// optimizer's state by then), so a Model's forward-only plan borrows the
// training plan's blocks first: the training plan is kept as it is (never
// freed and rebuilt around an evaluation) and evaluation at a batch no
// larger than training's usually needs no memory of its own. What does
// not fit comes from the model's evaluation arena, one cudaMalloc shared
// by the forward-only plans of every batch size (they never run at once),
// made at the first evaluation that needs it and grown if a larger one
// comes (EvalBytes is its size; PeakBytes counts it). A forward-only plan
// is planned again (host work, from the same sizes: the same layout) when
// the training plan was (a short training batch): after one evaluation
// following each training batch size, an evaluation allocates nothing.
// A batch whose plan would need more than the training plan's blocks and
// the arena as it is runs in passes of the most samples that fit (its
// input, labels and logits held whole, so that the loss is the whole
// batch's, as one kernel computes it; a short last pass zero-padded): the
// layers compute each sample on its own in evaluation (batch norm on its
// running statistics; the products per row, image or sequence), so the
// values are those of one pass, bit for bit on the fake (the pass sizes
// are a plan's, not the caller's concern). Evaluation then holds little
// more than training does: the batch's input, labels and logits.
// A Stage's forward-only plans borrow nothing (a pipeline may evaluate
// between a Forward and its Backward): all in the stage's arena. At the
// batch size B planned, the layout holds at most the input, the labels
// and the largest sum of the buffers alive across one layer (its input,
// output and scratch, and the activations Residuals hold): for the cnn
// about 39 thousand floats per sample at conv1 (its input, output and
// half as much unrolled input), against about 240 thousand floats per
// sample in the training plan.

// extent is a span of an arena: n bytes at off in region reg.
type extent struct{ reg, off, n int }

// arena lays out a forward-only plan's buffers at compile time in
// regions: first memory it borrows (a training plan's blocks, of the
// sizes given to newArena), then its own, which grows as needed (top
// bytes). Spans are aligned to 256 bytes; a freed span is reused by a
// later request (the smallest free span that fits, the first of equals;
// adjacent free spans of a region merged). The layout depends on the
// sizes only, not on where the regions are.
type arena struct {
	own  int      // the arena's own region: len(borrowed regions)
	free []extent // by region and offset, none adjacent
	top  int
}

const arenaAlign = 256

func newArena(borrowed []int) *arena {
	a := &arena{own: len(borrowed)}
	for i, n := range borrowed {
		if n >= arenaAlign {
			a.free = append(a.free, extent{i, 0, n / arenaAlign * arenaAlign})
		}
	}
	return a
}

func (a *arena) get(n int) extent {
	n = (max(n, 1) + arenaAlign - 1) / arenaAlign * arenaAlign
	best := -1
	for i, f := range a.free {
		if f.n >= n && (best < 0 || f.n < a.free[best].n) {
			best = i
		}
	}
	if best >= 0 {
		f := a.free[best]
		if f.n == n {
			a.free = append(a.free[:best], a.free[best+1:]...)
		} else {
			a.free[best] = extent{f.reg, f.off + n, f.n - n}
		}
		return extent{f.reg, f.off, n}
	}
	// none fits: grow the arena's own region (from its free span at the
	// top)
	if k := len(a.free) - 1; k >= 0 && a.free[k].reg == a.own && a.free[k].off+a.free[k].n == a.top {
		off := a.free[k].off
		a.free = a.free[:k]
		a.top = off + n
		return extent{a.own, off, n}
	}
	off := a.top
	a.top += n
	return extent{a.own, off, n}
}

func (a *arena) put(e extent) {
	less := func(x, y extent) bool { return x.reg < y.reg || x.reg == y.reg && x.off < y.off }
	i := sort.Search(len(a.free), func(i int) bool { return less(e, a.free[i]) })
	a.free = append(a.free, extent{})
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = e
	if i+1 < len(a.free) && a.free[i+1].reg == e.reg && e.off+e.n == a.free[i+1].off { // merge the next
		a.free[i].n += a.free[i+1].n
		a.free = append(a.free[:i+1], a.free[i+2:]...)
	}
	if i > 0 && a.free[i-1].reg == e.reg && a.free[i-1].off+a.free[i-1].n == e.off { // into the previous
		a.free[i-1].n += a.free[i].n
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
}

// addr is where e is.
func (c *compiler) addr(e extent) uintptr { return c.bases[e.reg] + uintptr(e.off) }

// slot is an activation's span of a forward-only plan's arena and how
// many holders it has: the layer that made it (its caller, once it
// returns), each view of it (Flatten, evaluation's Dropout, an in-place
// op's output), a Residual across its fn, the plan for its input and
// output. A layer that finds its input held once only may overwrite it
// (its caller gives it back after the layer: no one reads it later).
type slot struct {
	extent
	refs int
}

// evalAct allocates an activation of a forward-only plan (no gradient),
// held once.
func (c *compiler) evalAct(shape []int) *act {
	a := &act{shape: shape}
	n := 4 * a.size()
	e := c.ar.get(n)
	a.val, a.slot = c.addr(e), &slot{e, 1}
	return a
}

// outAct is an op's output of x's shape: x itself where inPlace (the
// kernel allows y = x) and x is dead after the op (a forward-only plan,
// x held once), else a new activation.
func (c *compiler) outAct(x *act, inPlace bool) (*act, error) {
	if c.eval && inPlace && x.slot != nil && x.slot.refs == 1 {
		return c.alias(x, nil), nil
	}
	return c.newAct(x.shape)
}

// alias is a view of x with shape (nil: x's; in a training plan, x
// itself then), holding x's slot.
func (c *compiler) alias(x *act, shape []int) *act {
	if shape == nil {
		if !c.eval {
			return x
		}
		shape = x.shape
	}
	c.retain(x)
	return &act{val: x.val, grad: x.grad, shape: shape, slot: x.slot}
}

func (c *compiler) retain(a *act) {
	if a.slot != nil {
		a.slot.refs++
	}
}

// drop gives up a hold of a's slot; the last gives its span back.
func (c *compiler) drop(a *act) {
	if a == nil || a.slot == nil {
		return
	}
	if a.slot.refs--; a.slot.refs == 0 {
		c.ar.put(a.slot.extent)
	}
}

// temp is n bytes of the current layer's scratch: in a forward-only
// plan given back once the layer is planned (layer's endTemps), in a
// training plan held for the plan's life.
func (c *compiler) temp(n int) (uintptr, error) {
	if !c.eval {
		return c.alloc(n)
	}
	e := c.ar.get(n)
	c.temps = append(c.temps, e)
	return c.addr(e), nil
}

// endTemps gives back the scratch taken since mark.
func (c *compiler) endTemps(mark int) {
	if !c.eval {
		return
	}
	for _, t := range c.temps[mark:] {
		c.ar.put(t)
	}
	c.temps = c.temps[:mark]
}

// chunk is how many of n samples an op runs at once so that its
// scratch, per samples per sample, stays within bound floats (one at
// least).
func chunk(n, per, bound int) int {
	return max(1, min(n, bound/max(per, 1)))
}

// residualEval is nn.Residual in a forward-only plan: x is held across
// fn (read again by the add), the sum written over fn's output when that
// dies here.
func (c *compiler) residualEval(l *nn.Residual, name string, x *act) (*act, error) {
	d := c.d
	c.retain(x)
	defer c.drop(x)
	fout, err := c.layer(l.Fn, child(name, "fn"), x)
	if err != nil {
		return nil, err
	}
	defer c.drop(fout)
	if fmt.Sprint(fout.shape) != fmt.Sprint(x.shape) {
		return nil, fmt.Errorf("layer %s (residual): fn maps %v to %v; the shapes must agree", quote(name), x.shape, fout.shape)
	}
	out, err := c.outAct(fout, true) // y may be b
	if err != nil {
		return nil, err
	}
	n := x.size()
	c.add(name, func() error { return d.k.Add(d.s, out.val, x.val, fout.val, n) }, nil)
	return out, nil
}

// convEval is nn.Conv2d in a forward-only plan: the images in chunks
// whose unrolled input (the workspace) is at most half the layer's
// output (one image at least).
func (c *compiler) convEval(name string, x *act, g kernels.ConvGeom, w, b uintptr) (*act, error) {
	d := c.d
	ho, wo := g.Out()
	out := c.evalAct([]int{g.N, g.Cout, ho, wo})
	one := g
	one.N = 1
	inPer, outPer := g.C*g.H*g.W, g.Cout*ho*wo
	nc := chunk(g.N, one.Workspace(), g.N*outPer/2)
	gc := g
	gc.N = nc
	ws, err := c.temp(4 * gc.Workspace())
	if err != nil {
		return nil, err
	}
	c.add(name, func() error {
		for i := 0; i < g.N; i += nc {
			gi := g
			gi.N = min(nc, g.N-i)
			if err := kernels.Conv2dForward(d.h, d.k, out.val+uintptr(4*i*outPer), x.val+uintptr(4*i*inPer), d.Params+w, d.Params+b, ws, gi); err != nil {
				return err
			}
		}
		return nil
	}, nil)
	return out, nil
}

// attentionEval is nn.CausalSelfAttention in a forward-only plan: the
// input projection, attention and output projection a chunk of
// sequences at a time, their scratch (the chunk's q, k, v by rows and by
// heads, scores and probabilities, output) within the layer's output
// size (one sequence at least), given back after the layer. p are the
// offsets of in_proj's weight and bias, out_proj's weight and bias.
//
// With $GDIST_ATTENTION=fused (kernels.AttentionGeom.Fused, as the
// training plan) attention is kernels.AttentionFusedForward: no scores,
// probabilities or workspace, only the chunk's q, k, v, output and its
// rows' log-sum-exp (N H T floats, which evaluation reads no more: given
// back with the rest), 4 T C + H T floats a sequence against the
// default's 11 T C + 2 H T^2 (evalAttentionScratch).
func (c *compiler) attentionEval(name string, x *act, g kernels.AttentionGeom, p [4]uintptr) (*act, error) {
	d := c.d
	fused, err := g.Fused()
	if err != nil {
		return nil, fmt.Errorf("layer %s (attention): %w", quote(name), err)
	}
	out := c.evalAct(x.shape) // never x: the projection reads it
	tc := g.T * g.C
	nc := chunk(g.N, evalAttentionScratch(g, 1, fused), g.N*tc)
	gc := g
	gc.N = nc
	var qkv, att, probs, ws uintptr
	scratch := []struct {
		at     *uintptr
		floats int
	}{{&qkv, 3 * nc * tc}, {&att, nc * tc}, {&probs, gc.Probs()}, {&ws, gc.Workspace()}}
	if fused {
		scratch = append(scratch[:2], struct {
			at     *uintptr
			floats int
		}{&probs, gc.FusedKeep()}) // the log-sum-exp rows
	}
	for _, t := range scratch {
		var err error
		if *t.at, err = c.temp(4 * t.floats); err != nil {
			return nil, err
		}
	}
	cc := g.C
	c.add(name, func() error {
		P := func(off uintptr) uintptr { return d.Params + off }
		for i := 0; i < g.N; i += nc {
			gi := g
			gi.N = min(nc, g.N-i)
			rows, at := gi.N*g.T, uintptr(4*i*tc)
			if err := kernels.LinearForward(d.h, d.k, qkv, x.val+at, P(p[0]), P(p[1]), rows, cc, 3*cc); err != nil {
				return err
			}
			var err error
			if fused {
				err = d.k.AttentionFusedForward(d.s, att, probs, qkv, gi)
			} else {
				err = kernels.AttentionForward(d.h, d.k, att, probs, qkv, ws, gi)
			}
			if err != nil {
				return err
			}
			if err := kernels.LinearForward(d.h, d.k, out.val+at, att, P(p[2]), P(p[3]), rows, cc, cc); err != nil {
				return err
			}
		}
		return nil
	}, nil)
	return out, nil
}

// evalAttentionScratch is the float32s of scratch attentionEval takes
// for a chunk of n sequences of g: q, k, v and the output (4 n T C),
// and the default's probabilities and workspace (2 n H T^2 + 7 n T C) or
// the fused kernel's log-sum-exp rows (n H T).
func evalAttentionScratch(g kernels.AttentionGeom, n int, fused bool) int {
	g.N = n
	if fused {
		return 4*n*g.T*g.C + g.FusedKeep()
	}
	return 4*n*g.T*g.C + g.Probs() + g.Workspace()
}

// evalSpec is what a forward-only plan is for: passes of batch samples
// of inShape, over batches of full samples (full > batch: a batch is
// evaluated batch samples at a time); walk plans the layers from the
// input, the compiler's parameter and batch-norm counts starting at pi
// and bi; with loss the labels, the loss words and the logits are
// planned for full samples; the blocks of the training plan on (nil:
// none) are borrowed.
type evalSpec struct {
	batch, full int
	inShape     []int
	pi, bi      int
	on          *plan
	walk        func(c *compiler, in *act) (*act, error)
	loss        bool
}

// layoutEval plans a forward-only plan with the borrowed blocks and the
// arena at bases (the last: the arena's) and returns it and how much of
// the arena it needs.
func (d *Model) layoutEval(s evalSpec, bases []uintptr) (*plan, int, error) {
	m := d.Host
	var sizes []int
	if s.on != nil {
		sizes, _ = s.on.borrowed()
	}
	c := &compiler{d: d, m: m, p: &plan{batch: s.batch, full: s.full, on: s.on}, pi: s.pi, bi: s.bi, eval: true, ar: newArena(sizes), bases: bases}
	p := c.p
	// the batch's buffers go up (or are written) before the ops run: held
	// throughout
	inPer := prod(s.inShape) / s.batch
	rows := s.full * m.LabelsPerSample()
	if s.full > s.batch {
		p.fullIn, _ = c.alloc(4 * s.full * inPer)
	}
	if s.loss {
		for _, b := range []struct {
			to *uintptr
			n  int
		}{{&p.labels, 4 * rows}, {&p.rowLoss, 4 * rows}, {&p.loss, 8}} {
			*b.to, _ = c.alloc(b.n)
		}
		if s.full > s.batch {
			p.logits, _ = c.alloc(4 * rows * m.Classes())
		}
	}
	p.in = c.evalAct(s.inShape)
	p.in.slot.refs++ // the plan's: never overwritten (the caller's data)
	out, err := s.walk(c, p.in)
	if err != nil {
		return nil, 0, fmt.Errorf("devmodel: %s: %w", m.Name, err)
	}
	p.out = out
	if s.full == s.batch {
		p.fullIn, p.logits = p.in.val, p.out.val
	}
	if s.loss {
		cl := m.Classes()
		if len(out.shape) < 2 || out.shape[len(out.shape)-1] != cl || out.size()*s.full != rows*cl*s.batch {
			return nil, 0, fmt.Errorf("devmodel: %s: the output is %v, not logits of %d classes for %d labels", m.Name, out.shape, cl, rows*s.batch/s.full)
		}
		p.classes, p.rows = cl, rows
	}
	// forward-only: each op's evaluation work is its forward
	for i := range p.ops {
		if o := &p.ops[i]; o.eval != nil {
			o.fwd = o.eval
		}
		p.ops[i].eval, p.ops[i].bwd = nil, nil
	}
	return p, c.ar.top, nil
}

// compileEval compiles a forward-only plan: it lays it out once to learn
// how much of the evaluation arena it needs, grows the arena to that if
// it is smaller (the other forward-only plans, in the old arena, are
// dropped: they are planned again on use), and lays it out again (the
// same walk and sizes: the same layout).
func (d *Model) compileEval(s evalSpec) (*plan, error) {
	var bases []uintptr
	if s.on != nil {
		_, bases = s.on.borrowed()
	}
	bases = append(bases, 0) // the arena's, once known
	_, top, err := d.layoutEval(s, bases)
	if err != nil {
		return nil, err
	}
	if top > d.evalCap {
		old := d.evalCap
		if d.evalMem != 0 {
			d.free(d.evalMem, d.evalCap) // after the model's work (free synchronizes)
			d.evalMem, d.evalCap, d.evalPlans = 0, 0, nil
		}
		if d.evalMem, err = d.malloc(top); err != nil {
			err = fmt.Errorf("devmodel: %s: %d bytes for evaluation batches of %d: %w", d.Host.Name, top, s.full, err)
			// the old arena back (the memory just freed), so that the
			// batches that fitted it evaluate as before (their plans
			// are planned again on use: TestEvalAfterFailedArenaGrowth)
			if old > 0 {
				if p, rerr := d.malloc(old); rerr == nil {
					d.evalMem, d.evalCap = p, old
				} else {
					err = fmt.Errorf("%w; the evaluation arena's %d bytes could not be had back either: %w", err, old, rerr)
				}
			}
			return nil, err
		}
		d.evalCap = top
	}
	bases[len(bases)-1] = d.evalMem
	p, _, err := d.layoutEval(s, bases)
	return p, err
}

// evalPlan is the forward-only plan for batches of full samples of the
// whole model, compiled on first use (and again after the training plan
// it borrows from was). It evaluates them in passes of the most samples
// whose plan fits in the training plan's blocks and the evaluation arena
// as it is (or as a pass of one sample needs it), when all of them do
// not (the batch's input, labels and logits are in it at once, for a
// loss of the whole batch): evaluation then holds little more memory
// than training. A ZeRO-3 model
// (Config.ShardParams, not Unshard'd) evaluates a batch in one pass (a
// pass gathers the parameters: the ranks must agree on the passes).
func (d *Model) evalPlan(full int) (*plan, error) {
	if p := d.evalPlans[full]; p != nil && p.on == d.plan {
		return p, nil
	}
	m := d.Host
	spec := func(b int) evalSpec {
		return evalSpec{batch: b, full: full, inShape: append([]int{b}, m.InputShape()...), on: d.plan, loss: true,
			walk: func(c *compiler, in *act) (*act, error) {
				out, err := c.layer(m.Net, "", in)
				if err == nil && (c.pi != len(m.Params) || c.bi != len(m.BNs)) {
					err = fmt.Errorf("%d of %d parameters and %d of %d batch norms placed", c.pi, len(m.Params), c.bi, len(m.BNs))
				}
				return out, err
			}}
	}
	b := full
	if !d.paramsSharded() {
		top := func(b int) int {
			sizes, _ := d.plan.borrowed()
			_, top, err := d.layoutEval(spec(b), make([]uintptr, len(sizes)+1))
			if err != nil {
				return math.MaxInt
			}
			return top
		}
		// the arena a pass of one sample needs (the batch's buffers, where
		// the training plan's blocks cannot hold them) is needed anyway
		limit := max(d.evalCap, top(1))
		if top(full) > limit {
			lo, hi := 1, full // top(lo) <= limit < top(hi)
			for hi-lo > 1 {
				if mid := (lo + hi) / 2; top(mid) <= limit {
					lo = mid
				} else {
					hi = mid
				}
			}
			b = lo
		}
	}
	p, err := d.compileEval(spec(b))
	if err != nil {
		return nil, err
	}
	if d.evalPlans == nil {
		d.evalPlans = map[int]*plan{}
	}
	d.evalPlans[full] = p
	return p, nil
}

// EvalBytes is the device memory evaluation holds beyond the training
// plan's blocks, which its forward-only plans borrow first: the
// evaluation arena, shared by every evaluation batch size (0 before an
// Eval needed one), within PeakBytes.
func (d *Model) EvalBytes() int64 { return int64(d.evalCap) }

// Eval runs the forward pass in evaluation mode on a batch (x, y as for
// ForwardBackward; any number of samples): batch norm normalizes with its
// running statistics and Dropout passes its input through, as nn's
// evaluation graphs (Model.NewGraph(batch, false)) do. It returns the
// mean cross-entropy over the batch's labels (samples times
// LabelsPerSample) and how many of those labels are the argmax of their
// logits (the first largest, as train's Evaluate takes it); only those 8
// bytes come down. Parameters, gradients, batch norm's running statistics
// and counts, the optimizer's state and Dropout's run count are left as
// they were, so that training goes on as if Eval had not run.
//
// It runs a forward-only plan (evalplan.go), compiled at the first Eval
// of each batch size: no gradients, no activations kept, buffers reused
// as soon as their last reader has run, laid out in the training plan's
// blocks (kept as they are) and, for what does not fit, an evaluation
// arena allocated once (EvalBytes); a batch too large for them runs in
// passes of fewer samples, with the same results.
func (d *Model) Eval(x []float32, y []int32) (loss float32, correct int, err error) {
	m := d.Host
	full, err := d.checkBatch(x, y)
	if err != nil {
		return 0, 0, err
	}
	p, err := d.evalPlan(full)
	if err != nil {
		return 0, 0, err
	}
	// a forward without its backward may have left producers' bf16
	// copies with the engine (copy16); this plan writes those blocks
	d.h.WithdrawAll()
	if err := d.upload([]uintptr{p.fullIn, p.labels}, bytesOf(x), bytesOf(y)); err != nil {
		return 0, 0, err
	}
	fwd := func(o op) func() error { return o.fwd }
	inPer, outPer := p.in.size()/p.batch, p.out.size()/p.batch
	for i := 0; i < full; i += p.batch {
		n := min(p.batch, full-i)
		if p.fullIn != p.in.val { // a pass of p.batch samples
			if n < p.batch { // the rest zeroed (valid ids; rows are independent)
				if err := d.memset(p.in.val, 4*p.in.size()); err != nil {
					return 0, 0, err
				}
			}
			if err := d.s.CopyAsync(p.in.val, p.fullIn+uintptr(4*i*inPer), 4*n*inPer, cuda.DeviceToDevice); err != nil {
				return 0, 0, err
			}
		}
		if d.paramsSharded() {
			// unit by unit: a collective per unit (see Unshard)
			if err := d.forwardSharded(p, fwd, "forward (evaluation)"); err != nil {
				return 0, 0, err
			}
		} else {
			for _, o := range p.ops {
				if o.fwd == nil {
					continue
				}
				if err := o.fwd(); err != nil {
					return 0, 0, fmt.Errorf("devmodel: %s: layer %s forward (evaluation): %w", m.Name, o.name, err)
				}
			}
		}
		if p.logits != p.out.val {
			if err := d.s.CopyAsync(p.logits+uintptr(4*i*outPer), p.out.val, 4*n*outPer, cuda.DeviceToDevice); err != nil {
				return 0, 0, err
			}
		}
	}
	if err := d.k.CrossEntropy(d.s, p.loss, p.rowLoss, p.logits, p.labels, p.rows, p.classes); err != nil {
		return 0, 0, err
	}
	// rowLoss is done with: it holds the rows' hits
	if err := d.k.CountCorrect(d.s, p.loss+4, p.rowLoss, p.logits, p.labels, p.rows, p.classes); err != nil {
		return 0, 0, err
	}
	var res [2]float32
	if err := d.download(bytesOf(res[:]), p.loss); err != nil {
		return 0, 0, err
	}
	return res[0], int(math.Float32bits(res[1])), nil
}

// EvalForward runs the stage's layers forward for evaluation on the
// input activation of batch samples at x (InSize(batch) float32s of
// device memory, as Forward takes it) and returns the device address of
// the output activation (OutSize(batch) float32s: the logits on the last
// stage), valid until the next EvalForward. It runs a forward-only plan
// (no gradients, no activations kept, buffers reused as soon as their
// last reader has run; compiled at the first EvalForward of each batch
// size into one arena shared by every batch size, allocated then and
// grown once if a larger batch comes; EvalBytes is its size), so that
// evaluating at a large batch holds a few layers' activations, not a
// training plan's; the activations the last Forward kept for Backward
// are left alone. A stage holds no batch norm or Dropout: the values are
// Forward's. Queued on Stream, as Forward.
func (s *Stage) EvalForward(x uintptr, batch int) (uintptr, error) {
	p, err := s.evalPlanFor(batch)
	if err != nil {
		return 0, err
	}
	d := s.d
	d.h.WithdrawAll() // as Eval
	if x != p.in.val {
		if err := d.s.CopyAsync(p.in.val, x, 4*p.in.size(), cuda.DeviceToDevice); err != nil {
			return 0, err
		}
	}
	for _, o := range p.ops {
		if o.fwd == nil {
			continue
		}
		if err := o.fwd(); err != nil {
			return 0, fmt.Errorf("devmodel: %s: layer %s forward (evaluation): %w", s.Host.Name, o.name, err)
		}
	}
	return p.out.val, nil
}

// EvalBytes is the device memory of the stage's forward-only plans (one
// arena; 0 before the first EvalForward), within PeakBytes.
func (s *Stage) EvalBytes() int64 { return s.d.EvalBytes() }

// evalPlanFor is the stage's forward-only plan for batch samples,
// compiled on first use: layers [0, From) are walked dry for the input's
// shape and the first parameter.
func (s *Stage) evalPlanFor(batch int) (*plan, error) {
	d, m := s.d, s.Host
	if p := d.evalPlans[batch]; p != nil {
		return p, nil
	}
	if batch < 1 {
		return nil, fmt.Errorf("devmodel: %s: stage [%d, %d): evaluation batch %d < 1", m.Name, s.From, s.To, batch)
	}
	dry := &compiler{m: m, p: &plan{batch: batch}}
	x := &act{shape: append([]int{batch}, m.InputShape()...)}
	for i := 0; i < s.From; i++ {
		var err error
		if x, err = dry.layer(topLayer(m, i), topName(m, i), x); err != nil {
			return nil, fmt.Errorf("devmodel: %s: %w", m.Name, err)
		}
	}
	end, _, _ := m.LayerParamRange(s.To)
	p, err := d.compileEval(evalSpec{batch: batch, full: batch, inShape: x.shape, pi: dry.pi, bi: dry.bi, walk: func(c *compiler, in *act) (*act, error) {
		out := in
		for i := s.From; i < s.To; i++ {
			y, err := c.layer(topLayer(m, i), topName(m, i), out)
			if err != nil {
				return nil, err
			}
			if out != in {
				c.drop(out)
			}
			out = y
		}
		if c.pi != end {
			return nil, fmt.Errorf("stage [%d, %d): parameters %d to %d placed, want up to %d", s.From, s.To, dry.pi, c.pi, end)
		}
		return out, nil
	}})
	if err != nil {
		return nil, err
	}
	if d.evalPlans == nil {
		d.evalPlans = map[int]*plan{}
	}
	d.evalPlans[batch] = p
	return p, nil
}
