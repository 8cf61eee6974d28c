package train

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
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
			kept := keptSaves(cfg.Save)
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
			rest.Resume = keptPath(cfg.Save, kept[1])
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
