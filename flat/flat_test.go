package flat_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/ddp"
	"github.com/gdist/gdist/flat"
	"github.com/gdist/gdist/zero"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// tiny is y = sum(x W + b) over a 2x3 input: two learnables.
type tiny struct {
	g    *G.ExprGraph
	x    *G.Node
	w, b *G.Node
	loss *G.Node
}

func newTiny(t *testing.T) *tiny {
	t.Helper()
	m := &tiny{g: G.NewGraph()}
	m.x = G.NewMatrix(m.g, tensor.Float32, G.WithShape(2, 3), G.WithName("x"), G.WithValue(tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float32{1, 2, 3, 4, 5, 6}))))
	m.w = G.NewMatrix(m.g, tensor.Float32, G.WithShape(3, 2), G.WithName("w"), G.WithInit(G.Ones()))
	m.b = G.NewVector(m.g, tensor.Float32, G.WithShape(2), G.WithName("b"), G.WithInit(G.Zeroes()))
	return m
}

// forward builds the loss from w and b as given (tapped or not).
func (m *tiny) forward(w, b *G.Node) {
	m.loss = G.Must(G.Sum(G.Must(G.BroadcastAdd(G.Must(G.Mul(m.x, w)), b, nil, []byte{0}))))
}

func wantInvalid(t *testing.T, err error, says string) {
	t.Helper()
	if err == nil || !errors.Is(err, flat.ErrInvalid) || !strings.Contains(err.Error(), says) {
		t.Fatalf("got %v, want flat.ErrInvalid saying %q", err, says)
	}
}

func TestBindRejects(t *testing.T) {
	m := newTiny(t)
	_, err := flat.Bind([]*G.Node{m.w, m.b, m.w}, 0)
	wantInvalid(t, err, `"w" is listed twice`)
	_, err = flat.Bind([]*G.Node{m.w, nil}, 0)
	wantInvalid(t, err, "learnable 1 is nil")
	_, err = flat.Bind(nil, 0)
	wantInvalid(t, err, "no learnables")
	f64 := G.NewVector(m.g, tensor.Float64, G.WithShape(2), G.WithName("d"), G.WithInit(G.Zeroes()))
	_, err = flat.Bind([]*G.Node{m.w, f64}, 0)
	wantInvalid(t, err, "float64")
	sum := G.Must(G.Add(m.w, m.w))
	_, err = flat.Bind([]*G.Node{sum}, 0)
	wantInvalid(t, err, "not a leaf")
	novalue := G.NewVector(m.g, tensor.Float32, G.WithShape(2), G.WithName("nv"))
	_, err = flat.Bind([]*G.Node{novalue}, 0)
	wantInvalid(t, err, "want a *tensor.Dense")
}

// TestBindViews: after Bind the nodes' values and gradients are views of
// the flat buffers, in the order given, with the values kept.
func TestBindViews(t *testing.T) {
	m := newTiny(t)
	p, err := flat.Bind([]*G.Node{m.b, m.w}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if p.Len() != 8 || len(p.Value) != 10 || p.Spans[1].Offset != 2 || p.Spans[1].Name != "w" {
		t.Fatalf("layout %+v, len %d", p.Spans, len(p.Value))
	}
	p.Value[2] = 7
	if got := m.w.Value().Data().([]float32)[0]; got != 7 {
		t.Fatalf("w[0] = %v after writing the flat buffer: not a view", got)
	}
	if p.Value[3] != 1 || p.Value[0] != 0 {
		t.Fatalf("values not kept: %v", p.Value)
	}
	g, _ := m.w.Grad()
	g.(*tensor.Dense).Data().([]float32)[1] = 3
	if p.Grad[3] != 3 {
		t.Fatal("the gradient is not a view of the flat gradient buffer")
	}
}

func TestTapRejects(t *testing.T) {
	m := newTiny(t)
	if _, err := flat.Tap(m.w); err != nil {
		t.Fatal(err)
	}
	_, err := flat.Tap(m.w)
	wantInvalid(t, err, "already tapped")
	m2 := newTiny(t)
	m2.forward(m2.w, m2.b)
	if _, err := G.Grad(m2.loss, m2.w, m2.b); err != nil {
		t.Fatal(err)
	}
	_, err = flat.Tap(m2.w)
	wantInvalid(t, err, "already differentiated")
}

// run1 runs one backward pass of m under a 1-rank DDP made by build.
func run1(t *testing.T, m *tiny, opts []G.VMOpt, wrap func(context.Context, comm.Comm) (func(context.Context, func() error) error, error)) error {
	t.Helper()
	cs, err := inproc.New(1, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cs[0].Close()
	return commtest.RunRanks(context.Background(), cs, time.Minute, func(ctx context.Context, c comm.Comm) error {
		backward, err := wrap(ctx, c)
		if err != nil {
			return err
		}
		vm := G.NewTapeMachine(m.g, opts...)
		defer vm.Close()
		return backward(ctx, func() error {
			defer vm.Reset()
			return vm.RunAll()
		})
	})
}

func ddpWrap(m *tiny) func(context.Context, comm.Comm) (func(context.Context, func() error) error, error) {
	return func(ctx context.Context, c comm.Comm) (func(context.Context, func() error) error, error) {
		d, err := ddp.Wrap(ctx, c, []*G.Node{m.w, m.b}, ddp.Options{})
		if err != nil {
			return nil, err
		}
		return d.Backward, nil
	}
}

// TestUsedOutsideTap: a learnable used both tapped and untapped would be
// reduced before its second gradient lands: an error names it.
func TestUsedOutsideTap(t *testing.T) {
	m := newTiny(t)
	tw, err := flat.Tap(m.w)
	if err != nil {
		t.Fatal(err)
	}
	m.forward(tw, m.b)
	m.loss = G.Must(G.Add(m.loss, G.Must(G.Sum(m.w)))) // w used untapped too
	if _, err := G.Grad(m.loss, m.w, m.b); err != nil {
		t.Fatal(err)
	}
	err = run1(t, m, []G.VMOpt{G.BindDualValues(m.w, m.b)}, ddpWrap(m))
	wantInvalid(t, err, `"w" gets gradients from outside its tap`)
}

// TestNoDualValues: a tape machine without BindDualValues never puts
// gradients in the buffer; the first Finish says so.
func TestNoDualValues(t *testing.T) {
	m := newTiny(t)
	m.forward(m.w, m.b)
	if _, err := G.Grad(m.loss, m.w, m.b); err != nil {
		t.Fatal(err)
	}
	err := run1(t, m, nil, ddpWrap(m))
	wantInvalid(t, err, "BindDualValues")
}

// TestTapNotBound: a tapped learnable left out of Wrap fails backward,
// naming it.
func TestTapNotBound(t *testing.T) {
	m := newTiny(t)
	tb, err := flat.Tap(m.b)
	if err != nil {
		t.Fatal(err)
	}
	m.forward(m.w, tb)
	if _, err := G.Grad(m.loss, m.w, m.b); err != nil {
		t.Fatal(err)
	}
	err = run1(t, m, []G.VMOpt{G.BindDualValues(m.w, m.b)}, func(ctx context.Context, c comm.Comm) (func(context.Context, func() error) error, error) {
		d, err := ddp.Wrap(ctx, c, []*G.Node{m.w}, ddp.Options{})
		if err != nil {
			return nil, err
		}
		return d.Backward, nil
	})
	if err == nil || !strings.Contains(err.Error(), `"b" was tapped but never bound`) {
		t.Fatalf("got %v", err)
	}
}

// TestLateGradient: two backward passes before Finish with taps (the
// second would add into a bucket under reduction): ErrLateGradient.
func TestLateGradient(t *testing.T) {
	m := newTiny(t)
	tw, _ := flat.Tap(m.w)
	tb, _ := flat.Tap(m.b)
	m.forward(tw, tb)
	if _, err := G.Grad(m.loss, m.w, m.b); err != nil {
		t.Fatal(err)
	}
	err := run1(t, m, []G.VMOpt{G.BindDualValues(m.w, m.b)}, func(ctx context.Context, c comm.Comm) (func(context.Context, func() error) error, error) {
		d, err := ddp.Wrap(ctx, c, []*G.Node{m.w, m.b}, ddp.Options{})
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, run func() error) error {
			return d.Backward(ctx, func() error {
				if err := run(); err != nil {
					return err
				}
				return run() // a second pass before Finish
			})
		}, nil
	})
	if !errors.Is(err, ddp.ErrLateGradient) {
		t.Fatalf("got %v, want ErrLateGradient", err)
	}
}

// TestZeroStage3Plain: stage 3 needs layers that fetch from a store.
func TestZeroStage3Plain(t *testing.T) {
	m := newTiny(t)
	cs, _ := inproc.New(1, comm.Options{})
	defer cs[0].Close()
	_, err := zero.Wrap(context.Background(), cs[0], []*G.Node{m.w, m.b}, zero.Options{Stage: 3})
	if err == nil || !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), "stage 1 or 2") {
		t.Fatalf("got %v", err)
	}
	_, err = zero.Wrap(context.Background(), cs[0], []*G.Node{m.w, m.w}, zero.Options{Stage: 2})
	wantInvalid(t, err, "listed twice")
}
