package devmodel_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

// TestProfile: with GDIST_DEVICE_PROFILE set, a gpt's training steps are
// timed by kind (every layer kind of the zoo's gpt, attention's
// projections apart from its core, the loss and the optimizer, each time
// >= 0, together within the step's time), the
// warm-up steps and evaluations left out, the profile written as JSON at
// Close; and the profile changes nothing of the training: every loss bit
// for bit that of the same model trained unprofiled.
func TestProfile(t *testing.T) {
	cudafake.RequireCUDA(t)
	const batch, steps = 2, 5
	train := func(profile string) ([]float32, *devmodel.Profile) {
		t.Setenv(devmodel.EnvProfile, profile)
		m, err := models.New("gpt-L1-D16-H2-T8", 3)
		if err != nil {
			t.Fatal(err)
		}
		d, err := devmodel.Place(m, devmodel.Config{Device: dev, Batch: batch, ClipGrad: 1,
			Optim: optim.Config{Name: "adamw", LR: 1e-3, WeightDecay: 0.01}})
		if err != nil {
			t.Fatal(err)
		}
		var losses []float32
		for i := 0; i < steps; i++ {
			x, y := text(i, batch, 8)
			l, err := d.Step(x, y)
			if err != nil {
				t.Fatal(err)
			}
			losses = append(losses, l)
			if i == 2 {
				if _, _, err := d.Eval(x, y); err != nil {
					t.Fatal(err)
				}
			}
		}
		p, err := d.Profile()
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		return losses, p
	}
	plain, none := train("")
	if none != nil {
		t.Errorf("a profile without %s: %+v", devmodel.EnvProfile, none)
	}
	file := filepath.Join(t.TempDir(), "profile.json")
	timed, p := train(file)
	for i := range plain {
		if math.Float32bits(plain[i]) != math.Float32bits(timed[i]) {
			t.Errorf("step %d: loss %v profiled, %v not", i, timed[i], plain[i])
		}
	}
	if p == nil {
		t.Fatal("no profile")
	}
	var sb strings.Builder
	p.WriteTable(&sb)
	t.Logf("\n%s", sb.String())
	if p.Steps != steps-devmodel.ProfileWarmup || p.Warmup != devmodel.ProfileWarmup || p.Batch != batch || p.StepMs <= 0 {
		t.Errorf("profile of %d steps after %d warm-up, batch %d, %v ms a step; want %d after %d, batch %d, a time",
			p.Steps, p.Warmup, p.Batch, p.StepMs, steps-devmodel.ProfileWarmup, devmodel.ProfileWarmup, batch)
	}
	layers := map[string]int{"linear": 3, "attention": 1, "layernorm": 3, "gelu": 1, "residual": 2, "embedding": 1, "loss": 0, "optimizer": 0, "gaps": 0}
	sum := 0.0
	for _, k := range p.Kinds {
		want, ok := layers[k.Kind]
		if !ok {
			t.Errorf("kind %q: not a layer kind of the gpt", k.Kind)
		}
		delete(layers, k.Kind)
		split := k.ForwardMs + k.BackwardMs
		if k.Kind == "gaps" {
			split = k.TotalMs // not split into forward and backward
		}
		if k.Layers != want || k.ForwardMs < 0 || k.BackwardMs < 0 || k.TotalMs < 0 || math.Abs(k.TotalMs-split) > 1e-9 {
			t.Errorf("kind %s: %+v; want %d layers, times >= 0", k.Kind, k, want)
		}
		sum += k.TotalMs
	}
	for k := range layers {
		t.Errorf("kind %s: not in the profile", k)
	}
	if math.Abs(sum-p.StepMs) > 1e-3*p.StepMs+1e-6 {
		t.Errorf("kinds sum to %v ms, the step takes %v", sum, p.StepMs)
	}
	if len(p.Layers) == 0 || p.Layers[0].Name == "" {
		t.Errorf("layers: %+v", p.Layers)
	}
	// The attention layer's time is its projections' ("linear") and its
	// core's ("attention").
	var layer, core float64
	for _, l := range p.Layers {
		if l.Kind == "attention" {
			layer += l.ForwardMs + l.BackwardMs
		}
	}
	for _, k := range p.Kinds {
		if k.Kind == "attention" {
			core = k.TotalMs
		}
	}
	if !(core > 0 && layer > core) {
		t.Errorf("the attention layer takes %v ms, its core %v: want the projections counted apart", layer, core)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the profile file: %v", err)
	}
	var got devmodel.Profile
	if err := json.Unmarshal(b, &got); err != nil || got.Steps != p.Steps || len(got.Kinds) != len(p.Kinds) {
		t.Errorf("the profile file: %v: %s", err, b)
	}
}
