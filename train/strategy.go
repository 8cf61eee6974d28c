package train

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/models"
)

// Strategy is how the ranks share the work of training: each rank holds
// one, built by the Factory registered under Config.Strategy. Run calls
// its methods from one goroutine, in this order: Load (when resuming),
// Step and Update for every batch (with ClipGrads between them and SetLR
// before Update when the strategy is a GradClipper or an LRSetter and
// the run clips or schedules), Eval and Save after every epoch,
// Memory and Report at the end, then Close.
//
// A method marked collective must be called by every rank of the training
// Comm, in the same order (it may issue collectives on that Comm or on
// Comms the strategy split from it); the others are local to the rank.
// Every blocking method takes ctx and returns ctx's error if it ends
// first.
type Strategy interface {
	// DataRank places this rank among the model's replicas: ranks that
	// share a replica (a pipeline's stages) have the same rank and take
	// the same samples; world is the number of replicas, the
	// data-parallel degree (the Comm's size for DDP and ZeRO).
	DataRank() (rank, world int)

	// Step runs forward and backward on this rank's batch (x: Batch
	// samples of the model's input size, y: their labels; Batch is
	// Setup.Config.Batch) on the strategy's own training graph, and
	// synchronises the gradients: after it they hold the average over
	// the replicas, wherever the strategy keeps them. It returns this
	// rank's mean loss. Collective.
	Step(ctx context.Context, x []float32, y []int32) (loss float32, err error)

	// Update steps the optimizer on the synchronised gradients and
	// zeroes them: the strategy owns the optimizer and the gradient
	// buffers, and the next Step starts from zero gradients. Collective
	// (ZeRO all-gathers the updated parameters).
	Update(ctx context.Context) error

	// Eval runs eval, one whole forward-only evaluation with graphs built
	// from the model by the caller (eval may issue collectives on the
	// training Comm), with every parameter in reach of those graphs: a
	// pipeline first gathers its stages' parameters onto every rank,
	// ZeRO-3 gathers each layer's parameters inside its ops under ctx.
	// Collective.
	Eval(ctx context.Context, eval func() error) error

	// Save writes a checkpoint of the model, the optimizer state and
	// pos at path (checkpoint.go describes the formats: DDP's two files,
	// or ZeRO's shard files and model file), adding meta to the files'
	// metadata. Collective: every rank returns an error if any rank
	// failed, naming it, so that no rank goes on alone.
	Save(ctx context.Context, path string, pos Position, meta map[string]string) error

	// Load restores the checkpoint at path, of either format, saved by
	// any strategy on any number of ranks (LoadCheckpoint), into the
	// model and this rank's optimizer (or its part of it), and returns
	// the position to go on from. Every rank reads the files itself; Run
	// calls it right after the Factory, before the first Step. Errors
	// wrap ErrCheckpoint.
	Load(ctx context.Context, path string) (Position, error)

	// Memory reports the model state this rank holds persistently, and
	// the most it held on top of that transiently during a step (ZeRO-2's
	// buckets, ZeRO-3's gathered layers, a pipeline's activations).
	Memory() (held MemoryBytes, transient int64)

	// Report fills in the strategy's own fields of the summary (Buckets,
	// Pipeline); Run has filled in the rest. Collective.
	Report(ctx context.Context, s *Summary) error

	// Close releases what the Factory built (graphs, Comms split from
	// the training Comm), not the training Comm or the model.
	io.Closer
}

// Setup is what a Factory builds a strategy from.
type Setup struct {
	// Comm is the training Comm: all ranks.
	Comm comm.Comm
	// Model is this rank's model, built with Config.Seed (every rank's
	// alike) and, with -syncbn, already converted. Resumed state is
	// loaded after the Factory (Strategy.Load).
	Model *models.Model
	// Config is the run's configuration, validated.
	Config Config
}

// Factory builds and checks one registered strategy.
type Factory struct {
	// New builds this rank's strategy for s.Model on s.Comm: it makes
	// every rank start from rank 0's parameters, builds the optimizer
	// and the training graph(s) (the model's layout is final once New
	// returns: Run builds the evaluation graph after it). Collective.
	New func(ctx context.Context, s Setup) (Strategy, error)
	// Check, when not nil, validates the strategy's own settings in cfg
	// and fills in their defaults; Config.Validate calls it after the
	// common checks and wraps its error in ErrConfig.
	Check func(cfg *Config) error
	// Doc describes the strategy in a few words (for -help).
	Doc string
}

var (
	stratMu    sync.Mutex
	strategies = map[string]Factory{}
)

// Register makes a strategy available as Config.Strategy = name. Call it
// from an init function. It panics if the name is empty or taken, or if
// f.New is nil.
func Register(name string, f Factory) {
	stratMu.Lock()
	defer stratMu.Unlock()
	switch _, dup := strategies[name]; {
	case name == "":
		panic("train: Register with an empty strategy name")
	case f.New == nil:
		panic("train: strategy " + name + " registered with a nil New")
	case dup:
		panic("train: strategy " + name + " registered twice")
	}
	strategies[name] = f
}

// Strategies lists the registered strategy names, sorted.
func Strategies() []string {
	stratMu.Lock()
	defer stratMu.Unlock()
	out := make([]string, 0, len(strategies))
	for n := range strategies {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// StrategyDoc is the Doc of the strategy registered as name ("" if none).
func StrategyDoc(name string) string {
	f, _ := lookup(name)
	return f.Doc
}

func lookup(name string) (Factory, bool) {
	stratMu.Lock()
	defer stratMu.Unlock()
	f, ok := strategies[name]
	return f, ok
}

// checkStrategy validates cfg.Strategy and its own settings.
func checkStrategy(cfg *Config) error {
	f, ok := lookup(cfg.Strategy)
	if !ok {
		return fmt.Errorf("%w: unknown -strategy %q (choose from %s)", ErrConfig, cfg.Strategy, strings.Join(Strategies(), ", "))
	}
	if cfg.Strategy != "pipeline" && (cfg.Stages != 0 || cfg.Microbatches != 0) {
		return fmt.Errorf("%w: -stages and -microbatches apply to -strategy pipeline only (this run: %s)", ErrConfig, cfg.Strategy)
	}
	if f.Check == nil {
		return nil
	}
	err := f.Check(cfg)
	if err != nil && !errors.Is(err, ErrConfig) {
		err = fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return err
}

// NewStrategy builds cfg's strategy (cfg validated) for m on c, as Run
// does before it loads a checkpoint. Collective.
func NewStrategy(ctx context.Context, c comm.Comm, m *models.Model, cfg Config) (Strategy, error) {
	f, ok := lookup(cfg.Strategy)
	if !ok {
		return nil, fmt.Errorf("%w: unknown -strategy %q", ErrConfig, cfg.Strategy)
	}
	return f.New(ctx, Setup{Comm: c, Model: m, Config: cfg})
}

// errDDPOnly is what a strategy other than DDP says of DDP's flags.
var errDDPOnly = errors.New("-no-overlap, -compress and -debug apply to -strategy ddp only")

// ddpFlagsSet reports whether cfg sets a flag only DDP implements.
func ddpFlagsSet(cfg *Config) bool {
	return cfg.NoOverlap || cfg.Compress != "" && cfg.Compress != "none" || cfg.Debug
}
