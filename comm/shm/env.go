package shm

import (
	"os"
	"strconv"
	"time"

	"github.com/gdist/gdist/comm"
)

// withEnv is the one place the shm transport reads its environment
// variables: it fills the fields of o left zero from
//
//	GDIST_SHM_DIR          Dir
//	GDIST_SHM_RING_BYTES   RingBytes (an integer; checked by withDefaults)
//	GDIST_SHM_FRAME_BYTES  FrameBytes (likewise)
//	GDIST_SHM_AREA_BYTES   AreaBytes (0: none)
//	GDIST_SHM_POLL_US      PollFor, in microseconds (0: never)
//	GDIST_SHM_SPIN_US      SpinFor, likewise
//	GDIST_SHM_ACTIVE_US    ActiveFor, likewise
//
// (GDIST_HOST_ID, the host's identity, is comm/internal/host's). A size
// that is not an integer is an error; a wait that is not a non-negative
// integer is ignored.
func (o Options) withEnv() (Options, error) {
	if o.Dir == "" {
		o.Dir = os.Getenv("GDIST_SHM_DIR")
	}
	for _, f := range []struct {
		name string
		v    *int
		zero int // what 0 in the environment stands for
	}{
		{"GDIST_SHM_RING_BYTES", &o.RingBytes, 0},
		{"GDIST_SHM_FRAME_BYTES", &o.FrameBytes, 0},
		{"GDIST_SHM_AREA_BYTES", &o.AreaBytes, -1},
	} {
		v := os.Getenv(f.name)
		if *f.v != 0 || v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return o, comm.InvalidArgf("shm: %s=%q is not an integer", f.name, v)
		}
		if n == 0 {
			n = f.zero
		}
		*f.v = n
	}
	for _, f := range []struct {
		name string
		v    *time.Duration
	}{
		{"GDIST_SHM_POLL_US", &o.PollFor},
		{"GDIST_SHM_SPIN_US", &o.SpinFor},
		{"GDIST_SHM_ACTIVE_US", &o.ActiveFor},
	} {
		if *f.v != 0 {
			continue
		}
		if us, err := strconv.Atoi(os.Getenv(f.name)); err == nil && us >= 0 {
			*f.v = time.Duration(us) * time.Microsecond
			if us == 0 {
				*f.v = -1
			}
		}
	}
	return o, nil
}
