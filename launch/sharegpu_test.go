package launch

import (
	"slices"
	"strings"
	"testing"
)

// GDIST_NCCL_SHARE_GPU=1 gives each worker an NCCL_HOSTID of its own (so
// that NCCL lets its ranks share a GPU) and, on one node, NCCL_SOCKET_IFNAME=lo
// unless set; without it nothing is added.
func TestShareGPUEnv(t *testing.T) {
	if env := shareGPUEnv([]string{"PATH=/bin", "GDIST_NCCL_SHARE_GPU=0"}, 1, false); env != nil {
		t.Fatalf("without GDIST_NCCL_SHARE_GPU=1: %q", env)
	}
	base := []string{"GDIST_NCCL_SHARE_GPU=0", "NCCL_HOSTID=same-for-all", "GDIST_NCCL_SHARE_GPU=1"}
	a, b := shareGPUEnv(base, 0, false), shareGPUEnv(base, 1, false)
	ha, hb := lookupEnv(a, "NCCL_HOSTID"), lookupEnv(b, "NCCL_HOSTID")
	if ha == "" || ha == hb || !strings.HasSuffix(hb, "-gdist-rank1") {
		t.Fatalf("NCCL_HOSTID of ranks 0 and 1: %q, %q; want distinct", ha, hb)
	}
	if !slices.Contains(a, "NCCL_SOCKET_IFNAME=lo") {
		t.Fatalf("one node: %q lacks NCCL_SOCKET_IFNAME=lo", a)
	}
	if env := shareGPUEnv(append(base, "NCCL_SOCKET_IFNAME=eth0"), 0, false); lookupEnv(env, "NCCL_SOCKET_IFNAME") != "" {
		t.Fatalf("NCCL_SOCKET_IFNAME set by the user was overridden: %q", env)
	}
	if env := shareGPUEnv(base, 0, true); lookupEnv(env, "NCCL_SOCKET_IFNAME") != "" {
		t.Fatalf("several nodes: %q sets NCCL_SOCKET_IFNAME", env)
	}
}
