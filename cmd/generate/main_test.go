package main

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/train"
	_ "github.com/gdist/gdist/train/dp" // -strategy ddp, zero3
)

// trainSave trains cfg on n inproc ranks and saves to cfg.Save.
func trainSave(t *testing.T, n int, cfg train.Config) {
	t.Helper()
	cs, err := inproc.New(n, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = commtest.RunRanks(context.Background(), cs, 2*time.Minute, func(ctx context.Context, c comm.Comm) error {
		defer c.Close()
		_, err := train.Run(ctx, c, cfg)
		return err
	})
	if err != nil {
		t.Fatalf("training %s with %s: %v", cfg.Model, cfg.Strategy, err)
	}
}

func generate(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(args, &out, &errOut)
	return out.String(), err
}

// TestGenerateFromCheckpoints: a tiny GPT trained a few steps under DDP
// and under ZeRO-3 (which saves a sharded checkpoint) ends with the same
// weights; generate reads either (model and size from the metadata) and
// prints the prompt and n bytes, the same text from both for the same
// seed, another for another seed; a non-gpt checkpoint and a missing
// -ckpt are clear errors.
func TestGenerateFromCheckpoints(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus.txt")
	if err := os.WriteFile(corpus, bytes.Repeat([]byte("func main() { fmt.Println(\"hello\") }\n"), 300), 0o644); err != nil {
		t.Fatal(err)
	}
	g := models.GPT{Layers: 1, Dim: 16, Heads: 2, Context: 16}
	cfg := train.Config{Model: g.Name(), DataDir: corpus, Epochs: 1, Steps: 8, Batch: 4, LR: 1e-2, Optimizer: "adam", Seed: 3, Backend: "inproc"}
	paths := map[string]string{}
	for _, st := range []string{"ddp", "zero3"} {
		c := cfg
		c.Strategy, c.Save = st, filepath.Join(dir, st+".safetensors")
		trainSave(t, 2, c)
		paths[st] = c.Save
	}
	a, _, err := train.LoadModel(paths["ddp"], "")
	if err != nil {
		t.Fatal(err)
	}
	b, meta, err := train.LoadModel(paths["zero3"], g.Name())
	if err != nil {
		t.Fatal(err)
	}
	if meta["model"] != g.Name() || a.Name != g.Name() {
		t.Fatalf("model %q, metadata %v", a.Name, meta)
	}
	for i, v := range a.Flat.Value {
		if w := b.Flat.Value[i]; math.Abs(float64(v-w)) > 1e-6*(1+math.Abs(float64(v))) {
			t.Fatalf("parameter %d: ddp %v, zero3 %v", i, v, w)
		}
	}
	var maxd float64
	for i, v := range a.Flat.Value {
		maxd = math.Max(maxd, math.Abs(float64(v-b.Flat.Value[i])))
	}
	t.Logf("largest parameter difference between ddp and zero3: %g", maxd)
	const prompt = "func main() {"
	args := []string{"-prompt", prompt, "-n", "60", "-temperature", "0.8", "-seed", "1"}
	outDDP, err := generate(t, append([]string{"-ckpt", paths["ddp"]}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	outZero, err := generate(t, append([]string{"-ckpt", paths["zero3"]}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	if outDDP != outZero {
		t.Fatalf("same weights and seed, different text:\nddp:   %q\nzero3: %q", outDDP, outZero)
	}
	if !strings.HasPrefix(outDDP, prompt) || len(outDDP) != len(prompt)+60+1 {
		t.Fatalf("output %q: want the prompt and 60 bytes", outDDP)
	}
	other, err := generate(t, "-ckpt", paths["ddp"], "-prompt", prompt, "-n", "60", "-temperature", "0.8", "-seed", "2")
	if err != nil || other == outDDP {
		t.Fatalf("seed 2 (%v): the same text as seed 1: %q", err, other)
	}
	t.Logf("%q", outDDP)

	// Not a language model.
	mlp := train.Config{Model: "mlp", DataDir: "synthetic", Epochs: 1, Steps: 2, Batch: 16, LR: 0.05, Optimizer: "sgd", Seed: 1, Backend: "inproc",
		Save: filepath.Join(dir, "mlp.safetensors")}
	trainSave(t, 1, mlp)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-ckpt", mlp.Save}, "holds a mlp model, not a gpt language model"},
		{[]string{"-prompt", "x"}, "-ckpt: name the checkpoint"},
		{[]string{"-ckpt", filepath.Join(dir, "none.safetensors")}, "none.safetensors"},
		{[]string{"-ckpt", paths["ddp"], "-model", "gpt"}, `holds a "` + g.Name() + `" model, not "gpt"`},
		{[]string{"-ckpt", paths["ddp"], "-temperature", "-1"}, "-temperature -1"},
	} {
		_, err := generate(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one mentioning %q", tc.args, err, tc.want)
		}
	}
	if _, err := generate(t, "-ckpt", paths["ddp"], "-bogus"); !errors.Is(err, errUsage) {
		t.Errorf("unknown flag: %v", err)
	}
}
