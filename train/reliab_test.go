package train_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gdist/gdist/checkpoint"
	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/train"
	"github.com/gdist/gdist/zero"
)

var errCrash = errors.New("simulated crash")

// TestCrashDuringSaveKeepsLastCheckpoint: a save that dies after writing
// the optimizer state (full checkpoints) or the shard files (ZeRO) but
// before the model file leaves the previous checkpoint resumable, and the
// next save removes the temporary files the crash left behind.
func TestCrashDuringSaveKeepsLastCheckpoint(t *testing.T) {
	for _, strat := range []string{"ddp", "zero2", "pipeline"} {
		t.Run(strat, func(t *testing.T) {
			dir := t.TempDir()
			cfg := base()
			cfg.Strategy, cfg.MaxSteps = strat, 5
			cfg.Save = filepath.Join(dir, "run.safetensors")
			if _, err := runRanks(t, 2, cfg); err != nil {
				t.Fatal(err)
			}
			// The next run resumes and dies in its save, between the writes,
			// leaving a temporary file as a killed write would.
			next := cfg
			next.Resume = cfg.Save
			leftover := filepath.Join(dir, ".run.safetensors.tmp123456")
			*train.TestHookSave = func(rank int, stage string) error {
				if stage != "commit" {
					return nil
				}
				if err := os.WriteFile(leftover, make([]byte, 1<<16), 0o644); err != nil {
					t.Error(err)
				}
				return errCrash
			}
			_, err := runRanks(t, 2, next)
			*train.TestHookSave = nil
			if err == nil {
				t.Fatalf("the crashing save: %v", err)
			}
			// The previous checkpoint (step 5) still resumes.
			check := cfg
			check.Resume, check.Save, check.MaxSteps = cfg.Save, "", 1
			sums, err := runRanks(t, 2, check)
			if err != nil {
				t.Fatalf("resuming after a crash during a save: %v", err)
			}
			if sums[0].Steps != 6 {
				t.Errorf("resumed at step %d, want 5 (the last complete save)", sums[0].Steps-1)
			}
			// The next save commits step 10 and cleans up.
			if _, err := runRanks(t, 2, next); err != nil {
				t.Fatal(err)
			}
			if _, meta := readCk(t, cfg.Save); meta["step"] != "10" {
				t.Errorf("step %q after the next save, want 10", meta["step"])
			}
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if strings.Contains(e.Name(), ".tmp") {
					t.Errorf("stale temporary file %s after the next save", e.Name())
				}
			}
			check.MaxSteps = 1
			if sums, err := runRanks(t, 2, check); err != nil || sums[0].Steps != 11 {
				t.Fatalf("resuming the next save: %v", err)
			}
		})
	}
}

// TestLegacyCheckpointResumes: checkpoints saved before file ids
// (<path>.train, <path>.rank<r>-of-<N>.safetensors, no file_id in the
// model file) still resume, and the next save replaces their files.
func TestLegacyCheckpointResumes(t *testing.T) {
	for _, strat := range []string{"ddp", "zero1"} {
		t.Run(strat, func(t *testing.T) {
			dir := t.TempDir()
			cfg := base()
			cfg.Strategy, cfg.MaxSteps = strat, 5
			cfg.Save = filepath.Join(dir, "old.safetensors")
			if _, err := runRanks(t, 2, cfg); err != nil {
				t.Fatal(err)
			}
			// Rename the files to the old layout.
			ts, meta, err := checkpoint.Read(cfg.Save)
			if err != nil {
				t.Fatal(err)
			}
			if strat == "ddp" {
				must(t, os.Rename(train.TrainStatePath(cfg.Save), cfg.Save+".train"))
			} else {
				for r := 0; r < 2; r++ {
					must(t, os.Rename(train.ShardPath(cfg.Save, r, 2), zero.ShardPath(cfg.Save, r, 2)))
				}
			}
			delete(meta, train.FileIDKey)
			list := make([]checkpoint.Tensor, 0, len(ts))
			for _, tt := range ts {
				list = append(list, tt)
			}
			must(t, checkpoint.Write(cfg.Save, list, meta))
			next := cfg
			next.Resume = cfg.Save
			sums, err := runRanks(t, 2, next)
			if err != nil {
				t.Fatalf("resuming an old-layout checkpoint: %v", err)
			}
			if sums[0].Steps != 10 {
				t.Errorf("%d steps, want 10", sums[0].Steps)
			}
			files, _ := filepath.Glob(filepath.Join(dir, "old*"))
			want := 2
			if strat != "ddp" {
				want = 3
			}
			if len(files) != want {
				t.Errorf("files after the next save: %v", files)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestSavePathCheckedFirst: a -save path that cannot be written is an
// ErrConfig naming it before the first step, not an error after an epoch.
func TestSavePathCheckedFirst(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	must(t, os.WriteFile(file, nil, 0o644))
	for _, tc := range []struct{ save, want string }{
		{filepath.Join(dir, "missing", "ck"), filepath.Join(dir, "missing")},
		{filepath.Join(file, "ck"), file},
		{dir, dir},
	} {
		cfg := base()
		cfg.Save = tc.save
		_, err := runRanks(t, 2, cfg)
		if !errors.Is(err, train.ErrConfig) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "-save") {
			t.Errorf("-save %s: %v", tc.save, err)
		}
	}
}

// TestNonFiniteLossStops: a diverging run stops at the first non-finite
// loss with an error naming the step and the rank, and leaves the last
// good checkpoint as it was.
func TestNonFiniteLossStops(t *testing.T) {
	for _, strat := range []string{"ddp", "zero1", "pipeline"} {
		t.Run(strat, func(t *testing.T) {
			dir := t.TempDir()
			cfg := base()
			cfg.Strategy, cfg.MaxSteps = strat, 5
			cfg.Save = filepath.Join(dir, "ck")
			if _, err := runRanks(t, 2, cfg); err != nil {
				t.Fatal(err)
			}
			bad := cfg
			bad.Resume, bad.LR, bad.MaxSteps = cfg.Save, 1e9, 0
			_, err := runRanks(t, 2, bad)
			if err == nil || !strings.Contains(err.Error(), "not finite") || !strings.Contains(err.Error(), "step ") || !strings.Contains(err.Error(), "rank ") {
				t.Fatalf("lr 1e9: %v", err)
			}
			t.Log(err)
			if _, meta := readCk(t, cfg.Save); meta["step"] != "5" {
				t.Errorf("checkpoint at step %s after the diverged run, want 5", meta["step"])
			}
		})
	}
}

// TestResumeAuto: -resume auto starts afresh when -save has no
// checkpoint yet and goes on from it when it has; it needs -save.
func TestResumeAuto(t *testing.T) {
	dir := t.TempDir()
	cfg := base()
	cfg.MaxSteps, cfg.Resume = 5, "auto"
	cfg.Save = filepath.Join(dir, "ck")
	for _, want := range []int64{5, 10} {
		sums, err := runRanks(t, 2, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if sums[0].Steps != want {
			t.Errorf("-resume auto: %d steps, want %d", sums[0].Steps, want)
		}
	}
	cfg.Save = ""
	if err := cfg.Validate(); !errors.Is(err, train.ErrConfig) {
		t.Errorf("-resume auto without -save: %v", err)
	}
}

// TestStopPreempts: a stop request on one rank stops every rank after
// the same step, saved there; the run then resumes from it.
func TestStopPreempts(t *testing.T) {
	for _, strat := range []string{"ddp", "zero2"} {
		t.Run(strat, func(t *testing.T) {
			dir := t.TempDir()
			cfg := base()
			cfg.Strategy = strat
			cfg.Save, cfg.Resume = filepath.Join(dir, "ck"), "auto"
			cs, err := inproc.New(2, comm.Options{})
			must(t, err)
			stop := make(chan struct{})
			close(stop)
			errs := make([]error, 2)
			commtest.RunRanks(context.Background(), cs, 3*time.Minute, func(ctx context.Context, c comm.Comm) error {
				defer c.Close()
				rc := cfg
				if c.Rank() == 1 {
					rc.Stop = stop
				}
				_, errs[c.Rank()] = train.Run(ctx, c, rc)
				return nil
			})
			for r, err := range errs {
				if !errors.Is(err, train.ErrPreempted) {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			if _, meta := readCk(t, cfg.Save); meta["step"] != "1" {
				t.Errorf("saved at step %s, want 1", meta["step"])
			}
			sums, err := runRanks(t, 2, cfg)
			if err != nil || sums[0].Steps != 40 {
				t.Fatalf("resuming: %v", err)
			}
		})
	}
}

// TestDivergedUpdateNotSaved: an update that makes the parameters
// non-finite (as -lr Inf did: a finite loss, then Inf parameters) at a
// step that saves leaves the last checkpoint as it was, and the error
// says training diverged at that step. The repro: -max-steps 19,
// then -save-every 20 -resume auto with a diverging update at step 20.
func TestDivergedUpdateNotSaved(t *testing.T) {
	for _, tc := range []struct {
		strat string
		sync  bool
	}{{"ddp", false}, {"ddp", true}, {"zero2", false}, {"pipeline", false}} {
		t.Run(fmt.Sprintf("%s sync=%v", tc.strat, tc.sync), func(t *testing.T) {
			dir := t.TempDir()
			cfg := base()
			cfg.Strategy, cfg.MaxSteps, cfg.SyncSave = tc.strat, 19, tc.sync
			cfg.Save = filepath.Join(dir, "run.safetensors")
			if _, err := runRanks(t, 2, cfg); err != nil {
				t.Fatal(err)
			}
			before, err := os.ReadFile(cfg.Save)
			must(t, err)
			next := cfg
			next.MaxSteps, next.SaveEvery, next.Resume = 0, 20, "auto"
			*train.TestHookUpdate = func(rank int, step int64, m *models.Model) {
				if rank == 0 && step >= 20 {
					m.Flat.Value[0] = float32(math.Inf(1))
				}
			}
			_, err = runRanks(t, 2, next)
			*train.TestHookUpdate = nil
			if err == nil || !strings.Contains(err.Error(), "diverged") || !strings.Contains(err.Error(), "step 20") {
				t.Fatalf("a diverged update at step 20: %v", err)
			}
			t.Log(err)
			after, err := os.ReadFile(cfg.Save)
			must(t, err)
			if !bytes.Equal(before, after) {
				_, meta := readCk(t, cfg.Save)
				t.Fatalf("the checkpoint changed (now step %s): a diverged state was saved over step 19's", meta["step"])
			}
			if sums, err := runRanks(t, 2, next); err != nil || sums[0].ResumedStep != 19 {
				t.Fatalf("resuming after the divergence: %v", err)
			}
		})
	}
}

// TestLRInfRejected: -lr beyond float32's range (Inf in the optimizer)
// is a bad configuration.
func TestLRInfRejected(t *testing.T) {
	for _, lr := range []float64{1e39, math.MaxFloat32 * 2, math.Inf(1)} {
		cfg := base()
		cfg.LR = lr
		if err := cfg.Validate(); !errors.Is(err, train.ErrConfig) || !strings.Contains(err.Error(), "-lr") {
			t.Errorf("-lr %v: %v", lr, err)
		}
	}
}

// TestSaveRefusesNonFinite: the model file's write itself refuses NaN or
// infinite values (where no rank could check beforehand: ZeRO-3's
// parameters are whole only in what rank 0 gathers to write), leaving
// the previous checkpoint.
func TestSaveRefusesNonFinite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ck")
	m, err := models.New("mlp", 1)
	must(t, err)
	opt, err := optim.New(optim.Config{Name: "sgd", LR: 0.1, Momentum: 0.9}, m.NumParams())
	must(t, err)
	must(t, train.Save(path, m, opt, train.Position{Step: 1}, nil))
	before, err := os.ReadFile(path)
	must(t, err)
	m.Flat.Value[m.NumParams()-1] = float32(math.NaN())
	if err := train.Save(path, m, opt, train.Position{Step: 2}, nil); !errors.Is(err, train.ErrDiverged) {
		t.Fatalf("saving a NaN parameter: %v", err)
	}
	m.Flat.Value[m.NumParams()-1] = 0
	st, _ := opt.State()
	for _, v := range st {
		v[3] = float32(math.Inf(-1))
	}
	if err := train.Save(path, m, opt, train.Position{Step: 3}, nil); !errors.Is(err, train.ErrDiverged) {
		t.Fatalf("saving an infinite optimizer state: %v", err)
	}
	after, err := os.ReadFile(path)
	must(t, err)
	if !bytes.Equal(before, after) {
		t.Fatal("a refused save changed the checkpoint")
	}
}

// TestFirstNonFinite: every position of a block, and none.
func TestFirstNonFinite(t *testing.T) {
	v := make([]float32, 3000)
	if i := train.FirstNonFinite(v); i != -1 {
		t.Fatalf("all zero: %d", i)
	}
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		for _, at := range []int{0, 1, 1023, 1024, 2999} {
			v[at] = bad
			if i := train.FirstNonFinite(v); i != at {
				t.Errorf("%v at %d: found at %d", bad, at, i)
			}
			v[at] = math.MaxFloat32
		}
	}
}

// TestConfigMismatchRefused: ranks whose settings differ (another job's
// rank on the same port, a node started with other flags) are refused
// before the first step, every rank naming the settings and both sides.
func TestConfigMismatchRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*train.Config)
		want string
	}{
		{"seed", func(c *train.Config) { c.Seed = 99 }, "-seed 99"},
		{"lr", func(c *train.Config) { c.LR = 0.1 }, "-lr 0.1"},
		{"batch", func(c *train.Config) { c.Batch = 8 }, "-batch 8"},
		{"data", func(c *train.Config) { c.Limit = 320 }, "-limit 320"},
		{"strategy", func(c *train.Config) { c.Strategy = "zero1" }, "-strategy zero1"},
		{"model", func(c *train.Config) { c.Model = "cnn" }, "-model cnn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, err := inproc.New(3, comm.Options{})
			must(t, err)
			errs := make([]error, 3)
			commtest.RunRanks(context.Background(), cs, time.Minute, func(ctx context.Context, c comm.Comm) error {
				defer c.Close()
				cfg := base()
				if c.Rank() == 2 {
					tc.set(&cfg)
				}
				_, errs[c.Rank()] = train.Run(ctx, c, cfg)
				return nil
			})
			for r, err := range errs {
				if !errors.Is(err, train.ErrConfig) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "rank 2") ||
					!strings.Contains(err.Error(), "rank 0") {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			t.Log(errs[0])
		})
	}
}

// TestSavePathLocked: a second job saving to a -save path a running job
// saves to is refused at its start, naming the path and the other job
// (two jobs on one path removed each other's temporary files: "rename
// .../.run.safetensors.tmpNNN: no such file or directory"), and the first
// job ends as it would alone.
func TestSavePathLocked(t *testing.T) {
	dir := t.TempDir()
	cfg := base()
	cfg.Save = filepath.Join(dir, "run.safetensors")
	cfg.SaveEvery = 2
	first := cfg
	started := make(chan struct{})
	var once sync.Once
	release := make(chan struct{})
	first.AfterStep = func(rank int, step int64) {
		if step == 3 {
			once.Do(func() { close(started) })
			<-release
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := runRanks(t, 2, first)
		done <- err
	}()
	<-started
	_, err := runRanks(t, 2, cfg)
	close(release)
	if err == nil || !strings.Contains(err.Error(), cfg.Save) || !strings.Contains(err.Error(), "another job") ||
		!strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("a second job on the same -save path: %v", err)
	}
	t.Log(err)
	if err := <-done; err != nil {
		t.Fatalf("the first job: %v", err)
	}
	if _, meta := readCk(t, cfg.Save); meta["step"] != "40" {
		t.Errorf("the first job's checkpoint is at step %s, want 40", meta["step"])
	}
	// Once the first job is over, the path is free again.
	cfg.Resume = "auto"
	if _, err := runRanks(t, 2, cfg); err != nil {
		t.Fatalf("a later job on the path: %v", err)
	}
}

// TestDiskFull: issue 25 item 7. A -save file system without room for one
// checkpoint is refused before the first step (not after an epoch of
// training), and a save that fails for want of space says so, says what
// to do, and does not claim an earlier checkpoint stays when there is
// none.
func TestDiskFull(t *testing.T) {
	cfg := base()
	cfg.Save = filepath.Join(t.TempDir(), "run.safetensors")
	steps := 0
	cfg.AfterStep = func(int, int64) { steps++ }
	*train.FreeBytes = func(string) (uint64, error) { return 100 << 10, nil }
	_, err := runRanks(t, 2, cfg)
	*train.FreeBytes = train.DiskFree
	if err == nil || steps != 0 || !strings.Contains(err.Error(), "free") || !strings.Contains(err.Error(), cfg.Save) {
		t.Fatalf("100 KiB free: %v after %d steps; want an error before the first step", err, steps)
	}
	t.Log(err)
	for _, sync := range []bool{false, true} {
		cfg := base()
		cfg.Save, cfg.SyncSave = filepath.Join(t.TempDir(), "run.safetensors"), sync
		*train.TestHookSave = func(rank int, stage string) error {
			return &os.PathError{Op: "write", Path: cfg.Save, Err: syscall.ENOSPC}
		}
		_, err := runRanks(t, 2, cfg)
		*train.TestHookSave = nil
		if err == nil || strings.Contains(err.Error(), "previous checkpoint stays") || !strings.Contains(err.Error(), "no earlier checkpoint") ||
			!strings.Contains(err.Error(), "free some space") {
			t.Errorf("sync %v: a first save failing for want of space: %v", sync, err)
		}
		t.Log(err)
	}
}
