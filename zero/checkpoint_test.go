package zero_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/checkpoint"
	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/zero"
)

// onRanks builds an engine on each of n inproc ranks (mlp, seed 5, Adam)
// and runs fn with it.
func onRanks(t *testing.T, n, stage int, fn func(c comm.Comm, m *models.Model, e *zero.Engine) error) {
	t.Helper()
	cs, err := inproc.New(n, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = commtest.RunRanks(context.Background(), cs, time.Minute, func(ctx context.Context, c comm.Comm) error {
		defer c.Close()
		m, err := models.New("mlp", 5)
		if err != nil {
			return err
		}
		e, err := zero.New(ctx, c, m, zero.Options{Stage: stage, Optim: optim.Config{Name: "adam", LR: 1e-3}})
		if err != nil {
			return err
		}
		return fn(c, m, e)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// stateVal is what the test puts at element i (of the unpadded buffer) of
// optimizer tensor k.
func stateVal(k string, i int) float32 {
	if k == "exp_avg" {
		return float32(i) * 1e-3
	}
	return float32(i%977) + 0.5
}

// TestShardRoundTrip: shards written by 5 ranks (the mlp's P is not a
// multiple of 5: the last shard is padded) join into the full parameters
// and optimizer state, and 3 ranks each take their new shard of it.
func TestShardRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ck")
	var want []float32
	onRanks(t, 5, 2, func(c comm.Comm, m *models.Model, e *zero.Engine) error {
		lo, hi := e.Shard()
		st, _ := e.Optimizer().State()
		for k, v := range st {
			for i := range v {
				if lo+i < m.NumParams() {
					v[i] = stateVal(k, lo+i)
				} else {
					v[i] = float32(math.NaN()) // padding must not be saved
				}
			}
		}
		e.Optimizer().SetStep(7)
		if c.Rank() == 0 {
			want = append([]float32(nil), m.Flat.Value[:m.NumParams()]...)
			if hi-lo != (m.NumParams()+4)/5 || m.NumParams()%5 == 0 {
				return fmt.Errorf("shard [%d, %d) of %d: no padding to test", lo, hi, m.NumParams())
			}
		}
		return e.WriteShard(context.Background(), path, map[string]string{"save_id": "s1", "rank": "bogus", "model": "mlp"}, nil)
	})
	sh, err := zero.ReadShards(path, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if sh.World != 5 || sh.ID != "s1" || sh.Model != "mlp" || sh.Optimizer != "adam" || sh.OptStep != 7 || sh.NumParams != len(want) {
		t.Fatalf("got world %d id %q model %q optimizer %q step %d params %d", sh.World, sh.ID, sh.Model, sh.Optimizer, sh.OptStep, sh.NumParams)
	}
	for i, v := range want {
		if sh.Params[i] != v {
			t.Fatalf("param %d: %v, want %v", i, sh.Params[i], v)
		}
	}
	if len(sh.OptState) != 2 {
		t.Fatalf("optimizer state %d tensors", len(sh.OptState))
	}
	for k, v := range sh.OptState {
		for i, x := range v {
			if x != stateVal(k, i) {
				t.Fatalf("%s[%d] = %v, want %v", k, i, x, stateVal(k, i))
			}
		}
	}
	onRanks(t, 3, 1, func(c comm.Comm, m *models.Model, e *zero.Engine) error {
		if err := e.LoadOptimizerState(sh.OptState, sh.OptStep); err != nil {
			return err
		}
		lo, _ := e.Shard()
		st, step := e.Optimizer().State()
		if step != 7 {
			return fmt.Errorf("step %d", step)
		}
		for k, v := range st {
			for i, x := range v {
				w := float32(0)
				if lo+i < m.NumParams() {
					w = stateVal(k, lo+i)
				}
				if x != w {
					return fmt.Errorf("rank %d: %s[%d] = %v, want %v", c.Rank(), k, lo+i, x, w)
				}
			}
		}
		return nil
	})
}

// TestShardErrors: a missing file, files of two saves, a shard that claims
// another range and a truncated file are reported, naming the file.
func TestShardErrors(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	onRanks(t, 2, 1, func(c comm.Comm, m *models.Model, e *zero.Engine) error {
		if err := e.WriteShard(context.Background(), a, map[string]string{"save_id": "A"}, nil); err != nil {
			return err
		}
		return e.WriteShard(context.Background(), b, map[string]string{"save_id": "B"}, nil)
	})
	if _, err := zero.ReadShards(a, 2, "A"); err != nil {
		t.Fatal(err)
	}
	copyFile := func(src, dst string) {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	check := func(name string, err error, want error, text string) {
		t.Helper()
		if !errors.Is(err, zero.ErrShard) || !errors.Is(err, want) || !strings.Contains(err.Error(), text) {
			t.Errorf("%s: got %v, want %v mentioning %q", name, err, want, text)
		}
	}
	_, err := zero.ReadShards(a, 3, "A")
	check("wrong world", err, fs.ErrNotExist, "a.rank0-of-3.safetensors is missing")
	_, err = zero.ReadShards(a, 2, "B")
	check("wrong id", err, zero.ErrShard, "different saves")

	// b's rank 1 file among a's.
	mixed := filepath.Join(dir, "mixed")
	copyFile(zero.ShardPath(a, 0, 2), zero.ShardPath(mixed, 0, 2))
	copyFile(zero.ShardPath(b, 1, 2), zero.ShardPath(mixed, 1, 2))
	_, err = zero.ReadShards(mixed, 0, "")
	check("mixed saves", err, zero.ErrShard, "different saves")

	// Rank 0's file presented as rank 1's.
	swapped := filepath.Join(dir, "swapped")
	copyFile(zero.ShardPath(a, 0, 2), zero.ShardPath(swapped, 0, 2))
	copyFile(zero.ShardPath(a, 0, 2), zero.ShardPath(swapped, 1, 2))
	_, err = zero.ReadShards(swapped, 2, "")
	check("swapped", err, zero.ErrShard, "swapped.rank1-of-2.safetensors: holds rank 0")

	// A shard whose range does not match its rank.
	ts, meta, err := checkpoint.Read(zero.ShardPath(a, 1, 2))
	if err != nil {
		t.Fatal(err)
	}
	meta["shard_lo"] = "0"
	var list []checkpoint.Tensor
	for _, tt := range ts {
		list = append(list, tt)
	}
	shifted := filepath.Join(dir, "shifted")
	copyFile(zero.ShardPath(a, 0, 2), zero.ShardPath(shifted, 0, 2))
	if err := checkpoint.Write(zero.ShardPath(shifted, 1, 2), list, meta); err != nil {
		t.Fatal(err)
	}
	_, err = zero.ReadShards(shifted, 2, "")
	check("shifted", err, zero.ErrShard, "rank 1 of 2 owns")

	// Truncated.
	f := zero.ShardPath(a, 1, 2)
	st, _ := os.Stat(f)
	if err := os.Truncate(f, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	_, err = zero.ReadShards(a, 2, "A")
	check("truncated", err, checkpoint.ErrCorrupt, "a.rank1-of-2.safetensors")

	// Two saves by different world sizes at one path: say which.
	copyFile(zero.ShardPath(a, 0, 2), a+".rank0-of-3.safetensors")
	_, err = zero.ReadShards(a, 0, "")
	check("ambiguous", err, zero.ErrShard, "[2 3]")
	_, err = zero.ReadShards(filepath.Join(dir, "none"), 0, "")
	check("none", err, zero.ErrShard, "no shard files")

	// LoadOptimizerState wants every tensor, full length.
	onRanks(t, 2, 1, func(c comm.Comm, m *models.Model, e *zero.Engine) error {
		err := e.LoadOptimizerState(map[string][]float32{"exp_avg": make([]float32, m.NumParams())}, 1)
		if !errors.Is(err, zero.ErrShard) || !strings.Contains(err.Error(), "exp_avg_sq") {
			return fmt.Errorf("missing tensor: %v", err)
		}
		err = e.LoadOptimizerState(map[string][]float32{"exp_avg": make([]float32, 3), "exp_avg_sq": make([]float32, 3)}, 1)
		if !errors.Is(err, zero.ErrShard) {
			return fmt.Errorf("short tensor: %v", err)
		}
		return nil
	})
}
