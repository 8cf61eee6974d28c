package rendezvous

import (
	"crypto/sha256"
	"encoding/hex"
	"hash/fnv"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gdist/gdist/comm"
)

// Launcher names reported in Env.Launcher.
const (
	LauncherGdist    = "gdist"    // our launch package
	LauncherTorchrun = "torchrun" // torchrun / torch.distributed.run
	LauncherMPI      = "mpirun"   // Open MPI's mpirun
	LauncherSlurm    = "srun"     // Slurm's srun
	LauncherManual   = "manual"   // RANK/WORLD_SIZE set by hand, or nothing (one process)
)

// Default ports.
const (
	DefaultMasterPort = 29500
	// Under mpirun and srun without MASTER_PORT the port is derived from
	// the job id, in [derivedPortBase, derivedPortBase+derivedPortSpan).
	derivedPortBase = 20000
	derivedPortSpan = 10000
)

// Env is what a rank learns from its environment.
type Env struct {
	Rank, Size           int
	LocalRank, LocalSize int // rank among, and number of, the processes on this host
	MasterAddr           string
	MasterPort           int
	// StorePort is the port of the store Connect serves (rank 0) and
	// dials: GDIST_STORE_PORT, else MASTER_PORT+1 under torchrun (whose own
	// agent serves its store on MASTER_PORT), else MASTER_PORT.
	StorePort int
	// StoreAddr (GDIST_STORE_ADDR, host:port) names a store that is already
	// running (our launcher runs one); Connect then only dials it.
	StoreAddr string
	Token     []byte
	// TokenDerived is true when Token was not given in GDIST_TOKEN but
	// derived from the job id (or a fixed development token): anyone who can
	// see the job id can compute it, so it is not a secret.
	TokenDerived bool
	Launcher     string // one of the Launcher* constants
	// JobID tells jobs apart on a store they share by mistake (one
	// MASTER_PORT): GDIST_JOB_ID, else the launcher's job id
	// (TORCHELASTIC_RUN_ID, OMPI_MCA_ess_base_jobid, SLURM_JOB_ID), else "".
	JobID string
	// JoinTimeout bounds how long Connect waits for every rank to join
	// the store rank 0 serves: GDIST_JOIN_TIMEOUT (a Go duration or
	// seconds); 0 means DefaultJoinTimeout.
	JoinTimeout time.Duration
}

// DefaultJoinTimeout is the default of Env.JoinTimeout.
const DefaultJoinTimeout = 10 * time.Minute

// FromEnv reads Env from the process environment; see FromLookup.
func FromEnv() (Env, error) { return FromLookup(os.LookupEnv) }

// FromLookup reads Env through lookup (os.LookupEnv or a test's map). The
// launcher is recognised in this order:
//
//   - gdist (GDIST_LAUNCHED=1 or GDIST_STORE_ADDR set) and torchrun
//     (TORCHELASTIC_RUN_ID set) and manual (RANK or WORLD_SIZE set) read
//     RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE;
//   - mpirun: OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE;
//   - srun: SLURM_PROCID, SLURM_NTASKS (or SLURM_NPROCS), SLURM_LOCALID,
//     and the local size from SLURM_STEP_TASKS_PER_NODE,
//     SLURM_TASKS_PER_NODE ("2(x3),1") or SLURM_NTASKS_PER_NODE;
//   - none of these: one process, rank 0 of 1 (manual).
//
// A missing local rank or size defaults to the global one (one host).
// MASTER_ADDR defaults to 127.0.0.1 (under srun on several nodes: the first
// node of the step). MASTER_PORT defaults to 29500, or under mpirun and
// srun to a port in [20000, 30000) derived from the job id, so that
// concurrent jobs do not collide.
//
// The token is GDIST_TOKEN, hex-decoded if it is valid hex and taken as raw
// bytes otherwise. Without it, the token is derived from the job id
// (TORCHELASTIC_RUN_ID, OMPI_MCA_ess_base_jobid, SLURM_JOB_ID) or, failing
// that, is a fixed development token; both set TokenDerived.
//
// The job id (Env.JobID) is GDIST_JOB_ID, else the launcher's job id; the
// join timeout (Env.JoinTimeout) is GDIST_JOIN_TIMEOUT.
//
// Bad values (a non-integer, rank >= size, size < 1, a missing size) give
// an error wrapping comm.ErrInvalidArgument that names the variable.
func FromLookup(lookup func(string) (string, bool)) (Env, error) {
	get := func(k string) string {
		v, _ := lookup(k)
		return strings.TrimSpace(v)
	}
	var e Env
	var names [4]string // rank, size, local rank, local size variables
	torchStyle := [4]string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}
	switch {
	case get("GDIST_LAUNCHED") == "1" || get("GDIST_STORE_ADDR") != "":
		e.Launcher, names = LauncherGdist, torchStyle
	case get("TORCHELASTIC_RUN_ID") != "":
		e.Launcher, names = LauncherTorchrun, torchStyle
	case get("RANK") != "" || get("WORLD_SIZE") != "":
		e.Launcher, names = LauncherManual, torchStyle
	case get("OMPI_COMM_WORLD_RANK") != "" || get("OMPI_COMM_WORLD_SIZE") != "":
		e.Launcher = LauncherMPI
		names = [4]string{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"}
	case get("SLURM_PROCID") != "":
		e.Launcher = LauncherSlurm
		size := "SLURM_NTASKS"
		if get(size) == "" && get("SLURM_NPROCS") != "" {
			size = "SLURM_NPROCS"
		}
		names = [4]string{"SLURM_PROCID", size, "SLURM_LOCALID", ""}
	default:
		e.Launcher = LauncherManual
	}

	// Ranks.
	e.Rank, e.Size, e.LocalRank, e.LocalSize = 0, 1, 0, 1
	if names[0] != "" {
		var err error
		if e.Size, err = intVar(get, names[1], names[0], 1); err != nil {
			return Env{}, err
		}
		if e.Rank, err = intVar(get, names[0], names[1], 0); err != nil {
			return Env{}, err
		}
		if e.Rank >= e.Size {
			return Env{}, comm.InvalidArgf("rendezvous: %s=%d is out of range [0, %s=%d)", names[0], e.Rank, names[1], e.Size)
		}
		e.LocalRank, e.LocalSize = e.Rank, e.Size
		if get(names[2]) != "" {
			if e.LocalRank, err = intVar(get, names[2], "", 0); err != nil {
				return Env{}, err
			}
		}
		lsName := names[3]
		if e.Launcher == LauncherSlurm {
			var ls int
			ls, lsName, err = slurmLocalSize(get)
			if err != nil {
				return Env{}, err
			}
			if ls > 0 {
				e.LocalSize = ls
			}
		} else if get(lsName) != "" {
			if e.LocalSize, err = intVar(get, lsName, "", 1); err != nil {
				return Env{}, err
			}
		}
		if lsName == "" {
			lsName = "local size"
		}
		if e.LocalRank >= e.LocalSize {
			return Env{}, comm.InvalidArgf("rendezvous: %s=%d is out of range [0, %s=%d)", names[2], e.LocalRank, lsName, e.LocalSize)
		}
	}

	// Job id, for the port and the token.
	jobID := ""
	switch e.Launcher {
	case LauncherMPI:
		jobID = get("OMPI_MCA_ess_base_jobid")
	case LauncherSlurm:
		if id := get("SLURM_JOB_ID"); id != "" {
			jobID = id
			if step := get("SLURM_STEP_ID"); step != "" {
				jobID += "." + step
			}
		}
	}
	var tokenSource string
	for _, k := range []string{"TORCHELASTIC_RUN_ID", "OMPI_MCA_ess_base_jobid", "SLURM_JOB_ID"} {
		if v := get(k); v != "" {
			tokenSource = k + "=" + v
			break
		}
	}

	// Addresses.
	e.MasterAddr = get("MASTER_ADDR")
	if e.MasterAddr == "" {
		e.MasterAddr = "127.0.0.1"
		if e.Launcher == LauncherSlurm {
			nodes, _ := strconv.Atoi(firstSet(get, "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"))
			if h := firstSlurmHost(firstSet(get, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")); nodes > 1 && h != "" {
				e.MasterAddr = h
			}
		}
	}
	e.MasterPort = DefaultMasterPort
	if get("MASTER_PORT") != "" {
		p, err := portVar(get, "MASTER_PORT")
		if err != nil {
			return Env{}, err
		}
		e.MasterPort = p
	} else if jobID != "" {
		h := fnv.New32a()
		h.Write([]byte(jobID))
		e.MasterPort = derivedPortBase + int(h.Sum32()%derivedPortSpan)
	}
	e.StorePort = e.MasterPort
	if get("GDIST_STORE_PORT") != "" {
		p, err := portVar(get, "GDIST_STORE_PORT")
		if err != nil {
			return Env{}, err
		}
		e.StorePort = p
	} else if e.Launcher == LauncherTorchrun {
		if e.MasterPort == 65535 {
			return Env{}, comm.InvalidArgf("rendezvous: MASTER_PORT=65535 leaves no port for the store under torchrun; set GDIST_STORE_PORT")
		}
		e.StorePort = e.MasterPort + 1
	}
	e.StoreAddr = get("GDIST_STORE_ADDR")
	e.JobID = get("GDIST_JOB_ID")
	if e.JobID == "" && tokenSource != "" {
		e.JobID = tokenSource
	}
	if v := get("GDIST_JOIN_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if f, ferr := strconv.ParseFloat(v, 64); ferr == nil {
			d, err = time.Duration(f*float64(time.Second)), nil
		}
		if err != nil || d <= 0 {
			return Env{}, comm.InvalidArgf("rendezvous: GDIST_JOIN_TIMEOUT=%q is neither a duration (\"90s\") nor a number of seconds", v)
		}
		e.JoinTimeout = d
	}

	// Token.
	if t, ok := lookup("GDIST_TOKEN"); ok && t != "" {
		if b, err := hex.DecodeString(t); err == nil {
			e.Token = b
		} else {
			e.Token = []byte(t)
		}
	} else {
		seed := "gdist development token"
		if tokenSource != "" {
			seed = "gdist token derived from " + tokenSource
		}
		sum := sha256.Sum256([]byte(seed))
		e.Token = sum[:]
		e.TokenDerived = true
	}
	return e, nil
}

// intVar parses the integer variable name, which must be set (other, if not
// empty, names the variable whose presence made it required) and >= lo.
func intVar(get func(string) string, name, other string, lo int) (int, error) {
	v := get(name)
	if v == "" {
		if other != "" && get(other) != "" {
			return 0, comm.InvalidArgf("rendezvous: %s is not set (%s is)", name, other)
		}
		return 0, comm.InvalidArgf("rendezvous: %s is not set", name)
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, comm.InvalidArgf("rendezvous: %s=%q is not an integer", name, v)
	}
	if n < lo {
		return 0, comm.InvalidArgf("rendezvous: %s=%d < %d", name, n, lo)
	}
	return n, nil
}

func portVar(get func(string) string, name string) (int, error) {
	p, err := intVar(get, name, "", 1)
	if err != nil {
		return 0, err
	}
	if p > 65535 {
		return 0, comm.InvalidArgf("rendezvous: %s=%d is not a TCP port", name, p)
	}
	return p, nil
}

func firstSet(get func(string) string, names ...string) string {
	for _, n := range names {
		if v := get(n); v != "" {
			return v
		}
	}
	return ""
}

// slurmLocalSize returns the number of tasks on this node (0 if unknown)
// and the variable it came from.
func slurmLocalSize(get func(string) string) (int, string, error) {
	for _, name := range []string{"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"} {
		v := get(name)
		if v == "" {
			continue
		}
		node := 0
		if s := get("SLURM_NODEID"); s != "" {
			var err error
			if node, err = intVar(get, "SLURM_NODEID", "", 0); err != nil {
				return 0, name, err
			}
		}
		n, ok := slurmTasksOnNode(v, node)
		if !ok {
			return 0, name, comm.InvalidArgf("rendezvous: %s=%q (SLURM_NODEID=%d) is not understood", name, v, node)
		}
		return n, name, nil
	}
	if get("SLURM_NTASKS_PER_NODE") != "" {
		n, err := intVar(get, "SLURM_NTASKS_PER_NODE", "", 1)
		return n, "SLURM_NTASKS_PER_NODE", err
	}
	return 0, "", nil
}

// slurmTasksOnNode reads Slurm's compressed tasks-per-node list, e.g.
// "4(x2),3", and returns the count of node index node.
func slurmTasksOnNode(list string, node int) (int, bool) {
	for _, item := range strings.Split(list, ",") {
		count, rep := item, 1
		if i := strings.IndexByte(item, '('); i >= 0 {
			if !strings.HasPrefix(item[i:], "(x") || !strings.HasSuffix(item, ")") {
				return 0, false
			}
			r, err := strconv.Atoi(item[i+2 : len(item)-1])
			if err != nil || r < 1 {
				return 0, false
			}
			count, rep = item[:i], r
		}
		n, err := strconv.Atoi(count)
		if err != nil || n < 1 {
			return 0, false
		}
		if node < rep {
			return n, true
		}
		node -= rep
	}
	return 0, false
}

// firstSlurmHost returns the first host of a Slurm host list such as
// "gpu[03-05,9],cpu1" ("gpu03"), or "" if it cannot tell.
func firstSlurmHost(list string) string {
	end := len(list)
	if i := strings.IndexAny(list, ",["); i >= 0 {
		end = i
	}
	if end == len(list) || list[end] == ',' {
		return list[:end]
	}
	// prefix[range...]suffix
	closeIdx := strings.IndexByte(list[end:], ']')
	if closeIdx < 0 {
		return ""
	}
	inner := list[end+1 : end+closeIdx]
	first := inner
	if i := strings.IndexAny(inner, ",-"); i >= 0 {
		first = inner[:i]
	}
	suffix := list[end+closeIdx+1:]
	if i := strings.IndexAny(suffix, ",["); i >= 0 {
		suffix = suffix[:i]
	}
	if first == "" {
		return ""
	}
	return list[:end] + first + suffix
}
