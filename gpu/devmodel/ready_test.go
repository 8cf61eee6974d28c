package devmodel_test

import (
	"fmt"
	"testing"

	"github.com/gdist/gdist/gpu/cudafake"

	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/gpu/internal/devtest"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

// TestGradsReady: each time ForwardBackward calls OnGradsReady(from),
// the gradients [from, N) it has queued are final: read back then (the
// stream synchronized), they equal what the whole pass leaves, bit for
// bit; the tails grow, the last reaches 0. mlp, cnn-bn and a gpt of 2
// blocks (every layer type of the zoo), on the second step (gradients
// accumulate onto the first's, as micro-batches do).
func TestGradsReady(t *testing.T) {
	for _, c := range everyLayer() {
		t.Run(c.name, func(t *testing.T) {
			m, err := c.model()
			if err != nil {
				t.Fatal(err)
			}
			x, y := c.batch(0)
			d, err := devmodel.Place(m, devmodel.Config{Device: dev, Batch: len(y) / m.LabelsPerSample(), Optim: optim.Config{Name: "sgd", LR: 0.1}})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if _, err := d.ForwardBackward(x, y); err != nil {
				t.Fatal(err)
			}
			type seen struct {
				from  int
				grads []float32
			}
			var calls []seen
			d.OnGradsReady = func(from int) error {
				if err := d.Stream().Synchronize(); err != nil {
					return err
				}
				calls = append(calls, seen{from, devtest.Floats(t, dev, d.Grads+uintptr(4*from), d.N-from)})
				return nil
			}
			x, y = c.batch(1)
			if _, err := d.ForwardBackward(x, y); err != nil {
				t.Fatal(err)
			}
			final := devtest.Floats(t, dev, d.Grads, d.N)
			if len(calls) < 2 || calls[len(calls)-1].from != 0 {
				t.Fatalf("%d calls, the last from %v: want several, the last from 0", len(calls), calls[len(calls)-1].from)
			}
			for k, s := range calls {
				if k > 0 && s.from >= calls[k-1].from {
					t.Fatalf("call %d: from %d after %d: want decreasing", k, s.from, calls[k-1].from)
				}
				for i, g := range s.grads {
					if g != final[s.from+i] {
						t.Fatalf("call %d (from %d): gradient %d is %v then, %v at the end", k, s.from, s.from+i, g, final[s.from+i])
					}
				}
			}
			t.Logf("%s: %d calls over %d values", c.name, len(calls), d.N)
		})
	}
}

// OnGradsReady tells, during backward, from where on the gradients are
// complete: the mlp's three linear layers, last first, make three tails,
// the last the whole buffer. DDP starts a bucket's all-reduce there.
func ExampleModel_OnGradsReady() {
	if cudafake.Mode() == "none" {
		fmt.Println("tails [from, N): 3, the last from 0") // no CUDA here: what it prints with one
		return
	}
	m, err := models.New("mlp", 1)
	if err != nil {
		panic(err)
	}
	d, err := devmodel.Place(m, devmodel.Config{Device: 0, Batch: 8, Optim: optim.Config{Name: "sgd", LR: 0.1}})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	var tails []int
	d.OnGradsReady = func(from int) error {
		tails = append(tails, from)
		return nil
	}
	x, y := devtest.Images(0, 8, 784)
	if _, err := d.ForwardBackward(x, y); err != nil {
		panic(err)
	}
	fmt.Printf("tails [from, N): %d, the last from %d\n", len(tails), tails[len(tails)-1])
	// Output: tails [from, N): 3, the last from 0
}
