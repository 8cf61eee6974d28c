// Command custom trains an nn model with a user-defined layer (model.go:
// Gated, written with gorgonia's ops) on one process, and the same model
// with DDP, ZeRO stage 1, 2 or 3, or as a 2-stage pipeline, ranks as
// processes (tcp, shm, auto) or goroutines (inproc).
//
//	go run ./examples/custom -strategy none -batch 32            # one process
//	go run ./examples/custom -strategy zero3 -nproc 2 -batch 16  # ZeRO-3, 2 x 16: the same steps
//	go run ./examples/custom -strategy pipeline -nproc 2 -batch 32 -backend inproc
//
// Data-parallel strategies take -batch samples per rank; the pipeline's
// stages all see the whole -batch. With -out FILE rank 0 writes the final
// parameters (float32, little endian) there.
package main

import (
	"context"
	"flag"
	"fmt"
	"github.com/gdist/gdist/examples/internal/kit"
	"github.com/gdist/gdist/launch"
	"log"
	"sync"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/ddp"
	"github.com/gdist/gdist/nn"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/pipeline"
	"github.com/gdist/gdist/zero"

	_ "github.com/gdist/gdist/comm/auto"
	_ "github.com/gdist/gdist/comm/shm"
	_ "github.com/gdist/gdist/comm/tcp"
)

type config struct {
	strategy, backend, out, optimizer string
	nproc, steps, batch               int
	lr                                float64
}

// result is what a run ends with on rank 0.
type result struct {
	params []float32   // all parameters (gathered from the shards or stages)
	mem    zero.Memory // ZeRO's model-state bytes on this rank
	loss   float32     // the last step's loss
}

func main() {
	var cfg config
	flag.StringVar(&cfg.strategy, "strategy", "zero3", "none (one process), ddp, zero1, zero2, zero3 or pipeline")
	flag.StringVar(&cfg.backend, "backend", "auto", "inproc (ranks as goroutines), tcp, shm or auto")
	flag.IntVar(&cfg.nproc, "nproc", 2, "ranks (pipeline: stages)")
	flag.IntVar(&cfg.steps, "steps", 100, "training steps")
	flag.IntVar(&cfg.batch, "batch", 16, "samples per rank and step (pipeline: per step)")
	flag.Float64Var(&cfg.lr, "lr", 0.1, "learning rate")
	flag.StringVar(&cfg.optimizer, "optim", "sgd", "sgd or adam")
	flag.StringVar(&cfg.out, "out", "", "write rank 0's final parameters to this file")
	flag.Parse()
	if err := run(context.Background(), cfg); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, cfg config) error {
	if cfg.strategy == "none" {
		r, err := single(ctx, cfg)
		if err != nil {
			return err
		}
		return finish(cfg, 0, r)
	}
	_, err := runRanks(ctx, cfg)
	return err
}

// runRanks runs the ranks (launch.Ranks) and returns rank 0's result (when
// rank 0 is in this process).
func runRanks(ctx context.Context, cfg config) (result, error) {
	var mu sync.Mutex
	var r0 result
	err := launch.Ranks(ctx, launch.Job{NProc: cfg.nproc, Backend: cfg.backend}, func(ctx context.Context, c comm.Comm) error {
		r, err := worker(ctx, c, cfg)
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			mu.Lock()
			r0 = r
			mu.Unlock()
		}
		return finish(cfg, c.Rank(), r)
	})
	return r0, err
}

func (cfg config) optim() optim.Config { return optim.Config{Name: cfg.optimizer, LR: cfg.lr} }

// single trains on one process at -batch.
func single(ctx context.Context, cfg config) (result, error) {
	m, err := newModel(1)
	if err != nil {
		return result{}, err
	}
	gr, err := m.NewGraph(cfg.batch, true)
	if err != nil {
		return result{}, err
	}
	opt, err := optim.New(cfg.optim(), m.NumParams())
	if err != nil {
		return result{}, err
	}
	var r result
	for step := 0; step < cfg.steps; step++ {
		x, y := batch(step*cfg.batch, cfg.batch)
		if r.loss, err = gr.Step(ctx, x, y); err != nil {
			return result{}, err
		}
		opt.Step(m.Flat.Value, m.Flat.Grad)
		m.ZeroGrad()
	}
	r.params = m.Flat.Value
	return r, nil
}

// worker trains on one rank.
func worker(ctx context.Context, c comm.Comm, cfg config) (result, error) {
	seed := int64(1 + c.Rank()) // any seed: DDP and ZeRO broadcast rank 0's values
	if cfg.strategy == "pipeline" {
		seed = 1 // each stage keeps its own layers' values: the seed must agree
	}
	m, err := newModel(seed)
	if err != nil {
		return result{}, err
	}
	if cfg.strategy == "pipeline" {
		return pipe(ctx, c, m, cfg)
	}
	var r result
	var backward func(context.Context, func() error) error
	var update func() error
	var addGrad nn.GradHook
	var final func() error // fills r after training
	switch cfg.strategy {
	case "ddp":
		d, err := ddp.New(ctx, c, m, ddp.Options{})
		if err != nil {
			return result{}, err
		}
		opt, err := optim.New(cfg.optim(), m.NumParams())
		if err != nil {
			return result{}, err
		}
		backward, addGrad, update = d.Backward, d.AddGrad, func() error {
			opt.Step(m.Flat.Value, m.Flat.Grad)
			m.ZeroGrad()
			return nil
		}
		final = func() error { r.params = m.Flat.Value; return nil }
	case "zero1", "zero2", "zero3":
		e, err := zero.New(ctx, c, m, zero.Options{Stage: int(cfg.strategy[4] - '0'), Optim: cfg.optim()})
		if err != nil {
			return result{}, err
		}
		backward, addGrad, update = e.Backward, e.AddGrad, func() error { return e.Step(ctx) }
		final = func() (err error) {
			r.mem = e.Memory()
			r.params, err = e.FullParams(ctx)
			return err
		}
	default:
		return result{}, fmt.Errorf("unknown -strategy %q (none, ddp, zero1, zero2, zero3, pipeline)", cfg.strategy)
	}
	// Graphs are built after the strategy: ZeRO re-lays the parameters.
	gr, err := m.NewGraph(cfg.batch, true)
	if err != nil {
		return result{}, err
	}
	gr.OnGrad = addGrad // each gradient to the strategy as backward makes it
	for step := 0; step < cfg.steps; step++ {
		x, y := batch((step*c.Size()+c.Rank())*cfg.batch, cfg.batch)
		if r.loss, err = gr.StepIn(ctx, backward, x, y); err != nil {
			return result{}, fmt.Errorf("rank %d, step %d: %w", c.Rank(), step, err)
		}
		if err := update(); err != nil {
			return result{}, err
		}
	}
	return r, final()
}

// pipe trains the model as a pipeline of c.Size() stages.
func pipe(ctx context.Context, c comm.Comm, m *nn.Model, cfg config) (result, error) {
	p, err := pipeline.New(ctx, c, m, pipeline.Config{Micro: 2}, cfg.batch)
	if err != nil {
		return result{}, err
	}
	defer p.Close()
	_, n := p.Range()
	opt, err := optim.New(cfg.optim(), n)
	if err != nil {
		return result{}, err
	}
	var r result
	for step := 0; step < cfg.steps; step++ {
		x, y := batch(step*cfg.batch, cfg.batch)
		loss, err := p.Step(ctx, x, y)
		if err != nil {
			return result{}, fmt.Errorf("stage %d, step %d: %w", p.Stage(), step, err)
		}
		r.loss = float32(loss)
		p.Update(opt)
	}
	// Every stage holds its own layers' parameters: sum the stages' parts.
	all := make([]float32, m.NumParams())
	off, _ := p.Range()
	copy(all[off:], p.Params())
	if err := comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(all), comm.Sum)); err != nil {
		return result{}, err
	}
	r.params = all
	return r, nil
}

// finish reports the last loss and writes the parameters (rank 0).
func finish(cfg config, rank int, r result) error {
	if rank != 0 {
		return nil
	}
	fmt.Printf("%s: final loss %.6f\n", cfg.strategy, r.loss)
	if cfg.out == "" {
		return nil
	}
	return kit.Write(cfg.out, r.params)
}
