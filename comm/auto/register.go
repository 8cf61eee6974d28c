package auto

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
	"github.com/gdist/gdist/comm/nccl"
	"github.com/gdist/gdist/comm/staging"
)

// EnvNCCL set to "0" keeps the auto backend off NCCL even where every rank
// has a GPU (e.g. for CPU training on a GPU machine).
const EnvNCCL = "GDIST_AUTO_NCCL"

// The "auto" backend: NCCL when every rank can use it (CUDA and NCCL load,
// one GPU per local rank; see PickNCCL), else the world Comm is algo's
// collectives over a Transport that picks shared memory or TCP per peer;
// closing that Comm closes the Transport.
func init() {
	comm.Register("auto", func(ctx context.Context, cfg comm.Config) (comm.Comm, error) {
		e := readEnv()
		use, why, err := pickNCCL(ctx, cfg, e.noNCCL)
		if err != nil {
			return nil, err
		}
		if use {
			return comm.New(ctx, "nccl", cfg)
		}
		if cfg.Rank == 0 && why != "" && e.debug {
			fmt.Fprintf(os.Stderr, "auto: not using nccl: %s\n", why)
		}
		t, err := New(ctx, cfg)
		if err != nil {
			return nil, err
		}
		// Device buffers too when CUDA is present, staged through pinned
		// memory (the nccl Comm takes both kinds itself).
		return staging.Adapt(algo.NewComm(t, cfg.Options)), nil
	})
}

// PickNCCL reports whether the auto backend uses NCCL: every rank must
// have CUDA, NCCL and a GPU of its own (nccl.UsableFor its host's
// LocalSize, and no two ranks naming one GPU by nccl.GPUOf: processes
// that each see "their one GPU" may all see the same), and
// GDIST_AUTO_NCCL must not be "0" on any rank. The ranks
// agree through cfg.Store; when they do not all qualify, why names the
// first rank that does not and its reason.
func PickNCCL(ctx context.Context, cfg comm.Config) (use bool, why string, err error) {
	return pickNCCL(ctx, cfg, readEnv().noNCCL)
}

// pickNCCL is PickNCCL with EnvNCCL's verdict given.
func pickNCCL(ctx context.Context, cfg comm.Config, noNCCL bool) (use bool, why string, err error) {
	if err := cfg.Validate(); err != nil {
		return false, "", err
	}
	ok, reason := nccl.UsableFor(max(cfg.LocalSize, 1))
	if noNCCL {
		ok, reason = false, EnvNCCL+"=0"
	}
	if cfg.Size == 1 {
		return ok, reason, nil
	}
	if cfg.Store == nil {
		return false, "", comm.InvalidArgf("auto: world size %d needs a Store", cfg.Size)
	}
	if d := cfg.OpTimeout(); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	gen, err := cfg.Store.Add(ctx, "auto-nccl/"+cfg.Job+"/gen/"+strconv.Itoa(cfg.Rank), 1)
	if err != nil {
		return false, "", fmt.Errorf("auto: rank %d: rendezvous: %w", cfg.Rank, err)
	}
	ns := fmt.Sprintf("auto-nccl/%s/%d/", cfg.Job, gen)
	mine := "ok"
	if ok {
		// the GPU this rank would use: two ranks on one GPU cannot both
		// use NCCL (a container's NVIDIA_VISIBLE_DEVICES=0 is every
		// process's, not one process's own)
		if gpu, err := nccl.GPUOf(cfg); err != nil {
			mine = "no: " + err.Error()
		} else {
			mine = "ok " + gpu
		}
	} else {
		mine = "no: " + reason
	}
	if err := cfg.Store.Set(ctx, ns+strconv.Itoa(cfg.Rank), []byte(mine)); err != nil {
		return false, "", fmt.Errorf("auto: rank %d: publishing GPU availability: %w", cfg.Rank, err)
	}
	use = true
	gpus := map[string]int{} // a GPU named by GPUOf: its first rank
	for r := range cfg.Size {
		v := []byte(mine)
		if r != cfg.Rank {
			if v, err = cfg.Store.Get(ctx, ns+strconv.Itoa(r)); err != nil {
				return false, "", fmt.Errorf("auto: rank %d: waiting for rank %d's GPU availability: %w", cfg.Rank, r, err)
			}
		}
		s := string(v)
		gpu, isOK := strings.CutPrefix(s, "ok ")
		switch {
		case !use:
		case !isOK:
			use, why = false, fmt.Sprintf("rank %d: %s", r, strings.TrimPrefix(s, "no: "))
		default:
			if first, dup := gpus[gpu]; dup {
				use, why = false, nccl.SharedGPU(first, r, gpu)
			}
			gpus[gpu] = r
		}
	}
	return use, why, nil
}
