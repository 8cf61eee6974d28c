package flat_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/comm/rendezvous"
	_ "github.com/gdist/gdist/comm/shm"
	"github.com/gdist/gdist/ddp"
	"github.com/gdist/gdist/flat"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/zero"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestWrapKeepsTensors: the *tensor.Dense values a model kept before
// Wrap (as gorgonia's LSTM example keeps its weights in a struct) are
// the learnables' values after it: they read the flat buffer, so they
// see every update, on every rank, for DDP and ZeRO stages 1 and 2.
func TestWrapKeepsTensors(t *testing.T) {
	for _, backend := range []string{"inproc", "shm"} {
		for _, strategy := range []string{"ddp", "zero1", "zero2"} {
			t.Run(backend+"/"+strategy, func(t *testing.T) { keepTensors(t, backend, strategy) })
		}
	}
}

// keepTensors trains 3 steps and checks the kept tensors after each, and
// after Close (which moves the buffers out of shared memory).
func keepTensors(t *testing.T, backend, strategy string) {
	{
		{
			var cs []comm.Comm
			if backend == "shm" {
				t.Setenv("GDIST_SHM_DIR", t.TempDir())
				cs = commtest.RegistryWorld("shm", commtest.OneStore(func() comm.Store { return rendezvous.NewMemStore() }),
					comm.Config{Token: []byte("flat-test-token"), Logf: t.Logf})(t, 2)
			} else {
				var err error
				if cs, err = inproc.New(2, comm.Options{}); err != nil {
					t.Fatal(err)
				}
				defer func() {
					for _, c := range cs {
						c.Close()
					}
				}()
			}
			err := commtest.RunRanks(context.Background(), cs, 2*time.Minute, func(ctx context.Context, c comm.Comm) error {
				m := newTiny(t)
				var err error
				if err := flat.Build(func() error {
					m.forward(m.w, m.b)
					_, err := G.Grad(m.loss, m.w, m.b)
					return err
				}); err != nil {
					return err
				}
				// The model keeps its tensors, as a struct of weights does.
				kept := []*tensor.Dense{m.w.Value().(*tensor.Dense), m.b.Value().(*tensor.Dense)}
				keptGrad, _ := m.w.Grad()
				learnables := []*G.Node{m.w, m.b}
				var p *flat.Params
				var backward func(context.Context, func() error) error
				var step func(context.Context) error
				var closeIt func() error
				switch strategy {
				case "ddp":
					d, err := ddp.Wrap(ctx, c, learnables, ddp.Options{})
					if err != nil {
						return err
					}
					closeIt = d.Close
					if backend == "shm" && !d.SharedGrads() {
						return fmt.Errorf("the gradients are not in shared memory: %v", d.SharedGradsErr())
					}
					solver := G.NewVanillaSolver(G.WithLearnRate(0.01))
					p, backward = d.Params(), d.Backward
					step = func(context.Context) error { return solver.Step(G.NodesToValueGrads(learnables)) }
				default:
					e, err := zero.Wrap(ctx, c, learnables, zero.Options{Stage: int(strategy[4] - '0'), Optim: optim.Config{Name: "sgd", LR: 0.01}})
					if err != nil {
						return err
					}
					closeIt = e.Close
					if backend == "shm" && !e.SharedBuffers() {
						return fmt.Errorf("the buffers are not in shared memory: %v", e.SharedBuffersErr())
					}
					p, backward, step = e.Params(), e.Backward, e.Step
				}
				if g, _ := m.w.Grad(); keptGrad != nil && g != keptGrad {
					return fmt.Errorf("w's gradient is a new tensor after Wrap")
				}
				vm := G.NewTapeMachine(m.g, G.BindDualValues(learnables...))
				defer vm.Close()
				check := func(s int) error {
					for i, k := range kept {
						if m := []*G.Node{m.w, m.b}[i]; m.Value() != k {
							return fmt.Errorf("step %d: learnable %d's value is a new tensor", s, i)
						}
						got, want := k.Data().([]float32), p.ValueOf(i)
						for j := range want {
							if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
								return fmt.Errorf("step %d: the kept tensor of learnable %d holds %v, the flat buffer %v: it went stale", s, i, got, want)
							}
						}
					}
					return nil
				}
				for s := 0; s < 3; s++ {
					before := append([]float32(nil), kept[0].Data().([]float32)...)
					if err = backward(ctx, vm.RunAll); err != nil {
						return err
					}
					vm.Reset()
					if err = step(ctx); err != nil {
						return err
					}
					if err := check(s); err != nil {
						return err
					}
					if after := kept[0].Data().([]float32); after[0] == before[0] {
						return fmt.Errorf("step %d: the kept w did not change (%v)", s, after)
					}
				}
				before := append([]float32(nil), kept[0].Data().([]float32)...)
				if err := closeIt(); err != nil { // moves shared buffers back into ordinary memory
					return err
				}
				if err := check(3); err != nil {
					return fmt.Errorf("after Close: %w", err)
				}
				if after := kept[0].Data().([]float32); after[0] != before[0] {
					return fmt.Errorf("Close changed w: %v, was %v", after, before)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestBindRefusesUnbackable: values that cannot be re-backed in place
// (a view of another tensor, one *Dense shared by two learnables) make
// Bind fail naming the learnable, and leave the values untouched.
func TestBindRefusesUnbackable(t *testing.T) {
	m := newTiny(t)
	whole := tensor.New(tensor.WithShape(4, 2), tensor.WithBacking([]float32{1, 2, 3, 4, 5, 6, 7, 8}))
	view, err := whole.Slice(G.S(0, 3))
	if err != nil {
		t.Fatal(err)
	}
	v := G.NewMatrix(m.g, tensor.Float32, G.WithShape(3, 2), G.WithName("v"), G.WithValue(view))
	_, err = flat.Bind([]*G.Node{m.b, v}, 0)
	wantInvalid(t, err, `learnable 1 ("v")`)
	wantInvalid(t, err, "view")
	shared := G.NewVector(m.g, tensor.Float32, G.WithShape(2), G.WithName("b2"), G.WithValue(m.b.Value()))
	_, err = flat.Bind([]*G.Node{m.b, shared}, 0)
	wantInvalid(t, err, `learnable 1 ("b2") has the same value tensor as learnable 0 ("b")`)
}
