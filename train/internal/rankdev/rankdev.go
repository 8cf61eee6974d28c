// Package rankdev chooses the GPU a rank of a device strategy (train/dp's
// DDP and ZeRO, train/pp's pipeline) trains on, one rule for them all.
package rankdev

import (
	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/rendezvous"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/launch"
)

// Device is the GPU this rank of c trains on and whether c takes its
// buffers: the Comm's own GPU if c is (or wraps, through Unwrap) a Comm
// that takes device buffers (the nccl backend: its LOCAL_RANK, modulo
// the GPUs with GDIST_NCCL_SHARE_GPU=1: see comm/nccl); else GPU first +
// the rank's local rank (its LOCAL_RANK under the launcher; its rank
// otherwise, as with -backend inproc, whose ranks are goroutines of one
// process), modulo the GPUs the process sees, so ranks share GPUs where
// there are fewer.
func Device(c comm.Comm, first int) (dev int, direct bool) {
	for x := c; x != nil; {
		if d, ok := x.(interface {
			Device() int
			DeviceCapable() bool
		}); ok && d.DeviceCapable() && d.Device() >= 0 {
			return d.Device(), true
		}
		u, ok := x.(interface{ Unwrap() comm.Comm })
		if !ok {
			break
		}
		x = u.Unwrap()
	}
	local := c.Rank()
	if launch.UnderLauncher() {
		if env, err := rendezvous.FromEnv(); err == nil {
			local = env.LocalRank
		}
	}
	return (first + local) % max(cuda.DeviceCount(), 1), false
}
