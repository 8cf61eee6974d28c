package optim

import (
	"math"
	"slices"
	"testing"
)

// TestNew64: every optimizer's float64 twin follows the float32 one (the
// same rules, within float32 rounding over a few steps) and has the same
// state tensors.
func TestNew64(t *testing.T) {
	for _, cfg := range []Config{
		{Name: "sgd", LR: 0.1},
		{Name: "sgd", LR: 0.1, Momentum: 0.9, WeightDecay: 0.01},
		{Name: "adam", LR: 0.01, WeightDecay: 0.01},
		{Name: "adamw", LR: 0.01, WeightDecay: 0.1},
		{Name: "rmsprop", LR: 0.01, Clip: 0.5, L2: 0.001},
		{Name: "adagrad", LR: 0.01},
		{Name: "momentum", LR: 0.01, L2: 0.01},
		{Name: "vanilla", LR: 0.1, Clip: 1},
	} {
		const n = 37
		o32, err := New(cfg, n)
		if err != nil {
			t.Fatal(err)
		}
		o64, err := New64(cfg, n)
		if err != nil {
			t.Fatal(err)
		}
		p32, p64 := make([]float32, n), make([]float64, n)
		for i := range p64 {
			p64[i] = math.Sin(float64(i))
			p32[i] = float32(p64[i])
		}
		for step := 0; step < 5; step++ {
			g32, g64 := make([]float32, n), make([]float64, n)
			for i := range g64 {
				g64[i] = float64(float32(math.Cos(float64(i*7+step)) * 2))
				g32[i] = float32(g64[i])
			}
			o32.Step(p32, g32)
			o64.Step64(p64, g64)
		}
		for i := range p64 {
			if d := math.Abs(p64[i] - float64(p32[i])); d > 1e-5*(1+math.Abs(p64[i])) {
				t.Fatalf("%+v: parameter %d is %v in float64, %v in float32", cfg, i, p64[i], p32[i])
			}
		}
		s32, t32 := o32.State()
		s64, t64 := o64.State64()
		k32, k64 := keys(s32), keys(s64)
		if !slices.Equal(k32, k64) || t32 != t64 || o32.Name() != o64.Name() {
			t.Fatalf("%+v: state %v step %d %s in float32, %v step %d %s in float64", cfg, k32, t32, o32.Name(), k64, t64, o64.Name())
		}
	}
	if _, err := New64(Config{Name: "lamb", LR: 1}, 3); err == nil {
		t.Fatal("an unknown optimizer: no error")
	}
}

func keys[T any](m map[string]T) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
