// Package syncbn is SyncBatchNorm for any Model whose batch-norm layers
// take a synchronisation hook (nn models have it): batch normalisation
// whose batch statistics span every rank of a Comm (or a sub-group), so that
// N ranks at batch B normalise exactly as one rank at batch N*B would.
//
// It works on every backend (inproc, tcp; the collectives are plain CPU
// ones) and with uneven per-rank batches, a rank with an empty batch
// included. Per batch-norm layer and step:
//
//   - forward: one all-gather of each rank's per-channel (count, mean, M2),
//     combined on every rank, in rank order, with Chan et al.'s pairwise
//     formula: M2 = M2a + M2b + delta^2 na nb / (na + nb). Summing
//     sum(x) and sum(x^2) instead would lose every digit of the variance
//     when the mean is large; the all-gather costs the same one round.
//   - backward: one all-reduce (sum) of [sum dy, sum dy*xhat].
//
// The scale and shift gradients stay per rank (DDP averages them with the
// other gradients), the running mean and the unbiased running variance are
// updated from the global statistics, so they are identical on every rank,
// and eval mode uses them. Convert switches a model's batch-norm layers to
// SyncBatchNorm, like PyTorch's convert_sync_batchnorm.
//
// Device (device.go) is the same for batch norms that run on a GPU
// (gpu/devmodel), over a Comm that takes device buffers (nccl): the
// all-gather and all-reduce on the device, the records combined by a
// kernel with Combine's operations (the same bits), every step ordered
// with the model's stream by CUDA events, the host not waiting.
package syncbn

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gdist/gdist/comm"
)

// Syncer synchronises batch-norm statistics over a Comm (the hook Model.SetBatchNormSync takes).
type Syncer struct {
	C comm.Comm
	// Timeout bounds each collective (0: the Comm's own default). A lost
	// peer is reported by the Comm well before it.
	Timeout time.Duration
	// Layers is how many layers Convert switched over.
	Layers int

	spent atomic.Int64 // nanoseconds inside collectives
	calls atomic.Int64
	owned bool // C is Convert's duplicate: Close closes it
}

// Spent is the time this rank spent in SyncBN's collectives (waiting for
// the slowest rank included) and how many it ran.
func (s *Syncer) Spent() (time.Duration, int64) {
	return time.Duration(s.spent.Load()), s.calls.Load()
}

// Close releases the Comm Convert made. It does not close a Comm the caller
// put in C.
func (s *Syncer) Close() error {
	if s == nil || !s.owned {
		return nil
	}
	return s.C.Close()
}

// Hook returns the function to put in a BNLayer's Sync field. Each call
// runs its collective under the ctx it is given (the graph step's), bounded
// further by Timeout when set.
func (s *Syncer) Hook() func(ctx context.Context, stage string, buf []float64) error {
	return func(ctx context.Context, stage string, buf []float64) error {
		t0 := time.Now()
		defer func() {
			s.spent.Add(int64(time.Since(t0)))
			s.calls.Add(1)
		}()
		if ctx == nil {
			return comm.InvalidArgf("syncbn: %s statistics without a context: run the graph with Step(ctx, ...)", stage)
		}
		if s.Timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, s.Timeout)
			defer cancel()
		}
		switch stage {
		case "forward":
			return s.forward(ctx, buf)
		case "backward":
			return comm.Run(ctx)(s.C.AllReduce(ctx, comm.FromSlice(buf), comm.Sum))
		}
		return comm.InvalidArgf("syncbn: unknown stage %q", stage)
	}
}

// forward turns this rank's [sum (C), M2 (C), count] into the values of
// the union of every rank's batch.
func (s *Syncer) forward(ctx context.Context, buf []float64) error {
	if len(buf)%2 != 1 {
		return comm.InvalidArgf("syncbn: forward statistics of length %d, want 2C+1", len(buf))
	}
	c := len(buf) / 2
	n := buf[2*c]
	// Send (count, mean, M2): means are what Chan's formula combines.
	mine := make([]float64, 2*c+1)
	mine[0] = n
	for ch := 0; ch < c; ch++ {
		if n > 0 {
			mine[1+ch] = buf[ch] / n
		}
		mine[1+c+ch] = buf[c+ch]
	}
	p := s.C.Size()
	all := make([]float64, p*len(mine))
	if err := comm.Run(ctx)(s.C.AllGather(ctx, comm.FromSlice(all), comm.FromSlice(mine))); err != nil {
		return fmt.Errorf("syncbn: gathering batch statistics: %w", err)
	}
	count, mean, m2 := Combine(all, p, c)
	for ch := 0; ch < c; ch++ {
		buf[ch] = mean[ch] * count
		buf[c+ch] = m2[ch]
	}
	buf[2*c] = count
	return nil
}

// Combine merges p ranks' (count, mean[C], M2[C]) records, laid out one
// after the other in all, in rank order (Chan, Golub and LeVeque's
// pairwise update). Ranks with count 0 are skipped.
func Combine(all []float64, p, c int) (count float64, mean, m2 []float64) {
	mean, m2 = make([]float64, c), make([]float64, c)
	rec := 2*c + 1
	for r := 0; r < p; r++ {
		nb := all[r*rec]
		if nb <= 0 {
			continue
		}
		mb, m2b := all[r*rec+1:r*rec+1+c], all[r*rec+1+c:r*rec+1+2*c]
		na := count
		n := na + nb
		for ch := 0; ch < c; ch++ {
			delta := mb[ch] - mean[ch]
			mean[ch] += delta * nb / n
			m2[ch] += m2b[ch] + delta*delta*na*nb/n
		}
		count = n
	}
	return count, mean, m2
}

// Model is a model whose batch-norm layers can synchronise: it sets fn
// as every such layer's hook (nil: per rank) and says how many it has.
// fn is called during the forward pass with stage "forward" and the
// layer's [sum (C), M2 (C), count], which it replaces by the values over
// all ranks, and during backward with "backward" and [sum dy (C),
// sum dy*xhat (C)], which it sums over all ranks; ctx is the context of the
// graph step that runs the layer and bounds the collectives. *nn.Model has it.
type Model interface {
	SetBatchNormSync(fn func(ctx context.Context, stage string, buf []float64) error) int
}

// Convert makes every batch-norm layer of m synchronise over c and
// returns the Syncer (Layers says how many it converted; 0 if m has no
// batch norm). The layers talk on a duplicate of c (a Split with one
// color), so their small, blocking collectives never queue behind DDP's
// gradient buckets; Convert is therefore a blocking collective over c.
// Close the Syncer after training.
func Convert(ctx context.Context, m Model, c comm.Comm) (*Syncer, error) {
	if m == nil || c == nil {
		return nil, comm.InvalidArgf("syncbn: nil model or comm")
	}
	if m.SetBatchNormSync(nil) == 0 {
		return &Syncer{C: c}, nil
	}
	dup, err := c.Split(ctx, 0, c.Rank())
	if err != nil {
		return nil, fmt.Errorf("syncbn: %w", err)
	}
	s := &Syncer{C: dup, owned: true}
	s.Layers = m.SetBatchNormSync(s.Hook())
	return s, nil
}

// Revert makes m's batch-norm layers per-rank again.
func Revert(m Model) { m.SetBatchNormSync(nil) }
