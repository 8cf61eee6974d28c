package rankdev

import (
	"testing"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/launch"
)

// hostComm is a rank of a host backend (only Rank is called).
type hostComm struct {
	comm.Comm
	rank int
}

func (c hostComm) Rank() int { return c.rank }

// gpuComm takes device buffers on GPU dev (as the nccl backend's).
type gpuComm struct {
	hostComm
	dev int
}

func (c gpuComm) Device() int         { return c.dev }
func (c gpuComm) DeviceCapable() bool { return true }

// wrapper wraps a Comm (as comm's checking and timing wrappers do).
type wrapper struct{ hostComm }

func (w wrapper) Unwrap() comm.Comm { return w.Comm }

func TestDevice(t *testing.T) {
	// a device Comm, wrapped: its own GPU, whatever first
	c := wrapper{hostComm{Comm: gpuComm{hostComm{rank: 1}, 3}, rank: 1}}
	if dev, direct := Device(c, 5); dev != 3 || !direct {
		t.Fatalf("wrapped nccl-like Comm on GPU 3: got GPU %d direct %v, want 3 true", dev, direct)
	}
	if launch.UnderLauncher() {
		t.Skip("the host-backend rule reads LOCAL_RANK under a launcher")
	}
	// a host backend: GPU first + rank, modulo the GPUs
	n := max(cuda.DeviceCount(), 1)
	for _, r := range []int{0, 1, 2} {
		if dev, direct := Device(hostComm{rank: r}, 1); dev != (1+r)%n || direct {
			t.Fatalf("host Comm rank %d, first GPU 1, %d GPUs: got GPU %d direct %v, want %d false", r, n, dev, direct, (1+r)%n)
		}
	}
}
