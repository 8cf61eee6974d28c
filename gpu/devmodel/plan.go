package devmodel

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"unsafe"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/kernels"
	"github.com/gdist/gdist/nn"
)

// Layers names the nn layers that have device kernels (what Check
// accepts).
const Layers = "Sequential, Residual, Linear, Conv2d, BatchNorm1d/2d (SyncBatchNorm with Config.SyncBN), ReLU, GELU, Tanh, MaxPool2d, Flatten, Dropout, LayerNorm, Embedding, PositionEmbedding, CausalSelfAttention"

// act is an activation on the device: its values, its gradient (0: none
// needed: the network's input, or nothing upstream learns) and shape
// (batch first).
type act struct {
	val, grad uintptr
	shape     []int
	// slot, in a forward-only plan (evalplan.go), is the arena span the
	// values live in, shared by the acts that view it.
	slot *slot
	// to16, where the kernel producing val can write its bf16 copy as it
	// goes (LayerNorm, GELU, ReLU), is where that copy goes: set by the
	// Linear that reads val (copy16) under bf16 autocast, 0 otherwise;
	// grad16, where a Linear reads grad as its output gradient (its
	// output, or a Residual's whose function it ends), is where the layer
	// whose backward writes grad (ReLU, GELU, LayerNorm, a Residual's
	// sum) puts grad's bf16 copy (grad16)
	to16, grad16 *uintptr
	// tail, on a Linear's output in a training plan, lets the layer
	// that reads it next take the Linear's bias (fuse.go)
	tail *linTail
	// plain: a layer reads val other than through its bf16 copy (copy16)
	// in a training plan: a Residual's sum, a view's reader, a layer
	// without products, a Linear without the copy; set as its readers
	// are planned (compiler.layer)
	plain bool
}

func (a *act) size() int { return prod(a.shape) }

func prod(s []int) int {
	n := 1
	for _, v := range s {
		n *= v
	}
	return n
}

// op is one layer's device work: fwd in layer order, bwd in reverse;
// eval, where it is not nil, instead of fwd in evaluation (Model.Eval:
// batch norm on its running statistics, Dropout the identity).
type op struct {
	name           string
	fwd, bwd, eval func() error
	// params is how many of the model's parameters were placed when the
	// op was added: the op's backward writes gradients of those only
	// (ForwardBackward's OnGradsReady).
	params int
}

// plan is a model compiled for one batch size: its activations, scratch
// and the ops over them. loss holds two 4-byte words: the mean loss
// (float32) and, after Eval, the count of correct predictions (int32).
type plan struct {
	batch         int
	in, out       *act
	ops           []op
	labels        uintptr
	rowLoss, loss uintptr
	rows, classes int
	blocks        []*cuda.Block
	convWS, attWS uintptr // shared scratch (reused by every layer)
	// region is the training plan's memory (a Model's or a Stage's;
	// memory.go), regionBytes long, laid out by mem; 0 for forward-only
	// plans (and pool blocks: planRegion off)
	region      uintptr
	regionBytes int
	mem         *memPlan
	// on, for a forward-only plan, is the training plan whose blocks it
	// borrows; full is the samples of the batches it evaluates (batch at
	// a time, through in and out, when batch < full), whose input and
	// logits are at fullIn and logits (evalplan.go)
	on             *plan
	full           int
	fullIn, logits uintptr
	// keys are the addresses of the values kept as bf16 copies only
	// (memory.go's copyOnly), reserved for the plan's life
	keys *keyRange
}

// compiler walks a model's layers (depth first, nn's parameter order).
type compiler struct {
	d      *Model // nil: a dry run (Check), nothing allocated
	m      *nn.Model
	p      *plan
	pi     int // next parameter
	bi     int // next batch-norm layer
	fake   uintptr
	convWS int // float32s
	attWS  int

	// mem, for a Model's training plan, records its buffers (the first
	// pass) or places them in its region (the second; memory.go); where,
	// whereKind and whereLayer are the layer being planned
	mem        *memPlan
	where      string
	whereKind  string
	whereLayer nn.Layer
	// attOps are the first and last attention ops; attFwdWS: the forward
	// uses the attention workspace (the heads' copies)
	attOps   [2]int
	attFwdWS bool
	// viaCopy: the layer being planned reads its input through the
	// input's bf16 copy (copy16); only16 are the outputs whose producer
	// can write the bf16 copy alone (LayerNorm, GELU: their backward does
	// not read them): where only bf16 products read one, no fp32 value is
	// kept (memory.go's copyOnly)
	viaCopy bool
	only16  []*act
	// dry, without a device (MemoryPlan), stands for the engine: whether
	// the products read the producers' bf16 copies and attention reads
	// the heads in place
	dry *dryEngine

	// eval: a forward-only plan (evalplan.go): no gradients, nothing kept
	// for backward, every buffer a span of ar (its regions at bases)
	// given back once its last reader has been planned; temps are the
	// current layers' scratch, given back when their layer is planned.
	eval  bool
	ar    *arena
	bases []uintptr
	temps []extent
}

// Check reports whether every layer of m has device kernels, refusing the
// first that has not by its name (its PyTorch prefix) and Go type; it
// needs no device.
func Check(m *nn.Model) error {
	_, err := (&Model{Host: m}).compile(1)
	return err
}

// compile plans the model at batch samples: on a device in two passes,
// the first recording the buffers and their lives, the second placing
// them in the plan's region (memory.go), which is the last plan's where
// it fits and is allocated again larger where not.
func (d *Model) compile(batch int) (*plan, error) {
	if d.k == nil || !planRegion {
		return d.compileWith(batch, nil, nil, false) // Check: a dry run; or the pool's blocks
	}
	region, size := uintptr(0), 0
	if d.plan != nil {
		region, size = d.plan.region, d.plan.regionBytes
		d.plan.region, d.plan.regionBytes = 0, 0
	}
	p, region, size, err := d.laidOut(fmt.Sprintf("the training plan at batch %d", batch), region, size, func(mp *memPlan, record bool) (*plan, error) {
		return d.compileWith(batch, mp, nil, record)
	})
	if err != nil && d.plan != nil { // kept for the next plan (freed by Close)
		d.plan.region, d.plan.regionBytes = region, size
	}
	return p, err
}

// compileWith is compile's pass: with mp (recording if record, else
// placing), the buffers in a region; without, from the pool (or made up,
// without a device). dry: the engine, where there is no device.
func (d *Model) compileWith(batch int, mp *memPlan, dry *dryEngine, record bool) (_ *plan, err error) {
	m := d.Host
	c := &compiler{m: m, p: &plan{batch: batch}, mem: mp, dry: dry, attOps: [2]int{math.MaxInt, -1}}
	if d.k != nil {
		c.d = d
	}
	defer func() {
		if err != nil && c.d != nil {
			d.release(c.p)
		}
	}()
	in := &act{shape: append([]int{batch}, m.InputShape()...)}
	if in.val, err = c.allocAs(roleBatch, in.shape, 4*in.size()); err != nil {
		return nil, err
	}
	c.p.in = in
	out, err := c.layer(m.Net, "", in)
	if err != nil {
		return nil, fmt.Errorf("devmodel: %s: %w", m.Name, err)
	}
	if c.pi != len(m.Params) || c.bi != len(m.BNs) {
		return nil, fmt.Errorf("devmodel: %s: %d of %d parameters and %d of %d batch norms placed", m.Name, c.pi, len(m.Params), c.bi, len(m.BNs))
	}
	cl := m.Classes()
	if len(out.shape) < 2 || out.shape[len(out.shape)-1] != cl {
		return nil, fmt.Errorf("devmodel: %s: the output is %v, not logits of %d classes", m.Name, out.shape, cl)
	}
	p := c.p
	p.out, p.classes, p.rows = out, cl, out.size()/cl
	if out.grad == 0 {
		if out.grad, err = c.allocAs(roleGrad, out.shape, 4*out.size()); err != nil {
			return nil, err
		}
	}
	c.mem.pin(in.val, out.val, out.grad) // the batch goes up, the loss reads the logits and writes their gradient
	c.where, c.whereKind, c.whereLayer = "", "", nil
	for _, b := range []struct {
		to   *uintptr
		n    int
		role memRole
	}{{&p.labels, 4 * p.rows, roleBatch}, {&p.rowLoss, 4 * p.rows, roleBatch}, {&p.loss, 8, roleBatch}, {&p.convWS, 4 * c.convWS, roleWS}, {&p.attWS, 4 * c.attWS, roleWS}} {
		if b.n > 0 {
			if *b.to, err = c.allocAs(b.role, nil, b.n); err != nil {
				return nil, err
			}
		}
	}
	if !c.attFwdWS && c.attOps[1] >= 0 { // the attention workspace: the backward's only
		c.mem.backwardOnly(c.attOps[0], c.attOps[1], p.attWS)
	}
	c.keepCopiesOnly() // read by bf16 products only: the copy alone (memory.go)
	if record {
		mp.layout(len(p.ops))
	}
	return p, nil
}

// borrowed are the training plan's memory a forward-only plan lays its
// buffers in first: the region, else the pool's blocks; sizes in bytes.
func (p *plan) borrowed() (sizes []int, ptrs []uintptr) {
	if p.region != 0 {
		return []int{p.regionBytes}, []uintptr{p.region}
	}
	for _, b := range p.blocks {
		sizes, ptrs = append(sizes, int(blockBytes(b.Bytes))), append(ptrs, b.Ptr)
	}
	return sizes, ptrs
}

// release gives a plan's blocks back to the pool (and its keys: after
// the engine's copies are withdrawn).
func (d *Model) release(p *plan) {
	if d.h != nil {
		d.h.WithdrawAll() // no copy served over blocks given back
	}
	p.keys.free()
	for _, b := range p.blocks {
		d.live -= blockBytes(b.Bytes)
		d.pool.Put(b)
	}
	p.blocks = nil
}

// alloc gets n bytes of the plan's memory from the pool (in a dry run, a
// made-up address; in a forward-only plan, a span of its arena held for
// the plan's life; in a Model's training plan, its place in the plan's
// region: allocAs).
func (c *compiler) alloc(n int) (uintptr, error) { return c.allocAs(roleScratch, nil, n) }

// allocAs is alloc of a buffer of role (and shape, an activation's), as
// the breakdown names it (memory.go).
func (c *compiler) allocAs(role memRole, shape []int, n int) (uintptr, error) {
	n = max(n, 1)
	if c.eval {
		return c.addr(c.ar.get(n)), nil
	}
	if c.mem != nil {
		return c.mem.alloc(c, role, shape, n)
	}
	if c.d == nil {
		c.fake += 256
		return c.fake, nil
	}
	b, err := c.d.pool.Get(n)
	if err != nil {
		return 0, err
	}
	c.p.blocks = append(c.p.blocks, b)
	c.d.live += blockBytes(n)
	c.d.peak = max(c.d.peak, c.d.fixed+c.d.live)
	return b.Ptr, nil
}

// newAct allocates an activation (and its gradient, but in a
// forward-only plan) of shape.
func (c *compiler) newAct(shape []int) (*act, error) {
	a := &act{shape: shape}
	if c.eval {
		return c.evalAct(shape), nil
	}
	var err error
	if a.val, err = c.allocAs(roleValue, shape, 4*a.size()); err != nil {
		return nil, err
	}
	if a.grad, err = c.allocAs(roleGrad, shape, 4*a.size()); err != nil {
		return nil, err
	}
	return a, nil
}

// param is the next parameter's offset in bytes.
func (c *compiler) param() uintptr {
	p := c.m.Params[c.pi]
	c.pi++
	return uintptr(4 * p.Offset)
}

// copy16 is the bf16 copy of x that x's producer writes as it goes, for
// a Linear that reads x (2 bytes a value from the pool, the plan's
// memory), where the producer can write one and the products read bf16
// copies (gemm.Engine.UsesCopies: bf16 autocast through cuBLAS with the
// cast kernel) in a training plan; 0 otherwise (fp32, TF32, a producer
// without one, a forward-only plan, a dry run). The reader gives it to
// the engine (Provide) before its forward product and withdraws it after
// its backward, so that x is cast for neither its forward product nor
// its weight gradient's. A second reader shares the copy. Where only
// such products read x and its producer can write the copy alone
// (compiler.only16), x keeps no fp32 value in a region's plan: x.val is
// then a key (memory.go's copyOnly), an address the engine serves the
// copy for and no device buffer has.
func (c *compiler) copy16(x *act) (uintptr, error) {
	if x.to16 == nil || c.eval || !c.usesCopies() {
		return 0, nil
	}
	if *x.to16 == 0 {
		p, err := c.allocAs(roleCopy, x.shape, 2*x.size())
		if err != nil {
			return 0, err
		}
		*x.to16 = p
	}
	c.viaCopy = true
	return *x.to16, nil
}

// canDrop32 makes out, the output of the op just planned whose kernel
// can write out's bf16 copy alone (its backward reads no out), a
// candidate for keeping no fp32 value (compileWith), in a training plan.
func (c *compiler) canDrop32(out *act) {
	if !c.eval {
		c.only16 = append(c.only16, out)
	}
}

// val32 is where a's producer writes its fp32 values: a.val, or 0 where
// none is kept (a key: copyOnly) and it writes the bf16 copy alone.
func (c *compiler) val32(a *act) uintptr {
	if c.mem.keyed(a.val) {
		return 0
	}
	return a.val
}

// producer makes the element-wise op just planned (out from x) write
// out's bf16 copy as it goes with fwd16, if a Linear reads out (copy16),
// and, if x is a Linear's output, x's gradient's with bwd16 (saved: out
// or x, as elementwise's), in a training plan.
func (c *compiler) producer(d *Model, out, x *act, err error,
	fwd16 func(k *kernels.Kernels, s *cuda.Stream, y, y16, x uintptr, n int) error,
	bwd16 func(k *kernels.Kernels, s *cuda.Stream, dx, dx16, dy, saved uintptr, n int) error, fromOut bool) (*act, error) {
	if err != nil || c.eval {
		return out, err
	}
	out.to16 = new(uintptr)
	to16, n, y := out.to16, x.size(), c.val32(out)
	if !fromOut { // its backward reads its input: the copy may be all it writes
		c.canDrop32(out)
	}
	o := &c.p.ops[len(c.p.ops)-1]
	o.fwd = func() error { return fwd16(d.k, d.s, y, *to16, x.val, n) }
	g16, err := c.grad16(x)
	if err != nil || g16 == 0 {
		return out, err
	}
	saved := x.val
	if fromOut {
		saved = out.val
	}
	o.bwd = func() error { return bwd16(d.k, d.s, x.grad, g16, out.grad, saved, n) }
	return out, nil
}

// grad16 is the bf16 copy of x's gradient that the layer reading x
// writes in its backward as it writes the gradient (all of it), for the
// Linear whose output x is (it reads it as dy in both its backward
// products): as copy16, 0 where there is none.
func (c *compiler) grad16(x *act) (uintptr, error) {
	if x.grad16 == nil || x.grad == 0 || c.eval || !c.usesCopies() {
		return 0, nil
	}
	if *x.grad16 != 0 {
		return 0, fmt.Errorf("internal: a second layer writes the gradient of a Linear's output") // a Sequential's output has one reader
	}
	p, err := c.allocAs(roleGrad16, x.shape, 2*x.size())
	if err != nil {
		return 0, err
	}
	c.mem.linked(p, x.grad) // lives as the gradient
	*x.grad16 = p
	return p, nil
}

// usesCopies is whether the products read the producers' bf16 copies
// (the engine's UsesCopies; without a device, c.dry's) in a training
// plan.
func (c *compiler) usesCopies() bool {
	if c.d != nil {
		return c.d.h.UsesCopies() && producerCopies
	}
	return c.dry != nil && c.dry.copies
}

// attentionInPlace is whether attention reads the heads in place
// (kernels.AttentionInPlace; without a device, c.dry's).
func (c *compiler) attentionInPlace() bool {
	if c.d != nil {
		return kernels.AttentionInPlace(c.d.h)
	}
	return c.dry != nil && c.dry.inPlace
}

// dryEngine is what a plan without a device takes the engine to do.
type dryEngine struct{ copies, inPlace bool }

// producerCopies switches copy16 (off: every operand cast by the
// engine, the path the tests compare with).
var producerCopies = true

// provide gives the engine x16, the bf16 copy of x's rows of cols values
// (copy16), if any.
func (d *Model) provide(x *act, x16 uintptr, cols int) error {
	if x16 == 0 {
		return nil
	}
	return d.h.Provide(x.val, x16, x.size()/cols, cols)
}

// withdraw ends provide. A reader provides again before its backward
// products, and withdraws after: between its forward and its backward,
// a Stage's EvalForward withdraws every copy (Eval's WithdrawAll), and
// x may be a key that only the copy serves (copyOnly).
func (d *Model) withdraw(x *act, x16 uintptr) {
	if x16 != 0 {
		d.h.Withdraw(x.val)
	}
}

func (c *compiler) add(name string, fwd, bwd func() error) {
	c.p.ops = append(c.p.ops, op{name: name, fwd: fwd, bwd: bwd, params: c.pi})
}

func child(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

func quote(name string) string {
	if name == "" {
		return "(the model)"
	}
	return fmt.Sprintf("%q", name)
}

func with(shape []int, last int) []int {
	s := append([]int(nil), shape...)
	s[len(s)-1] = last
	return s
}

// elementwise plans an activation applied to each of x's values:
// fwd(y, x), and when x has a gradient bwd(dx, dy, saved) with saved the
// activation's output (fromOut) or its input. The kernels and stream are
// d's when the ops run.
func (c *compiler) elementwise(d *Model, name string, x *act,
	fwd func(k *kernels.Kernels, s *cuda.Stream, y, x uintptr, n int) error,
	bwd func(k *kernels.Kernels, s *cuda.Stream, dx, dy, saved uintptr, n int) error, fromOut bool) (*act, error) {
	out, err := c.outAct(x, true) // y may be x
	if err != nil {
		return nil, err
	}
	n := x.size()
	c.add(name, func() error { return fwd(d.k, d.s, out.val, x.val, n) }, func() error {
		if x.grad == 0 {
			return nil
		}
		saved := x.val
		if fromOut {
			saved = out.val
		}
		return bwd(d.k, d.s, x.grad, out.grad, saved, n)
	})
	return out, nil
}

// layer plans l (named name) on input x and returns its output. In a
// forward-only plan the caller lends x (it gives it back after layer
// returns, unless it reads it again: see slot) and owns the output; the
// layer's scratch is given back once it is planned.
func (c *compiler) layer(l nn.Layer, name string, x *act) (*act, error) {
	mark := len(c.temps)
	w, wk, wl := c.where, c.whereKind, c.whereLayer
	c.where, c.whereKind, c.whereLayer = name, strings.TrimPrefix(fmt.Sprintf("%T", l), "*"), l
	via := c.viaCopy
	c.viaCopy = false
	out, err := c.layerOps(l, name, x)
	if _, seq := l.(*nn.Sequential); !seq && !c.viaCopy && out != x {
		// l read x's values (a Sequential's children note their reads;
		// a view that is x itself hands it on to its reader)
		x.plain = true
	}
	c.viaCopy = via
	c.where, c.whereKind, c.whereLayer = w, wk, wl
	c.endTemps(mark)
	return out, err
}

func (c *compiler) layerOps(l nn.Layer, name string, x *act) (*act, error) {
	d := c.d
	if d == nil {
		d = &Model{} // dry: the closures are never called
	}
	P := func(off uintptr) uintptr { return d.Params + off }
	G := func(off uintptr) uintptr { return d.Grads + off }
	shapeErr := func(want string) error {
		return fmt.Errorf("layer %s (%T): input shape %v; want %s", quote(name), l, x.shape, want)
	}
	switch l := l.(type) {
	case *nn.Sequential:
		// each child's input is given back after it (forward-only plans)
		cur := x
		next := func(y *act, by nn.Layer) {
			if cur != x {
				c.mem.consumed(cur, by, len(c.p.ops)) // its readers are planned
				c.drop(cur)
			}
			cur = y
		}
		for i := 0; i < len(l.Layers); i++ {
			cn := child(name, fmt.Sprint(i))
			if e, ok := l.Layers[i].(*nn.Embedding); ok && i+1 < len(l.Layers) {
				if pe, ok := l.Layers[i+1].(*nn.PositionEmbedding); ok {
					y, err := c.embedding(e, pe, cn, cur)
					if err != nil {
						return nil, err
					}
					next(y, e)
					i++
					continue
				}
			}
			y, err := c.layer(l.Layers[i], cn, cur)
			if err != nil {
				return nil, err
			}
			next(y, l.Layers[i])
		}
		if cur == x {
			return c.alias(x, nil), nil
		}
		return cur, nil
	case *nn.Residual:
		if c.eval {
			return c.residualEval(l, name, x)
		}
		fin := &act{val: x.val, shape: x.shape}
		var err error
		if x.grad != 0 {
			if fin.grad, err = c.allocAs(roleGrad, x.shape, 4*x.size()); err != nil {
				return nil, err
			}
		}
		n := x.size()
		// its backward's last work, after fn's: dx = dfn_in + dout
		at := len(c.p.ops)
		c.add(name, nil, nil)
		fout, err := c.layer(l.Fn, child(name, "fn"), fin)
		if err != nil {
			return nil, err
		}
		if fmt.Sprint(fout.shape) != fmt.Sprint(x.shape) {
			return nil, fmt.Errorf("layer %s (residual): fn maps %v to %v; the shapes must agree", quote(name), x.shape, fout.shape)
		}
		// fn's input gradient: written by fn's backward, read by the sum;
		// fn's output gradient (out's) is read by the sum too
		c.mem.backwardOnly(at, len(c.p.ops)-1, fin.grad)
		c.mem.touch(fout.grad, at)
		// out's gradient is fn's output's: the Linear that ends fn reads
		// it as dy (its bf16 copy, if the next layer's backward writes one:
		// grad16)
		out := &act{shape: x.shape, grad: fout.grad, grad16: fout.grad16}
		if out.val, err = c.allocAs(roleValue, x.shape, 4*n); err != nil {
			return nil, err
		}
		if out.grad == 0 && x.grad != 0 {
			return nil, fmt.Errorf("layer %s (residual): internal: no gradient for fn's output", quote(name))
		}
		if out.grad == 0 {
			if out.grad, err = c.allocAs(roleGrad, x.shape, 4*n); err != nil {
				return nil, err
			}
		}
		if x.grad != 0 {
			g16, err := c.grad16(x) // x's gradient is the whole sum
			if err != nil {
				return nil, err
			}
			c.p.ops[at].bwd = func() error { return d.k.AddBF16(d.s, x.grad, g16, fin.grad, out.grad, n) }
		}
		if !c.biasResidual(d, name, out, x, fout) { // with the bias of the Linear ending fn (fuse.go)
			c.add(name, func() error { return d.k.Add(d.s, out.val, x.val, fout.val, n) }, nil)
		}
		c.mem.consumed(fout, nil, len(c.p.ops)) // read by the sum, in forward only
		return out, nil
	case *nn.Linear:
		if len(x.shape) < 2 || x.shape[len(x.shape)-1] != l.In {
			return nil, shapeErr(fmt.Sprintf("(..., %d)", l.In))
		}
		rows := x.size() / l.In
		out, err := c.newAct(with(x.shape, l.Out))
		if err != nil {
			return nil, err
		}
		x16, err := c.copy16(x)
		if err != nil {
			return nil, err
		}
		if !c.eval {
			out.grad16 = new(uintptr) // dy's bf16 copy, if its writer makes one (grad16)
		}
		dy16 := out.grad16
		w, b := c.param(), c.param()
		tail := c.linTail(out, b, rows, l.Out) // the next layer may take the bias (fuse.go)
		c.add(name, func() error {
			if err := d.provide(x, x16, l.In); err != nil {
				return err
			}
			return tail.after(kernels.LinearForward(d.h, d.k, out.val, x.val, P(w), tail.biasOf(P(b)), rows, l.In, l.Out))
		}, func() error {
			if err := d.provide(x, x16, l.In); err != nil { // again: an EvalForward since the forward withdrew it (a Stage's)
				return err
			}
			defer d.withdraw(x, x16)
			if err := tail.before(); err != nil {
				return err
			}
			if dy16 != nil {
				dy := &act{val: out.grad, shape: out.shape}
				if err := d.provide(dy, *dy16, l.Out); err != nil {
					return err
				}
				defer d.withdraw(dy, *dy16)
			}
			return kernels.LinearBackward(d.h, d.k, x.grad, G(w), tail.gradOf(G(b)), x.val, P(w), out.grad, rows, l.In, l.Out, true)
		})
		return out, nil
	case *nn.Conv2d:
		if len(x.shape) != 4 || x.shape[1] != l.In {
			return nil, shapeErr(fmt.Sprintf("(N, %d, H, W)", l.In))
		}
		g := kernels.ConvGeom{N: x.shape[0], C: l.In, H: x.shape[2], W: x.shape[3], Cout: l.Out, K: l.K, Pad: l.Pad}
		ho, wo := g.Out()
		if ho < 1 || wo < 1 {
			return nil, shapeErr("an image at least as large as the kernel")
		}
		if c.eval {
			return c.convEval(name, x, g, c.param(), c.param())
		}
		out, err := c.newAct([]int{g.N, l.Out, ho, wo})
		if err != nil {
			return nil, err
		}
		c.convWS = max(c.convWS, g.Workspace())
		w, b := c.param(), c.param()
		p := c.p
		c.add(name, func() error {
			return kernels.Conv2dForward(d.h, d.k, out.val, x.val, P(w), P(b), p.convWS, g)
		}, func() error {
			return kernels.Conv2dBackward(d.h, d.k, x.grad, G(w), G(b), x.val, P(w), out.grad, p.convWS, g, true)
		})
		return out, nil
	case *nn.BatchNorm:
		st := l.State()
		var sync kernels.BNSync
		if c.d != nil {
			sync = kernels.BNSync(c.d.cfg.SyncBN)
			if st.Sync != nil && sync == nil {
				return nil, fmt.Errorf("layer %s (%T): a SyncBatchNorm (the host layer has a Sync hook) needs Config.SyncBN on the device (devmodel.HostSyncBN makes one of the host's hook)", quote(name), l)
			}
		}
		if (len(x.shape) != 2 && len(x.shape) != 4) || x.shape[1] != st.C {
			return nil, shapeErr(fmt.Sprintf("(N, %d) or (N, %d, H, W)", st.C, st.C))
		}
		if c.bi >= len(c.m.BNs) || c.m.BNs[c.bi] != st {
			return nil, fmt.Errorf("layer %s (%T): not the model's batch norm %d", quote(name), l, c.bi)
		}
		var bd *bnDev
		if c.d != nil {
			bd = c.d.bns[c.bi]
		}
		c.bi++
		n, inner := x.shape[0], prod(x.shape[2:])
		cfg := kernels.BatchNormConfig{C: st.C, Momentum: st.Momentum, Eps: st.Eps}
		out, err := c.newAct(x.shape)
		if err != nil {
			return nil, err
		}
		var xhat uintptr // not in evaluation
		if !c.eval {
			if xhat, err = c.allocAs(roleSaved, x.shape, 4*x.size()); err != nil {
				return nil, err
			}
		}
		ws, err := c.temp(kernels.BatchNormWorkspace(st.C))
		if err != nil {
			return nil, err
		}
		gamma, beta := c.param(), c.param()
		c.add(name, func() error {
			bd.batches++
			return d.k.BatchNormForwardSync(d.s, out.val, xhat, x.val, P(gamma), P(beta), bd.mean, bd.vr, ws, n, inner, cfg, true, sync)
		}, func() error {
			return d.k.BatchNormBackwardSync(d.s, x.grad, G(gamma), G(beta), out.grad, xhat, P(gamma), ws, n, inner, cfg, true, sync)
		})
		// evaluation: the running statistics, read only; no xhat
		c.p.ops[len(c.p.ops)-1].eval = func() error {
			return d.k.BatchNormForward(d.s, out.val, 0, x.val, P(gamma), P(beta), bd.mean, bd.vr, ws, n, inner, cfg, false)
		}
		return out, nil
	case nn.ReLU, *nn.ReLU:
		out, err := c.elementwise(d, name, x, (*kernels.Kernels).ReLU, (*kernels.Kernels).ReLUBackward, true)
		return c.producer(d, out, x, err, (*kernels.Kernels).ReLUBF16, (*kernels.Kernels).ReLUBackwardBF16, true)
	case nn.GELU, *nn.GELU:
		if out, ok, err := c.biasGELU(d, name, x); ok { // with the Linear's bias (fuse.go)
			return out, err
		}
		out, err := c.elementwise(d, name, x, (*kernels.Kernels).GELU, (*kernels.Kernels).GELUBackward, false)
		return c.producer(d, out, x, err, (*kernels.Kernels).GELUBF16, (*kernels.Kernels).GELUBackwardBF16, false)
	case nn.Tanh, *nn.Tanh:
		return c.elementwise(d, name, x, (*kernels.Kernels).Tanh, (*kernels.Kernels).TanhBackward, true)
	case nn.MaxPool2d, *nn.MaxPool2d:
		if len(x.shape) != 4 || x.shape[2] < 2 || x.shape[3] < 2 {
			return nil, shapeErr("(N, C, H, W), H and W at least 2")
		}
		planes, h, w := x.shape[0]*x.shape[1], x.shape[2], x.shape[3]
		out, err := c.newAct([]int{x.shape[0], x.shape[1], h / 2, w / 2})
		if err != nil {
			return nil, err
		}
		arg, err := c.temp(out.size())
		if err != nil {
			return nil, err
		}
		c.add(name, func() error { return d.k.MaxPool2d(d.s, out.val, arg, x.val, planes, h, w) }, func() error {
			if x.grad == 0 {
				return nil
			}
			return d.k.MaxPool2dBackward(d.s, x.grad, out.grad, arg, planes, h, w)
		})
		return out, nil
	case nn.Flatten, *nn.Flatten:
		return c.alias(x, []int{x.shape[0], x.size() / x.shape[0]}), nil
	case *nn.Dropout:
		if l.P < 0 || l.P >= 1 {
			return nil, fmt.Errorf("layer %s (dropout): probability %v not in [0, 1)", quote(name), l.P)
		}
		if l.P == 0 || c.eval { // evaluation: the identity (nn's eval graph)
			return c.alias(x, nil), nil
		}
		out, err := c.newAct(x.shape)
		if err != nil {
			return nil, err
		}
		n, per := x.size(), x.size()/x.shape[0]
		var run int64
		c.add(name, func() error {
			run = d.run
			return d.k.Dropout(d.s, out.val, x.val, n, l.P, l.Seed, run, int64(d.SampleOffset)*int64(per))
		}, func() error {
			if x.grad == 0 {
				return nil
			}
			return d.k.Dropout(d.s, x.grad, out.grad, n, l.P, l.Seed, run, int64(d.SampleOffset)*int64(per))
		})
		// evaluation: the identity (nn's eval graph), no run counted
		c.p.ops[len(c.p.ops)-1].eval = func() error {
			return d.s.CopyAsync(out.val, x.val, 4*n, cuda.DeviceToDevice)
		}
		return out, nil
	case *nn.LayerNorm:
		if len(x.shape) < 2 || x.shape[len(x.shape)-1] != l.C {
			return nil, shapeErr(fmt.Sprintf("(..., %d)", l.C))
		}
		eps := l.Eps
		if eps == 0 {
			eps = 1e-5
		}
		rows := x.size() / l.C
		out, err := c.outAct(x, true) // y may be x
		if err != nil {
			return nil, err
		}
		var xhat, inv uintptr // 0 in evaluation: not kept
		if !c.eval {
			if xhat, err = c.allocAs(roleSaved, x.shape, 4*x.size()); err != nil {
				return nil, err
			}
			if inv, err = c.allocAs(roleSaved, nil, 4*rows); err != nil {
				return nil, err
			}
		}
		var dx16 uintptr // dx's bf16 copy, if x is a Linear's output (grad16)
		if !c.eval {
			out.to16 = new(uintptr) // its bf16 copy, if a Linear reads it (copy16)
			if dx16, err = c.grad16(x); err != nil {
				return nil, err
			}
			c.canDrop32(out) // its backward reads xhat and 1/std, not y
		}
		to16, y := out.to16, c.val32(out)
		w, b := c.param(), c.param()
		c.add(name, func() error {
			var y16 uintptr
			if to16 != nil {
				y16 = *to16
			}
			return d.k.LayerNormForwardBF16(d.s, y, y16, xhat, inv, x.val, P(w), P(b), rows, l.C, eps)
		}, func() error {
			return d.k.LayerNormBackwardBF16(d.s, x.grad, dx16, G(w), G(b), out.grad, xhat, inv, P(w), rows, l.C, true)
		})
		return out, nil
	case *nn.Embedding:
		return c.embedding(l, nil, name, x)
	case *nn.PositionEmbedding:
		// on its own (right after an Embedding it is fused into it)
		if len(x.shape) != 3 || x.shape[1] != l.T || x.shape[2] != l.Dim {
			return nil, shapeErr(fmt.Sprintf("(N, %d, %d)", l.T, l.Dim))
		}
		out, err := c.newAct(x.shape)
		if err != nil {
			return nil, err
		}
		pos, rows := c.param(), x.shape[0]*l.T
		c.add(name, func() error {
			return d.k.PositionEmbedding(d.s, out.val, x.val, P(pos), rows, l.Dim, l.T)
		}, func() error {
			if x.grad != 0 { // dx = dy
				if err := d.s.CopyAsync(x.grad, out.grad, 4*x.size(), cuda.DeviceToDevice); err != nil {
					return err
				}
			}
			return d.k.PositionEmbeddingBackward(d.s, G(pos), out.grad, rows, l.Dim, l.T, true)
		})
		return out, nil
	case *nn.CausalSelfAttention:
		if l.Heads < 1 || l.Dim%l.Heads != 0 {
			return nil, fmt.Errorf("layer %s (attention): %d heads do not divide dimension %d", quote(name), l.Heads, l.Dim)
		}
		if len(x.shape) != 3 || x.shape[2] != l.Dim {
			return nil, shapeErr(fmt.Sprintf("(N, T, %d)", l.Dim))
		}
		g := kernels.AttentionGeom{N: x.shape[0], T: x.shape[1], C: l.Dim, H: l.Heads}
		if c.eval {
			return c.attentionEval(name, x, g, [4]uintptr{c.param(), c.param(), c.param(), c.param()})
		}
		cc, rows := l.Dim, x.shape[0]*x.shape[1]
		qkv, err := c.newAct(with(x.shape, 3*cc))
		if err != nil {
			return nil, err
		}
		att, err := c.newAct(x.shape)
		if err != nil {
			return nil, err
		}
		out, err := c.newAct(x.shape)
		if err != nil {
			return nil, err
		}
		out.grad16 = new(uintptr) // the out-projection's dy's bf16 copy, if its writer makes one (grad16)
		dy16 := out.grad16
		fused, err := g.Fused() // $GDIST_ATTENTION=fused: no T x T probabilities kept
		if err != nil {
			return nil, fmt.Errorf("layer %s (attention): %w", quote(name), err)
		}
		keep, ws := g.Probs(), g.Workspace()
		inPlace := !fused && c.attentionInPlace() // the workspace holds dS only
		switch {
		case fused:
			keep, ws = g.FusedKeep(), g.FusedWorkspace()
		case inPlace:
			ws = g.InPlaceWorkspace()
		}
		probs, err := c.allocAs(roleSaved, nil, 4*keep) // P, or the fused path's log-sum-exp rows
		if err != nil {
			return nil, err
		}
		c.attWS = max(c.attWS, ws)
		if !fused && !inPlace {
			c.attFwdWS = true // the heads' copies: the forward uses it too
		}
		// the heads' path, as planned, when the op runs (the in-place
		// workspace is too small for the copies)
		heads := func() error {
			if inPlace && !kernels.AttentionInPlace(d.h) {
				return fmt.Errorf("layer %s (attention): planned with the heads in place, now copied ($%s changed since the model was placed?)", quote(name), kernels.EnvAttentionHeads)
			}
			return nil
		}
		x16, err := c.copy16(x)
		if err != nil {
			return nil, err
		}
		win, bin, wout, bout := c.param(), c.param(), c.param(), c.param()
		tail := c.linTail(out, bout, rows, cc) // the Residual may take the out-projection's bias (fuse.go)
		p := c.p
		c.add(name, func() error {
			if err := d.provide(x, x16, cc); err != nil {
				return err
			}
			if err := kernels.LinearForward(d.h, d.k, qkv.val, x.val, P(win), P(bin), rows, cc, 3*cc); err != nil {
				return err
			}
			d.profileSplit("linear", "attention") // GDIST_DEVICE_PROFILE (profile.go)
			if err := heads(); err != nil {
				return err
			}
			var err error
			if fused {
				err = d.k.AttentionFusedForward(d.s, att.val, probs, qkv.val, g)
			} else {
				err = kernels.AttentionForward(d.h, d.k, att.val, probs, qkv.val, p.attWS, g)
			}
			if err != nil {
				return err
			}
			d.profileSplit("attention", "linear")
			return tail.after(kernels.LinearForward(d.h, d.k, out.val, att.val, P(wout), tail.biasOf(P(bout)), rows, cc, cc))
		}, func() error {
			if err := d.provide(x, x16, cc); err != nil { // again, as a Linear's
				return err
			}
			defer d.withdraw(x, x16)
			if err := tail.before(); err != nil { // a GELU's that took the out-projection's bias (fuse.go): it writes dy
				return err
			}
			dy := &act{val: out.grad, shape: out.shape}
			if err := d.provide(dy, *dy16, cc); err != nil {
				return err
			}
			err := kernels.LinearBackward(d.h, d.k, att.grad, G(wout), tail.gradOf(G(bout)), att.val, P(wout), out.grad, rows, cc, cc, true)
			d.withdraw(dy, *dy16)
			if err != nil {
				return err
			}
			d.profileSplit("linear", "attention")
			if err := heads(); err != nil {
				return err
			}
			if fused {
				err = d.k.AttentionFusedBackward(d.s, qkv.grad, att.grad, qkv.val, att.val, probs, p.attWS, g)
			} else {
				err = kernels.AttentionBackward(d.h, d.k, qkv.grad, att.grad, qkv.val, probs, p.attWS, g)
			}
			if err != nil {
				return err
			}
			d.profileSplit("attention", "linear")
			return kernels.LinearBackward(d.h, d.k, x.grad, G(win), G(bin), x.val, P(win), qkv.grad, rows, cc, 3*cc, true)
		})
		// qkv's and the output's gradients, and the workspace (unless the
		// heads' copies use it), are this op's backward's only (memory.go)
		at := len(c.p.ops) - 1
		c.mem.backwardOnly(at, at, qkv.grad, att.grad)
		c.attOps = [2]int{min(c.attOps[0], at), max(c.attOps[1], at)}
		return out, nil
	}
	what := "has no device kernels"
	if _, ok := l.(nn.Container); ok {
		what = "is a container other than nn's Sequential and Residual (build it from nn.Seq and nn.Residual, whose order of children is known)"
	}
	return nil, fmt.Errorf("layer %s (%T) %s; device layers: %s", quote(name), l, what, strings.ReplaceAll(Layers, "\n", " "))
}

// embedding plans an Embedding, and the PositionEmbedding after it when
// pe is not nil, as one op (nn's values bit for bit: the row, plus the
// position in one float32 add).
func (c *compiler) embedding(e *nn.Embedding, pe *nn.PositionEmbedding, name string, x *act) (*act, error) {
	d := c.d
	if d == nil {
		d = &Model{}
	}
	if len(x.shape) < 1 || len(x.shape) > 2 {
		return nil, fmt.Errorf("layer %s (%T): input shape %v; want (N) or (N, T) ids", quote(name), e, x.shape)
	}
	rows := x.size()
	shape := append(append([]int(nil), x.shape...), e.Dim)
	t := 1
	if pe != nil {
		if len(shape) != 3 || shape[1] != pe.T || pe.Dim != e.Dim {
			return nil, fmt.Errorf("layer %s (%T): input shape %v; want (N, %d, %d)", quote(name), pe, shape, pe.T, pe.Dim)
		}
		t = pe.T
	}
	out, err := c.newAct(shape)
	if err != nil {
		return nil, err
	}
	w := c.param()
	// the position table's addresses when the op runs (d.Params and
	// d.Grads move between units with ZeRO-2, 3: zero.go)
	pos, dpos := func() uintptr { return 0 }, func() uintptr { return 0 }
	if pe != nil {
		off := c.param()
		pos, dpos = func() uintptr { return d.Params + off }, func() uintptr { return d.Grads + off }
	}
	c.add(name, func() error {
		return d.k.Embedding(d.s, out.val, x.val, d.Params+w, pos(), rows, e.Num, e.Dim, t)
	}, func() error {
		if x.grad != 0 { // the ids get no gradient
			if err := d.memset(x.grad, 4*rows); err != nil {
				return err
			}
		}
		return d.k.EmbeddingBackward(d.s, d.Grads+w, dpos(), out.grad, x.val, rows, e.Num, e.Dim, t, true)
	})
	return out, nil
}

// SyncBNFunc makes batch norm's statistics span the data-parallel ranks
// on the device (SyncBatchNorm; Config.SyncBN): nn.BNLayer.Sync's
// contract over device memory (kernels.BNSync). With stage "forward" buf
// is the device address of this rank's per-channel [sum x (C), M2 (C),
// count] (n = 2C+1 float64s), to be replaced with the values of the
// union of every rank's batch (M2 combined with Chan's formula, as
// package syncbn does); with "backward", [sum dy (C), sum dy xhat (C)]
// (n = 2C), to be replaced with their sums over the ranks. The values
// are queued on s, the model's stream: the hook orders its work after
// them (queues it on s, or synchronizes s first) and leaves the result
// ready for work queued on s after it returns. Every rank calls it in
// the same order (the batch norms in layer order forward, in reverse
// backward); dgamma and dbeta stay per rank, as nn's. An error stops the
// step (ForwardBackward returns it, naming the layer).
type SyncBNFunc func(s *cuda.Stream, stage string, buf uintptr, n int) error

// HostSyncBN makes a SyncBNFunc of a host hook, nn's SyncFunc
// (syncbn.Syncer.Hook's: the CPU path's SyncBatchNorm over a comm.Comm):
// it waits for s, copies the n float64s down, calls fn with ctx (which
// bounds fn's collectives: the context of the training run) and copies
// the result up (8 n bytes each way per batch-norm layer and pass). The
// statistics are then combined exactly as on the CPU path. It holds no
// device resources between calls: there is nothing to close.
func HostSyncBN(ctx context.Context, fn nn.SyncFunc) SyncBNFunc {
	return func(s *cuda.Stream, stage string, buf uintptr, n int) error {
		if err := s.Synchronize(); err != nil {
			return err
		}
		host := make([]float64, n)
		b := unsafe.Slice((*byte)(unsafe.Pointer(&host[0])), 8*n)
		if err := cuda.CopyDtoH(s.Device(), b, buf); err != nil {
			return err
		}
		if err := fn(ctx, stage, host); err != nil {
			return fmt.Errorf("syncbn %s: %w", stage, err)
		}
		if err := cuda.CopyHtoD(s.Device(), buf, b); err != nil {
			return err
		}
		// the copy runs on the legacy default stream, which s (a
		// non-blocking stream) does not wait for unless told: by an
		// event of this call's, destroyed once s's wait is queued (the
		// wait holds the record; this path waits on the host each call
		// anyway, so an event's making costs nothing that counts)
		up, err := cuda.NewEvent(s.Device())
		if err != nil {
			return err
		}
		return errors.Join(s.WaitDefault(up), up.Destroy())
	}
}

// Products says what computes the model's matrix products and in which
// precision: cuBLAS (version, path) or gdist's tiled kernel and why.
func (d *Model) Products() string {
	return fmt.Sprintf("%s, %s", d.h.Backend(), d.h.Precision())
}
