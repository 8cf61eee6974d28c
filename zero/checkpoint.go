package zero

// Sharded checkpoints.
//
// A checkpoint saved by N ranks is one safetensors file per rank,
// ShardPath(path, r, N) = "<path>.rank<r>-of-<N>.safetensors", written by
// that rank alone (atomically, with checkpoint.Write). Rank r's file holds
// the unpadded part of its shard, [lo, lo+len) with lo = r*S, S = ceil(P/N)
// and len = min(S, P-lo) (0 where the shard is all padding):
//
//	params                  F32 [len]   parameters, our flat layout
//	optimizer.<name>        F32 [len]   each optimizer tensor (exp_avg, ...)
//	buffers.<torch name>    rank 0 only: batch-norm running_mean,
//	                        running_var (F32) and num_batches_tracked (I64)
//
// and the metadata format (ShardFormat), model, num_params, world_size,
// rank, shard_size (S), shard_lo, shard_len, stage, optimizer, opt_step,
// plus what the caller adds (package train adds save_id, epoch, batch,
// step). A rank writes only what it owns, so the format also serves
// stage 3, where no rank holds all parameters.
//
// ReadShards puts the N files back together into the full flat parameters
// and full optimizer state, whatever world size and strategy will use them
// next. It reads every file: at the sizes gdist trains (a few million
// parameters, a few tens of MB with Adam) that costs little; for much
// larger models a rank would read only the files overlapping its new shard
// (shard_lo and shard_len make that possible without a format change).

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/gdist/gdist/checkpoint"
	"github.com/gdist/gdist/internal/hugepage"
)

// ShardFormat is the "format" metadata of shard files (and of the model
// file package train writes beside them).
const ShardFormat = "gdist-zero-v1"

// ErrShard wraps every problem with a set of shard files.
var ErrShard = errors.New("zero: bad sharded checkpoint")

// ShardPath is the file rank writes for the checkpoint at path saved by
// world ranks.
func ShardPath(path string, rank, world int) string {
	return fmt.Sprintf("%s.rank%d-of-%d.safetensors", path, rank, world)
}

// shardSpan is the unpadded part [lo, lo+n) of rank's shard of p elements
// over world ranks, and the shard length S.
func shardSpan(p, world, rank int) (lo, n, s int) {
	s = (p + world - 1) / world
	lo = rank * s
	n = max(0, min(s, p-lo))
	return lo, n, s
}

// WriteShard writes this rank's shard of the parameters and of the
// optimizer state, and extra (the caller's: package train passes the
// model's batch-norm buffers as "buffers.<name>" on rank 0), to
// ShardPath(path, rank, N), atomically. meta is added to the file's
// metadata (package train adds "model"); it cannot override the keys
// WriteShard sets. It is not a
// collective: the caller makes sure that every rank wrote its file (see
// package train). Not safe for use concurrently with Step or Update.
// With stage 3, whose shards are per tensor, it first gathers this rank's
// contiguous span of the file format tensor by tensor (one tensor held
// at a time): then it is a collective, which every rank must call.
func (e *Engine) WriteShard(ctx context.Context, path string, meta map[string]string, extra []checkpoint.Tensor) error {
	write, err := e.SnapshotShard(ctx, path, meta, extra, nil)
	if err != nil {
		return err
	}
	return write()
}

// SnapshotShard is WriteShard in two parts: it copies this rank's shard
// (under the same conditions as WriteShard, a collective with stage 3)
// and returns the function that writes the copy, which may run later and
// concurrently with Step and Update (a save that does not stop
// training). alloc gives the copy's buffers (nil: fresh ones; a caller
// that saves often reuses them once the write returned).
func (e *Engine) SnapshotShard(ctx context.Context, path string, meta map[string]string, extra []checkpoint.Tensor, alloc func(n int) []float32) (write func() error, err error) {
	if alloc == nil {
		alloc = hugepage.Float32s
	}
	view := func(name string, v []float32) checkpoint.Tensor {
		dst := alloc(len(v))
		copy(dst, v)
		return checkpoint.F32View(name, []int{len(v)}, dst)
	}
	lo, ln, _ := shardSpan(e.p, e.c.Size(), e.rank)
	if e.f64 != nil {
		return e.f64.snapshot(e, path, meta, extra)
	}
	st, t := e.opt.State()
	var params []float32
	if e.st3 != nil {
		if params, st, err = e.st3.fileSpan(ctx, lo, ln, st); err != nil {
			return nil, err
		}
	} else {
		params = e.flatP[lo : lo+ln]
	}
	md := e.shardMeta(meta, e.opt.Name(), t)
	ts := []checkpoint.Tensor{view("params", params[:ln])}
	for k, v := range st {
		ts = append(ts, view("optimizer."+k, v[:ln]))
	}
	ts = append(ts, extra...)
	return e.shardWriter(path, ts, md), nil
}

// shardMeta is the metadata of this rank's shard file: meta plus the
// layout, stage and optimizer.
func (e *Engine) shardMeta(meta map[string]string, optName string, optStep int64) map[string]string {
	n := e.c.Size()
	lo, ln, s := shardSpan(e.p, n, e.rank)
	md := map[string]string{}
	for k, v := range meta {
		md[k] = v
	}
	for k, v := range map[string]string{
		"format":     ShardFormat,
		"num_params": strconv.Itoa(e.p),
		"world_size": strconv.Itoa(n),
		"rank":       strconv.Itoa(e.rank),
		"shard_size": strconv.Itoa(s),
		"shard_lo":   strconv.Itoa(lo),
		"shard_len":  strconv.Itoa(ln),
		"stage":      strconv.Itoa(e.opts.Stage),
		"optimizer":  optName,
		"opt_step":   strconv.FormatInt(optStep, 10),
	} {
		md[k] = v
	}
	return md
}

// shardWriter returns the function that writes this rank's shard file.
func (e *Engine) shardWriter(path string, ts []checkpoint.Tensor, md map[string]string) func() error {
	file, rank := ShardPath(path, e.rank, e.c.Size()), e.rank
	return func() error {
		if err := checkpoint.Write(file, ts, md); err != nil {
			return fmt.Errorf("zero: saving the shard of rank %d: %w", rank, err)
		}
		return nil
	}
}

// LoadOptimizerState sets this rank's shard optimizer from the full
// (unpadded, P values per tensor) optimizer state of a checkpoint: every
// tensor the optimizer has must be in full, and this rank takes its shard
// of it (the padding stays zero). step is the optimizer's step count. Call
// it after New and before the first Step.
func (e *Engine) LoadOptimizerState(full map[string][]float32, step int64) error {
	if e.f64 != nil {
		return fmt.Errorf("%w: the model's learnables are float64: use LoadOptimizerState64", ErrShard)
	}
	st, _ := e.opt.State()
	lo, ln, _ := shardSpan(e.p, e.c.Size(), e.rank)
	for k, dst := range st {
		src, ok := full[k]
		switch {
		case !ok:
			return fmt.Errorf("%w: no optimizer state %q for optimizer %s", ErrShard, k, e.opt.Name())
		case len(src) != e.p:
			return fmt.Errorf("%w: optimizer state %q has %d values, the model has %d parameters", ErrShard, k, len(src), e.p)
		}
		clear(dst)
		if e.st3 != nil {
			e.st3.takeShard(dst, src)
			continue
		}
		copy(dst, src[lo:lo+ln])
	}
	e.opt.SetStep(step)
	return nil
}

// LoadParams sets the parameters from the full (unpadded, P values, the
// model's flat layout) parameters of a checkpoint, the inverse of
// FullParams: stages 1 and 2 copy them into the flat buffer every rank
// holds (the padding stays zero), stage 3 takes this rank's shard of each
// tensor. Every rank must load the same values. Call it after New and
// before the first Step.
func (e *Engine) LoadParams(full []float32) error {
	if e.f64 != nil {
		return fmt.Errorf("%w: the model's learnables are float64: use LoadParams64", ErrShard)
	}
	if len(full) != e.p {
		return fmt.Errorf("%w: %d parameters, the model has %d", ErrShard, len(full), e.p)
	}
	if e.st3 != nil {
		clear(e.flatP)
		e.st3.takeShard(e.flatP, full)
		return nil
	}
	copy(e.flatP[:e.p], full)
	return nil
}

// Shards is a sharded checkpoint put back together.
type Shards struct {
	Model     string
	NumParams int
	World     int               // ranks that saved it
	ID        string            // the save's "save_id" ("" if none)
	Meta      map[string]string // rank 0's file's metadata
	Params    []float32         // all parameters, in the models' flat layout (nil for float64 ones)
	Optimizer string            // optimizer name
	OptStep   int64
	OptState  map[string][]float32 // every optimizer tensor, NumParams values each
	// Params64 and OptState64 stand in for Params and OptState (then nil)
	// when the shards hold float64 learnables (F64 tensors).
	Params64   []float64
	OptState64 map[string][]float64
	// Buffers are the batch-norm buffers by PyTorch name
	// ("1.running_mean", ...), from rank 0's file.
	Buffers map[string]checkpoint.Tensor
}

// ReadShards reads and checks the shard files of the checkpoint at path
// and joins them. world is the number of ranks that saved it; 0 finds it
// from the files on disk (there must be exactly one rank-0 file for path).
// If id is not empty, every file must carry save_id id. Every file must
// belong to the same save (save_id), model, parameter count, optimizer and
// optimizer step, and hold exactly its shard, so that together they cover
// [0, P) once. Errors wrap ErrShard (and checkpoint.ErrCorrupt for a
// malformed file, fs.ErrNotExist for a missing one) and name the file.
func ReadShards(path string, world int, id string) (*Shards, error) {
	if world < 0 {
		return nil, fmt.Errorf("%w: world size %d", ErrShard, world)
	}
	if world == 0 {
		var err error
		if world, err = findWorld(path); err != nil {
			return nil, err
		}
	}
	sh := &Shards{World: world, ID: id}
	var first string // rank 0's file, for messages
	idFrom := path   // where sh.ID comes from, for messages
	covered := 0
	for r := 0; r < world; r++ {
		f := ShardPath(path, r, world)
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: %s: %s", ErrShard, f, fmt.Sprintf(format, args...))
		}
		ts, meta, err := checkpoint.Read(f)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: shard file %s is missing (a checkpoint saved by %d ranks has %d shard files): %w", ErrShard, f, world, world, err)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrShard, err)
		}
		if meta["format"] != ShardFormat {
			return nil, bad("not a gdist ZeRO shard (format %q, want %q)", meta["format"], ShardFormat)
		}
		ints := map[string]int{}
		for _, k := range []string{"num_params", "world_size", "rank", "shard_size", "shard_lo", "shard_len"} {
			v, err := strconv.Atoi(meta[k])
			if err != nil || v < 0 {
				return nil, bad("bad %s %q", k, meta[k])
			}
			ints[k] = v
		}
		optStep, err := strconv.ParseInt(meta["opt_step"], 10, 64)
		if err != nil || optStep < 0 {
			return nil, bad("bad opt_step %q", meta["opt_step"])
		}
		if r == 0 {
			first = f
			if sh.ID == "" {
				sh.ID, idFrom = meta["save_id"], f
			}
			sh.Model, sh.NumParams, sh.Meta = meta["model"], ints["num_params"], meta
			sh.Optimizer, sh.OptStep = meta["optimizer"], optStep
			if sh.NumParams == 0 {
				return nil, bad("no parameters")
			}
			if ts["params"].DType == "F64" {
				sh.Params64 = make([]float64, sh.NumParams)
				sh.OptState64 = map[string][]float64{}
			} else {
				sh.Params = hugepage.Float32s(sh.NumParams)
				sh.OptState = map[string][]float32{}
			}
			for k := range ts {
				if name, ok := strings.CutPrefix(k, "optimizer."); ok {
					if sh.Params64 != nil {
						sh.OptState64[name] = make([]float64, sh.NumParams)
					} else {
						sh.OptState[name] = hugepage.Float32s(sh.NumParams)
					}
				}
			}
			sh.Buffers = map[string]checkpoint.Tensor{}
			for k, t := range ts {
				if name, ok := strings.CutPrefix(k, "buffers."); ok {
					t.Name = name
					sh.Buffers[name] = t
				}
			}
		}
		switch {
		case meta["save_id"] != sh.ID:
			return nil, fmt.Errorf("%w: %s belongs to save %q, but %s to save %q: the shard files are from different saves",
				ErrShard, f, meta["save_id"], idFrom, sh.ID)
		case ints["world_size"] != world || ints["rank"] != r:
			return nil, bad("holds rank %d of %d ranks, want rank %d of %d", ints["rank"], ints["world_size"], r, world)
		case meta["model"] != sh.Model || ints["num_params"] != sh.NumParams:
			return nil, bad("holds model %q with %d parameters, but %s holds %q with %d", meta["model"], ints["num_params"], first, sh.Model, sh.NumParams)
		case meta["optimizer"] != sh.Optimizer || optStep != sh.OptStep:
			return nil, bad("optimizer %s at step %d, but %s has %s at step %d", meta["optimizer"], optStep, first, sh.Optimizer, sh.OptStep)
		}
		lo, ln, s := shardSpan(sh.NumParams, world, r)
		if ints["shard_size"] != s || ints["shard_lo"] != lo || ints["shard_len"] != ln {
			return nil, bad("shard [%d, +%d) of size %d, but rank %d of %d owns [%d, +%d) of size %d of %d parameters",
				ints["shard_lo"], ints["shard_len"], ints["shard_size"], r, world, lo, ln, s, sh.NumParams)
		}
		want := map[string][]float32{}
		want64 := map[string][]float64{}
		if sh.Params64 != nil {
			want64["params"] = sh.Params64[lo : lo+ln]
			for k, v := range sh.OptState64 {
				want64["optimizer."+k] = v[lo : lo+ln]
			}
		} else {
			want["params"] = sh.Params[lo : lo+ln]
			for k, v := range sh.OptState {
				want["optimizer."+k] = v[lo : lo+ln]
			}
		}
		read := func(k string) (checkpoint.Tensor, error) {
			t, ok := ts[k]
			if !ok {
				return t, bad("no tensor %q", k)
			}
			if (t.DType == "F64") != (sh.Params64 != nil) {
				return t, bad("tensor %q is %s, but the parameters in %s are %s: the shards mix float32 and float64", k, t.DType, first, map[bool]string{true: "F64", false: "F32"}[sh.Params64 != nil])
			}
			return t, nil
		}
		for k, dst := range want {
			t, err := read(k)
			if err != nil {
				return nil, err
			}
			v, err := t.Float32s()
			if err != nil {
				return nil, bad("tensor %q: %v", k, err)
			}
			if len(v) != ln || len(t.Shape) != 1 {
				return nil, bad("tensor %q has shape %v, want [%d]", k, t.Shape, ln)
			}
			copy(dst, v)
		}
		for k, dst := range want64 {
			t, err := read(k)
			if err != nil {
				return nil, err
			}
			v, err := t.Float64s()
			if err != nil {
				return nil, bad("tensor %q: %v", k, err)
			}
			if len(v) != ln || len(t.Shape) != 1 {
				return nil, bad("tensor %q has shape %v, want [%d]", k, t.Shape, ln)
			}
			copy(dst, v)
			want[k] = nil // known, for the check below
		}
		for k := range ts {
			if _, ok := want[k]; !ok && (r > 0 || !strings.HasPrefix(k, "buffers.")) {
				return nil, bad("unexpected tensor %q", k)
			}
		}
		covered += ln
	}
	if covered != sh.NumParams {
		return nil, fmt.Errorf("%w: the %d shard files of %s cover %d of %d parameters", ErrShard, world, path, covered, sh.NumParams)
	}
	return sh, nil
}

// findWorld returns N for the one "<path>.rank0-of-<N>.safetensors" there is.
func findWorld(path string) (int, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("%w: looking for the shard files of %s: %w", ErrShard, path, err)
	}
	var worlds []int
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), base+".rank0-of-")
		if !ok {
			continue
		}
		rest, ok = strings.CutSuffix(rest, ".safetensors")
		if n, err := strconv.Atoi(rest); ok && err == nil && n > 0 {
			worlds = append(worlds, n)
		}
	}
	sort.Ints(worlds)
	switch len(worlds) {
	case 0:
		return 0, fmt.Errorf("%w: no shard files of %s (no %s.rank0-of-<N>.safetensors)", ErrShard, path, path)
	case 1:
		return worlds[0], nil
	}
	return 0, fmt.Errorf("%w: %s has shard files of saves by %v ranks; say which", ErrShard, path, worlds)
}
