package opcheck

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
)

// Each check rejects what it must with ErrInvalidArgument and a message
// naming the op and the argument, and accepts the in-place aliases.
func TestArgs(t *testing.T) {
	a := Args{Rank: 1, Size: 3, Buf: HostBuf}
	big := comm.FromSlice(make([]float32, 6))
	small := comm.FromSlice(make([]float32, 2))
	dev := comm.DeviceBuffer(0x1000, 0, comm.Float32, 2)
	var nilCtx context.Context
	p2p := func(ctx context.Context, buf comm.Buffer, peer int) error {
		_, err := a.P2P(ctx, true, buf, peer)
		return err
	}
	for _, c := range []struct {
		name string
		err  error
		want string // "" : accepted
	}{
		{"in-place all-gather", a.AllGather(big, big.Slice(2, 4)), ""},
		{"all-gather overlap", a.AllGather(big, big.Slice(1, 3)), "all_gather: dst and src overlap"},
		{"all-gather length", a.AllGather(comm.FromSlice(make([]float32, 5)), small), "dst has 5 elements, want 6"},
		{"all-gather dtype", a.AllGather(big, comm.FromSlice(make([]int32, 2))), "dst is float32 but src is int32"},
		{"reduce-scatter in place", a.ReduceScatter(big.Slice(2, 4), big, comm.Sum), ""},
		{"bitwise on float", a.AllReduce(small, comm.BAnd), "all_reduce:"},
		{"device buffer on host backend", a.Broadcast(dev, 0), "broadcast: buf is device memory"},
		{"root", a.Reduce(small, comm.Sum, 3), "reduce: root 3 out of range [0, 3)"},
		{"gather non-root ignores dst", a.Gather(comm.Buffer{}, small, 0), ""},
		{"gather root checks dst", a.Gather(small, small, 1), "gather: dst has 2 elements"},
		{"scatter root", a.Scatter(small, big, 1), ""},
		{"all-to-all multiple", a.AllToAll(comm.FromSlice(make([]float32, 4)), comm.FromSlice(make([]float32, 4))), "not a multiple of the group size 3"},
		{"all-to-all overlap", a.AllToAll(big, big), "all_to_all: dst and src overlap"},
		{"nil ctx", p2p(nilCtx, small, 0), "send: nil context"},
		{"peer", p2p(context.Background(), small, -1), "send: peer -1 out of range"},
	} {
		switch {
		case c.want == "" && c.err != nil:
			t.Errorf("%s: rejected: %v", c.name, c.err)
		case c.want != "" && (!errors.Is(c.err, comm.ErrInvalidArgument) || !strings.Contains(c.err.Error(), c.want)):
			t.Errorf("%s: got %v, want an invalid-argument error containing %q", c.name, c.err, c.want)
		}
	}
}

// Device buffers overlap only on one device, within their byte ranges.
func TestDeviceOverlap(t *testing.T) {
	a := comm.DeviceBuffer(0x1000, 0, comm.Float32, 4) // [0x1000, 0x1010)
	for _, c := range []struct {
		b    comm.Buffer
		want bool
	}{
		{comm.DeviceBuffer(0x100c, 0, comm.Float32, 1), true},
		{comm.DeviceBuffer(0x1010, 0, comm.Float32, 1), false},
		{comm.DeviceBuffer(0x1000, 1, comm.Float32, 4), false},
		{comm.FromSlice(make([]float32, 4)), false},
	} {
		if got := comm.Overlap(a, c.b); got != c.want {
			t.Errorf("Overlap(%v, %v) = %v, want %v", a, c.b, got, c.want)
		}
	}
}

// Context ends with the timeout, and with life.
func TestContext(t *testing.T) {
	ctx, cancel := Context(context.Background(), context.Background(), time.Millisecond)
	defer cancel()
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("timeout: %v", ctx.Err())
	}
	life, end := context.WithCancel(context.Background())
	ctx, cancel = Context(context.Background(), life, 0)
	defer cancel()
	end()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("op context outlived its Comm")
	}
}
