package tcp

import (
	"context"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
	"github.com/gdist/gdist/comm/internal/wire"
)

// The "tcp" backend: the world Comm is algo's collectives over a Transport;
// closing that Comm closes the Transport.
func init() {
	comm.Register("tcp", func(ctx context.Context, cfg comm.Config) (comm.Comm, error) {
		t, err := New(ctx, cfg)
		if err != nil {
			return nil, err
		}
		tun := algo.DefaultTuning()
		tun.ChunkBytes = ChunkBytes
		return algo.NewTunedComm(t, cfg.Options, algo.TuningFromEnv(tun)), nil
	})
}

// ChunkBytes is the pipelining unit (algo.Tuning.ChunkBytes) of the tcp
// backend's collectives unless $GDIST_CHUNK_BYTES sets one: a whole frame,
// 8 times algo's default. Each chunk is a message, and a message costs
// both ranks a few wakeups and system calls besides its bytes; with two
// ranks on two cores, where the copies in and out of the kernel already
// keep both cores busy, fewer messages is what counts, not the overlap of
// more, smaller ones. 2-rank all-reduce, commbench, 6 alternating rounds
// on the shared 2-core test machine: busbw (medians) 2.22/2.28/2.19/2.11
// GB/s at 1/4/16/64 MiB with 512 KiB chunks, 2.33/3.44/2.82/2.55 with 4
// MiB; the CPU per byte fell 10-30%. Larger chunks gained nothing more.
const ChunkBytes = wire.MaxFrame
