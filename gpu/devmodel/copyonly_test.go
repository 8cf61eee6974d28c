package devmodel_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/gemm"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
)

// copyOnlyModel has LayerNorm and GELU outputs with every kind of
// reader: only a Linear's bf16 products (1.fn.0, 1.fn.2 fused with the
// Linear's bias, 2 through a view: a Dropout of 0), a Residual's sum
// beside the Linear in its function (0, 4), a layer without products
// (5: Tanh).
func copyOnlyModel() (*nn.Model, error) {
	return nn.New("copyonly", nn.Seq(
		&nn.LayerNorm{C: 40},
		&nn.Residual{Fn: nn.Seq(&nn.LayerNorm{C: 40}, &nn.Linear{In: 40, Out: 48}, nn.GELU{}, &nn.Linear{In: 48, Out: 40})},
		&nn.LayerNorm{C: 40},
		nn.Seq(&nn.Dropout{}, &nn.Linear{In: 40, Out: 24}), nn.GELU{},
		&nn.Residual{Fn: nn.Seq(&nn.Linear{In: 24, Out: 24})},
		&nn.LayerNorm{C: 24}, nn.Tanh{}, &nn.Linear{In: 24, Out: 10}), []int{40}, 4)
}

// copyOnly is the layers whose values b keeps as their bf16 copy only.
func copyOnly(b devmodel.MemoryBreakdown) []string {
	var s []string
	for _, x := range b.Buffers {
		if x.Role == "values (bf16 copy only)" {
			s = append(s, x.Layer)
		}
	}
	sort.Strings(s)
	return s
}

// Under bf16 autocast a LayerNorm's or GELU's output that only bf16
// products read (a Linear's forward and weight gradient, through the
// copy the kernel writes) keeps no fp32 value: the kernel writes the
// copy alone and the plan holds 4 bytes a value less (memory.go's
// copyOnly); one that anything else reads (a Residual's sum, a Tanh) is
// kept. Training is bit for bit the plan that writes and keeps every
// fp32 value (pool blocks, the whole step; 3 AdamW steps with clipping,
// an evaluation between), and MemoryPlan lays out what the device does.
// Before, every such value was kept beside its copy.
func TestCopyOnlyValues(t *testing.T) {
	cudafake.RequireCUDA(t)
	t.Setenv(gemm.EnvBF16Cast, "kernel")
	cfg := devmodel.Config{Device: dev, Batch: 6, Precision: gemm.BF16, Optim: optim.Config{Name: "adamw", LR: 3e-3}, ClipGrad: 1}
	m, err := copyOnlyModel()
	if err != nil {
		t.Fatal(err)
	}
	dry, err := devmodel.MemoryPlan(m, 6, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(copyOnly(dry)), "[1.fn.0 1.fn.2 2]"; got != want {
		t.Errorf("values kept as bf16 copies only: %s, want %s\n%s", got, want, dry)
	}
	fp, err := devmodel.MemoryPlan(m, 6, devmodel.Config{Optim: cfg.Optim, ClipGrad: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(copyOnly(fp)) != 0 {
		t.Errorf("fp32: values kept as bf16 copies only: %v", copyOnly(fp))
	}
	run := func(region bool) (losses, params []float32, d *devmodel.Model) {
		defer devmodel.SetPlanRegion(region)()
		m, err := copyOnlyModel()
		if err != nil {
			t.Fatal(err)
		}
		d, err = devmodel.Place(m, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		if !strings.Contains(d.Products(), "cuBLAS") {
			t.Skip(d.Products()) // the tiled kernel reads no copies
		}
		for i := 0; i < 3; i++ {
			x, y := devtest.Images(i, 6, 40)
			l, err := d.Step(x, y)
			if err != nil {
				t.Fatal(err)
			}
			losses = append(losses, l)
			if i == 1 {
				x, y := devtest.Images(9, 10, 40)
				l, _, err := d.Eval(x, y)
				if err != nil {
					t.Fatal(err)
				}
				losses = append(losses, l)
			}
		}
		return losses, devtest.Floats(t, dev, d.Params, d.N), d
	}
	l0, p0, _ := run(false)
	l1, p1, d := run(true)
	if i, ok := bitsEqual(l1, l0); !ok {
		t.Errorf("loss %d: %v with values as copies only, %v with every fp32 value kept", i, l1[i], l0[i])
	}
	if i, ok := bitsEqual(p1, p0); !ok {
		t.Errorf("parameter %d: %v with values as copies only, %v with every fp32 value kept", i, p1[i], p0[i])
	}
	b := d.Memory()
	if got, want := fmt.Sprint(copyOnly(b)), fmt.Sprint(copyOnly(dry)); got != want || b.Plan != dry.Plan {
		t.Errorf("placed: %s as copies only in a region of %d bytes; MemoryPlan: %s in %d", got, b.Plan, want, dry.Plan)
	}
}
