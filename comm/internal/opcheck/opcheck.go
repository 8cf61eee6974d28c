// Package opcheck holds what every comm.Comm implementation (comm/algo,
// comm/nccl, comm/staging) does before it issues an operation, written once:
// the argument checks of each collective and of Send/Recv, with the error
// messages users see, and the context that bounds an operation.
//
// A backend differs only in which memory it takes (host or device, on which
// device): it says so with Args.Buf.
package opcheck

import (
	"context"
	"fmt"
	"time"

	"github.com/gdist/gdist/comm"
)

// Args checks the arguments of the operations of one Comm: Size ranks, this
// one Rank. Buf checks one buffer the operation reads or writes on this
// rank (well formed, memory the backend can reach); HostBuf is that of the
// host backends.
type Args struct {
	Rank, Size int
	Buf        func(name, which string, b comm.Buffer) error
}

// HostBuf is Args.Buf for backends that take host memory only.
func HostBuf(name, which string, b comm.Buffer) error {
	if err := b.Validate(); err != nil {
		return fmt.Errorf("%s: %s: %w", name, which, err)
	}
	if b.IsDevice() {
		return comm.InvalidArgf("%s: %s is device memory, which this backend cannot access", name, which)
	}
	return nil
}

// Ctx rejects a nil ctx.
func Ctx(name string, ctx context.Context) error {
	if ctx == nil {
		return comm.InvalidArgf("%s: nil context", name)
	}
	return nil
}

// Root checks a root rank.
func (a Args) Root(name string, root int) error {
	if root < 0 || root >= a.Size {
		return comm.InvalidArgf("%s: root %d out of range [0, %d)", name, root, a.Size)
	}
	return nil
}

// Peer checks the peer of a Send or Recv.
func (a Args) Peer(name string, peer int) error {
	if peer < 0 || peer >= a.Size {
		return comm.InvalidArgf("%s: peer %d out of range [0, %d)", name, peer, a.Size)
	}
	return nil
}

// Pair checks dst/src of an op where big holds Size times small, allowing
// only the in-place alias (small is big's slice for this rank).
func (a Args) Pair(name string, big, small comm.Buffer, bigName, smallName string) error {
	if err := a.Buf(name, bigName, big); err != nil {
		return err
	}
	if err := a.Buf(name, smallName, small); err != nil {
		return err
	}
	if big.DType() != small.DType() {
		return comm.InvalidArgf("%s: %s is %v but %s is %v", name, bigName, big.DType(), smallName, small.DType())
	}
	n, k := a.Size, small.Len()
	if big.Len() != n*k {
		return comm.InvalidArgf("%s: %s has %d elements, want %d (%d ranks x %d)", name, bigName, big.Len(), n*k, n, k)
	}
	if comm.Overlap(big, small) && !comm.Same(big.Slice(a.Rank*k, (a.Rank+1)*k), small) {
		return comm.InvalidArgf("%s: %s and %s overlap; only the in-place alias (%s = %s's slice for rank %d) is allowed",
			name, bigName, smallName, smallName, bigName, a.Rank)
	}
	return nil
}

func reduction(name string, dt comm.DType, red comm.ReduceOp) error {
	if err := comm.CheckReduce(dt, red); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// AllReduce checks the arguments of comm.Comm.AllReduce.
func (a Args) AllReduce(buf comm.Buffer, red comm.ReduceOp) error {
	const name = "all_reduce"
	if err := a.Buf(name, "buf", buf); err != nil {
		return err
	}
	return reduction(name, buf.DType(), red)
}

// Broadcast checks the arguments of comm.Comm.Broadcast.
func (a Args) Broadcast(buf comm.Buffer, root int) error {
	const name = "broadcast"
	if err := a.Buf(name, "buf", buf); err != nil {
		return err
	}
	return a.Root(name, root)
}

// Reduce checks the arguments of comm.Comm.Reduce.
func (a Args) Reduce(buf comm.Buffer, red comm.ReduceOp, root int) error {
	const name = "reduce"
	if err := a.Buf(name, "buf", buf); err != nil {
		return err
	}
	if err := reduction(name, buf.DType(), red); err != nil {
		return err
	}
	return a.Root(name, root)
}

// AllGather checks the arguments of comm.Comm.AllGather.
func (a Args) AllGather(dst, src comm.Buffer) error {
	return a.Pair("all_gather", dst, src, "dst", "src")
}

// Gather checks the arguments of comm.Comm.Gather: dst matters on the root
// only.
func (a Args) Gather(dst, src comm.Buffer, root int) error {
	return a.rooted("gather", root, dst, src, "dst", "src")
}

// Scatter checks the arguments of comm.Comm.Scatter: src matters on the
// root only.
func (a Args) Scatter(dst, src comm.Buffer, root int) error {
	return a.rooted("scatter", root, src, dst, "src", "dst")
}

// rooted checks a gather or scatter: the root's big buffer holds every
// rank's small one; the others have only their small one.
func (a Args) rooted(name string, root int, big, small comm.Buffer, bigName, smallName string) error {
	if err := a.Root(name, root); err != nil {
		return err
	}
	if a.Rank == root {
		return a.Pair(name, big, small, bigName, smallName)
	}
	return a.Buf(name, smallName, small)
}

// ReduceScatter checks the arguments of comm.Comm.ReduceScatter.
func (a Args) ReduceScatter(dst, src comm.Buffer, red comm.ReduceOp) error {
	const name = "reduce_scatter"
	if err := a.Pair(name, src, dst, "src", "dst"); err != nil {
		return err
	}
	return reduction(name, src.DType(), red)
}

// AllToAll checks the arguments of comm.Comm.AllToAll.
func (a Args) AllToAll(dst, src comm.Buffer) error {
	const name = "all_to_all"
	if err := a.Buf(name, "dst", dst); err != nil {
		return err
	}
	if err := a.Buf(name, "src", src); err != nil {
		return err
	}
	if dst.DType() != src.DType() || dst.Len() != src.Len() {
		return comm.InvalidArgf("%s: dst is %v and src is %v; they must have the same dtype and length", name, dst, src)
	}
	if src.Len()%a.Size != 0 {
		return comm.InvalidArgf("%s: length %d is not a multiple of the group size %d", name, src.Len(), a.Size)
	}
	if comm.Overlap(dst, src) {
		return comm.InvalidArgf("%s: dst and src overlap", name)
	}
	return nil
}

// P2P checks the arguments of comm.Comm.Send (send) or Recv, and returns
// the op's name.
func (a Args) P2P(ctx context.Context, send bool, buf comm.Buffer, peer int) (string, error) {
	name := "recv"
	if send {
		name = "send"
	}
	if err := Ctx(name, ctx); err != nil {
		return name, err
	}
	if err := a.Buf(name, "buf", buf); err != nil {
		return name, err
	}
	return name, a.Peer(name, peer)
}

// Context bounds an operation issued under user by the Comm's timeout (none
// if not positive) and by life (ends when the Comm is closed). cancel must
// be called when the operation ends.
func Context(user, life context.Context, timeout time.Duration) (ctx context.Context, cancel context.CancelFunc) {
	var c context.CancelFunc
	if timeout > 0 {
		ctx, c = context.WithTimeout(user, timeout)
	} else {
		ctx, c = context.WithCancel(user)
	}
	stop := context.AfterFunc(life, c)
	return ctx, func() { stop(); c() }
}
