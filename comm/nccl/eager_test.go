package nccl_test

import (
	"os"
	"testing"

	"github.com/gdist/gdist/comm/nccl"
	"github.com/gdist/gdist/gpu/cudafake"
)

// Issue 26, seen on an H200 with NCCL 2.28: a communicator that connects at
// its first collective blocks that launch until every peer launches it, so
// an asynchronous collective on one Comm followed by a wait on another
// deadlocks against a peer that issues them in the other order (commtest's
// SubGroupIndependent hung). Loading NCCL sets NCCL_RUNTIME_CONNECT=0, so
// communicators connect when they are made, unless the user chose.
func TestEagerConnectByDefault(t *testing.T) {
	cudafake.RequireCUDA(t)
	for _, c := range []struct {
		set       bool
		val, want string
	}{{false, "", "0"}, {true, "1", "1"}, {true, "0", "0"}} {
		if c.set {
			t.Setenv(nccl.EnvRuntimeConnect, c.val)
		} else {
			t.Setenv(nccl.EnvRuntimeConnect, "x") // restored afterwards
			os.Unsetenv(nccl.EnvRuntimeConnect)
		}
		nccl.Reload()
		if ok, why := nccl.Usable(); !ok {
			t.Skipf("no NCCL: %s", why)
		}
		if got, ok := os.LookupEnv(nccl.EnvRuntimeConnect); got != c.want || !ok {
			t.Errorf("%s set %v to %q before loading: %q (set %v) after, want %q", nccl.EnvRuntimeConnect, c.set, c.val, got, ok, c.want)
		}
	}
	nccl.Reload()
}
