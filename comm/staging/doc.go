// Package staging lets a backend take buffers of the memory kind it cannot
// address, by copying them through memory it can:
//
//   - Wrap(c) gives a host backend (inproc, tcp, shm) device buffers: inputs
//     are copied from the device into pinned host memory when the operation
//     is issued, the backend runs on the host copies, and outputs are copied
//     back to the device before the Work completes. Several ranks can share
//     one GPU this way, which NCCL refuses.
//   - WrapDevice(c, dev) gives a device backend (nccl) host buffers, through
//     memory on dev.
//
// Buffers of the kind the backend takes pass straight through, so a wrapped
// Comm costs nothing for them. Only what the operation reads on this rank is
// copied in and only what it writes is copied out (a broadcast root copies
// in, the others copy out). Buffers that overlap are staged in one region,
// so the wrapped Comm sees the same aliasing and applies its own in-place
// rules. Staging memory comes from a cache (CacheBytes per world Comm,
// shared with its sub-groups). Collectives complete in issue order, as the
// comm.Comm contract requires.
//
// Device memory is read when the operation is issued and written before its
// Work completes, with cudaMemcpy on the legacy default stream: work the
// caller queued on that stream (or on blocking streams) before issuing is
// seen; work on other streams must be synchronized by the caller first, or
// named by a cuda.Order's After event in the operation's context
// (cuda.WithOrder): the host waits for it before copying the device
// buffers in and again before copying results out (a brief poll, then
// asleep in the driver on a blocking-sync event recorded on a stream of
// the wrapper's own that waits for After: no core spins meanwhile;
// TestAfterWaitCostsNoCPU). Each such wait ends, too, with the
// operation's ctx or after the wrapped Comm's operation timeout (its
// OpTimeout method: comm/algo's Comms give their Options'; others
// comm.DefaultTimeout): an After that never completes (its stream stuck
// behind a peer that is gone) fails the operation, naming it and the
// rank, and the Comm with it (TestAfterWaitBounded); the host's CUDA
// wait goes on in the background. An Order's Done is not recorded (the results
// are copied out when the Work completes, after the call): wait for the
// Work. A copy to the device is asynchronous to the host: when the Work completes,
// the results are queued on the default stream, where later work (and any
// copy back to the host) sees them.
//
// Staging is explicit, at the call site: New (comm.New, then Adapt) or
// Adapt gives a host backend's Comm device buffers when CUDA is available
// (without CUDA the Comm is returned as is, and the host backends refuse
// device buffers with comm.ErrInvalidArgument); Wrap and WrapDevice wrap
// unconditionally. Importing the package changes nothing that comm.New
// builds. The "auto" backend applies Adapt to its host Comm itself, and the
// "nccl" backend returns its Comm wrapped by WrapDevice.
//
// NewBuffer, FreeBuffer, Copy, Upload and CheckDevice describe device
// memory from package gpu/cuda as comm.Buffers (gpu/cuda sits below comm
// and does not import it).
package staging
