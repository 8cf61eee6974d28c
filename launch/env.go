package launch

import (
	"os"
	"strconv"
	"strings"
)

// The launcher's protocol variables: Run sets them in each child's
// environment, and the worker side of this package reads them back. This
// file is the one place package launch reads its environment; each value
// has one function below, read when it is asked for (not cached), and the
// rest of the package calls those. The rendezvous variables Run also sets
// (RANK, WORLD_SIZE, MASTER_ADDR, GDIST_STORE_ADDR, GDIST_TOKEN, ...) are
// read by comm/rendezvous (FromEnv); GDIST_NCCL_SHARE_GPU and NCCL_HOSTID
// by comm/nccl.
const (
	// EnvLaunched is "1" in a worker Run started (IsWorker).
	EnvLaunched = "GDIST_LAUNCHED"
	// EnvLauncherPID is the process id of the worker's launcher
	// (WatchLauncher).
	EnvLauncherPID = "GDIST_LAUNCHER_PID"
	// EnvRestartCount is the worker's generation: 0, then k after the
	// k-th restart (RestartCount).
	EnvRestartCount = "GDIST_RESTART_COUNT"
	// EnvMaxRestarts is Spec.MaxRestarts (MaxRestarts).
	EnvMaxRestarts = "GDIST_MAX_RESTARTS"
	// EnvTargetWorldSize is the number of ranks the job was launched with
	// (TargetWorldSize).
	EnvTargetWorldSize = "GDIST_TARGET_WORLD_SIZE"
	// EnvCPUs lists the CPUs a bound worker runs on, "2,3" (BoundCPUs).
	EnvCPUs = "GDIST_CPUS"
	// EnvFaultStart, read by the launcher, lists the starts that fail,
	// "gen:rank,...": a test's stand-in for lost capacity.
	EnvFaultStart = "GDIST_FAULT_START"
)

// The other launchers' variables a worker looks at.
const (
	envTorchRestartCount = "TORCHELASTIC_RESTART_COUNT" // torchrun's RestartCount
	envTorchMaxRestarts  = "TORCHELASTIC_MAX_RESTARTS"  // torchrun's MaxRestarts
)

// IsWorker reports whether this process was started by Run (GDIST_LAUNCHED=1).
func IsWorker() bool { return os.Getenv(EnvLaunched) == "1" }

// UnderLauncher reports whether this process is one rank of a job started
// by a launcher: ours (IsWorker), torchrun (WORLD_SIZE), mpirun
// (OMPI_COMM_WORLD_SIZE) or srun (SLURM_NTASKS). Programs that launch their
// own workers do so only when this is false.
func UnderLauncher() bool {
	if IsWorker() {
		return true
	}
	for _, v := range []string{"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"} {
		if os.Getenv(v) != "" {
			return true
		}
	}
	return false
}

// RestartCount is this worker's restart number: 0 in the first generation,
// k after the k-th restart by our launcher (GDIST_RESTART_COUNT) or by
// torchrun --max-restarts (TORCHELASTIC_RESTART_COUNT).
func RestartCount() int { return firstPositive(EnvRestartCount, envTorchRestartCount) }

// MaxRestarts is how many times this worker's job may be restarted:
// GDIST_MAX_RESTARTS from our launcher, TORCHELASTIC_MAX_RESTARTS from
// torchrun; 0 when neither is set.
func MaxRestarts() int { return firstPositive(EnvMaxRestarts, envTorchMaxRestarts) }

// firstPositive is the first of the variables names that holds an integer
// above 0, or 0.
func firstPositive(names ...string) int {
	for _, v := range names {
		if n, err := strconv.Atoi(os.Getenv(v)); err == nil && n > 0 {
			return n
		}
	}
	return 0
}

// TargetWorldSize is the number of ranks this worker's job was launched
// with (GDIST_TARGET_WORLD_SIZE; Spec.MinProc may run a generation on
// fewer), or 0 when not set.
func TargetWorldSize() int {
	n, _ := strconv.Atoi(os.Getenv(EnvTargetWorldSize))
	return max(n, 0)
}

// launcherPID is GDIST_LAUNCHER_PID, or 0 when it is not a process id.
func launcherPID() int {
	pid, err := strconv.Atoi(os.Getenv(EnvLauncherPID))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// cpusVar is GDIST_CPUS as set, parsed by BoundCPUs.
func cpusVar() string { return os.Getenv(EnvCPUs) }

// faultStart reports whether GDIST_FAULT_START ("gen:rank,...", for tests
// of lost capacity) says that rank's start in generation gen fails.
func faultStart(gen, rank int) bool {
	for _, f := range strings.Split(os.Getenv(EnvFaultStart), ",") {
		if f == strconv.Itoa(gen)+":"+strconv.Itoa(rank) {
			return true
		}
	}
	return false
}

// gomaxprocsSet reports whether this process's environment sets
// GOMAXPROCS (a bound child then inherits it as it is).
func gomaxprocsSet() bool { return os.Getenv("GOMAXPROCS") != "" }

// inheritedEnv is the environment every child starts from: this process's.
func inheritedEnv() []string { return os.Environ() }
