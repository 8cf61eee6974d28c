package train

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"reflect"
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
	// Config is the run's configuration, validated: Config.Options holds
	// the strategy's own options (never nil when its Factory has some).
	Config Config
}

// A BatchEvaluator is a Strategy that evaluates batches where its model
// lives (a GPU strategy, on its device) instead of through the host's
// evaluation graph: Run's evaluations call EvalBatches in place of Eval.
type BatchEvaluator interface {
	// EvalBatches calls eval (which runs EvaluateBatches over this
	// rank's share of the test set) with the strategy's EvalBatch, and
	// returns its error. Collective.
	EvalBatches(ctx context.Context, eval func(batch EvalBatch) error) error
}

// An EvalSharder is a BatchEvaluator whose ranks do not each evaluate
// their own samples: EvaluateBatches splits the test set over EvalComm's
// ranks and sums the results over them (a pipeline's replicas, whose
// stage ranks evaluate the same batches).
type EvalSharder interface {
	EvalComm() comm.Comm
}

// Options are a strategy's own settings (Config.Options): a pointer to a
// struct of the strategy's package, each of whose settings has a
// command-line flag.
type Options interface {
	// AddFlags defines on fs a flag for each option, bound to it, with
	// its current value as the flag's default. A flag's String must read
	// back with its Set (as the flag package's own do): the settings the
	// ranks compare are the flags' values (Config.Settings), and
	// StrategyFlags copies them.
	AddFlags(fs *flag.FlagSet)
}

// Factory is one registered strategy: what it is, its own options, how
// they are checked, and how it is built.
type Factory struct {
	// Doc describes the strategy in a few words (for -help).
	Doc string
	// Options, when not nil, returns new options of the strategy at
	// their defaults; Config.Options nil means these. Their flags are
	// defined on a command line with AddStrategyFlags.
	Options func() Options
	// Check, when not nil, validates the strategy's settings in cfg
	// (cfg.Options is the strategy's own, a copy that Check may fill in)
	// and returns the number of model replicas that train on distinct
	// data, the data-parallel degree, with cfg.World ranks (0 when
	// cfg.World is 0: unknown). Config.Validate calls it after the
	// common checks and wraps its error in ErrConfig. nil: nothing to
	// check, and every rank is a replica.
	Check func(cfg *Config) (replicas int, err error)
	// New builds this rank's strategy for s.Model on s.Comm: it makes
	// every rank start from rank 0's parameters, builds the optimizer
	// and the training graph(s) (the model's layout is final once New
	// returns: Run builds the evaluation graph after it). Collective.
	New func(ctx context.Context, s Setup) (Strategy, error)
	// CheckpointCopies is how many more copies of the parameters than
	// the model file's a checkpoint holds, besides the optimizer state
	// (ZeRO's shard files: 1), for the check that -save has room.
	CheckpointCopies int
	// Device says the strategy trains on a GPU as well (Config.Device
	// "cuda"); its Check refuses the settings it cannot do there. A
	// strategy without it is refused with -device cuda.
	Device bool
}

var (
	stratMu    sync.Mutex
	strategies = map[string]Factory{}
)

// DefaultStrategy is Config.Strategy's default.
const DefaultStrategy = "ddp"

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

// checkStrategy validates cfg.Strategy and its options (filling in the
// strategy's defaults when cfg.Options is nil; a copy otherwise, which
// the strategy's Check may fill in: the ranks of one process share the
// caller's) and returns the data-parallel degree with cfg.World ranks.
func checkStrategy(cfg *Config) (replicas int, err error) {
	f, ok := lookup(cfg.Strategy)
	if !ok {
		return 0, fmt.Errorf("%w: unknown -strategy %q (choose from %s)", ErrConfig, cfg.Strategy, strings.Join(Strategies(), ", "))
	}
	switch {
	case f.Options == nil && cfg.Options != nil:
		return 0, fmt.Errorf("%w: -strategy %s takes no options (Config.Options is a %T)", ErrConfig, cfg.Strategy, cfg.Options)
	case f.Options == nil:
	case cfg.Options == nil:
		cfg.Options = f.Options()
	case reflect.TypeOf(cfg.Options) != reflect.TypeOf(f.Options()):
		return 0, fmt.Errorf("%w: Config.Options is a %T, not -strategy %s's %T", ErrConfig, cfg.Options, cfg.Strategy, f.Options())
	default:
		cfg.Options = copyOptions(cfg.Options)
	}
	if n, _ := cfg.CUDADevice(); n >= 0 && !f.Device {
		var on []string
		for _, name := range Strategies() {
			if g, _ := lookup(name); g.Device {
				on = append(on, name)
			}
		}
		return 0, fmt.Errorf("%w: -strategy %s cannot train on -device %s yet (strategies that can: %s); use -device cpu", ErrConfig, cfg.Strategy, cfg.Device, strings.Join(on, ", "))
	}
	if f.Check == nil {
		return cfg.World, nil
	}
	replicas, err = f.Check(cfg)
	if err != nil && !errors.Is(err, ErrConfig) {
		err = fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return replicas, err
}

// copyOptions returns a copy of o, a pointer to a struct (o itself
// otherwise).
func copyOptions(o Options) Options {
	v := reflect.ValueOf(o)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return o
	}
	c := reflect.New(v.Elem().Type())
	c.Elem().Set(v.Elem())
	return c.Interface().(Options)
}

// optionSettings lists o's flags as "-flag value", sorted by name.
func optionSettings(o Options) []string {
	if o == nil {
		return nil
	}
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	copyOptions(o).AddFlags(fs)
	var out []string
	fs.VisitAll(func(f *flag.Flag) { out = append(out, "-"+f.Name+" "+f.Value.String()) })
	return out
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
