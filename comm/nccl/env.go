package nccl

import (
	"os"
	"strings"
)

// This file is the one place package nccl reads (and, for
// NCCL_RUNTIME_CONNECT, sets) the process environment. Each value is read
// by one function below, when it is needed (not cached):
//
//	GDIST_NCCL_PATH         EnvLibrary: the libnccl to load (read by
//	                        internal/dl's loader, to which load passes the name)
//	NCCL_RUNTIME_CONNECT    EnvRuntimeConnect: set to 0 when unset (eagerConnect)
//	CUDA_VISIBLE_DEVICES,   a launcher gave this process one GPU (onePerProcess)
//	NVIDIA_VISIBLE_DEVICES
//	GDIST_NCCL_SHARE_GPU    EnvShareGPU: ranks share GPUs (shareGPU)
//	NCCL_HOSTID             EnvHostID: needed with EnvShareGPU (shareGPU)
//
// NCCL itself reads its own NCCL_* variables.

// EnvLibrary names the environment variable that points the loader at a
// specific libnccl (a path or a file name for dlopen). When it is set,
// nothing else is tried.
const EnvLibrary = "GDIST_NCCL_PATH"

// EnvRuntimeConnect is NCCL's variable (2.22+) that says whether a
// communicator connects its peers at its first collective (1, NCCL's
// default) or when it is made (0).
const EnvRuntimeConnect = "NCCL_RUNTIME_CONNECT"

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

// visibleDevices are the variables by which a launcher or a container
// gives a process its GPUs (onePerProcess).
var visibleDevices = []string{"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"}

// eagerConnect makes this process's communicators connect when they are
// made, unless the user set NCCL_RUNTIME_CONNECT: with NCCL's default, the
// first collective of a communicator blocks inside its launch until every
// peer has launched it too, so a rank that issues an asynchronous
// collective on one Comm and then waits on another (which the Work
// contract allows) deadlocks against a peer that issues them in the other
// order (seen on an H200 with NCCL 2.28: commtest's SubGroupIndependent
// hung). ncclCommInitRank is collective anyway, so connecting there costs
// no extra wait. Send/recv still connect at a pair's first message
// (ConnectPeers connects them up front).
func eagerConnect() {
	if _, set := os.LookupEnv(EnvRuntimeConnect); !set {
		os.Setenv(EnvRuntimeConnect, "0")
	}
}

// onePerProcess reports whether the launcher gave this process its own GPU:
// CUDA_VISIBLE_DEVICES (Slurm's --gpus-per-task=1 sets it) or
// NVIDIA_VISIBLE_DEVICES (a Kubernetes pod with one GPU) names exactly one.
func onePerProcess() bool {
	for _, env := range visibleDevices {
		v := strings.TrimSpace(os.Getenv(env))
		if v != "" && v != "all" && v != "none" && v != "void" && !strings.Contains(v, ",") {
			return true
		}
	}
	return false
}
