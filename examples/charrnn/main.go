// Command charrnn trains a character-level GRU language model that
// builds a new graph for every step, unrolled to that step's sequence
// length (the LispMachine style of gorgonia's own charRNN example), on
// one process and data parallel with gdist: the model keeps its
// parameters as tensors, gdist re-backs them in place once
// (ddp.WrapValues, zero.WrapValues), and each step hands the step's
// gradients over with AddGrads.
//
//	go run ./examples/charrnn -strategy none -batch 8                 # one process, 8 sequences a step
//	go run ./examples/charrnn -strategy ddp -nproc 2 -batch 4         # 2 processes x 4: the same steps
//	go run ./examples/charrnn -strategy zero2 -nproc 2 -batch 4 -dtype float32
//
// The optimizer is gorgonia's RMSProp with gradient clipping, the
// program's own solver: DDP runs it on the averaged gradients; ZeRO-2
// shards its state, running the same rules from optim.FromSolver on each
// rank's shard. With -out FILE rank 0 writes the final parameters
// (float64, little endian) there: the test compares the runs with them.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"math"
	"os"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/ddp"
	"github.com/gdist/gdist/flat"
	"github.com/gdist/gdist/launch"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/zero"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	_ "github.com/gdist/gdist/comm/auto"
	_ "github.com/gdist/gdist/comm/shm"
	_ "github.com/gdist/gdist/comm/tcp"
)

type config struct {
	strategy, backend, dtype, out string
	nproc, steps, batch           int
	lr                            float64
}

func main() {
	var cfg config
	flag.StringVar(&cfg.strategy, "strategy", "ddp", "none (one process, no gdist), ddp or zero2")
	flag.StringVar(&cfg.backend, "backend", "auto", "inproc (ranks as goroutines), tcp, shm or auto")
	flag.StringVar(&cfg.dtype, "dtype", "float64", "float64 or float32 parameters")
	flag.IntVar(&cfg.nproc, "nproc", 2, "ranks")
	flag.IntVar(&cfg.steps, "steps", 40, "training steps")
	flag.IntVar(&cfg.batch, "batch", 4, "sequences per rank and step")
	flag.Float64Var(&cfg.lr, "lr", 0.01, "learning rate (RMSProp)")
	flag.StringVar(&cfg.out, "out", "", "write rank 0's final parameters to this file")
	flag.Parse()
	if err := run(context.Background(), cfg); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, cfg config) error {
	if cfg.dtype != "float64" && cfg.dtype != "float32" {
		return fmt.Errorf("unknown -dtype %q (float64, float32)", cfg.dtype)
	}
	switch cfg.strategy {
	case "none":
		return single(cfg)
	case "ddp", "zero2":
	default:
		return fmt.Errorf("unknown -strategy %q (none, ddp, zero2)", cfg.strategy)
	}
	return launch.Ranks(ctx, launch.Job{NProc: cfg.nproc, Backend: cfg.backend}, func(ctx context.Context, c comm.Comm) error {
		return worker(ctx, c, cfg)
	})
}

func (cfg config) dt() tensor.Dtype {
	if cfg.dtype == "float32" {
		return tensor.Float32
	}
	return tensor.Float64
}

// solver is the program's optimizer: gorgonia's RMSProp with clipping.
func (cfg config) solver() G.Solver {
	return G.NewRMSPropSolver(G.WithLearnRate(cfg.lr), G.WithClip(1))
}

// single is the model trained the plain gorgonia way, on one process: a
// new graph each step, a LispMachine (forward and backward), the solver.
func single(cfg config) error {
	m := newGRU(cfg.dt(), 1)
	solver := cfg.solver()
	var loss float64
	for k := 0; k < cfg.steps; k++ {
		s, err := m.build(k, 0, cfg.batch)
		if err != nil {
			return err
		}
		vm := G.NewLispMachine(s.g)
		err = vm.RunAll()
		vm.Close()
		if err != nil {
			return err
		}
		if err := solver.Step(G.NodesToValueGrads(s.nodes)); err != nil {
			return err
		}
		loss = lossValue(s.loss)
	}
	return finish(cfg, 0, m, loss)
}

// worker is the same loop on one rank: the lines marked gdist are what
// changes.
func worker(ctx context.Context, c comm.Comm, cfg config) error {
	m := newGRU(cfg.dt(), 1+c.Rank()) // any seed: rank 0's values are broadcast
	chars, _ := vocab()
	if err := comm.CheckSame(ctx, c, "the vocabulary", []byte(string(chars))); err != nil { // gdist: the same numbering on every rank
		return err
	}
	values := make([]flat.Value, len(names))
	for i, p := range m.params {
		values[i] = flat.Value{Name: names[i], T: p} // gdist: the tensors the model keeps
	}
	var backward func(context.Context, func() error) error
	var addGrads func([]*G.Node) error
	var update func() error
	if cfg.strategy == "ddp" {
		d, err := ddp.WrapValues(ctx, c, values, ddp.Options{}) // gdist
		if err != nil {
			return err
		}
		defer d.Close()
		solver := cfg.solver()
		backward, addGrads = d.Backward, d.AddGrads
		update = func() error { return solver.Step(d.ValueGrads()) } // the averaged gradients
	} else {
		// ZeRO shards the optimizer's state, so it runs the update: the
		// same RMSProp, options and all.
		oc, err := optim.FromSolver(cfg.solver())
		if err != nil {
			return err
		}
		e, err := zero.WrapValues(ctx, c, values, zero.Options{Stage: 2, Optim: oc}) // gdist
		if err != nil {
			return err
		}
		defer e.Close()
		backward, addGrads = e.Backward, e.AddGrads
		update = func() error { return e.Step(ctx) }
	}
	var loss float64
	for k := 0; k < cfg.steps; k++ {
		var s *step
		// gdist: build graphs one at a time (ranks may be goroutines).
		err := flat.Build(func() (err error) {
			s, err = m.build(k, c.Rank()*cfg.batch, cfg.batch) // this rank's sequences of the global batch
			return err
		})
		if err != nil {
			return err
		}
		vm := G.NewLispMachine(s.g)
		err = backward(ctx, func() error { // gdist: forward, backward, average
			if err := vm.RunAll(); err != nil {
				return err
			}
			return addGrads(s.nodes) // gdist: this graph's gradients, in values' order
		})
		vm.Close()
		if err != nil {
			return fmt.Errorf("rank %d, step %d: %w", c.Rank(), k, err)
		}
		if err := update(); err != nil {
			return err
		}
		loss = lossValue(s.loss) // this rank's sequences
	}
	return finish(cfg, c.Rank(), m, loss)
}

// finish reports the last step's loss and writes the parameters.
func finish(cfg config, rank int, m *gru, loss float64) error {
	if rank != 0 {
		return nil
	}
	fmt.Printf("%s %s: last loss %.6f\n", cfg.strategy, cfg.dtype, loss)
	if cfg.out == "" {
		return nil
	}
	p := m.flat()
	b := make([]byte, 8*len(p))
	for i, v := range p {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
	}
	return os.WriteFile(cfg.out, b, 0o644)
}
