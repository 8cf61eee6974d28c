package flat

import (
	"context"
	"fmt"

	"github.com/gdist/gdist/comm"
)

// CheckSame fails on every rank (comm.CheckSame, a *comm.NotSameError
// naming the ranks) unless every rank's learnables have the same shapes
// in the same order: a model built differently on some rank (another
// configuration, a vocabulary of another size) is named before the ranks'
// buffers are mixed (a transposed weight has as many elements). Blocking;
// every rank calls it. ddp and zero call it when they wrap a model.
func (p *Params) CheckSame(ctx context.Context, c comm.Comm) error {
	var b []byte
	if p.DType() != comm.Float32 { // float32 on one rank, float64 on another
		b = fmt.Appendf(b, "%v ", p.DType())
	}
	for i, s := range p.Spans {
		b = fmt.Appendf(b, "%d:%v ", i, s.Shape)
	}
	return comm.CheckSame(ctx, c, "the learnables' layout (their shapes, in order)", b)
}
