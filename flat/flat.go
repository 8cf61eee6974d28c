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
	// Value64 and Grad64 stand in for Value and Grad (then nil) when the
	// learnables are float64 (Bind of float64 nodes; DType says which).
	Value64 []float64
	Grad64  []float64
	Spans   []Span

	nodes  []*G.Node       // bound gorgonia learnables (Bind), by span
	vals   []*tensor.Dense // bound parameter tensors (BindValues), by span
	taps   []*tapCell
	onGrad func(i int, ready bool)
	last   int  // tapped gradient whose accumulation is still under way
	dual   bool // Verify saw gradients reach Grad
	dt     comm.DType
}

// New returns Params over the given buffers and spans, checked (Check).
func New(value, grad []float32, spans []Span) (*Params, error) {
	p := &Params{Value: value, Grad: grad, Spans: spans, last: -1, dt: comm.Float32}
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
	if n := p.ValueBuf().Len(); n < off {
		return fmt.Errorf("%w: parameter buffer has %d elements, the spans need %d", ErrInvalid, n, off)
	}
	if g := p.GradBuf(); p.HasGrad() && g.Len() < off {
		return fmt.Errorf("%w: gradient buffer has %d elements, the spans need %d", ErrInvalid, g.Len(), off)
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
func (p *Params) ZeroGrad() {
	clear(p.Grad)
	clear(p.Grad64)
}

// Bind lays learnables out in that order in new flat buffers of at least
// minLen elements (0: just enough), copying each one's current value (and
// gradient, if it has one), and re-backs every node's value in place onto
// its view of the flat parameter buffer: the *tensor.Dense the node held
// (and that a model may keep, in a struct of weights) is the same tensor
// afterwards and reads and writes the flat buffer. The gradient (the dual
// value) is re-backed in place likewise where the node has one, else
// given a new tensor over the flat gradient buffer. Each learnable must
// be a distinct leaf of a graph (made with
// gorgonia.NewTensor/NewMatrix/NewVector and a value), all float32 or all
// float64 (see DType), whose value is a *tensor.Dense with storage of its
// own (not a view of another tensor, not
// masked, not manually managed memory, not shared with another
// learnable); anything else is an error naming it, and then no value has
// been touched.
func Bind(learnables []*G.Node, minLen int) (*Params, error) {
	if len(learnables) == 0 {
		return nil, fmt.Errorf("%w: no learnables", ErrInvalid)
	}
	p := &Params{last: -1, dt: comm.Float32}
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
		dt, err := dtypeOf(n)
		if err != nil {
			return nil, fmt.Errorf("%w: learnable %d (%q): %v", ErrInvalid, i, n.Name(), err)
		}
		if i == 0 {
			p.dt = dt
		} else if dt != p.dt {
			return nil, fmt.Errorf("%w: learnable %d (%q) is %v but learnable 0 (%q) is %v: the learnables of one model share one type (tensor.Float32 or tensor.Float64)", ErrInvalid, i, n.Name(), dt, learnables[0].Name(), p.dt)
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
	p.alloc(max(off, minLen))
	for i, n := range learnables {
		p.copyIn(i, false, n.Value().(*tensor.Dense))
		if g := dualGrad(n); g != nil && g.DataSize() == p.Spans[i].Size {
			p.copyIn(i, true, g)
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
	for i, v := range p.vals {
		tensor.WithBacking(p.viewOf(i, false))(v)
	}
	for i, n := range p.nodes {
		s := p.Spans[i]
		v := n.Value().(*tensor.Dense)
		tensor.WithBacking(p.viewOf(i, false))(v) // its shape stays: Bind checked the size
		if p.HasGrad() {
			if g := dualGrad(n); g != nil && g.Shape().Eq(v.Shape()) {
				tensor.WithBacking(p.viewOf(i, true))(g)
			} else {
				G.WithGrad(tensor.New(tensor.WithShape(s.Shape...), tensor.WithBacking(p.viewOf(i, true))))(n)
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
	if p.dt == comm.Float64 {
		p.Value64 = grow(p.Value64, n, func(n int) []float64 { return make([]float64, n) })
		if p.Grad64 != nil {
			p.Grad64 = grow(p.Grad64, n, func(n int) []float64 { return make([]float64, n) })
		}
		return p.rebind()
	}
	p.Value = grow(p.Value, n, hugepage.Float32s)
	if p.Grad != nil {
		p.Grad = grow(p.Grad, n, hugepage.Float32s)
	}
	return p.rebind()
}

func grow[T float32 | float64](s []T, n int, alloc func(int) []T) []T {
	if len(s) >= n {
		return s
	}
	t := alloc(n)
	copy(t, s)
	return t
}

// Move moves the buffers into value and grad (nil: leave that buffer
// where it is), which must be at least as long: it copies the contents
// (the new tail zero) and re-backs bound learnables onto them, as Grow
// does. Strategies use it to put the buffers in memory their Comm shares
// (comm.Alloc). For float32 Params; MoveBuffers takes either type.
func (p *Params) Move(value, grad []float32) error {
	var v, g comm.Buffer
	if value != nil {
		v = comm.FromSlice(value)
	}
	if grad != nil {
		g = comm.FromSlice(grad)
	}
	return p.MoveBuffers(v, g)
}

// MoveBuffers is Move with host buffers of the Params' DType (a zero
// Buffer: leave that one where it is).
func (p *Params) MoveBuffers(value, grad comm.Buffer) error {
	pv, pg := p.ValueBuf(), p.GradBuf()
	bad := func(b comm.Buffer, have comm.Buffer) bool {
		return b.DType() != p.dt || b.IsDevice() || b.Len() < have.Len()
	}
	if value.Len() > 0 && bad(value, pv) || grad.Len() > 0 && (!p.HasGrad() || bad(grad, pg)) {
		return fmt.Errorf("%w: moving %v buffers of %d and %d elements into %v and %v", ErrInvalid, p.dt, pv.Len(), pg.Len(), value, grad)
	}
	if value.Len() > 0 {
		clear(value.Host()[copy(value.Host(), pv.Host()):])
		p.setBuf(false, value)
	}
	if grad.Len() > 0 {
		clear(grad.Host()[copy(grad.Host(), pg.Host()):])
		p.setBuf(true, grad)
	}
	return p.rebind()
}

// Bound reports whether p re-backs gorgonia learnables or parameter
// tensors (Bind, BindValues).
func (p *Params) Bound() bool { return p.nodes != nil || p.vals != nil }

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
