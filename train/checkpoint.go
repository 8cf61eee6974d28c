package train

// Checkpoints. Each Strategy saves and loads its own (Strategy.Save,
// Strategy.Load); there are two formats, and every strategy loads both.
//
// Full (Save, Load; DDP and the pipeline): <path> holds the model with
// PyTorch's names and layouts, <path>.<id>.train (TrainStatePath) the
// full optimizer state and the position, both written by rank 0
// (SaveFull); checkpoint_files.go says how the pair switches atomically. The pipeline first
// gathers its stages' parameters and optimizer state from their ranks
// into the whole model and a full-size optimizer, so its checkpoints are
// DDP's.
//
// Sharded (SaveZero; ZeRO, checkpoint_zero.go): every rank writes its
// shard file, then rank 0 the whole model at <path>, as above, naming the
// shard files.
//
// LoadCheckpoint reads either format into a model and a full-size
// optimizer, so a checkpoint saved by N ranks with any strategy resumes on
// M ranks with any strategy: DDP keeps the whole optimizer state, a ZeRO
// engine takes its new shard of it, a pipeline stage its range.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/gdist/gdist/checkpoint"
	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/data"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/zero"
)

// ErrCheckpoint wraps every problem with a checkpoint to resume from.
var ErrCheckpoint = errors.New("train: bad checkpoint")

// Position is where training stands: the next batch to run.
type Position struct {
	Epoch int   // epoch of the next batch
	Batch int   // index of the next batch in that epoch
	Step  int64 // optimizer steps taken so far
}

// ModelTensors returns the model's parameters and batch-norm buffers as
// safetensors tensors with PyTorch's names and layouts (Linear weights
// transposed to [out, in]).
func ModelTensors(m *models.Model) []checkpoint.Tensor {
	return modelTensors(m, (*SnapshotBuffers)(nil).hold())
}

// modelTensors is ModelTensors with the parameters copied into buffers
// from bufs.
func modelTensors(m *models.Model, bufs *heldBufs) []checkpoint.Tensor {
	var out []checkpoint.Tensor
	for _, p := range m.Params {
		dst := bufs.get(p.Size)
		p.ToTorchInto(dst, m.Flat.Value[p.Offset:p.Offset+p.Size])
		out = append(out, checkpoint.F32View(p.Name, p.Torch, dst))
	}
	for _, b := range m.BNs {
		out = append(out,
			checkpoint.F32(b.Prefix+".running_mean", []int{b.C}, b.RunningMean),
			checkpoint.F32(b.Prefix+".running_var", []int{b.C}, b.RunningVar),
			checkpoint.I64(b.Prefix+".num_batches_tracked", []int{}, []int64{b.NumBatches}))
	}
	return out
}

// LoadModelTensors sets m's parameters and buffers from tensors named and
// laid out as ModelTensors writes them. Missing, extra or mis-shaped tensors
// are errors naming the tensor.
func LoadModelTensors(m *models.Model, ts map[string]checkpoint.Tensor, file string) error {
	want := map[string]bool{}
	for _, p := range m.Params {
		want[p.Name] = true
		t, ok := ts[p.Name]
		if !ok {
			return fmt.Errorf("%w: %s has no tensor %q: it is not a %s checkpoint", ErrCheckpoint, file, p.Name, m.Name)
		}
		if !sameShape(t.Shape, p.Torch) {
			return fmt.Errorf("%w: %s: tensor %q has shape %v, model %s needs %v", ErrCheckpoint, file, p.Name, t.Shape, m.Name, p.Torch)
		}
		v, err := t.Float32s()
		if err != nil {
			return fmt.Errorf("%w: %s: tensor %q: %v", ErrCheckpoint, file, p.Name, err)
		}
		copy(m.Flat.Value[p.Offset:p.Offset+p.Size], p.FromTorch(v))
	}
	for _, b := range m.BNs {
		for _, name := range []string{"running_mean", "running_var"} {
			key := b.Prefix + "." + name
			want[key] = true
			t, ok := ts[key]
			if !ok || !sameShape(t.Shape, []int{b.C}) {
				return fmt.Errorf("%w: %s: missing or mis-shaped batch-norm buffer %q", ErrCheckpoint, file, key)
			}
			v, err := t.Float32s()
			if err != nil {
				return fmt.Errorf("%w: %s: %q: %v", ErrCheckpoint, file, key, err)
			}
			if name == "running_mean" {
				copy(b.RunningMean, v)
			} else {
				copy(b.RunningVar, v)
			}
		}
		key := b.Prefix + ".num_batches_tracked"
		want[key] = true
		if t, ok := ts[key]; ok {
			v, err := t.Int64s()
			if err != nil || len(v) != 1 {
				return fmt.Errorf("%w: %s: bad %q", ErrCheckpoint, file, key)
			}
			b.NumBatches = v[0]
		}
	}
	var extra []string
	for k := range ts {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return fmt.Errorf("%w: %s has tensors model %s does not: %v", ErrCheckpoint, file, m.Name, extra)
	}
	return nil
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TrainStatePath is where the optimizer state and position of the full
// checkpoint at path are: <path>.<id>.train, id being the save's file id
// in path's metadata (fileIDKey), or <path>.train for a checkpoint saved
// before file ids (and when path cannot be read). It reads path's header.
func TrainStatePath(path string) string {
	if meta, err := readMeta(path); err == nil && meta[fileIDKey] != "" {
		return trainFile(path, meta[fileIDKey])
	}
	return path + ".train"
}

// ShardPath is where rank's shard file of the sharded checkpoint at path,
// saved by world ranks, is: zero.ShardPath of <path>.<id> (the save's
// file id), or of path itself for a checkpoint saved before file ids. It
// reads path's header.
func ShardPath(path string, rank, world int) string {
	return zero.ShardPath(shardBase(path), rank, world)
}

// InputNormalization says, in every checkpoint's metadata, how inputs
// were prepared in training: pixels scaled to [0, 1], then normalised with
// the Fashion-MNIST training set's mean and standard deviation.
var InputNormalization = fmt.Sprintf("x = (pixel/255 - %.4f) / %.4f", data.FashionMNISTMean, data.FashionMNISTStd)

// Save writes the model to path (loadable by PyTorch's load_state_dict)
// and the optimizer state and position to TrainStatePath(path). The two
// switch together: the optimizer state goes to a new file named by the
// save's id, <path>.<id>.train, and then the model file, written
// atomically over path, commits the save by naming that id (metadata
// file_id). A crash at any point leaves path and the files it names whole:
// the previous checkpoint, or the new one. After the commit the previous
// save's files are removed, and before writing, temporary files an earlier
// crashed save left are.
func Save(path string, m *models.Model, opt optim.Optimizer, pos Position, meta map[string]string) error {
	return SnapshotFull(path, m, opt, pos, meta, nil)()
}

// SnapshotFull is Save in two parts: it copies the model and the
// optimizer state now (into buffers from bufs, reused from one save to
// the next; nil: fresh ones) and returns the function that writes the
// copy (it may run while training goes on: an asynchronous save).
func SnapshotFull(path string, m *models.Model, opt optim.Optimizer, pos Position, meta map[string]string, bufs *SnapshotBuffers) (write func() error) {
	id := newSaveID(pos.Step)
	common := map[string]string{
		"format":  "gdist-v1",
		"model":   m.Name,
		"step":    strconv.FormatInt(pos.Step, 10),
		"save_id": id,
		// What a PyTorch user must feed the loaded model.
		"input_normalization": InputNormalization,
	}
	for k, v := range meta {
		common[k] = v
	}
	st, t := opt.State()
	trainMeta := map[string]string{
		"optimizer":  opt.Name(),
		"opt_step":   strconv.FormatInt(t, 10),
		"epoch":      strconv.Itoa(pos.Epoch),
		"batch":      strconv.Itoa(pos.Batch),
		"num_params": strconv.Itoa(m.NumParams()),
	}
	for k, v := range common {
		trainMeta[k] = v
	}
	// ts and model are the snapshot, in buffers from bufs that the write
	// gives back.
	var ts []checkpoint.Tensor
	names := make([]string, 0, len(st))
	for k := range st {
		names = append(names, k)
	}
	sort.Strings(names)
	held := bufs.hold()
	for _, k := range names {
		dst := held.get(len(st[k]))
		copy(dst, st[k])
		ts = append(ts, checkpoint.F32View("optimizer."+k, []int{len(st[k])}, dst))
	}
	model := modelTensors(m, held)
	return func() error {
		defer held.release()
		if w := tensorsNonFinite(model); w != "" {
			return fmt.Errorf("%w: not saving step %d to %s: %s", ErrDiverged, pos.Step, path, w)
		}
		if w := tensorsNonFinite(ts); w != "" {
			return fmt.Errorf("%w: not saving step %d to %s: %s", ErrDiverged, pos.Step, path, w)
		}
		removeStale(path, "", true)
		tpath := trainFile(path, id)
		if err := checkpoint.Write(tpath, ts, trainMeta); err != nil {
			return fmt.Errorf("train: saving optimizer state: %w", err)
		}
		if err := saveHook(0, "commit"); err != nil {
			return err
		}
		common[fileIDKey] = id
		common["train_state"] = filepath.Base(tpath)
		if err := checkpoint.Write(path, model, common); err != nil {
			os.Remove(tpath)
			return fmt.Errorf("train: saving model: %w", err)
		}
		removeStale(path, id, false)
		return nil
	}
}

// Load restores what Save wrote into m and opt and returns the position and
// the model file's metadata.
func Load(path string, m *models.Model, opt optim.Optimizer) (Position, map[string]string, error) {
	var pos Position
	if _, err := os.Stat(path); err != nil {
		return pos, nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	ts, meta, err := checkpoint.Read(path)
	if err != nil {
		return pos, nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	if meta["model"] != "" && meta["model"] != m.Name {
		return pos, nil, fmt.Errorf("%w: %s holds a %q model, not %q", ErrCheckpoint, path, meta["model"], m.Name)
	}
	if err := LoadModelTensors(m, ts, path); err != nil {
		return pos, nil, err
	}
	tpath := path + ".train" // saved before file ids
	if id := meta[fileIDKey]; id != "" {
		tpath = trainFile(path, id)
	}
	ots, tmeta, err := checkpoint.Read(tpath)
	if err != nil {
		return pos, nil, fmt.Errorf("%w: optimizer state: %v", ErrCheckpoint, err)
	}
	if tmeta["step"] != meta["step"] || tmeta["model"] != meta["model"] || tmeta["save_id"] != meta["save_id"] {
		return pos, nil, fmt.Errorf("%w: %s (step %s) and %s (step %s) are from different saves", ErrCheckpoint, path, meta["step"], tpath, tmeta["step"])
	}
	if tmeta["optimizer"] != opt.Name() {
		return pos, nil, fmt.Errorf("%w: %s was saved with optimizer %q, this run uses %q", ErrCheckpoint, tpath, tmeta["optimizer"], opt.Name())
	}
	st, _ := opt.State()
	for k, dst := range st {
		t, ok := ots["optimizer."+k]
		if !ok {
			return pos, nil, fmt.Errorf("%w: %s lacks optimizer state %q", ErrCheckpoint, tpath, k)
		}
		v, err := t.Float32s()
		if err != nil || len(v) != len(dst) {
			return pos, nil, fmt.Errorf("%w: %s: optimizer state %q has %d values, want %d", ErrCheckpoint, tpath, k, len(v), len(dst))
		}
		copy(dst, v)
	}
	ints := map[string]*int{"epoch": &pos.Epoch, "batch": &pos.Batch}
	for k, p := range ints {
		v, err := strconv.Atoi(tmeta[k])
		if err != nil || v < 0 {
			return pos, nil, fmt.Errorf("%w: %s: bad %s %q", ErrCheckpoint, tpath, k, tmeta[k])
		}
		*p = v
	}
	if pos.Step, err = strconv.ParseInt(tmeta["step"], 10, 64); err != nil {
		return pos, nil, fmt.Errorf("%w: %s: bad step %q", ErrCheckpoint, tpath, tmeta["step"])
	}
	ot, err := strconv.ParseInt(tmeta["opt_step"], 10, 64)
	if err != nil {
		return pos, nil, fmt.Errorf("%w: %s: bad opt_step", ErrCheckpoint, tpath)
	}
	opt.SetStep(ot)
	return pos, meta, nil
}

// LoadCheckpoint restores a checkpoint written by Save or by SaveZero, by
// any number of ranks, into m and opt (a full-size optimizer: a ZeRO
// engine takes its shard with LoadOptimizerState) and returns the position
// and path's metadata. For a sharded checkpoint it reads every shard file
// (see package zero). Errors wrap ErrCheckpoint.
func LoadCheckpoint(path string, m *models.Model, opt optim.Optimizer) (Position, map[string]string, error) {
	_, meta, err := checkpoint.Read(path)
	if err != nil || meta["format"] != zero.ShardFormat {
		return Load(path, m, opt) // a missing or bad file is reported there
	}
	return loadZero(path, meta, m, opt)
}

// SaveFull is Save as a collective: rank 0 writes the files, and every
// rank learns whether that worked (and why not), so that no rank goes on
// alone.
func SaveFull(ctx context.Context, c comm.Comm, path string, m *models.Model, opt optim.Optimizer, pos Position, meta map[string]string) error {
	var err error
	if c.Rank() == 0 {
		err = Save(path, m, opt, pos, meta)
	}
	return agree(ctx, c, err, "the checkpoint to "+path)
}

// WithMeta returns a copy of meta with the key-value pairs kv added.
func WithMeta(meta map[string]string, kv ...string) map[string]string {
	out := make(map[string]string, len(meta)+len(kv)/2)
	for k, v := range meta {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// testHookSave, when a test sets it, runs on each rank at the named
// stages of a save: "shard" before a rank writes its ZeRO shard file,
// "commit" on rank 0 before the model file that commits the save is
// written (after the optimizer state or the shards). An error fails the
// save there, as a crash would.
var testHookSave func(rank int, stage string) error

func saveHook(rank int, stage string) error {
	if testHookSave == nil {
		return nil
	}
	return testHookSave(rank, stage)
}

// OptimizerBytes is the size of opt's state.
func OptimizerBytes(opt optim.Optimizer) int64 {
	st, _ := opt.State()
	var n int64
	for _, v := range st {
		n += int64(len(v)) * 4
	}
	return n
}
