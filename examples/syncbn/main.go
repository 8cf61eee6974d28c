// Command syncbn trains a small nn CNN with batch norm data parallel
// (DDP) with SyncBatchNorm: the batch statistics span every rank's
// samples, so N ranks x B train exactly like one process with N*B
// (running statistics included). -sync=false keeps per-rank statistics
// (plain BatchNorm under DDP), which does not.
//
//	go run ./examples/syncbn -nproc 2 -batch 8 -backend inproc
//	go run ./examples/syncbn -nproc 1 -batch 16
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/ddp"
	"github.com/gdist/gdist/examples/internal/kit"
	"github.com/gdist/gdist/launch"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/syncbn"

	_ "github.com/gdist/gdist/comm/auto"
	_ "github.com/gdist/gdist/comm/shm"
	_ "github.com/gdist/gdist/comm/tcp"
)

type config struct {
	backend, out        string
	nproc, steps, batch int
	lr                  float64
	sync                bool
}

func main() {
	var cfg config
	flag.StringVar(&cfg.backend, "backend", "auto", "inproc (ranks as goroutines), tcp, shm or auto")
	flag.IntVar(&cfg.nproc, "nproc", 2, "ranks")
	flag.IntVar(&cfg.steps, "steps", 30, "training steps")
	flag.IntVar(&cfg.batch, "batch", 8, "samples per rank and step")
	flag.Float64Var(&cfg.lr, "lr", 0.05, "learning rate (SGD)")
	flag.BoolVar(&cfg.sync, "sync", true, "synchronise batch-norm statistics across ranks (SyncBatchNorm)")
	flag.StringVar(&cfg.out, "out", "", "write rank 0's final parameters and running statistics here")
	flag.Parse()
	if err := run(context.Background(), cfg); err != nil {
		log.Fatal(err)
	}
}

// newCNN is conv 3x3 (4 channels) + batch norm + ReLU + 2x2 max-pool,
// then a linear classifier, over 1x8x8 images.
func newCNN(seed int64) (*nn.Model, error) {
	net := nn.Seq(&nn.Conv2d{In: 1, Out: 4, K: 3, Pad: 1}, nn.BatchNorm2d(4), nn.ReLU{}, nn.MaxPool2d{},
		nn.Flatten{}, &nn.Linear{In: 4 * 4 * 4, Out: 3})
	return nn.New("cnn-syncbn", net, []int{1, 8, 8}, seed)
}

// images returns samples [first, first+n): a bright blob whose corner is
// the label, on a patterned background.
func images(first, n int) ([]float32, []int32) {
	x := make([]float32, n*64)
	y := make([]int32, n)
	for i := range y {
		s := first + i
		y[i] = int32(s % 3)
		cx, cy := 1+4*(int(y[i])%2), 1+4*(int(y[i])/2)
		for p := 0; p < 64; p++ {
			r, c := p/8, p%8
			v := 0.3 * math.Sin(float64(s*64+p)*0.61)
			if r >= cy && r < cy+3 && c >= cx && c < cx+3 {
				v += 2
			}
			x[i*64+p] = float32(v)
		}
	}
	return x, y
}

func run(ctx context.Context, cfg config) error {
	return launch.Ranks(ctx, launch.Job{NProc: cfg.nproc, Backend: cfg.backend}, func(ctx context.Context, c comm.Comm) error {
		return worker(ctx, c, cfg)
	})
}

func worker(ctx context.Context, c comm.Comm, cfg config) error {
	m, err := newCNN(1)
	if err != nil {
		return err
	}
	if cfg.sync {
		s, err := syncbn.Convert(ctx, m, c) // the one line SyncBatchNorm takes
		if err != nil {
			return err
		}
		defer s.Close()
	}
	d, err := ddp.New(ctx, c, m, ddp.Options{})
	if err != nil {
		return err
	}
	gr, err := m.NewGraph(cfg.batch, true)
	if err != nil {
		return err
	}
	gr.OnGrad = d.AddGrad
	opt, err := optim.New(optim.Config{Name: "sgd", LR: cfg.lr}, m.NumParams())
	if err != nil {
		return err
	}
	var loss float32
	for step := 0; step < cfg.steps; step++ {
		x, y := images((step*c.Size()+c.Rank())*cfg.batch, cfg.batch)
		if loss, err = gr.StepIn(ctx, d.Backward, x, y); err != nil {
			return fmt.Errorf("rank %d, step %d: %w", c.Rank(), step, err)
		}
		opt.Step(m.Flat.Value, m.Flat.Grad)
		m.ZeroGrad()
	}
	if c.Rank() != 0 {
		return nil
	}
	fmt.Printf("rank 0: last loss %.6f\n", loss)
	if cfg.out == "" {
		return nil
	}
	return kit.Write(cfg.out, state(m))
}

// state is the parameters, then every running mean and variance.
func state(m *nn.Model) []float32 {
	out := append([]float32(nil), m.Flat.Value[:m.NumParams()]...)
	for _, k := range m.BufferNames() {
		out = append(out, m.Buffers()[k]...)
	}
	return out
}
