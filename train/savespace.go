package train

// Saving: is there room, and what a failed save leaves.

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

// freeBytes is diskFree; tests replace it.
var freeBytes = diskFree

// checkpointBytes estimates what one checkpoint of cfg's run on m writes:
// the model file, the optimizer state (one float32 per parameter per
// slot of the optimizer: SGD's momentum, Adam's two moments) and the
// strategy's own copies (Factory.CheckpointCopies: ZeRO's shard
// files hold the parameters once more).
func checkpointBytes(cfg Config, m *models.Model) uint64 {
	slots := 0
	if opt, err := optim.New(cfg.OptimConfig(), 1); err == nil {
		st, _ := opt.State()
		slots = len(st)
	}
	f, _ := lookup(cfg.Strategy)
	copies := 1 + slots + f.CheckpointCopies
	return uint64(m.NumParams()) * 4 * uint64(copies)
}

// checkSaveSpace refuses, before the first step, a -save file system
// without room for one more checkpoint (the last one stays until the new
// one commits): it would fail at the first save, after training up to it.
func checkSaveSpace(cfg Config, m *models.Model) error {
	dir := filepath.Dir(cfg.Save)
	free, err := freeBytes(dir)
	if err != nil {
		return nil // unknown: the saves will tell
	}
	need := checkpointBytes(cfg, m)
	if free < need {
		return fmt.Errorf("-save %s: %s free on the file system of %s, and a checkpoint of this run (model %s, %d parameters, with its optimizer state) takes about %s: the first save would fail after training up to it. Free some space there, or -save elsewhere",
			cfg.Save, mib(free), dir, m.Name, m.NumParams(), mib(need))
	}
	return nil
}

func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// saveFailed adds to the error of a failed save at path what became of
// the checkpoint there (a failed save never touches it) and, when the
// file system was full, what to do.
func saveFailed(err error, path string) error {
	note := "there is no earlier checkpoint there"
	if meta, merr := readMeta(path); merr == nil {
		note = "the checkpoint of step " + meta["step"] + " there stays as it was"
		if meta["step"] == "" {
			note = "the checkpoint there stays as it was"
		}
	}
	if errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), syscall.ENOSPC.Error()) {
		note += fmt.Sprintf("; the file system of %s is full: free some space there (or -save elsewhere) and go on with -resume auto", filepath.Dir(path))
	}
	return fmt.Errorf("%w (%s)", err, note)
}
