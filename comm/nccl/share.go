package nccl

import (
	"os"
	"strings"
)

// EnvShareGPU set to "1" lets NCCL ranks share a GPU: local rank k of a
// host with n GPUs then uses GPU k mod n, where it would otherwise be
// refused. NCCL itself refuses two ranks of one host on one GPU
// ("Duplicate GPU detected"), but not two ranks of different hosts: each
// rank's process must therefore pose as its own host, with its own
// NCCL_HOSTID, and reach the others over loopback (NCCL_SOCKET_IFNAME=lo).
// gdist's launcher (package launch: train -nproc) sets both for each worker
// when it sees GDIST_NCCL_SHARE_GPU=1; with another launcher, set them per
// process. The ranks then talk through NCCL's network transport, not
// NVLink or shared memory: this is for testing multi-rank NCCL on a machine
// with fewer GPUs than ranks, not for speed.
const EnvShareGPU = "GDIST_NCCL_SHARE_GPU"

// EnvHostID is NCCL's variable for the host identity it compares to find
// ranks of one host.
const EnvHostID = "NCCL_HOSTID"

// shareGPU reports whether GPU sharing was asked for (EnvShareGPU=1), and if
// so, why it cannot work ("" when it can).
func shareGPU() (asked bool, why string) {
	if strings.TrimSpace(os.Getenv(EnvShareGPU)) != "1" {
		return false, ""
	}
	if strings.TrimSpace(os.Getenv(EnvHostID)) == "" {
		return true, EnvShareGPU + "=1 but " + EnvHostID + " is not set: NCCL refuses ranks of one host on one GPU " +
			"unless each rank's process poses as its own host (set " + EnvHostID + " to a value of its own in each process, " +
			"and NCCL_SOCKET_IFNAME=lo; gdist's launcher does both)"
	}
	return true, ""
}

// oneGPUPerRank is the advice when a host has fewer GPUs than ranks.
const oneGPUPerRank = "NCCL needs one GPU per rank (it refuses two ranks of one host on one GPU): use a host backend (tcp, shm), " +
	"which stages device buffers, fewer ranks, give each rank one GPU (CUDA_VISIBLE_DEVICES, Slurm's --gpus-per-task=1), " +
	"or, to test on fewer GPUs, set " + EnvShareGPU + "=1 with a distinct " + EnvHostID + " per process"
