package cuda_test

import (
	"context"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/gpu/cuda"
)

// An all-reduce over NCCL ordered with a compute stream on the device:
// NCCL's stream waits for the gradients the compute stream wrote (after),
// and the compute stream for the sums (done) before it updates; the host
// waits for neither. c is a Comm of the nccl backend on dev; grads holds
// n float32s written on s.
func ExampleWithOrder() {
	var (
		ctx   context.Context
		c     comm.Comm
		s     *cuda.Stream
		dev   int
		grads uintptr
		n     int
	)
	run := func() error {
		after, err := cuda.NewEvent(dev) // made once, at set-up, in a training loop
		if err != nil {
			return err
		}
		defer after.Destroy()
		done, err := cuda.NewEvent(dev)
		if err != nil {
			return err
		}
		defer done.Destroy()
		// ... backward queued on s writes grads ...
		if err := after.Record(s); err != nil {
			return err
		}
		w, err := c.AllReduce(cuda.WithOrder(ctx, cuda.Order{After: after, Done: done}),
			comm.DeviceBuffer(grads, dev, comm.Float32, n), comm.Avg)
		if err != nil {
			return err
		}
		if err := s.WaitEvent(done); err != nil { // no host wait
			return err
		}
		// ... the update queued on s reads the averaged grads ...
		return w.Wait(ctx) // later: the all-reduce's failure, if any
	}
	_ = run
}
