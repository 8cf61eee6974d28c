package devmodel

// Fusions across layers (issue 28): the layer after a Linear may take
// over the Linear's bias, so that the bias add joins the next kernel
// instead of a pass of its own over the Linear's output:
//
//   - a GELU right after a Linear (or after attention, whose
//     out-projection is one: TestFusedSameBits/attention-gelu): forward,
//     one kernel adds the bias and applies GELU (kernels.BiasGELU);
//     backward, one kernel computes GELU's gradient and sums it into the
//     bias's gradient (kernels.BiasGELUBackward), so the Linear's
//     backward sums no bias gradient (GPT's MLP);
//   - a Residual whose function ends with a Linear (the MLP's second
//     Linear, attention's out-projection): the Residual's add adds the
//     bias first (kernels.BiasAddResidual: x + (f + b)).
//
// The Linear's output then holds its product without the bias, read by
// the fused kernels only. Each fused kernel does the unfused kernels'
// float32 operations in their order (the column sums in BiasGrad's
// chunks and order): training is bit for bit the same
// (TestFusedSameBits). The fused work runs inside the Linear's op (its
// forward after the product, its backward before the products), so that
// an op touches only its own layer's parameters (ZeRO's units) and the
// fused kernels read the bias where the Linear's op does. A
// forward-only plan fuses nothing (its Linear's output is read as it
// is).

// fuseLayers switches the fusions (off: every layer on its own, the path
// TestFusedSameBits compares with).
var fuseLayers = true

// linTail is a Linear's output's offer of its bias to the layer that
// reads the output next, set by the Linear (or attention's
// out-projection) in a training plan; nil otherwise.
type linTail struct {
	op         int     // the Linear's op (its index in the plan)
	bias       uintptr // the bias's offset in the flat buffers, bytes
	rows, cols int
	taken      bool         // a reader took the bias: the product is stored without it
	noGrad     bool         // the reader sums the bias's gradient too
	then       func() error // after the Linear's forward product
	first      func() error // first in the Linear's backward
}

// linTail makes the offer of the bias at offset b of the Linear whose op
// is added next (its output out, rows of cols), in a training plan.
func (c *compiler) linTail(out *act, b uintptr, rows, cols int) *linTail {
	if c.eval || !fuseLayers {
		return nil
	}
	out.tail = &linTail{op: len(c.p.ops), bias: b, rows: rows, cols: cols}
	return out.tail
}

// biasOf is the bias the Linear's forward adds: p, or 0 where a reader
// took it.
func (t *linTail) biasOf(p uintptr) uintptr {
	if t != nil && t.taken {
		return 0
	}
	return p
}

// gradOf is the bias gradient the Linear's backward sums: g, or 0 where
// the reader sums it.
func (t *linTail) gradOf(g uintptr) uintptr {
	if t != nil && t.noGrad {
		return 0
	}
	return g
}

// after runs the reader's forward work after the Linear's product (err:
// the product's).
func (t *linTail) after(err error) error {
	if err != nil || t == nil || t.then == nil {
		return err
	}
	return t.then()
}

// before runs the reader's backward work first in the Linear's backward.
func (t *linTail) before() error {
	if t == nil || t.first == nil {
		return nil
	}
	return t.first()
}

// offer is x's linTail if the layer being planned may take it: x is the
// output of the op planned last, and no one took its bias.
func (c *compiler) offer(x *act) *linTail {
	t := x.tail
	if t == nil || t.taken || c.eval || !fuseLayers || t.op != len(c.p.ops)-1 || x.grad == 0 {
		return nil
	}
	return t
}

// biasGELU plans a GELU on x, the output of the Linear planned last, fused
// with its bias (ok false: not fused, plan it on its own).
func (c *compiler) biasGELU(d *Model, name string, x *act) (out *act, ok bool, err error) {
	t := c.offer(x)
	if t == nil {
		return nil, false, nil
	}
	if out, err = c.newAct(x.shape); err != nil {
		return nil, true, err
	}
	out.to16 = new(uintptr) // its bf16 copy, if a Linear reads it (copy16)
	c.writtenBy(t.op, out.val, out.grad)
	dx16, err := c.grad16(x)
	if err != nil {
		return nil, true, err
	}
	c.canDrop32(out) // its backward reads x, not out
	to16, rows, cols, y := out.to16, t.rows, t.cols, c.val32(out)
	t.taken, t.noGrad = true, true
	t.then = func() error {
		return d.profileAs(name, "gelu", func() error {
			return d.k.BiasGELU(d.s, y, *to16, x.val, d.Params+t.bias, rows, cols)
		})
	}
	t.first = func() error {
		return d.profileAs(name, "gelu", func() error {
			return d.k.BiasGELUBackward(d.s, x.grad, dx16, d.Grads+t.bias, out.grad, x.val, d.Params+t.bias, rows, cols, true)
		})
	}
	return out, true, nil
}

// biasResidual makes the Residual's add out = x + fout also add the bias
// of the Linear whose output fout is, if it is the op planned last
// (false: add on its own).
func (c *compiler) biasResidual(d *Model, name string, out, x, fout *act) bool {
	t := c.offer(fout)
	if t == nil {
		return false
	}
	t.taken = true
	c.writtenBy(t.op, out.val)
	rows, cols := t.rows, t.cols
	t.then = func() error {
		return d.profileAs(name, "residual", func() error {
			return d.k.BiasAddResidual(d.s, out.val, x.val, fout.val, d.Params+t.bias, rows, cols)
		})
	}
	return true
}

// profileAs runs f, the work of the fused layer named layer (of kind
// kind) inside another layer's op, and with GDIST_DEVICE_PROFILE
// (profile.go) times it as that layer's: the op's own work before and
// after it stays the op's.
func (d *Model) profileAs(layer, kind string, f func() error) error {
	p := d.prof()
	if p == nil || !p.open || p.err != nil || p.cur == "" {
		return f()
	}
	a := p.record(d)
	p.spans = append(p.spans, span{layer: p.cur, kind: p.segKind, bwd: p.curBwd, a: p.segStart, b: a})
	err := f()
	b := p.record(d)
	p.spans = append(p.spans, span{layer: layer, kind: kind, bwd: p.curBwd, a: a, b: b})
	p.segStart = b
	return err
}

// writtenBy notes in the plan's memory layout (memory.go) that the
// buffers at addrs, allocated after the Linear's op, are used by that op
// (op): the fused work writes them there (forward) and reads them there
// (backward).
func (c *compiler) writtenBy(op int, addrs ...uintptr) {
	if c.mem == nil {
		return
	}
	for _, a := range addrs {
		c.mem.touch(a, op)
	}
}
