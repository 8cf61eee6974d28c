// Command plain trains a plain gorgonia model (model.go: gorgonia's own
// ops, tape machine and SGD solver, no gdist type) on one process, and the
// same model data parallel with gdist: DDP, ZeRO-1 or ZeRO-2, ranks as
// processes (tcp, shm, auto) or as goroutines (inproc).
//
//	go run ./examples/plain -strategy none -batch 32         # one process, batch 32
//	go run ./examples/plain -strategy ddp -nproc 2 -batch 16 # 2 processes x 16: the same steps
//	go run ./examples/plain -strategy zero2 -nproc 2 -batch 16 -backend inproc -tap
//
// With -out FILE rank 0 writes the final parameters (float32, little
// endian) there: the test compares the runs with them.
package main

import (
	"context"
	"flag"
	"fmt"
	"github.com/gdist/gdist/examples/internal/kit"
	"github.com/gdist/gdist/launch"
	"log"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/ddp"
	"github.com/gdist/gdist/flat"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/zero"
	G "gorgonia.org/gorgonia"

	_ "github.com/gdist/gdist/comm/auto"
	_ "github.com/gdist/gdist/comm/shm"
	_ "github.com/gdist/gdist/comm/tcp"
)

type config struct {
	strategy, backend, out string
	nproc, steps, batch    int
	lr                     float64
	tap                    bool
}

func main() {
	var cfg config
	flag.StringVar(&cfg.strategy, "strategy", "ddp", "none (one process, no gdist), ddp, zero1 or zero2")
	flag.StringVar(&cfg.backend, "backend", "auto", "inproc (ranks as goroutines), tcp, shm or auto")
	flag.IntVar(&cfg.nproc, "nproc", 2, "ranks")
	flag.IntVar(&cfg.steps, "steps", 200, "training steps")
	flag.IntVar(&cfg.batch, "batch", 16, "samples per rank and step")
	flag.Float64Var(&cfg.lr, "lr", 0.1, "learning rate (SGD)")
	flag.BoolVar(&cfg.tap, "tap", false, "tap every learnable: reduce gradient buckets while backward runs")
	flag.StringVar(&cfg.out, "out", "", "write rank 0's final parameters to this file")
	flag.Parse()
	if err := run(context.Background(), cfg); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, cfg config) error {
	switch {
	case cfg.strategy == "none":
		return single(cfg)
	case cfg.strategy != "ddp" && cfg.strategy != "zero1" && cfg.strategy != "zero2":
		return fmt.Errorf("unknown -strategy %q (none, ddp, zero1, zero2)", cfg.strategy)
	}
	// Ranks as goroutines (inproc), as processes this program starts, or
	// as one rank of a job started by a launcher (ours, torchrun, mpirun).
	return launch.Ranks(ctx, launch.Job{NProc: cfg.nproc, Backend: cfg.backend}, func(ctx context.Context, c comm.Comm) error {
		return worker(ctx, c, cfg)
	})
}

// single is the model trained the plain gorgonia way, on one process.
func single(cfg config) error {
	m, err := newMLP(cfg.batch, 1, nil)
	if err != nil {
		return err
	}
	m.machine()
	solver := G.NewVanillaSolver(G.WithLearnRate(cfg.lr))
	for step := 0; step < cfg.steps; step++ {
		m.load(step * cfg.batch)
		if err := m.vm.RunAll(); err != nil {
			return err
		}
		m.vm.Reset()
		if err := solver.Step(G.NodesToValueGrads(m.learnables)); err != nil {
			return err
		}
	}
	return finish(cfg, 0, m)
}

// worker is the same loop on one rank: the lines marked gdist are all
// that changes.
func worker(ctx context.Context, c comm.Comm, cfg config) error {
	var tap func(*G.Node) (*G.Node, error)
	if cfg.tap {
		tap = flat.Tap // gdist (optional): overlap reductions with backward
	}
	var m *mlp
	// gdist: build graphs one at a time (ranks may be goroutines).
	err := flat.Build(func() (err error) {
		m, err = newMLP(cfg.batch, uint64(1+c.Rank()), tap) // any seed: rank 0's values are broadcast
		return err
	})
	if err != nil {
		return err
	}
	var backward func(context.Context, func() error) error
	var update func() error
	if cfg.strategy == "ddp" {
		d, err := ddp.Wrap(ctx, c, m.learnables, ddp.Options{}) // gdist
		if err != nil {
			return err
		}
		solver := G.NewVanillaSolver(G.WithLearnRate(cfg.lr))
		backward = d.Backward
		update = func() error { return solver.Step(G.NodesToValueGrads(m.learnables)) }
	} else {
		// ZeRO shards the optimizer state, so it owns the optimizer.
		e, err := zero.Wrap(ctx, c, m.learnables, zero.Options{Stage: int(cfg.strategy[4] - '0'), // gdist
			Optim: optim.Config{Name: "sgd", LR: cfg.lr}})
		if err != nil {
			return err
		}
		backward = e.Backward
		update = func() error { return e.Step(ctx) }
	}
	flat.Build(func() error { m.machine(); return nil })
	for step := 0; step < cfg.steps; step++ {
		// This rank's part of the global batch of step.
		m.load((step*c.Size() + c.Rank()) * cfg.batch)
		if err := backward(ctx, m.vm.RunAll); err != nil { // gdist: forward, backward, average
			return fmt.Errorf("rank %d, step %d: %w", c.Rank(), step, err)
		}
		m.vm.Reset()
		if err := update(); err != nil {
			return err
		}
	}
	return finish(cfg, c.Rank(), m)
}

// finish reports the loss of the last step and writes the parameters.
func finish(cfg config, rank int, m *mlp) error {
	if rank != 0 {
		return nil
	}
	fmt.Printf("%s: final loss %.6f\n", cfg.strategy, m.loss.Value().Data().(float32))
	if cfg.out == "" {
		return nil
	}
	return kit.Write(cfg.out, m.params())
}
