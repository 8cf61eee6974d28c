package train

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/data"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

// Config is one training run.
type Config struct {
	Model   string
	DataDir string // "" means data.DefaultDir; "synthetic" a generated set
	// Data, when set, is the training and test sets LoadData(cfg) would
	// return, loaded already: ranks in one process (an in-process launch)
	// share one copy instead of loading one each. Run only reads it.
	Data *Data
	// AfterStep, if set, runs on each rank after each training step, with
	// the rank and the number of steps done (for metrics, or to pace or
	// fail a run in tests).
	AfterStep   func(rank int, step int64)
	Epochs      int
	Batch       int // per rank
	EvalBatch   int // default 500
	LR          float64
	Optimizer   string // sgd | adam | adamw
	Momentum    float64
	WeightDecay float64
	Seed        int64
	Limit       int // cap on training samples (0: all)
	Pad         bool
	// Strategy is a registered strategy (Strategies; DefaultStrategy if
	// ""), and Options its own options (its Factory's Options: nil means
	// their defaults; see StrategyFlags for a command line's).
	Strategy string
	Options  Options
	// SyncBN makes the model's batch norms synchronise their statistics
	// over the ranks (package syncbn) before the strategy is built: a
	// change to the model that the data-parallel strategies share, not a
	// strategy (one that cannot take it says so in its Check).
	SyncBN bool
	// LocalRanks is how many ranks of the run share this host's cores (0:
	// unknown), for a strategy whose defaults depend on it (DDP
	// overlaps its all-reduces with backward only when the ranks leave
	// cores free).
	LocalRanks int
	Save       string
	// Resume is the checkpoint to go on from; "auto" resumes from Save's
	// checkpoint if there is one there (the last complete save: saves
	// commit atomically), and starts afresh otherwise.
	Resume   string
	MaxSteps int // stop (and save) after this many optimizer steps in this run; 0: no cap
	// SaveEvery also saves every this many steps (with Save), mid-epoch
	// too; 0: at the end of every epoch only.
	SaveEvery int
	// SyncSave writes every save before training goes on. By default a
	// strategy that can snapshot (DDP, ZeRO, the pipeline) copies what a
	// save writes and writes it in the background while training
	// continues; the save commits when every rank has written its part.
	SyncSave bool
	// Keep is how many checkpoints to keep at Save: the latest at Save,
	// the older ones at Save.<id>.safetensors; 0 or 1: the latest only.
	Keep int
	// Restarts is this run's restart number (a launcher restarted the job
	// after a failure; launch.RestartCount): a restarted run with Save
	// and no Resume resumes from Save's checkpoint, like Resume "auto",
	// and the summary counts the steps it recomputes.
	Restarts int
	// Restartable says a launcher may restart the job (its max restarts
	// are above 0): rank 0 then records the step it reached in
	// <Save>.progress, for the restart to count the steps it recomputes.
	Restartable bool
	Backend     string
	// Device is where the model trains: "cpu" (or "") on the host, or
	// "cuda" / "cuda:N" on a GPU (package gpu/devmodel), for a strategy
	// registered with Factory.Device (train/dp's ddp and zero1-3, one
	// rank or several). Checkpoints go through the host model, so a
	// checkpoint is the same file whichever device wrote it.
	Device string
	// Precision is the matrix products' precision on a GPU, by PyTorch's
	// names (package gpu/gemm): "fp32" (the default), "tf32"
	// (torch.backends.cuda.matmul.allow_tf32) or "bf16" (autocast to
	// bfloat16: the products' inputs; parameters, gradients, optimizer
	// state and the other layers stay fp32). -device cpu computes fp32.
	Precision string
	// World is the number of ranks, where known before the Comm exists
	// (a launcher sets it to the ranks it will start), so that Validate
	// checks the settings that depend on it; 0: unknown. Run sets it to
	// the Comm's size.
	World int
	// Stop, when closed on any rank, preempts the run: every rank
	// finishes the step under way, Run saves at that point (with Save)
	// and returns ErrPreempted. nil: never.
	Stop <-chan struct{}

	// The run's length, learning-rate schedule, clipping and evaluation
	// (schedule.go, clip.go).
	//
	// Steps ends the run at this many optimizer steps (counted over
	// resumes, like Position.Step) or at the end of Epochs, whichever
	// comes first; 0: Epochs alone. That length is what the schedule
	// spans; MaxSteps only stops this run early.
	Steps int64
	// Warmup raises the learning rate linearly from LR/Warmup to LR over
	// the first Warmup steps.
	Warmup int
	// LRSchedule is the rate after the warm-up: "constant" (or "") LR, or
	// "cosine", decaying from LR to FinalLR*LR at the run's last step.
	LRSchedule string
	// ClipGrad, when positive, scales every step's averaged gradient down
	// to this global L2 norm when its norm is larger (GradClipper).
	ClipGrad float64
	// EvalEvery, when positive, evaluates on the held-out set every
	// EvalEvery steps (an "eval" event), besides the evaluation at the
	// end of every epoch and of the run.
	EvalEvery int

	// BLASThreadsFrom says who chose this process's OpenBLAS thread
	// count (see nn.ChooseBLASThreads; the caller sets the count with
	// nn.SetBLASThreads): the summary reports it beside the count.
	BLASThreadsFrom string

	JSON     bool
	Progress io.Writer // rank 0's progress bar; nil for none
	Out      io.Writer // rank 0's events (JSON lines) or human summary
	// Reporter, when not nil, shows rank 0's progress and results instead
	// of the text or JSON lines on Out and the bar on Progress.
	Reporter Reporter
}

// MemoryBytes is the model state a rank holds persistently.
type MemoryBytes struct {
	Params    int64 `json:"params"`
	Grads     int64 `json:"grads"`
	Optimizer int64 `json:"optimizer"`
}

// Summary is the last JSON line.
type Summary struct {
	Event           string  `json:"event"`
	WorldSize       int     `json:"world_size"`
	Backend         string  `json:"backend"`
	Strategy        string  `json:"strategy"`
	SyncBN          bool    `json:"syncbn"`
	SyncBNMsPerStep float64 `json:"syncbn_ms_per_step,omitempty"` // rank 0's time in SyncBN collectives
	Model           string  `json:"model"`
	NumParams       int     `json:"num_params"`
	Optimizer       string  `json:"optimizer"`
	Batch           int     `json:"batch"`
	GlobalBatch     int     `json:"global_batch"`
	Epochs          int     `json:"epochs"`
	Steps           int64   `json:"steps"`
	TrainSamples    int     `json:"train_samples"`
	// SamplesPerSec is the samples trained (all ranks) divided by the
	// time spent inside the training steps: assembling the batch,
	// forward, backward, gradient reduction, the optimizer update and
	// the per-step loss check, summed over the steps of this run, on the
	// slowest rank. Start-up, evaluation and checkpoints are excluded;
	// slow steps (the first ones, a descheduled rank) count in full, so
	// it is the sustained mean rate. StepMsP50 is rank 0's median step.
	SamplesPerSec float64 `json:"samples_per_sec"`
	StepMsP50     float64 `json:"step_ms_p50"`
	// LoopSamplesPerSec is GlobalBatch / StepMsP50: the rate of a typical
	// step, as PyTorch training scripts print it (batch size over a step's
	// time, warm-up and stragglers aside). It is at least SamplesPerSec
	// when steps take about the same time.
	LoopSamplesPerSec float64 `json:"loop_samples_per_sec"`
	// BLASThreads is how many threads OpenBLAS uses in rank 0's process (0
	// without OpenBLAS), and BLASThreadsFrom who chose that number
	// (Config.BLASThreadsFrom: "default", "-blas-threads" or the
	// environment variable's name).
	BLASThreads     int     `json:"blas_threads"`
	BLASThreadsFrom string  `json:"blas_threads_from,omitempty"`
	TrainLoss       float64 `json:"train_loss"`
	EvalLoss        float64 `json:"eval_loss"`
	TestAccuracy    float64 `json:"test_accuracy"`
	// Language models: tokens (bytes) per second, held-out bits per byte,
	// and the unigram byte model's bits per byte on the same text (the
	// baseline to beat).
	TokensPerSec    float64     `json:"tokens_per_sec,omitempty"`
	EvalBPB         float64     `json:"eval_bpb,omitempty"`
	UnigramBPB      float64     `json:"unigram_bpb,omitempty"`
	ModelStateBytes MemoryBytes `json:"model_state_bytes"`
	// ModelStatePeakBytes adds the most held transiently (ZeRO-2's
	// gradient buckets) to the persistent model state.
	ModelStatePeakBytes int64 `json:"model_state_peak_bytes"`
	// With ClipGrad: the steps of this run whose gradient norm exceeded
	// it (and were scaled down), and the median norm before clipping.
	ClippedSteps int64   `json:"clipped_steps,omitempty"`
	GradNormP50  float64 `json:"grad_norm_p50,omitempty"`
	// LR is the learning rate of the run's last step (the schedule's).
	LR float64 `json:"lr"`
	// Pipeline holds the pipeline's measurements (-strategy pipeline:
	// its Report fills it in).
	Pipeline Detail `json:"pipeline,omitempty"`
	// CommBytesPerStep is what this rank moved per training step on the
	// training Comm (comm.Moved: sent, and read from or written into
	// peers' shared buffers by the zero-copy collectives; evaluation
	// excluded; SyncBN's own Comm not counted), CommBytesByTransport the
	// same per transport (shm, tcp, ...).
	CommBytesPerStep     float64            `json:"comm_bytes_per_step"`
	CommBytesByTransport map[string]float64 `json:"comm_bytes_per_step_by_transport,omitempty"`
	PeakRSSBytes         int64              `json:"peak_rss_bytes"`
	// Overlap says the strategy overlaps its gradient collectives with
	// backward (true unless its Report says otherwise: DDP's
	// -no-overlap), and Buckets how many buckets it reduces them in.
	Overlap bool `json:"overlap"`
	Buckets int  `json:"buckets"`
	// SharedMemory: the strategy's flat buffers (DDP's gradients, ZeRO
	// 1-2's parameters) lie in the Comm's shared memory, so their
	// collectives are zero-copy (comm.Alloc); SharedMemoryNote is why not
	// where the Comm has shared memory but no room for them.
	SharedMemory     bool    `json:"shared_memory"`
	SharedMemoryNote string  `json:"shared_memory_note,omitempty"`
	BLAS             string  `json:"blas"`
	WallSeconds      float64 `json:"wall_seconds"`
	// Saves is how many checkpoints this run wrote, SaveMsMean and
	// SaveMsMax how long training stood still for them.
	Saves      int     `json:"saves,omitempty"`
	SaveMsMean float64 `json:"save_ms_mean,omitempty"`
	SaveMsMax  float64 `json:"save_ms_max,omitempty"`
	// Restarts is the run's restart number (Config.Restarts) and
	// StepsRecomputed how many steps the restarts ran again: those the
	// failed generations took after their last checkpoint.
	Restarts        int   `json:"restarts,omitempty"`
	StepsRecomputed int64 `json:"steps_recomputed,omitempty"`
	// ResumedStep is the step this run resumed at (0: it started afresh).
	ResumedStep int64 `json:"resumed_step,omitempty"`
	// Device is where the model trained: "cpu" or "cuda:N"; with a GPU,
	// PeakDeviceBytes is the most device memory the model held at once
	// (rank 0's: devmodel's PeakBytes).
	Device          string  `json:"device"`
	Precision       string  `json:"precision,omitempty"` // with a GPU: fp32, tf32 or bf16
	PeakDeviceBytes int64   `json:"peak_device_bytes,omitempty"`
	Run             RunInfo `json:"-"`
}

// A Detail is a strategy's own section of the summary (Summary.Pipeline):
// a struct, encoded in the JSON line as it is, which says itself in one
// line of the text output (after the summary's).
type Detail interface {
	Text() string
}

// EpochEvent is printed after every epoch.
type EpochEvent struct {
	Event         string  `json:"event"`
	Epoch         int     `json:"epoch"`
	Steps         int64   `json:"steps"`
	TrainLoss     float64 `json:"train_loss"`
	EvalLoss      float64 `json:"eval_loss"`
	TestAccuracy  float64 `json:"test_accuracy"`
	SamplesPerSec float64 `json:"samples_per_sec"`
	Seconds       float64 `json:"seconds"`
	// Language models: tokens (bytes) per second and held-out bits per byte.
	TokensPerSec float64 `json:"tokens_per_sec,omitempty"`
	EvalBPB      float64 `json:"eval_bpb,omitempty"`
	Run          RunInfo `json:"-"`
}

// EvalEvent is printed every Config.EvalEvery steps.
type EvalEvent struct {
	Event        string  `json:"event"` // "eval"
	Step         int64   `json:"step"`
	Epoch        int     `json:"epoch"`      // the epoch under way, from 1
	TrainLoss    float64 `json:"train_loss"` // mean over the steps since the last "eval" event (all ranks)
	EvalLoss     float64 `json:"eval_loss"`
	TestAccuracy float64 `json:"test_accuracy"`
	EvalBPB      float64 `json:"eval_bpb,omitempty"` // language models
	LR           float64 `json:"lr"`                 // the last step's learning rate
	Seconds      float64 `json:"seconds"`            // since the run started
	Run          RunInfo `json:"-"`
}

// ErrPreempted is Run's error when Config.Stop stopped it: every rank
// finished the same step and, with Config.Save, saved there.
var ErrPreempted = errors.New("train: preempted")

// ErrConfig wraps every bad configuration.
var ErrConfig = errors.New("train: bad configuration")

func (c *Config) defaults() {
	if c.Model == "" {
		c.Model = "mlp"
	}
	if c.Optimizer == "" {
		c.Optimizer = "sgd"
	}
	if c.Strategy == "" {
		c.Strategy = DefaultStrategy
	}
	if f, ok := lookup(c.Strategy); ok && c.Options == nil && f.Options != nil {
		c.Options = f.Options()
	}
	if c.EvalBatch == 0 {
		c.EvalBatch = 500
	}
	if c.Device == "" {
		c.Device = "cpu"
	}
	if c.Precision == "" {
		c.Precision = "fp32"
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
}

// Validate reports the first bad setting.
func (c *Config) Validate() error {
	c.defaults()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case !models.Known(c.Model):
		return bad("unknown model %q (choose from %s)", c.Model, strings.Join(models.AllNames(), ", "))
	case c.Epochs < 1:
		return bad("-epochs %d: want at least 1", c.Epochs)
	case c.Batch < 1:
		return bad("-batch %d: want at least 1", c.Batch)
	case c.EvalBatch < 1:
		return bad("eval batch %d: want at least 1", c.EvalBatch)
	case !(c.LR > 0) || c.LR > math.MaxFloat32:
		return bad("-lr %v: want a positive number below %.4g (the optimizer computes in float32)", c.LR, math.MaxFloat32)
	case math.IsNaN(c.Momentum):
		return bad("-momentum %v: want a number in [0, 1)", c.Momentum)
	case !(c.WeightDecay >= 0) || c.WeightDecay > math.MaxFloat32:
		return bad("-weight-decay %v: want 0 or a positive number below %.4g", c.WeightDecay, math.MaxFloat32)
	case c.Limit < 0:
		return bad("-limit %d: want 0 (all) or more", c.Limit)
	case c.MaxSteps < 0:
		return bad("max steps %d is negative", c.MaxSteps)
	case c.SaveEvery < 0:
		return bad("-save-every %d: want 0 (every epoch) or a number of steps", c.SaveEvery)
	case c.Keep < 0:
		return bad("-keep %d: want 1 or more checkpoints", c.Keep)
	case c.SaveEvery > 0 && c.Save == "":
		return bad("-save-every %d needs -save (where to save)", c.SaveEvery)
	case c.Resume == "auto" && c.Save == "":
		return bad("-resume auto resumes from the -save checkpoint: set -save")
	case c.World < 0:
		return bad("world size %d is negative", c.World)
	case c.Steps < 0:
		return bad("-steps %d: want 0 (the -epochs decide) or more", c.Steps)
	case c.Warmup < 0:
		return bad("-warmup %d: want 0 (none) or more steps", c.Warmup)
	case c.LRSchedule != "" && c.LRSchedule != "constant" && c.LRSchedule != "cosine":
		return bad("-lr-schedule %q: want constant or cosine", c.LRSchedule)
	case c.ClipGrad < 0 || math.IsNaN(c.ClipGrad) || math.IsInf(c.ClipGrad, 0):
		return bad("-clip-grad %v: want a positive gradient norm (0: no clipping)", c.ClipGrad)
	case c.EvalEvery < 0:
		return bad("-eval-every %d: want 0 (at the end of each epoch only) or more steps", c.EvalEvery)
	}
	if _, _, err := models.Net(c.Model); err != nil {
		return bad("%v", err)
	}
	dev, err := c.CUDADevice()
	if err != nil {
		return err
	}
	switch c.Precision {
	case "fp32", "tf32", "bf16":
	default:
		return bad("-precision %q: want fp32, tf32 or bf16 (PyTorch's fp32 default, allow_tf32, autocast to bfloat16)", c.Precision)
	}
	if c.Precision != "fp32" && dev < 0 {
		return bad("-precision %s sets the matrix products' precision on a GPU: add -device cuda (the CPU path computes fp32)", c.Precision)
	}
	if _, err := checkStrategy(c); err != nil {
		return err
	}
	if c.SyncBN && c.Model != "cnn-bn" {
		return bad("-syncbn: model %s has no batch-norm layers (use -model cnn-bn)", c.Model)
	}
	if _, err := optim.New(c.OptimConfig(), 0); err != nil {
		return bad("%v", err)
	}
	if c.Save != "" {
		if err := checkSavePath(c.Save); err != nil {
			return bad("%v", err)
		}
	}
	return nil
}

// checkSavePath reports whether a checkpoint can be written at path: its
// directory exists and takes a new file, and path is not a directory.
func checkSavePath(path string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("-save %s is a directory: name a file in it, e.g. %s", path, filepath.Join(path, "run.safetensors"))
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("-save %s: directory %s does not exist: create it first", path, dir)
	case err != nil:
		return fmt.Errorf("-save %s: %v", path, err)
	case !st.IsDir():
		return fmt.Errorf("-save %s: %s is not a directory", path, strings.TrimSuffix(dir, string(filepath.Separator)))
	}
	// The name checkpoint.Write gives its temporary files, which the next
	// save removes if this one stays behind.
	f, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return fmt.Errorf("-save %s: cannot write in %s: %v", path, dir, err)
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// CUDADevice parses c.Device: the GPU's index for "cuda" (0) or
// "cuda:N", -1 for "cpu" (or ""), an error wrapping ErrConfig otherwise.
func (c *Config) CUDADevice() (int, error) {
	switch d := c.Device; {
	case d == "" || d == "cpu":
		return -1, nil
	case d == "cuda":
		return 0, nil
	case strings.HasPrefix(d, "cuda:"):
		if n, err := strconv.Atoi(d[len("cuda:"):]); err == nil && n >= 0 {
			return n, nil
		}
	}
	return 0, fmt.Errorf("%w: -device %q: want cpu, cuda or cuda:N (a GPU's index)", ErrConfig, c.Device)
}

// DeviceName is c.Device as the summary reports it: "cpu" or "cuda:N".
func (c *Config) DeviceName() string {
	n, err := c.CUDADevice()
	if err != nil || n < 0 {
		return "cpu"
	}
	return "cuda:" + strconv.Itoa(n)
}

// OptimConfig is the optimizer c configures.
func (c *Config) OptimConfig() optim.Config {
	o := optim.Config{Name: c.Optimizer, LR: c.LR, Momentum: c.Momentum, WeightDecay: c.WeightDecay}
	switch c.Optimizer {
	case "sgd", "momentum":
	default: // -momentum is sgd's (and gorgonia's momentum solver's)
		o.Momentum = 0
	}
	return o
}

// Samples is a training or test set as the loop reads it: Len samples of
// SampleSize inputs and LabelsPerSample labels each (1 for an image's
// class; one per position for a language model's text window).
// *data.Dataset and *data.TextSplit are Samples.
type Samples interface {
	Len() int
	SampleSize() int
	LabelsPerSample() int
	Batch(idx []int, x []float32, y []int32) error
}

// limited is the first n samples of a set.
type limited struct {
	Samples
	n int
}

func (l limited) Len() int { return l.n }

func limit(s Samples, n int) Samples {
	if d, ok := s.(*data.Dataset); ok {
		return d.Limit(n)
	}
	if n <= 0 || n >= s.Len() {
		return s
	}
	return limited{s, n}
}

// CheckData checks, before any worker starts, that cfg's training data
// is there and, after -limit, gives each of the model's replicas on
// cfg.World ranks (the strategy's Check says how many) at least one batch
// (the sampler's rules), so that a launcher can refuse what would make
// every worker fail. It reads no more than it must: the headers of the
// Fashion-MNIST files (data.Count), of a text corpus only that it
// exists.
func CheckData(cfg Config) error {
	if _, ok := textModel(cfg.Model); ok {
		path := cfg.DataDir
		if path == "" {
			path = data.DefaultCorpus()
		}
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("-data: text corpus: %w", err)
		}
		return nil
	}
	var n int
	switch dir := cfg.DataDir; dir {
	case "synthetic":
		n = syntheticTrain
	default:
		if dir == "" {
			dir = data.DefaultDir
		}
		var err error
		if n, err = data.Count(dir, "train"); err != nil {
			return err
		}
	}
	world, err := cfg.Replicas()
	if err != nil {
		return err
	}
	if cfg.Limit > 0 {
		n = min(n, cfg.Limit)
	}
	smp := data.Sampler{N: n, World: max(world, 1), Batch: cfg.Batch, Seed: cfg.Seed, Pad: cfg.Pad}
	if err := smp.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return nil
}

// Replicas is the number of the model's replicas that train on distinct
// data (the data-parallel degree) with c.World ranks, as c's strategy
// says (its Factory's Check); 0 when c.World is 0. It checks the
// strategy's settings as Validate does.
func (c Config) Replicas() (int, error) {
	c.defaults()
	return checkStrategy(&c)
}

// evalWindows is how many held-out windows a text evaluation reads.
const evalWindows = 1024

// spreadSet is n samples of a set, evenly spaced.
type spreadSet struct {
	Samples
	n int
}

func (s spreadSet) Len() int { return s.n }
func (s spreadSet) Batch(idx []int, x []float32, y []int32) error {
	m := make([]int, len(idx))
	for k, i := range idx {
		if i < 0 || i >= s.n {
			return fmt.Errorf("train: sample %d of %d", i, s.n)
		}
		m[k] = i * s.Samples.Len() / s.n
	}
	return s.Samples.Batch(m, x, y)
}

func spread(s Samples, n int) Samples {
	if n >= s.Len() {
		return s
	}
	return spreadSet{s, n}
}

// textModel reports whether cfg's model reads text, and its context.
func textModel(name string) (context int, ok bool) {
	if !strings.HasPrefix(name, "gpt") {
		return 0, false
	}
	_, in, err := models.Net(name)
	if err != nil || len(in) != 1 {
		return 0, false
	}
	return in[0], true
}

// Data is a training and a test set (Config.Data).
type Data struct{ Train, Test Samples }

// syntheticTrain is the training set size of -data synthetic.
const syntheticTrain = 6000

// LoadData returns the training and test sets for cfg: Fashion-MNIST (or
// a synthetic set) for the image models; for the language models (gpt),
// the text at cfg.DataDir (a file, or every file below a directory) or by
// default the Go source tree's .go files (data.DefaultCorpus), held-out
// files chosen by path.
func LoadData(cfg Config) (trainSet, testSet Samples, err error) {
	if ctx, ok := textModel(cfg.Model); ok {
		path, ext := cfg.DataDir, ""
		if path == "" {
			path, ext = data.DefaultCorpus(), ".go"
		}
		t, err := data.LoadText(path, ext, ctx)
		if err != nil {
			return nil, nil, err
		}
		// Evaluate on evalWindows windows spread evenly over the held-out
		// split (all of it would take minutes at every evaluation).
		return t.Split(false), spread(t.Split(true), evalWindows), nil
	}
	if cfg.DataDir == "synthetic" {
		// One generated set (same class prototypes), split
		// syntheticTrain / 1000.
		all := data.Synthetic(syntheticTrain+1000, 1)
		test := *all
		test.N = 1000
		test.Images = all.Images[syntheticTrain*all.SampleSize():]
		test.Labels = all.Labels[syntheticTrain:]
		return all.Limit(syntheticTrain), &test, nil
	}
	dir := cfg.DataDir
	if dir == "" {
		dir = data.DefaultDir
	}
	tr, err := data.Load(dir, "train")
	if err != nil {
		return nil, nil, err
	}
	te, err := data.Load(dir, "test")
	if err != nil {
		return nil, nil, err
	}
	return tr, te, nil
}

// testHookUpdate, when a test sets it, runs on each rank right after
// each update, with the step it took (a test makes an update diverge).
var testHookUpdate func(rank int, step int64, m *models.Model)

// finite reports whether f is neither NaN nor infinite.
func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// nextPos is the position after batch k of epoch's nb, steps taken.
func nextPos(epoch, k, nb int, steps int64) Position {
	if k+1 == nb {
		return Position{Epoch: epoch + 1, Step: steps}
	}
	return Position{Epoch: epoch, Batch: k + 1, Step: steps}
}

// stopRequested reports whether stop is closed.
func stopRequested(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// checkStep tells every rank, after a step, whether any rank asked to
// stop (stopReq) and the least of the ranks' save statuses (saving: see
// saver.status), and returns an error on every rank if any rank's loss at
// step is NaN or infinite, naming the step and the first such rank.
// Collective: one small all-reduce.
func checkStep(ctx context.Context, c comm.Comm, loss float32, stopReq bool, saving int32, step int64, epoch, batch int) (stop bool, allSaving int32, err error) {
	bad := []int32{int32(c.Size()), 0, saving} // first bad rank, -1 if any rank stops, save status
	finite := !math.IsNaN(float64(loss)) && !math.IsInf(float64(loss), 0)
	if !finite {
		bad[0] = int32(c.Rank())
	}
	if stopReq {
		bad[1] = -1
	}
	if err := comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(bad), comm.Min)); err != nil {
		return false, 0, fmt.Errorf("train: step %d: checking the loss: %w", step, err)
	}
	if int(bad[0]) == c.Size() {
		return bad[1] < 0, bad[2], nil
	}
	what := ""
	if !finite && int(bad[0]) == c.Rank() {
		what = fmt.Sprintf(" (%v)", loss)
	}
	return false, 0, fmt.Errorf("%w at step %d (epoch %d, batch %d): rank %d's loss is not finite%s; lower -lr (or check the data)",
		ErrDiverged, step, epoch+1, batch, bad[0], what)
}

// syncBuffers gives every rank rank 0's batch-norm running statistics (as
// PyTorch DDP's broadcast_buffers does), before evaluation and saving.
func syncBuffers(ctx context.Context, c comm.Comm, m *models.Model) error {
	for _, b := range m.BNs {
		for _, v := range [][]float32{b.RunningMean, b.RunningVar} {
			if err := comm.Run(ctx)(c.Broadcast(ctx, comm.FromSlice(v), 0)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Evaluate runs the evaluation graph over the test set, sharded over the
// ranks, and returns the mean cross-entropy and the accuracy (the same on
// every rank).
// With ZeRO-3 or a pipeline, run it inside Strategy.Eval.
func Evaluate(ctx context.Context, c comm.Comm, ev *models.Graph, ds Samples) (loss, acc float64, err error) {
	m := ev.M
	k := m.Classes()
	return EvaluateBatches(ctx, c, m, ev.Batch, ds, func(x []float32, y []int32) (float64, int, error) {
		n := len(y)
		logits, err := ev.Logits(x[:cap(x)])
		if err != nil {
			return 0, 0, err
		}
		correct := 0
		for i := 0; i < n; i++ {
			best := 0
			for j := 1; j < k; j++ {
				if logits[i*k+j] > logits[i*k+best] {
					best = j
				}
			}
			if int32(best) == y[i] {
				correct++
			}
		}
		return models.CrossEntropy(logits[:n*k], y[:n], k), correct, nil
	})
}

// An EvalBatch evaluates one batch of samples (x, y as Strategy.Step
// takes them; at most the evaluation batch, fewer at the end of the set)
// and returns the mean cross-entropy over its labels and how many labels
// are the argmax of their logits (the first largest).
type EvalBatch func(x []float32, y []int32) (loss float64, correct int, err error)

// EvaluateBatches is Evaluate with eval for the evaluation graph: this
// rank's share of ds in batches of batch samples (x's capacity is always
// the whole batch, the samples past len(x) zero), the losses and counts
// all-reduced. Collective.
func EvaluateBatches(ctx context.Context, c comm.Comm, m *models.Model, batch int, ds Samples, eval EvalBatch) (loss, acc float64, err error) {
	rank, world := c.Rank(), c.Size()
	lps := m.LabelsPerSample()
	b := batch
	var mine []int
	for i := rank; i < ds.Len(); i += world {
		mine = append(mine, i)
	}
	x := make([]float32, b*m.InputSize())
	y := make([]int32, b*lps)
	var sums [3]float64 // loss sum, correct, count (over labels)
	for lo := 0; lo < len(mine); lo += b {
		hi := min(lo+b, len(mine))
		idx := mine[lo:hi]
		clear(x)
		xs, ys := x[:len(idx)*m.InputSize()], y[:len(idx)*lps]
		if err := ds.Batch(idx, xs, ys); err != nil {
			return 0, 0, err
		}
		l, correct, err := eval(xs, ys)
		if err != nil {
			return 0, 0, err
		}
		n := len(ys)
		sums[0] += l * float64(n)
		sums[1] += float64(correct)
		sums[2] += float64(n)
	}
	v := sums[:]
	if err := comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(v), comm.Sum)); err != nil {
		return 0, 0, err
	}
	if v[2] == 0 {
		return 0, 0, fmt.Errorf("train: empty test set")
	}
	return v[0] / v[2], v[1] / v[2], nil
}

// unigram is the unigram baseline in bits per byte of a text test set (0
// for other sets).
func unigram(s Samples) float64 {
	if sp, ok := s.(spreadSet); ok {
		s = sp.Samples
	}
	if t, ok := s.(*data.TextSplit); ok {
		return t.T.UnigramBits()
	}
	return 0
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// peakRSS is the process's peak resident set size (VmHWM), or 0 if unknown.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}
