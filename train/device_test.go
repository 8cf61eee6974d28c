package train_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gdist/gdist/train"
	_ "github.com/gdist/gdist/train/dp"
)

// TestConfigDevice: -device parses as cpu, cuda or cuda:N, and a
// strategy not registered with train.Factory.Device is refused on a GPU.
func TestConfigDevice(t *testing.T) {
	for _, c := range []struct {
		dev  string
		n    int
		name string
	}{{"", -1, "cpu"}, {"cpu", -1, "cpu"}, {"cuda", 0, "cuda:0"}, {"cuda:3", 3, "cuda:3"}} {
		cfg := train.Config{Device: c.dev}
		if n, err := cfg.CUDADevice(); err != nil || n != c.n || cfg.DeviceName() != c.name {
			t.Errorf("-device %q: %d, %v, %q", c.dev, n, err, cfg.DeviceName())
		}
	}
	for _, bad := range []string{"gpu", "cuda:", "cuda:-1", "cuda:x"} {
		if _, err := (&train.Config{Device: bad}).CUDADevice(); !errors.Is(err, train.ErrConfig) {
			t.Errorf("-device %q: %v", bad, err)
		}
	}
	cfg := train.Config{Model: "mlp", Epochs: 1, Batch: 1, LR: 0.1, Strategy: "replicated", Device: "cuda"} // the example strategy: no Factory.Device
	if err := cfg.Validate(); !errors.Is(err, train.ErrConfig) ||
		!strings.Contains(err.Error(), "-strategy replicated cannot train on -device cuda yet (strategies that can: ddp, pipeline, zero1, zero2, zero3)") {
		t.Errorf("a CPU-only strategy on -device cuda: %v", err)
	}
	cfg.Device = "cpu"
	if err := cfg.Validate(); err != nil {
		t.Errorf("on the CPU: %v", err)
	}
	for _, s := range []string{"ddp", "zero1", "zero2", "zero3", "pipeline"} {
		cfg := train.Config{Model: "mlp", Epochs: 1, Batch: 2, LR: 0.1, Strategy: s, Device: "cuda", World: 2}
		if err := cfg.Validate(); err != nil {
			t.Errorf("-strategy %s on -device cuda: %v", s, err)
		}
	}
}
