// Package pipeline trains a sequential model split into K stages, one per
// rank, with micro-batch pipelining (GPipe and 1F1B schedules).
//
// Every rank holds the whole Model (built from the same seed: a pipeline
// broadcasts nothing) but computes and updates only its stage's layers, whose parameters are one contiguous range of the
// model's flat parameter and gradient buffers (Range). A later
// data-parallel group over the replicas of one stage can all-reduce that
// range as one buffer.
//
// The pipeline adapts the model, not the reverse: Model is generic in the
// model's own stage type, so any nn model built on a Sequential is a Model
// as it is (nn.Model.NewStage returns *nn.StageGraph, and nn does not
// import this package), and New, Split and the profiling functions infer
// that type from their argument.
//
// Stages are given as layer boundaries, or chosen by Balance (equal
// parameter counts) or BalanceTime (equal compute, from ProfileLayers'
// per-layer timings; the last stage is charged no recomputation, and a
// Model that is a Sampler, as every nn model is, is timed on its own kind
// of input, such as token ids): Split picks by Config.Balance, identically
// on every rank. A pipeline's bubble
// matches (K-1)/(M+K-1) only when its stages take equal time.
//
// A batch is split into M micro-batches (sizes differ by at most one).
// Stage s receives each micro-batch's input activation from stage s-1
// (Recv, tag 2i), runs its layers and sends the output to stage s+1
// (Send, tag 2i); the last stage computes the loss and its gradient and
// sends the gradient with respect to its input back (tag 2i+1), and so on
// down to stage 0. All messages are asynchronous: the receive for the next
// micro-batch's input is posted before the current one is computed, the
// receive for a micro-batch's output gradient as soon as its forward pass
// is done, and sends are waited for only at the end of the step, so
// communication overlaps compute.
//
// Backward passes recompute the stage's forward pass from the saved input
// (see Stage), so a stage holds only the input of each
// micro-batch in flight: GPipe M on every stage but the last, 1F1B at most
// K-s on stage s. The last stage fuses each micro-batch's forward and
// backward, so it holds one under both schedules.
//
// The loss of each micro-batch is its mean cross-entropy multiplied by
// microBatch/batch, so the gradients accumulated in Grad over the M
// micro-batches are those of the whole batch's mean loss: a pipeline step
// matches one step of the unsplit model on the whole batch.
//
// Stats records each stage's busy and idle time and every op's compute
// time per step; Replay runs a schedule on paper with instant messages
// from such op times, which separates the bubble that the schedule, stage
// imbalance and compute jitter impose from what communication adds.
//
// Batch norm is not supported (micro-batch statistics differ from the
// batch's).
package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/optim"
)

// Config selects the split and the schedule.
type Config struct {
	// Boundaries are the K+1 layer indices that delimit the stages:
	// stage s runs layers [Boundaries[s], Boundaries[s+1]). Nil: chosen
	// by Balance.
	Boundaries []int
	// Balance is how stages are chosen when Boundaries is nil: ByParams
	// ("" too) or ByTime (every rank profiles the layers and the best few
	// splits' stages on a micro-batch; see Split).
	Balance string
	// Micro is the number of micro-batches per batch (0: K).
	Micro int
	// Schedule is GPipe or OneFOneB ("" means OneFOneB).
	Schedule string
}

// Stats are one stage's cumulative measurements.
type Stats struct {
	Steps int
	// Busy is the time spent computing; Idle the time spent waiting for
	// messages (received activations and gradients, and the end-of-step
	// sends and loss broadcast).
	Busy, Idle time.Duration
	// PeakHeld is the largest number of micro-batch inputs held at once
	// for a later backward pass; PeakHeldBytes their size.
	PeakHeld      int
	PeakHeldBytes int64
	// OpTimes[j][o] is the compute time of Ops()[o] in step j (the first
	// MaxOpSteps steps), for Replay.
	OpTimes [][]time.Duration
}

// MaxOpSteps caps how many steps' op times Stats keeps.
const MaxOpSteps = 4096

// Pipeline is one rank's stage. It is not safe for concurrent use.
type Pipeline struct {
	c          comm.Comm
	m          model
	stage, k   int
	from, to   int
	off, n     int
	batch      int
	sizes      []int // micro-batch sizes
	starts     []int // first sample of each micro-batch
	ops        []Op
	graphs     map[int]Stage // by micro-batch size
	boundaries []int
	stats      Stats
}

// New builds rank c.Rank()'s stage of m for batches of batch samples.
// c.Size() is the number of stages K. Every rank must pass the same cfg and
// batch, and a model built from the same seed.
func New[S Stage](ctx context.Context, c comm.Comm, m Model[S], cfg Config, batch int) (*Pipeline, error) {
	return newPipeline(ctx, c, erase(m), cfg, batch)
}

func newPipeline(ctx context.Context, c comm.Comm, m model, cfg Config, batch int) (*Pipeline, error) {
	k := c.Size()
	micro := cfg.Micro
	if micro == 0 {
		micro = k
	}
	if micro < 1 || micro > batch {
		return nil, fmt.Errorf("pipeline: %d micro-batches for a batch of %d", micro, batch)
	}
	b := cfg.Boundaries
	if b == nil {
		var err error
		if b, err = split(ctx, c, m, k, cfg.Balance, (batch+micro-1)/micro); err != nil {
			return nil, err
		}
	} else if err := checkBoundaries(m, b, k); err != nil {
		return nil, err
	}
	sched := cfg.Schedule
	if sched == "" {
		sched = OneFOneB
	}
	p := &Pipeline{c: c, m: m, stage: c.Rank(), k: k, batch: batch,
		graphs: map[int]Stage{}, boundaries: append([]int(nil), b...)}
	p.from, p.to = b[p.stage], b[p.stage+1]
	p.off, p.n = m.StageRange(p.from, p.to)
	var err error
	if p.ops, err = Ops(sched, k, p.stage, micro); err != nil {
		return nil, err
	}
	// A Comm that sets up per-peer resources for send/recv (nccl: NCCL
	// communicators) makes them now, for the neighbours, in an order all
	// stages share, before any operation is in flight.
	if pc, ok := c.(comm.PeerConnector); ok {
		var peers []int
		if p.stage > 0 {
			peers = append(peers, p.stage-1)
		}
		if p.stage < k-1 {
			peers = append(peers, p.stage+1)
		}
		if err := pc.ConnectPeers(ctx, peers); err != nil {
			return nil, fmt.Errorf("pipeline: stage %d: connecting to its neighbours: %w", p.stage, err)
		}
	}
	p.sizes, p.starts = SplitBatch(batch, micro)
	for _, sz := range p.sizes {
		if p.graphs[sz] == nil {
			g, err := m.newStage(p.from, p.to, sz, p.stage == k-1)
			if err != nil {
				p.Close()
				return nil, err
			}
			p.graphs[sz] = g
		}
	}
	return p, nil
}

// Split chooses the boundaries of k stages of m by balance (ByParams or
// ByTime), the same on every rank of c. With ByTime every rank of c, once
// all are quiet (a garbage collection, then a barrier), profiles the
// layers on micro-batches of micro samples and times the stages of the
// best few splits as wholes, as in BalanceMeasured; the ranks combine
// their timings by taking the fastest of each (the least disturbed) and so
// reach the same choice. Profiling on every rank at once measures under the
// load of training, when every core is busy.
func Split[S Stage](ctx context.Context, c comm.Comm, m Model[S], k int, balance string, micro int) ([]int, error) {
	return split(ctx, c, erase(m), k, balance, micro)
}

func split(ctx context.Context, c comm.Comm, m model, k int, balance string, micro int) ([]int, error) {
	switch balance {
	case "", ByParams:
		return Balance(m, k)
	case ByTime:
	default:
		return nil, fmt.Errorf("pipeline: unknown balance %q (want %q or %q)", balance, ByParams, ByTime)
	}
	b, err := splitByTime(ctx, c, m, k, micro)
	if err != nil {
		return nil, err
	}
	if err := checkBoundaries(m, b, k); err != nil {
		return nil, err
	}
	return b, nil
}

// Stage is this rank's stage index.
func (p *Pipeline) Stage() int { return p.stage }

// Layers is the stage's layer range [from, to).
func (p *Pipeline) Layers() (from, to int) { return p.from, p.to }

// Boundaries are the K+1 layer indices delimiting all stages.
func (p *Pipeline) Boundaries() []int { return append([]int(nil), p.boundaries...) }

// Stats returns the stage's cumulative measurements.
func (p *Pipeline) Stats() Stats {
	st := p.stats
	st.OpTimes = append([][]time.Duration(nil), st.OpTimes...)
	return st
}

// MicroBatches lists the micro-batch sizes.
func (p *Pipeline) MicroBatches() []int { return append([]int(nil), p.sizes...) }

// Ops is this stage's schedule.
func (p *Pipeline) Ops() []Op { return append([]Op(nil), p.ops...) }

// Range is the stage's parameter range [off, off+n) of Flat and Grad.
func (p *Pipeline) Range() (off, n int) { return p.off, p.n }

// Params and Grads are views of the stage's range of Flat and Grad.
func (p *Pipeline) Params() []float32 { return p.m.FlatParams().Value[p.off : p.off+p.n] }

// Grads: see Params.
func (p *Pipeline) Grads() []float32 { return p.m.FlatParams().Grad[p.off : p.off+p.n] }

func (p *Pipeline) last() bool        { return p.stage == p.k-1 }
func (p *Pipeline) graph(i int) Stage { return p.graphs[p.sizes[i]] }

// Update applies opt (made for Range's n elements) to this stage's
// parameters and zeroes their gradients.
func (p *Pipeline) Update(opt optim.Optimizer) {
	opt.Step(p.Params(), p.Grads())
	clear(p.Grads())
}

// Close releases the stage's graphs (not the Comm).
func (p *Pipeline) Close() error {
	var err error
	for _, g := range p.graphs {
		if e := g.Close(); err == nil {
			err = e
		}
	}
	return err
}

func tagF(i int) int { return 2 * i }
func tagB(i int) int { return 2*i + 1 }

type pending struct {
	buf []float32
	w   comm.Work
}

// Step runs one batch through the pipeline: x holds batch samples of input
// (read by stage 0 only; other stages may pass nil) and y batch labels
// (read by the last stage only). Parameter gradients are added into this
// stage's range of the model's Grad; apply the optimizer with Update. It
// returns the batch's mean loss on every rank (broadcast from the last
// stage).
//
// On any error (communication or this stage's own compute) the Comm is
// aborted (comm.Abort), which fails the other stages' operations at once:
// close the Comm and build a new one.
func (p *Pipeline) Step(ctx context.Context, x []float32, y []int32) (float64, error) {
	if p.stage == 0 && len(x) != p.batch*p.m.InputSize() {
		return 0, fmt.Errorf("pipeline: got %d input floats, want %d", len(x), p.batch*p.m.InputSize())
	}
	if p.last() && (len(y) < p.batch || len(y)%p.batch != 0) {
		return 0, fmt.Errorf("pipeline: got %d labels for a batch of %d (want a positive multiple: labels per sample x batch)", len(y), p.batch)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // on error: fails pending operations (and tells peers)
	loss, err := p.step(ctx, x, y)
	if err != nil {
		err = fmt.Errorf("pipeline: stage %d: %w", p.stage, err)
		// A failure in this stage's own compute leaves no operation in
		// flight to fail: abort the Comm so that no stage waits for us.
		comm.Abort(p.c, err)
		return 0, err
	}
	p.stats.Steps++
	return loss, nil
}

func (p *Pipeline) step(ctx context.Context, x []float32, y []int32) (float64, error) {
	M := len(p.sizes)
	in := p.m.InputSize()
	var (
		sends   []comm.Work
		fwd     = map[int]pending{} // posted receives of input activations
		bwd     = map[int]pending{} // posted receives of output gradients
		held    = map[int][]float32{}
		heldB   int64
		lossSum float64
	)
	wait := func(w comm.Work) error {
		t0 := time.Now()
		err := w.Wait(ctx)
		p.stats.Idle += time.Since(t0)
		return err
	}
	postFwd := func(i int) error {
		if p.stage == 0 || i >= M {
			return nil
		}
		buf := make([]float32, p.graph(i).InSize())
		w, err := p.c.Recv(ctx, comm.FromSlice(buf), p.stage-1, tagF(i))
		if err != nil {
			return err
		}
		fwd[i] = pending{buf, w}
		return nil
	}
	postBwd := func(i int) error {
		buf := make([]float32, p.graph(i).OutSize())
		w, err := p.c.Recv(ctx, comm.FromSlice(buf), p.stage+1, tagB(i))
		if err != nil {
			return err
		}
		bwd[i] = pending{buf, w}
		return nil
	}
	send := func(buf []float32, peer, tag int) error {
		if buf == nil {
			return nil
		}
		w, err := p.c.Send(ctx, comm.FromSlice(buf), peer, tag)
		if err != nil {
			return err
		}
		sends = append(sends, w)
		return nil
	}
	// input returns micro-batch i's input: a view of x on stage 0, else the
	// received activation (and posts the receive for the next one).
	input := func(i int) ([]float32, error) {
		if p.stage == 0 {
			s := p.starts[i] * in
			return x[s : s+p.sizes[i]*in], nil
		}
		r := fwd[i]
		delete(fwd, i)
		if err := wait(r.w); err != nil {
			return nil, err
		}
		return r.buf, postFwd(i + 1)
	}
	if err := postFwd(0); err != nil {
		return 0, err
	}
	var times []time.Duration
	if len(p.stats.OpTimes) < MaxOpSteps {
		times = make([]time.Duration, len(p.ops))
	}
	busy := func(o int, t0 time.Time) {
		d := time.Since(t0)
		p.stats.Busy += d
		if times != nil {
			times[o] = d
		}
	}
	for o, op := range p.ops {
		i, g := op.Micro, p.graph(op.Micro)
		switch {
		case p.last():
			xi, err := input(i)
			if err != nil {
				return 0, err
			}
			p.hold(1, int64(len(xi))*4)
			g.SetScale(float32(p.sizes[i]) / float32(p.batch))
			t0 := time.Now()
			per := len(y) / p.batch // labels per sample (a sequence model's positions)
			l, dx, err := g.Step(xi, y[p.starts[i]*per:(p.starts[i]+p.sizes[i])*per])
			busy(o, t0)
			if err != nil {
				return 0, err
			}
			lossSum += float64(l) * float64(p.sizes[i])
			if p.stage > 0 {
				if err := send(dx, p.stage-1, tagB(i)); err != nil {
					return 0, err
				}
			}
		case !op.Backward:
			xi, err := input(i)
			if err != nil {
				return 0, err
			}
			held[i] = xi
			heldB += int64(len(xi)) * 4
			p.hold(len(held), heldB)
			t0 := time.Now()
			out, err := g.Forward(xi)
			busy(o, t0)
			if err != nil {
				return 0, err
			}
			if err := send(out, p.stage+1, tagF(i)); err != nil {
				return 0, err
			}
			if err := postBwd(i); err != nil {
				return 0, err
			}
		default:
			r := bwd[i]
			delete(bwd, i)
			if err := wait(r.w); err != nil {
				return 0, err
			}
			xi := held[i]
			t0 := time.Now()
			dx, err := g.Backward(xi, r.buf)
			busy(o, t0)
			if err != nil {
				return 0, err
			}
			delete(held, i)
			heldB -= int64(len(xi)) * 4
			if p.stage > 0 {
				if err := send(dx, p.stage-1, tagB(i)); err != nil {
					return 0, err
				}
			}
		}
	}
	for _, w := range sends {
		if err := wait(w); err != nil {
			return 0, err
		}
	}
	// Every rank reports the loss.
	lb := []float64{lossSum / float64(p.batch)}
	w, err := p.c.Broadcast(ctx, comm.FromSlice(lb), p.k-1)
	if err != nil {
		return 0, err
	}
	if err := wait(w); err != nil {
		return 0, err
	}
	if times != nil {
		p.stats.OpTimes = append(p.stats.OpTimes, times)
	}
	return lb[0], nil
}

func (p *Pipeline) hold(n int, bytes int64) {
	p.stats.PeakHeld = max(p.stats.PeakHeld, n)
	p.stats.PeakHeldBytes = max(p.stats.PeakHeldBytes, bytes)
}
