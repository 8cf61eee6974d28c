package train_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/train"
)

// textConfig trains a tiny GPT on a small text file.
func textConfig(t *testing.T) train.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "corpus.txt")
	var b strings.Builder
	for i := 0; i < 200; i++ {
		b.WriteString("func f() { return x + y }\n// a comment about the code\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	g := models.GPT{Layers: 1, Dim: 16, Heads: 2, Context: 16}
	return train.Config{Model: g.Name(), DataDir: path, Epochs: 1, Batch: 4, LR: 1e-2, Optimizer: "adam", Seed: 3, Backend: "inproc"}
}

// TestGPTTwoRanksEqualsOne: a byte-level GPT on a text file, 2 ranks x 4
// windows == 1 rank x 8 (same steps): the same held-out loss within
// 1e-4 (Adam, one epoch); the summary reports tokens/s, bits per byte and the unigram
// baseline, which training beats on this repetitive text.
func TestGPTTwoRanksEqualsOne(t *testing.T) {
	cfg := textConfig(t)
	two, err := runRanks(t, 2, cfg)
	if err != nil {
		t.Fatal(err)
	}
	one := cfg
	one.Batch = 8
	ref, err := runRanks(t, 1, one)
	if err != nil {
		t.Fatal(err)
	}
	a, b := two[0], ref[0]
	if math.Abs(a.EvalLoss-b.EvalLoss) > 1e-4*b.EvalLoss {
		t.Fatalf("2 ranks: eval loss %v; 1 rank: %v", a.EvalLoss, b.EvalLoss)
	}
	if a.TokensPerSec <= 0 || math.Abs(a.EvalBPB-a.EvalLoss/math.Ln2) > 1e-9 || a.UnigramBPB <= 0 {
		t.Fatalf("summary: %v tokens/s, %v bits per byte, unigram %v", a.TokensPerSec, a.EvalBPB, a.UnigramBPB)
	}
	if a.EvalBPB >= a.UnigramBPB {
		t.Errorf("held-out %v bits per byte, not below the unigram baseline %v", a.EvalBPB, a.UnigramBPB)
	}
}
