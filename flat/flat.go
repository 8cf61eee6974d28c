package flat

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/internal/hugepage"
	"github.com/gdist/gdist/internal/reduce"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ErrInvalid wraps every error about learnables that cannot be laid out
// or tapped.
var ErrInvalid = errors.New("flat: invalid learnables")

// Span is one learnable's place in the flat buffers.
type Span struct {
	Name   string
	Shape  []int
	Offset int // first element in Value and Grad
	Size   int
}

// Params is a model's learnables in one flat parameter buffer and one flat
// gradient buffer. Spans lie in offset order, contiguous from 0; the
// buffers may be longer than the spans (ZeRO pads them to a multiple of
// the world size). Not safe for concurrent use.
type Params struct {
	Value []float32
	Grad  []float32 // nil when a strategy keeps no full gradient buffer
	Spans []Span

	nodes  []*G.Node // bound gorgonia learnables (Bind), by span
	taps   []*tapCell
	onGrad func(i int, ready bool)
	last   int  // tapped gradient whose accumulation is still under way
	dual   bool // Verify saw gradients reach Grad
}

// New returns Params over the given buffers and spans, checked (Check).
func New(value, grad []float32, spans []Span) (*Params, error) {
	p := &Params{Value: value, Grad: grad, Spans: spans, last: -1}
	if err := p.Check(); err != nil {
		return nil, err
	}
	return p, nil
}

// Len is the number of learnable scalars (the end of the last span).
func (p *Params) Len() int {
	if len(p.Spans) == 0 {
		return 0
	}
	s := p.Spans[len(p.Spans)-1]
	return s.Offset + s.Size
}

// Check verifies the layout: spans in offset order with no gap or
// overlap, each Size the product of its Shape, and buffers at least Len
// long (Grad may be nil).
func (p *Params) Check() error {
	off := 0
	for i, s := range p.Spans {
		if s.Offset != off {
			return fmt.Errorf("%w: span %d (%q) starts at %d, want %d (spans must be in offset order, with no gap or overlap)", ErrInvalid, i, s.Name, s.Offset, off)
		}
		if n := prod(s.Shape); n != s.Size {
			return fmt.Errorf("%w: span %d (%q) has size %d but shape %v (%d elements)", ErrInvalid, i, s.Name, s.Size, s.Shape, n)
		}
		off += s.Size
	}
	if off == 0 {
		return fmt.Errorf("%w: no learnable scalars", ErrInvalid)
	}
	if len(p.Value) < off {
		return fmt.Errorf("%w: parameter buffer has %d elements, the spans need %d", ErrInvalid, len(p.Value), off)
	}
	if p.Grad != nil && len(p.Grad) < off {
		return fmt.Errorf("%w: gradient buffer has %d elements, the spans need %d", ErrInvalid, len(p.Grad), off)
	}
	return nil
}

// ValueOf and GradOf are views of learnable i's parameters and gradient.
func (p *Params) ValueOf(i int) []float32 {
	s := p.Spans[i]
	return p.Value[s.Offset : s.Offset+s.Size]
}

// GradOf is a view of learnable i's gradient (nil without a gradient
// buffer).
func (p *Params) GradOf(i int) []float32 {
	if p.Grad == nil {
		return nil
	}
	s := p.Spans[i]
	return p.Grad[s.Offset : s.Offset+s.Size]
}

// ZeroGrad clears the gradient buffer.
func (p *Params) ZeroGrad() { clear(p.Grad) }

// Bind lays learnables out in that order in new flat buffers of at least
// minLen elements (0: just enough), copying each one's current value (and
// gradient, if it has one), and re-backs every node's value in place onto
// its view of the flat parameter buffer: the *tensor.Dense the node held
// (and that a model may keep, in a struct of weights) is the same tensor
// afterwards and reads and writes the flat buffer. The gradient (the dual
// value) is re-backed in place likewise where the node has one, else
// given a new tensor over the flat gradient buffer. Each learnable must
// be a distinct float32 leaf of a graph (made with
// gorgonia.NewTensor/NewMatrix/NewVector and a value) whose value is a
// *tensor.Dense with storage of its own (not a view of another tensor, not
// masked, not manually managed memory, not shared with another
// learnable); anything else is an error naming it, and then no value has
// been touched.
func Bind(learnables []*G.Node, minLen int) (*Params, error) {
	if len(learnables) == 0 {
		return nil, fmt.Errorf("%w: no learnables", ErrInvalid)
	}
	p := &Params{last: -1}
	seen := map[*G.Node]int{}
	values := map[*tensor.Dense]int{}
	names := map[string]bool{}
	off := 0
	for i, n := range learnables {
		if n == nil {
			return nil, fmt.Errorf("%w: learnable %d is nil", ErrInvalid, i)
		}
		if j, dup := seen[n]; dup {
			return nil, fmt.Errorf("%w: learnable %q is listed twice (at %d and %d)", ErrInvalid, n.Name(), j, i)
		}
		seen[n] = i
		if n.Op() != nil {
			return nil, fmt.Errorf("%w: learnable %d (%q) is the result of %v, not a leaf: pass the nodes made with gorgonia.NewTensor/NewMatrix/NewVector", ErrInvalid, i, n.Name(), n.Op())
		}
		if n.Dtype() != tensor.Float32 {
			return nil, fmt.Errorf("%w: learnable %d (%q) is %v; gdist trains float32 learnables", ErrInvalid, i, n.Name(), n.Dtype())
		}
		d, ok := n.Value().(*tensor.Dense)
		if !ok {
			return nil, fmt.Errorf("%w: learnable %d (%q) has value %T, want a *tensor.Dense (give it one with gorgonia.WithValue or gorgonia.WithInit)", ErrInvalid, i, n.Name(), n.Value())
		}
		if why := unbackable(d); why != "" {
			return nil, fmt.Errorf("%w: learnable %d (%q): its value %s, so it cannot be re-backed in place onto the flat buffer: give it a tensor of its own (tensor.New with WithBacking, or gorgonia.WithInit)", ErrInvalid, i, n.Name(), why)
		}
		if j, dup := values[d]; dup {
			return nil, fmt.Errorf("%w: learnable %d (%q) has the same value tensor as learnable %d (%q): each learnable needs a tensor of its own", ErrInvalid, i, n.Name(), j, learnables[j].Name())
		}
		values[d] = i
		name := n.Name()
		if name == "" || names[name] {
			name = fmt.Sprintf("param%d", i)
		}
		names[name] = true
		shape := append([]int(nil), n.Shape()...)
		size := prod(shape)
		if d.DataSize() != size {
			return nil, fmt.Errorf("%w: learnable %d (%q) has shape %v but its value holds %d elements", ErrInvalid, i, n.Name(), shape, d.DataSize())
		}
		p.Spans = append(p.Spans, Span{Name: name, Shape: shape, Offset: off, Size: size})
		off += size
	}
	p.Value = hugepage.Float32s(max(off, minLen))
	p.Grad = hugepage.Float32s(max(off, minLen))
	for i, n := range learnables {
		copy(p.ValueOf(i), denseF32(n.Value().(*tensor.Dense)))
		if g := dualGrad(n); g != nil && g.DataSize() == p.Spans[i].Size {
			copy(p.GradOf(i), denseF32(g))
		}
	}
	p.nodes = learnables
	if err := p.rebind(); err != nil {
		return nil, err
	}
	if err := p.findTaps(); err != nil {
		return nil, err
	}
	return p, nil
}

// unbackable says why a value tensor cannot be re-backed in place ("" if
// it can).
func unbackable(d *tensor.Dense) string {
	switch {
	case d.IsView():
		return "is a view of another tensor (a slice or transpose)"
	case d.RequiresIterator():
		return "is not contiguous (transposed)"
	case d.IsMasked():
		return "is masked"
	case d.IsManuallyManaged() || !d.IsNativelyAccessible():
		return "lies in manually managed memory (tensor.FromMemory or a device engine)"
	}
	return ""
}

// denseF32 is the elements of a float32 *Dense (a scalar as one element).
func denseF32(d *tensor.Dense) []float32 {
	switch v := d.Data().(type) {
	case []float32:
		return v
	case float32:
		return []float32{v}
	}
	return nil
}

// dualGrad is n's gradient tensor where n holds a dual value (not its
// derivative node's value), else nil.
func dualGrad(n *G.Node) *tensor.Dense {
	g, err := n.Grad()
	if err != nil || g == nil {
		return nil
	}
	if d := n.Deriv(); d != nil && d.Value() == g {
		return nil
	}
	d, _ := g.(*tensor.Dense)
	if d == nil || unbackable(d) != "" || d.Dtype() != n.Dtype() {
		return nil
	}
	return d
}

// rebind points every bound node's value and gradient at the buffers:
// the tensors they hold are re-backed in place (tensor.WithBacking
// applied to the existing *Dense), so whoever kept them sees the flat
// buffers.
func (p *Params) rebind() (err error) {
	defer func() {
		// gorgonia's node options panic on a type mismatch.
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: re-backing a learnable: %v", ErrInvalid, r)
		}
	}()
	for i, n := range p.nodes {
		s := p.Spans[i]
		v := n.Value().(*tensor.Dense)
		tensor.WithBacking(p.ValueOf(i))(v) // its shape stays: Bind checked the size
		if p.Grad != nil {
			if g := dualGrad(n); g != nil && g.Shape().Eq(v.Shape()) {
				tensor.WithBacking(p.GradOf(i))(g)
			} else {
				G.WithGrad(tensor.New(tensor.WithShape(s.Shape...), tensor.WithBacking(p.GradOf(i))))(n)
			}
		}
	}
	return nil
}

// Grow makes both buffers at least n elements long (the new tail zero),
// keeping their contents, and re-backs bound learnables onto the new
// buffers. Graphs that read the old buffers directly (not through bound
// nodes) must be rebuilt.
func (p *Params) Grow(n int) error {
	if len(p.Value) < n {
		v := hugepage.Float32s(n)
		copy(v, p.Value)
		p.Value = v
	}
	if p.Grad != nil && len(p.Grad) < n {
		g := hugepage.Float32s(n)
		copy(g, p.Grad)
		p.Grad = g
	}
	return p.rebind()
}

// Move moves the buffers into value and grad (nil: leave that buffer
// where it is), which must be at least as long: it copies the contents
// (the new tail zero) and re-backs bound learnables onto them, as Grow
// does. Strategies use it to put the buffers in memory their Comm shares
// (comm.Alloc).
func (p *Params) Move(value, grad []float32) error {
	if value != nil && len(value) < len(p.Value) || grad != nil && (p.Grad == nil || len(grad) < len(p.Grad)) {
		return fmt.Errorf("%w: moving buffers of %d and %d elements into %d and %d", ErrInvalid, len(p.Value), len(p.Grad), len(value), len(grad))
	}
	if value != nil {
		clear(value[copy(value, p.Value):])
		p.Value = value
	}
	if grad != nil {
		clear(grad[copy(grad, p.Grad):])
		p.Grad = grad
	}
	return p.rebind()
}

// Bound reports whether p re-backs gorgonia learnables (Bind).
func (p *Params) Bound() bool { return p.nodes != nil }

func prod(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// AddTo sets dst[j] += src[j] for j < min(len(dst), len(src)) with the
// reduce kernels the collectives use (internal/reduce) (the same sums as a plain loop: each is one
// rounded float32 addition).
func AddTo(dst, src []float32) {
	n := min(len(dst), len(src))
	dst, src = dst[:n], src[:n]
	if n < 256 { // short rows: the call into the kernels costs more
		for len(src) >= 8 {
			d, s := dst[:8:8], src[:8:8]
			d[0] += s[0]
			d[1] += s[1]
			d[2] += s[2]
			d[3] += s[3]
			d[4] += s[4]
			d[5] += s[5]
			d[6] += s[6]
			d[7] += s[7]
			dst, src = dst[8:], src[8:]
		}
		for i, v := range src {
			dst[i] += v
		}
		return
	}
	reduce.Into(comm.Float32, comm.Sum, unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*len(dst)),
		unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), 4*len(src)))
}
