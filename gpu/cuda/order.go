package cuda

import "context"

// Order ties work that runs on a stream of its own (an NCCL collective on
// its communicator's stream) into the caller's streams, as PyTorch's
// ProcessGroupNCCL ties a collective to the current stream, without the
// host waiting:
//
//   - After, if not nil, is an event the caller recorded on the streams
//     that write or read the operation's buffers (at their current end):
//     the operation's stream waits for it on the device before the
//     operation starts (cudaStreamWaitEvent, at issue).
//   - Done, if not nil, is recorded on the operation's stream right after
//     the operation, at issue: a stream of the caller's that waits for it
//     (Stream.WaitEvent) sees the operation's results, and may then reuse
//     its buffers.
//
// Both are events of the operation's device. An operation launched
// after the call returns (comm/nccl's Send and Recv wait for their
// peer's channel or message) makes its waits and records then: the
// caller records After again, and waits for Done, only after its Work
// completes. An Order travels in the
// operation's context (WithOrder), through wrappers, to the backend that
// runs it; comm/nccl honours it for device buffers (its collectives still
// wait for the legacy default stream as well), except for a rank's
// messages to itself (a copy that runs with the second call's context
// only), and comm/staging honours After. The Work completes as
// without it; waiting for Done on the device does not report the
// operation's failure: check the Work (Err, or Wait) before trusting the
// results. NCCL ends a failed operation's kernels when it aborts the
// communicator, so a stream waiting for Done does not wait forever.
type Order struct {
	After, Done *Event
}

type orderKey struct{}

// WithOrder returns ctx carrying o, for an operation on device memory
// (see Order).
func WithOrder(ctx context.Context, o Order) context.Context {
	return context.WithValue(ctx, orderKey{}, o)
}

// OrderOf is the Order ctx carries (zero if none).
func OrderOf(ctx context.Context) Order {
	o, _ := ctx.Value(orderKey{}).(Order)
	return o
}
