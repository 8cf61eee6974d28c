package train

// Sharded checkpoints (ZeRO; checkpoint.go has the overview,
// checkpoint_files.go how a save commits).
//
// SaveZero: every rank writes its shard file
// zero.ShardPath(<path>.<id>, r, N) (see package zero for its layout),
// id being the save's id; then rank 0 writes <path>: the whole model with
// PyTorch's names and layouts, like DDP's, whose metadata (format
// zero.ShardFormat, world_size, save_id, file_id) points at the shard
// files. <path> is written last, atomically, once every rank has written
// its shard, so it commits the save: a crash in between leaves <path>
// naming the previous save's shard files, untouched, and the new ones are
// removed by the next save.
//
// ConsolidateZero rebuilds the single PyTorch file from the shard files
// alone.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"

	"github.com/gdist/gdist/checkpoint"
	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/flat"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/zero"
)

// SaveZero saves a ZeRO run's checkpoint at path: every rank writes its
// shard file, then rank 0 writes the model to path (loadable by PyTorch's
// load_state_dict, as Save's), whose metadata names the save and the
// world size. meta is added to every file's metadata. m is the model e
// trains; every rank holds all its parameters (stages 1 and 2).
//
// It is a collective: every rank calls it with the same path, and every
// rank returns an error if any rank failed (naming that rank), so no rank
// goes on alone. A failed or interrupted save leaves path and the files
// it names as they were (the previous checkpoint). After a successful
// save the previous save's files at path (shards, or the optimizer state
// of an earlier full checkpoint) are removed.
func SaveZero(ctx context.Context, c comm.Comm, path string, m *models.Model, e *zero.Engine, pos Position, meta map[string]string) error {
	phases, err := SnapshotZero(ctx, c, path, m, e, pos, meta, nil)
	if err != nil {
		return err
	}
	return runPhases(ctx, c, phases, path)
}

// runPhases runs a save's phases one after the other, every rank's part
// of one before any of the next: a collective.
func runPhases(ctx context.Context, c comm.Comm, phases []func() error, path string) error {
	for i, ph := range phases {
		var err error
		if ph != nil {
			err = ph()
		}
		what := path
		if i < len(phases)-1 {
			what = "its part of " + path
		}
		if err := agree(ctx, c, err, what); err != nil {
			return err
		}
	}
	return nil
}

// SnapshotZero is SaveZero in parts: it copies (a collective) what the
// save writes and returns this rank's part of each phase of the writing:
// the shard files, then rank 0's model file, which commits the save. A
// phase starts once every rank finished the one before (runPhases, or the
// asynchronous saver, which runs them while training goes on).
func SnapshotZero(ctx context.Context, c comm.Comm, path string, m *models.Model, e *zero.Engine, pos Position, meta map[string]string, bufs *SnapshotBuffers) ([]func() error, error) {
	var id string
	if c.Rank() == 0 {
		// Before any rank writes: the broadcast holds them back (and no
		// earlier save is still writing: the saver finishes one first).
		removeStale(path, "", true)
		id = newSaveID(pos.Step)
	}
	if err := comm.BroadcastObject(ctx, c, &id, 0); err != nil {
		return nil, fmt.Errorf("train: saving %s: %w", path, err)
	}
	md := map[string]string{}
	for k, v := range meta {
		md[k] = v
	}
	md["save_id"] = id
	md["epoch"] = strconv.Itoa(pos.Epoch)
	md["batch"] = strconv.Itoa(pos.Batch)
	md["step"] = strconv.FormatInt(pos.Step, 10)
	md["model"] = m.Name
	var extra []checkpoint.Tensor
	if c.Rank() == 0 {
		for _, b := range m.BNs {
			p := "buffers." + b.Prefix
			extra = append(extra,
				checkpoint.F32(p+".running_mean", []int{b.C}, b.RunningMean),
				checkpoint.F32(p+".running_var", []int{b.C}, b.RunningVar),
				checkpoint.I64(p+".num_batches_tracked", []int{}, []int64{b.NumBatches}))
		}
	}
	shardBufs := bufs.hold()
	writeShard, err := e.SnapshotShard(ctx, path+"."+id, md, extra, shardBufs.get)
	if err := agree(ctx, c, err, "its shard of "+path); err != nil {
		return nil, err
	}
	rank := c.Rank()
	shard := func() error {
		defer shardBufs.release()
		if err := saveHook(rank, "shard"); err != nil {
			return err
		}
		return writeShard()
	}
	// Rank 0 writes the whole model: with stage 3 every rank takes part in
	// gathering it (tensor by tensor), and only rank 0 keeps it.
	full := m
	if m.Store != nil {
		params, gerr := e.FullParams(ctx)
		if gerr != nil {
			return nil, fmt.Errorf("train: saving %s: %w", path, gerr)
		}
		cp := *m
		cp.Flat = &flat.Params{Value: params, Spans: m.Flat.Spans}
		full = &cp
	}
	if rank != 0 {
		return []func() error{shard, nil}, nil
	}
	md["format"] = zero.ShardFormat
	md["model"] = m.Name
	md["input_normalization"] = InputNormalization
	md["num_params"] = strconv.Itoa(m.NumParams())
	md["world_size"] = strconv.Itoa(c.Size())
	md["shards"] = fmt.Sprintf("%s.%s.rank<r>-of-%d.safetensors", filepath.Base(path), id, c.Size())
	md[fileIDKey] = id
	held := bufs.hold()
	model := modelTensors(full, held) // a copy
	commit := func() error {
		defer held.release()
		if w := tensorsNonFinite(model); w != "" {
			return fmt.Errorf("%w: not saving step %d to %s: %s", ErrDiverged, pos.Step, path, w)
		}
		if err := saveHook(0, "commit"); err != nil {
			return err
		}
		if err := checkpoint.Write(path, model, md); err != nil {
			return fmt.Errorf("train: saving model: %w", err)
		}
		removeStale(path, id, false)
		return nil
	}
	return []func() error{shard, commit}, nil
}

// agree tells every rank whether every rank's err is nil. A rank that
// failed returns its own error; the others an error naming the first rank
// that failed and its error.
func agree(ctx context.Context, c comm.Comm, err error, what string) error {
	aerr := comm.Agree(ctx, c, err)
	var re *comm.RankError
	switch {
	case err != nil:
		return err
	case errors.As(aerr, &re):
		return fmt.Errorf("train: rank %d failed to save %s: %s", re.Rank, what, re.Msg)
	case aerr != nil:
		return fmt.Errorf("train: saving: %w", aerr)
	}
	return nil
}

// loadZero is LoadCheckpoint for the sharded checkpoint at path, whose
// model file's metadata is meta: it reads every shard file (see package
// zero).
func loadZero(path string, meta map[string]string, m *models.Model, opt optim.Optimizer) (Position, map[string]string, error) {
	var pos Position
	if meta["model"] != m.Name {
		return pos, nil, fmt.Errorf("%w: %s holds a %q model, not %q", ErrCheckpoint, path, meta["model"], m.Name)
	}
	world, err := strconv.Atoi(meta["world_size"])
	if err != nil || world < 1 {
		return pos, nil, fmt.Errorf("%w: %s: bad world_size %q", ErrCheckpoint, path, meta["world_size"])
	}
	base := path // saved before file ids
	if id := meta[fileIDKey]; id != "" {
		base = dataBase(path, id)
	}
	sh, err := zero.ReadShards(base, world, meta["save_id"])
	if err != nil {
		return pos, nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if sh.Model != m.Name || sh.NumParams != m.NumParams() {
		return pos, nil, fmt.Errorf("%w: the shards of %s hold a %q model with %d parameters, not %q with %d",
			ErrCheckpoint, path, sh.Model, sh.NumParams, m.Name, m.NumParams())
	}
	if sh.Optimizer != opt.Name() {
		return pos, nil, fmt.Errorf("%w: %s was saved with optimizer %q, this run uses %q", ErrCheckpoint, path, sh.Optimizer, opt.Name())
	}
	st, _ := opt.State()
	for k := range st {
		if _, ok := sh.OptState[k]; !ok {
			return pos, nil, fmt.Errorf("%w: the shards of %s lack optimizer state %q", ErrCheckpoint, path, k)
		}
	}
	ints := map[string]*int{"epoch": &pos.Epoch, "batch": &pos.Batch}
	for k, p := range ints {
		v, err := strconv.Atoi(sh.Meta[k])
		if err != nil || v < 0 {
			return pos, nil, fmt.Errorf("%w: %s: bad %s %q", ErrCheckpoint, zero.ShardPath(base, 0, world), k, sh.Meta[k])
		}
		*p = v
	}
	if pos.Step, err = strconv.ParseInt(sh.Meta["step"], 10, 64); err != nil || pos.Step < 0 {
		return pos, nil, fmt.Errorf("%w: %s: bad step %q", ErrCheckpoint, zero.ShardPath(base, 0, world), sh.Meta["step"])
	}
	if err := setBuffers(m, sh.Buffers, zero.ShardPath(base, 0, world)); err != nil {
		return pos, nil, err
	}
	copy(m.Flat.Value, sh.Params)
	for k, dst := range st {
		copy(dst, sh.OptState[k])
	}
	opt.SetStep(sh.OptStep)
	return pos, meta, nil
}

// setBuffers sets m's batch-norm buffers from bufs (PyTorch names); file
// is named in errors.
func setBuffers(m *models.Model, bufs map[string]checkpoint.Tensor, file string) error {
	n := 0
	for _, b := range m.BNs {
		for _, x := range []struct {
			name string
			dst  []float32
		}{{"running_mean", b.RunningMean}, {"running_var", b.RunningVar}} {
			key := b.Prefix + "." + x.name
			t, ok := bufs[key]
			if !ok || !sameShape(t.Shape, []int{b.C}) {
				return fmt.Errorf("%w: %s: missing or mis-shaped batch-norm buffer %q", ErrCheckpoint, file, key)
			}
			v, err := t.Float32s()
			if err != nil {
				return fmt.Errorf("%w: %s: %q: %v", ErrCheckpoint, file, key, err)
			}
			copy(x.dst, v)
			n++
		}
		key := b.Prefix + ".num_batches_tracked"
		if t, ok := bufs[key]; ok {
			v, err := t.Int64s()
			if err != nil || len(v) != 1 {
				return fmt.Errorf("%w: %s: bad %q", ErrCheckpoint, file, key)
			}
			b.NumBatches = v[0]
			n++
		}
	}
	if n != len(bufs) {
		return fmt.Errorf("%w: %s has batch-norm buffers model %s does not", ErrCheckpoint, file, m.Name)
	}
	return nil
}

// ConsolidateZero writes to out one safetensors file holding the model of
// the sharded (ZeRO) checkpoint at path, with PyTorch's names and layouts:
// what Save writes for DDP, loadable by load_state_dict or
// LoadModelTensors. It is built from the shard files alone (parameters and
// batch-norm buffers; no optimizer state), so it also works where path
// itself is gone (the shard files are then found on disk: those of the
// newest complete save at path). It needs no Comm: run it offline,
// anywhere the files are.
func ConsolidateZero(path, out string) error {
	if filepath.Clean(out) == filepath.Clean(path) {
		return fmt.Errorf("train: consolidate %s: the output must be another file", path)
	}
	world, id, base := 0, "", path
	_, meta, err := checkpoint.Read(path)
	var sh *zero.Shards
	switch {
	case err == nil:
		if meta["format"] != zero.ShardFormat {
			return fmt.Errorf("%w: %s is not a sharded checkpoint (format %q): it is one file already", ErrCheckpoint, path, meta["format"])
		}
		if world, err = strconv.Atoi(meta["world_size"]); err != nil || world < 1 {
			return fmt.Errorf("%w: %s: bad world_size %q", ErrCheckpoint, path, meta["world_size"])
		}
		id = meta["save_id"]
		if fid := meta[fileIDKey]; fid != "" {
			base = dataBase(path, fid)
		}
		sh, err = zero.ReadShards(base, world, id)
	case errors.Is(err, fs.ErrNotExist):
		// Go by the shard files alone: the newest save whose files are
		// all there, else the files of a save from before file ids.
		var first error
		for _, fid := range shardSaves(path) {
			if sh, err = zero.ReadShards(path+"."+fid, 0, ""); err == nil {
				base = path + "." + fid
				break
			}
			if first == nil {
				first = err
			}
		}
		if sh == nil {
			if sh, err = zero.ReadShards(path, 0, ""); err != nil && first != nil {
				err = first
			}
		}
	default:
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	m, err := models.New(sh.Model, 0)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCheckpoint, path, err)
	}
	if m.NumParams() != sh.NumParams {
		return fmt.Errorf("%w: the shards of %s hold %d parameters, model %s has %d", ErrCheckpoint, path, sh.NumParams, m.Name, m.NumParams())
	}
	copy(m.Flat.Value, sh.Params)
	if err := setBuffers(m, sh.Buffers, zero.ShardPath(base, 0, sh.World)); err != nil {
		return err
	}
	md := map[string]string{"format": "gdist-v1", "model": m.Name, "consolidated_from": filepath.Base(path),
		"save_id": sh.ID, "world_size": strconv.Itoa(sh.World)}
	for _, k := range []string{"step", "epoch", "batch", "seed", "strategy"} {
		if v, ok := sh.Meta[k]; ok {
			md[k] = v
		}
	}
	if err := checkpoint.Write(out, ModelTensors(m), md); err != nil {
		return fmt.Errorf("train: consolidate %s: %w", path, err)
	}
	return nil
}
