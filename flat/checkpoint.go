package flat

import (
	"fmt"
	"slices"

	"github.com/gdist/gdist/checkpoint"
	"github.com/gdist/gdist/comm"
)

// Tensors returns the learnables as safetensors tensors (package
// checkpoint), one per span with its name and shape: F32 or F64 by DType,
// copies of the flat parameter buffer. A plain gorgonia model under DDP
// saves them from rank 0 (checkpoint.Write(path, d.Params().Tensors(),
// meta)); every rank loads them back with Load.
func (p *Params) Tensors() []checkpoint.Tensor {
	out := make([]checkpoint.Tensor, len(p.Spans))
	for i, s := range p.Spans {
		if p.DType() == comm.Float64 {
			out[i] = checkpoint.F64(s.Name, s.Shape, p.ValueOf64(i))
		} else {
			out[i] = checkpoint.F32(s.Name, s.Shape, p.ValueOf(i))
		}
	}
	return out
}

// Load sets every learnable from the tensor of its span's name (as
// Tensors writes them; F32, F64, F16 or BF16 converted to the Params'
// type), in place: the model's tensors see the values. Every span must
// have its tensor, of its shape; an error names the first that does not,
// and then nothing has been changed. Other tensors are ignored. Every
// rank must load the same values (or call it on rank 0 before the
// strategy broadcasts).
func (p *Params) Load(ts map[string]checkpoint.Tensor) error {
	vals := make([]any, len(p.Spans))
	for i, s := range p.Spans {
		t, ok := ts[s.Name]
		if !ok {
			return fmt.Errorf("%w: the checkpoint has no tensor %q (learnable %d)", ErrInvalid, s.Name, i)
		}
		if !slices.Equal(t.Shape, s.Shape) && !(len(s.Shape) == 0 && slices.Equal(t.Shape, []int{1})) {
			return fmt.Errorf("%w: the checkpoint's %q has shape %v, the learnable %v", ErrInvalid, s.Name, t.Shape, s.Shape)
		}
		var err error
		if p.DType() == comm.Float64 {
			vals[i], err = t.Float64s()
		} else {
			vals[i], err = t.Float32s()
		}
		if err != nil {
			return fmt.Errorf("%w: the checkpoint's %q: %v", ErrInvalid, s.Name, err)
		}
	}
	for i, v := range vals {
		switch v := v.(type) {
		case []float32:
			copy(p.ValueOf(i), v)
		case []float64:
			copy(p.ValueOf64(i), v)
		}
	}
	return nil
}
