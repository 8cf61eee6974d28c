package flat

import (
	"fmt"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/internal/hugepage"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// DType is the learnables' element type: comm.Float32 (Value and Grad
// hold them) or comm.Float64 (Value64 and Grad64 do; Bind of float64
// nodes).
func (p *Params) DType() comm.DType {
	if p.dt == 0 {
		return comm.Float32
	}
	return p.dt
}

// HasGrad reports whether p keeps a full gradient buffer.
func (p *Params) HasGrad() bool {
	if p.dt == comm.Float64 {
		return p.Grad64 != nil
	}
	return p.Grad != nil
}

// ValueBuf is the parameter buffer (Value or Value64) as a comm.Buffer,
// for collectives whatever the DType.
func (p *Params) ValueBuf() comm.Buffer {
	if p.dt == comm.Float64 {
		return comm.FromSlice(p.Value64)
	}
	return comm.FromSlice(p.Value)
}

// GradBuf is the gradient buffer (Grad or Grad64) as a comm.Buffer (of
// length 0 without one).
func (p *Params) GradBuf() comm.Buffer {
	if p.dt == comm.Float64 {
		return comm.FromSlice(p.Grad64)
	}
	return comm.FromSlice(p.Grad)
}

// ValueOf64 and GradOf64 are ValueOf and GradOf for float64 Params.
func (p *Params) ValueOf64(i int) []float64 {
	s := p.Spans[i]
	return p.Value64[s.Offset : s.Offset+s.Size]
}

// GradOf64 is a view of float64 learnable i's gradient (nil without a
// gradient buffer).
func (p *Params) GradOf64(i int) []float64 {
	if p.Grad64 == nil {
		return nil
	}
	s := p.Spans[i]
	return p.Grad64[s.Offset : s.Offset+s.Size]
}

// dtypeOf is the comm type of a learnable's tensor type.
func dtypeOf(n *G.Node) (comm.DType, error) {
	switch n.Dtype() {
	case tensor.Float32:
		return comm.Float32, nil
	case tensor.Float64:
		return comm.Float64, nil
	}
	return 0, fmt.Errorf("it is %v; gdist trains float32 and float64 learnables", n.Dtype())
}

// alloc makes both buffers, n elements each, of p's type.
func (p *Params) alloc(n int) {
	if p.dt == comm.Float64 {
		p.Value64, p.Grad64 = make([]float64, n), make([]float64, n)
		return
	}
	p.Value, p.Grad = hugepage.Float32s(n), hugepage.Float32s(n)
}

// viewOf is learnable i's view of the value (or gradient) buffer, as a
// slice of p's type.
func (p *Params) viewOf(i int, grad bool) any {
	switch {
	case p.dt == comm.Float64 && grad:
		return p.GradOf64(i)
	case p.dt == comm.Float64:
		return p.ValueOf64(i)
	case grad:
		return p.GradOf(i)
	}
	return p.ValueOf(i)
}

// copyIn copies d's elements (a scalar as one) into learnable i's view
// of the value (or gradient) buffer.
func (p *Params) copyIn(i int, grad bool, d *tensor.Dense) {
	switch dst := p.viewOf(i, grad).(type) {
	case []float32:
		switch v := d.Data().(type) {
		case []float32:
			copy(dst, v)
		case float32:
			dst[0] = v
		}
	case []float64:
		switch v := d.Data().(type) {
		case []float64:
			copy(dst, v)
		case float64:
			dst[0] = v
		}
	}
}

// setBuf makes b (of p's type) the value (or gradient) buffer.
func (p *Params) setBuf(grad bool, b comm.Buffer) {
	if p.dt == comm.Float64 {
		s, _ := comm.AsSlice[float64](b)
		if grad {
			p.Grad64 = s
		} else {
			p.Value64 = s
		}
		return
	}
	s, _ := comm.AsSlice[float32](b)
	if grad {
		p.Grad = s
	} else {
		p.Value = s
	}
}
