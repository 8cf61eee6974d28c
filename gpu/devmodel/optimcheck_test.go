package devmodel_test

import (
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
)

// TestOptimRefused: an optimizer without device kernels (gorgonia's
// solvers, which optim accepts) is refused by name when a model or a
// stage is placed, before anything runs (it was stepped with Adam's
// kernels).
func TestOptimRefused(t *testing.T) {
	m, err := nn.New("mlp", nn.Seq(&nn.Linear{In: 4, Out: 8}, nn.ReLU{}, &nn.Linear{In: 8, Out: 3}), []int{4}, 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := devmodel.Config{Device: dev, Batch: 2, Optim: optim.Config{Name: "rmsprop", LR: 0.01}}
	want := `optimizer "rmsprop" has no device kernels`
	if _, err := devmodel.Place(m, cfg); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Place: %v, want %s", err, want)
	}
	if _, err := devmodel.PlaceStage(m, 0, 1, cfg); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("PlaceStage: %v, want %s", err, want)
	}
}
