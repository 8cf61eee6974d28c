//go:build cgo

package nccl

/*
#include "shim.h"
*/
import "C"

import (
	"context"

	"github.com/gdist/gdist/gpu/cuda"
)

// ordered wraps an operation's launch in the cuda.Order that ctx carries
// (cuda.WithOrder): the communicator's stream waits for After before the
// operation, and Done is recorded on it after, both at the launch, on the
// device (no host waiting). Without an Order, launch is returned as is.
func (c *Comm) ordered(ctx context.Context, launch launchFn) launchFn {
	o := cuda.OrderOf(ctx)
	if o.After == nil && o.Done == nil {
		return launch
	}
	return func(h, st, ev C.uintptr_t) C.int {
		s, err := cuda.StreamOf(c.device, uintptr(st))
		if err == nil && o.After != nil {
			err = s.WaitEvent(o.After)
		}
		if err != nil {
			return C.int(C.GDNC_CUDA_ERROR + cudaCode(err))
		}
		r := launch(h, st, ev)
		if r == 0 && o.Done != nil {
			if err := o.Done.Record(s); err != nil {
				return C.int(C.GDNC_CUDA_ERROR + cudaCode(err))
			}
		}
		return r
	}
}

// cudaCode is err's cudaError_t (cudaErrorInvalidValue, 1, if it is not
// a *cuda.Error).
func cudaCode(err error) int {
	if e, ok := err.(*cuda.Error); ok {
		return e.Code
	}
	return 1
}
