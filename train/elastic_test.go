package train_test

import (
	"errors"
	"github.com/gdist/gdist/train"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestSaveEveryKeep: -save-every saves mid-epoch and -keep K leaves the
// latest checkpoint and K-1 older ones, each complete: resuming from an
// older one and running to the end equals the uninterrupted run. Nothing
// else stays in the directory.
func TestSaveEveryKeep(t *testing.T) {
	for _, strat := range []string{"ddp", "zero3"} {
		t.Run(strat, func(t *testing.T) {
			dir := t.TempDir()
			cfg := base()
			cfg.Strategy = strat
			cfg.Save = filepath.Join(dir, "ck.safetensors")
			cfg.SaveEvery, cfg.Keep = 7, 3
			sums, err := runRanks(t, 2, cfg)
			must(t, err)
			// 40 steps: saves at 7, 14, 20 (epoch end), 21, 28, 35, 40.
			if sums[0].Saves != 7 {
				t.Errorf("%d saves, want 7", sums[0].Saves)
			}
			kept := train.KeptSaves(cfg.Save)
			if len(kept) != 2 || !strings.HasPrefix(kept[0], "35-") || !strings.HasPrefix(kept[1], "28-") {
				t.Fatalf("kept %v, want the saves of steps 35 and 28", kept)
			}
			// The files: 3 model files and their saves' data files.
			ents, _ := os.ReadDir(dir)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			sort.Strings(names)
			perSave := 1 // DDP: <id>.train
			if strat == "zero3" {
				perSave = 2 // a shard per rank
			}
			if len(names) != 3+3*perSave {
				t.Errorf("files %v", names)
			}

			rest := cfg
			rest.Resume = train.KeptPath(cfg.Save, kept[1])
			rest.Save = filepath.Join(dir, "rest.safetensors")
			rest.SaveEvery, rest.Keep = 0, 0
			got, err := runRanks(t, 2, rest)
			must(t, err)
			if got[0].Steps != 40 || got[0].EvalLoss != sums[0].EvalLoss {
				t.Errorf("resumed from step 28: %d steps, eval loss %v; uninterrupted %v", got[0].Steps, got[0].EvalLoss, sums[0].EvalLoss)
			}
		})
	}
}

// TestSaveInBackground: a save's writing goes on while training
// continues (the model file of the step 5 save is written only once rank
// 0 has run step 8), and the result is what a synchronous save gives.
func TestSaveInBackground(t *testing.T) {
	for _, strat := range []string{"ddp", "zero2"} {
		t.Run(strat, func(t *testing.T) {
			dir := t.TempDir()
			cfg := base()
			cfg.Strategy, cfg.Epochs = strat, 1
			cfg.Save, cfg.SaveEvery = filepath.Join(dir, "bg.safetensors"), 5
			var reached atomic.Int64
			cfg.AfterStep = func(rank int, step int64) {
				if rank == 0 {
					reached.Store(step)
				}
			}
			waited := make(chan int64, 8)
			*train.TestHookSave = func(rank int, stage string) error {
				if rank != 0 || stage != "commit" {
					return nil
				}
				// The first save (step 5) commits only after step 8 ran.
				if len(waited) == 0 {
					deadline := time.Now().Add(20 * time.Second)
					for reached.Load() < 8 && time.Now().Before(deadline) {
						time.Sleep(time.Millisecond)
					}
				}
				waited <- reached.Load()
				return nil
			}
			sums, err := runRanks(t, 2, cfg)
			*train.TestHookSave = nil
			must(t, err)
			if at := <-waited; at < 8 {
				t.Fatalf("the step 5 save committed with training at step %d: it did not go on in the background", at)
			}
			sync := cfg
			sync.Save, sync.SyncSave = filepath.Join(dir, "sync.safetensors"), true
			want, err := runRanks(t, 2, sync)
			must(t, err)
			if sums[0].EvalLoss != want[0].EvalLoss || sums[0].Saves != want[0].Saves {
				t.Errorf("background saves: eval loss %v, %d saves; synchronous: %v, %d", sums[0].EvalLoss, sums[0].Saves, want[0].EvalLoss, want[0].Saves)
			}
			a, _ := readCk(t, cfg.Save)
			b, _ := readCk(t, sync.Save)
			sameTensors(t, "checkpoint", a, b)
		})
	}
}

// TestBackgroundSaveFails: a rank whose background write fails stops
// every rank with an error naming it, and the previous checkpoint stays.
func TestBackgroundSaveFails(t *testing.T) {
	dir := t.TempDir()
	cfg := base()
	cfg.Strategy, cfg.Epochs = "zero1", 1
	cfg.Save, cfg.SaveEvery = filepath.Join(dir, "ck.safetensors"), 5
	var saves atomic.Int32
	*train.TestHookSave = func(rank int, stage string) error {
		if rank == 1 && stage == "shard" && saves.Add(1) == 2 {
			return errors.New("disk full")
		}
		return nil
	}
	_, err := runRanks(t, 2, cfg)
	*train.TestHookSave = nil
	if err == nil || !strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("got %v, want an error naming rank 1 and its cause", err)
	}
	if _, meta := readCk(t, cfg.Save); meta["step"] != "5" {
		t.Errorf("checkpoint at step %s, want 5 (the last complete save)", meta["step"])
	}
}
