package ddp

import (
	"context"

	"github.com/gdist/gdist/comm"
)

// CommHook reduces one bucket. Start must begin averaging grad (a view of
// the gradient buffer) over the ranks of c and return at once; once the
// returned Work is done, grad must hold the average. Every rank calls Start
// for the same buckets in the same order.
type CommHook interface {
	Start(ctx context.Context, c comm.Comm, grad []float32) (comm.Work, error)
	Name() string
}

// BufferHook is a CommHook that also reduces buckets of any floating
// type (float64 learnables): DDP calls StartBuffer instead of Start
// whenever the hook has it. A hook without it serves float32 models only.
type BufferHook interface {
	CommHook
	StartBuffer(ctx context.Context, c comm.Comm, grad comm.Buffer) (comm.Work, error)
}

// Average is the default hook: an in-place all-reduce with comm.Avg.
type Average struct{}

// Start all-reduces grad in place.
func (Average) Start(ctx context.Context, c comm.Comm, grad []float32) (comm.Work, error) {
	return c.AllReduce(ctx, comm.FromSlice(grad), comm.Avg)
}

// StartBuffer all-reduces grad in place, whatever its type.
func (Average) StartBuffer(ctx context.Context, c comm.Comm, grad comm.Buffer) (comm.Work, error) {
	return c.AllReduce(ctx, grad, comm.Avg)
}

// Name is "none".
func (Average) Name() string { return "none" }

// FP16Compress sends gradients as IEEE half floats: each bucket is divided
// by the world size (so the sum cannot overflow where the average would
// not), converted to float16, all-reduced with Sum (reduced in float32 on
// the way) and converted back. Half the bytes, about 3 decimal digits.
type FP16Compress struct{}

// Start compresses grad and starts the all-reduce.
func (FP16Compress) Start(ctx context.Context, c comm.Comm, grad []float32) (comm.Work, error) {
	return compressed(ctx, c, grad, comm.ToF16, comm.F16.Float32)
}

// Name is "fp16".
func (FP16Compress) Name() string { return "fp16" }

// BF16Compress is FP16Compress with bfloat16: the range of float32, about
// 2-3 decimal digits.
type BF16Compress struct{}

// Start compresses grad and starts the all-reduce.
func (BF16Compress) Start(ctx context.Context, c comm.Comm, grad []float32) (comm.Work, error) {
	return compressed(ctx, c, grad, comm.ToBF16, comm.BF16.Float32)
}

// compressed pre-divides grad by the world size, converts it to a 16-bit
// type, all-reduces with Sum and converts the result back into grad.
func compressed[T comm.BF16 | comm.F16](ctx context.Context, c comm.Comm, grad []float32, to func(float32) T, from func(T) float32) (comm.Work, error) {
	n := float32(c.Size())
	buf := make([]T, len(grad))
	for i, v := range grad {
		buf[i] = to(v / n)
	}
	w, err := c.AllReduce(ctx, comm.FromSlice(buf), comm.Sum)
	if err != nil {
		return nil, err
	}
	return then(w, func() {
		for i, v := range buf {
			grad[i] = from(v)
		}
	}), nil
}

// Name is "bf16".
func (BF16Compress) Name() string { return "bf16" }

// HookByName returns the hook for "none", "fp16" or "bf16".
func HookByName(name string) (CommHook, error) {
	switch name {
	case "", "none":
		return Average{}, nil
	case "fp16":
		return FP16Compress{}, nil
	case "bf16":
		return BF16Compress{}, nil
	}
	return nil, comm.InvalidArgf("ddp: unknown gradient compression %q (none, fp16, bf16)", name)
}

// then returns a Work that completes after w, once fn has run (only if w
// succeeded).
func then(w comm.Work, fn func()) comm.Work {
	r := comm.NewRequest()
	go func() {
		<-w.Done()
		err := w.Err()
		if err == nil {
			fn()
		}
		r.Complete(err)
	}()
	return r
}
