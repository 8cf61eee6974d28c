//go:build cgo

package nccl

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/staging"
	"github.com/gdist/gdist/gpu/cuda"
)

// ncclDataType_t of each comm.DType (values from abiTable).
var ncclTypes = map[comm.DType]C.int{
	comm.Uint8:    C.int(abiValue("ncclUint8")),
	comm.Int32:    C.int(abiValue("ncclInt32")),
	comm.Int64:    C.int(abiValue("ncclInt64")),
	comm.Float16:  C.int(abiValue("ncclFloat16")),
	comm.Float32:  C.int(abiValue("ncclFloat32")),
	comm.Float64:  C.int(abiValue("ncclFloat64")),
	comm.BFloat16: C.int(abiValue("ncclBfloat16")),
}

// ncclRedOp_t of the arithmetic reductions (values from abiTable).
var ncclOps = map[comm.ReduceOp]C.int{
	comm.Sum:  C.int(abiValue("ncclSum")),
	comm.Prod: C.int(abiValue("ncclProd")),
	comm.Max:  C.int(abiValue("ncclMax")),
	comm.Min:  C.int(abiValue("ncclMin")),
	comm.Avg:  C.int(abiValue("ncclAvg")),
}

func (c *Comm) dtype(name string, dt comm.DType) (C.int, error) {
	if dt == comm.BFloat16 && !c.lib.atLeast(2, 10) {
		return 0, fmt.Errorf("%w: %s: bfloat16 needs NCCL 2.10 or later, this is %s", comm.ErrUnsupported, name, c.lib.versionString())
	}
	return ncclTypes[dt], nil
}

func (c *Comm) redop(name string, op comm.ReduceOp) (C.int, error) {
	if op == comm.Avg && !c.lib.atLeast(2, 10) {
		return 0, fmt.Errorf("%w: %s: avg needs NCCL 2.10 or later (ncclAvg), this is %s", comm.ErrUnsupported, name, c.lib.versionString())
	}
	return ncclOps[op], nil
}

// checkBuf checks a buffer the operation reads or writes on this rank: well
// formed and, unless empty, device memory on this rank's device.
func (c *Comm) checkBuf(name, which string, b comm.Buffer) error {
	if err := b.Validate(); err != nil {
		return fmt.Errorf("%s: %s: %w", name, which, err)
	}
	if b.Len() == 0 {
		return nil
	}
	if !b.IsDevice() {
		return comm.InvalidArgf("%s: %s is host memory; this Comm takes device buffers on cuda:%d "+
			"(the Comm that comm.New(ctx, \"nccl\", cfg) returns takes host buffers too)", name, which, c.device)
	}
	if _, dev := b.Device(); dev != c.device {
		return comm.InvalidArgf("%s: %s is on cuda:%d, but this rank's communicator is on cuda:%d", name, which, dev, c.device)
	}
	if err := staging.CheckDevice(b); err != nil {
		return fmt.Errorf("%s: %s: %w", name, which, err)
	}
	return nil
}

// dptr is b's device address (0 for an empty buffer, whose memory is never
// touched).
func dptr(b comm.Buffer) C.uintptr_t {
	if b.Len() == 0 {
		return 0
	}
	p, _ := b.Device()
	return C.uintptr_t(p)
}

// empty issues an operation that moves no data: it still completes in
// order.
func (c *Comm) empty(ctx context.Context, name string) (comm.Work, error) {
	return c.issue(ctx, c.coll, name, true, func(_, st, ev C.uintptr_t) C.int {
		return C.gdnc_no_op(c.lib.c, C.int(c.device), st, ev)
	}, nil)
}

// AllReduce: see comm.Comm. In place (ncclAllReduce with sendbuff ==
// recvbuff). BAnd, BOr and BXor, which NCCL lacks, all-gather the inputs and
// combine them on the host (see bitwise).
func (c *Comm) AllReduce(ctx context.Context, buf comm.Buffer, op comm.ReduceOp) (comm.Work, error) {
	const name = "all_reduce"
	if err := c.args.AllReduce(buf, op); err != nil {
		return nil, err
	}
	if op.Bitwise() {
		return c.bitwise(ctx, name, buf, buf, op, -1, false)
	}
	dt, err := c.dtype(name, buf.DType())
	if err != nil {
		return nil, err
	}
	nop, err := c.redop(name, op)
	if err != nil {
		return nil, err
	}
	if buf.Len() == 0 {
		return c.empty(ctx, name)
	}
	p, n := dptr(buf), C.size_t(buf.Len())
	return c.issue(ctx, c.coll, name, true, c.ordered(ctx, func(h, st, ev C.uintptr_t) C.int {
		return C.gdnc_all_reduce(c.lib.c, C.int(c.device), st, ev, h, p, p, n, dt, nop)
	}), nil)
}

// Broadcast: see comm.Comm (ncclBroadcast, in place).
func (c *Comm) Broadcast(ctx context.Context, buf comm.Buffer, root int) (comm.Work, error) {
	const name = "broadcast"
	if err := c.args.Broadcast(buf, root); err != nil {
		return nil, err
	}
	dt, err := c.dtype(name, buf.DType())
	if err != nil {
		return nil, err
	}
	if buf.Len() == 0 {
		return c.empty(ctx, name)
	}
	p, n := dptr(buf), C.size_t(buf.Len())
	return c.issue(ctx, c.coll, name, true, c.ordered(ctx, func(h, st, ev C.uintptr_t) C.int {
		return C.gdnc_broadcast(c.lib.c, C.int(c.device), st, ev, h, p, p, n, dt, C.int(root))
	}), nil)
}

// Reduce: see comm.Comm (ncclReduce, in place; other ranks' buffers are only
// read).
func (c *Comm) Reduce(ctx context.Context, buf comm.Buffer, op comm.ReduceOp, root int) (comm.Work, error) {
	const name = "reduce"
	if err := c.args.Reduce(buf, op, root); err != nil {
		return nil, err
	}
	if op.Bitwise() {
		return c.bitwise(ctx, name, buf, buf, op, root, false)
	}
	dt, err := c.dtype(name, buf.DType())
	if err != nil {
		return nil, err
	}
	nop, err := c.redop(name, op)
	if err != nil {
		return nil, err
	}
	if buf.Len() == 0 {
		return c.empty(ctx, name)
	}
	p, n := dptr(buf), C.size_t(buf.Len())
	return c.issue(ctx, c.coll, name, true, c.ordered(ctx, func(h, st, ev C.uintptr_t) C.int {
		return C.gdnc_reduce(c.lib.c, C.int(c.device), st, ev, h, p, p, n, dt, nop, C.int(root))
	}), nil)
}

// AllGather: see comm.Comm (ncclAllGather; NCCL's in-place form is ours).
func (c *Comm) AllGather(ctx context.Context, dst, src comm.Buffer) (comm.Work, error) {
	const name = "all_gather"
	if err := c.args.AllGather(dst, src); err != nil {
		return nil, err
	}
	dt, err := c.dtype(name, src.DType())
	if err != nil {
		return nil, err
	}
	if src.Len() == 0 {
		return c.empty(ctx, name)
	}
	s, d, n := dptr(src), dptr(dst), C.size_t(src.Len())
	return c.issue(ctx, c.coll, name, true, c.ordered(ctx, func(h, st, ev C.uintptr_t) C.int {
		return C.gdnc_all_gather(c.lib.c, C.int(c.device), st, ev, h, s, d, n, dt)
	}), nil)
}

// ReduceScatter: see comm.Comm (ncclReduceScatter; NCCL's in-place form is
// ours).
func (c *Comm) ReduceScatter(ctx context.Context, dst, src comm.Buffer, op comm.ReduceOp) (comm.Work, error) {
	const name = "reduce_scatter"
	if err := c.args.ReduceScatter(dst, src, op); err != nil {
		return nil, err
	}
	if op.Bitwise() {
		return c.bitwise(ctx, name, dst, src, op, -1, true)
	}
	dt, err := c.dtype(name, src.DType())
	if err != nil {
		return nil, err
	}
	nop, err := c.redop(name, op)
	if err != nil {
		return nil, err
	}
	if dst.Len() == 0 {
		return c.empty(ctx, name)
	}
	s, d, n := dptr(src), dptr(dst), C.size_t(dst.Len())
	return c.issue(ctx, c.coll, name, true, c.ordered(ctx, func(h, st, ev C.uintptr_t) C.int {
		return C.gdnc_reduce_scatter(c.lib.c, C.int(c.device), st, ev, h, s, d, n, dt, nop)
	}), nil)
}

// group issues ops (grouped ncclSend/ncclRecv and device copies) as one
// collective.
func (c *Comm) group(ctx context.Context, name string, ops []C.gdnc_p2p) (comm.Work, error) {
	if len(ops) == 0 {
		return c.empty(ctx, name)
	}
	return c.issue(ctx, c.coll, name, true, c.ordered(ctx, func(h, st, ev C.uintptr_t) C.int {
		return C.gdnc_group(c.lib.c, C.int(c.device), st, ev, h, &ops[0], C.int(len(ops)))
	}), nil)
}

func p2pOp(send bool, b comm.Buffer, peer int, dt C.int) C.gdnc_p2p {
	kind := C.int(1)
	if send {
		kind = 0
	}
	return C.gdnc_p2p{kind: kind, peer: C.int(peer), dt: dt, buf: dptr(b), count: C.size_t(b.Len())}
}

func copyOp(dst, src comm.Buffer) C.gdnc_p2p {
	return C.gdnc_p2p{kind: 2, buf: dptr(dst), src: dptr(src), bytes: C.size_t(dst.Bytes())}
}

// Gather: see comm.Comm. NCCL has no gather: the root receives from every
// rank in one group of ncclRecv, the others ncclSend.
func (c *Comm) Gather(ctx context.Context, dst, src comm.Buffer, root int) (comm.Work, error) {
	if err := c.args.Gather(dst, src, root); err != nil {
		return nil, err
	}
	return c.rooted(ctx, "gather", true, dst, src, root)
}

// Scatter: see comm.Comm. NCCL has no scatter: the root sends every rank its
// part in one group of ncclSend, the others ncclRecv.
func (c *Comm) Scatter(ctx context.Context, dst, src comm.Buffer, root int) (comm.Work, error) {
	if err := c.args.Scatter(dst, src, root); err != nil {
		return nil, err
	}
	return c.rooted(ctx, "scatter", false, src, dst, root)
}

// rooted issues a gather (the root's big receives every rank's small) or a
// scatter (every rank's small receives its part of the root's big) as one
// group of ncclSend and ncclRecv, with a device copy for the root's own
// part unless it is in place.
func (c *Comm) rooted(ctx context.Context, name string, gather bool, big, small comm.Buffer, root int) (comm.Work, error) {
	dt, err := c.dtype(name, small.DType())
	if err != nil {
		return nil, err
	}
	k := small.Len()
	var ops []C.gdnc_p2p
	switch {
	case k == 0:
	case c.rank != root:
		ops = append(ops, p2pOp(gather, small, root, dt))
	default:
		for p := 0; p < c.size; p++ {
			part := big.Slice(p*k, (p+1)*k)
			switch {
			case p != root:
				ops = append(ops, p2pOp(!gather, part, p, dt))
			case comm.Same(part, small):
			case gather:
				ops = append(ops, copyOp(part, small))
			default:
				ops = append(ops, copyOp(small, part))
			}
		}
	}
	return c.group(ctx, name, ops)
}

// AllToAll: see comm.Comm. NCCL has no all-to-all: one group of ncclSend and
// ncclRecv with every other rank, and a device copy for this rank's part.
func (c *Comm) AllToAll(ctx context.Context, dst, src comm.Buffer) (comm.Work, error) {
	const name = "all_to_all"
	if err := c.args.AllToAll(dst, src); err != nil {
		return nil, err
	}
	dt, err := c.dtype(name, src.DType())
	if err != nil {
		return nil, err
	}
	k := src.Len() / c.size
	var ops []C.gdnc_p2p
	if k > 0 {
		for p := 0; p < c.size; p++ {
			s, d := src.Slice(p*k, (p+1)*k), dst.Slice(p*k, (p+1)*k)
			if p == c.rank {
				ops = append(ops, copyOp(d, s))
				continue
			}
			ops = append(ops, p2pOp(true, s, p, dt), p2pOp(false, d, p, dt))
		}
	}
	return c.group(ctx, name, ops)
}

// Barrier: see comm.Comm (an all-reduce of one element).
func (c *Comm) Barrier(ctx context.Context) (comm.Work, error) {
	p := C.uintptr_t(c.scratch)
	return c.issue(ctx, c.coll, "barrier", true, func(h, st, ev C.uintptr_t) C.int {
		return C.gdnc_all_reduce(c.lib.c, C.int(c.device), st, ev, h, p, p, 1, ncclTypes[comm.Float32], ncclOps[comm.Sum])
	}, nil)
}

// bitwise does BAnd, BOr or BXor, which NCCL lacks, exactly: the inputs are
// all-gathered into device memory, copied to pinned host memory, combined
// there by a host function queued on the stream (cudaLaunchHostFunc), and
// the result is copied into out; all in stream order, so the Work still
// completes in order. It costs Size() times the memory and traffic of a
// native reduction. src is all-reduced (scatter: this rank's part of it goes
// to out); with root >= 0 only the root writes out.
func (c *Comm) bitwise(ctx context.Context, name string, out, src comm.Buffer, op comm.ReduceOp, root int, scatter bool) (comm.Work, error) {
	if !cuda.HasHostFunc() {
		return nil, fmt.Errorf("%w: %s %v: NCCL has no bitwise reductions, and the host step needs cudaLaunchHostFunc (CUDA 10 or later)", comm.ErrUnsupported, name, op)
	}
	bytes := src.Bytes()
	if bytes == 0 {
		return c.empty(ctx, name)
	}
	n := c.size
	off, ln := 0, bytes
	if scatter {
		ln = out.Bytes()
		off = c.rank * ln
	}
	tmp, err := c.devPool.Get(n * bytes)
	if err != nil {
		return nil, fmt.Errorf("nccl: %s: %w", name, err)
	}
	pin, err := c.hostPool.Get(n * bytes)
	if err != nil {
		c.devPool.Put(tmp)
		return nil, fmt.Errorf("nccl: %s: %w", name, err)
	}
	var outp C.uintptr_t
	if root < 0 || root == c.rank {
		outp = dptr(out)
	}
	bop := map[comm.ReduceOp]C.int{comm.BAnd: 0, comm.BOr: 1, comm.BXor: 2}[op]
	release := func(ok bool) {
		if ok {
			c.devPool.Put(tmp)
			c.hostPool.Put(pin)
		}
	}
	s := dptr(src)
	return c.issue(ctx, c.coll, name, true, c.ordered(ctx, func(h, st, ev C.uintptr_t) C.int {
		return C.gdnc_bitwise(c.lib.c, C.int(c.device), st, ev, h, s, C.size_t(bytes), C.uintptr_t(tmp.Ptr),
			C.uintptr_t(pin.Ptr), C.int(n), bop, C.size_t(off), C.size_t(ln), outp)
	}), release)
}
