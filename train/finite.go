package train

// Divergence: no NaN or infinite value is ever saved.
//
// The per-step check (checkStep) looks at the step's loss, computed from
// the parameters before that step's update; an update can still make the
// parameters non-finite with a finite loss (a learning rate beyond
// float32's range did: Inf times a finite gradient). So every save first
// checks, on every rank, the state its part of the save would write
// (saver.checkFinite): the parameters this rank updates, its optimizer
// state and the batch-norm buffers. A non-finite value anywhere stops
// every rank with nothing written, and the last checkpoint stays. The
// model file's write checks its own tensors once more (a ZeRO-3 rank
// holds no whole parameters to check beforehand; rank 0 gathers them for
// the model file).

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/gdist/gdist/checkpoint"
	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

// ErrDiverged wraps the error of a run whose loss or state turned NaN or
// infinite.
var ErrDiverged = errors.New("train: training diverged")

// firstNonFinite returns the index of v's first NaN or infinite value, or
// -1 when every value is finite.
func firstNonFinite(v []float32) int {
	const exp = 0x7f800000 // every exponent bit set: Inf or NaN
	for i := 0; i < len(v); i += 1024 {
		blk := v[i:min(i+1024, len(v))]
		// Branch-free over a block: t is 0 exactly for a non-finite
		// value, and (t-1)>>31 is then 1 (t is below 1<<31 otherwise).
		var bad uint32
		for _, x := range blk {
			t := math.Float32bits(x)&exp ^ exp
			bad |= (t - 1) >> 31
		}
		if bad == 0 {
			continue
		}
		for j, x := range blk {
			if math.Float32bits(x)&exp == exp {
				return i + j
			}
		}
	}
	return -1
}

// StateChecker is what a strategy implements to say whether the state its
// rank would save is finite (the built-in strategies do; for others Run
// checks the model's flat parameters).
type StateChecker interface {
	// NonFinite names the first NaN or infinite value of the state this
	// rank's part of a save would write (its parameters, its optimizer
	// state), or returns "" when every value is finite. Local.
	NonFinite() string
}

// ParamsNonFinite names the first non-finite value of v, which holds the
// model's flat parameters from offset off on, or returns "".
func ParamsNonFinite(m *models.Model, v []float32, off int) string {
	i := firstNonFinite(v)
	if i < 0 {
		return ""
	}
	at := off + i
	for _, p := range m.Params {
		if at >= p.Offset && at < p.Offset+p.Size {
			return fmt.Sprintf("parameter %s holds %v", p.Name, v[i])
		}
	}
	return fmt.Sprintf("parameter value %d holds %v", at, v[i])
}

// OptimizerNonFinite names the first non-finite value of opt's state, or
// returns "".
func OptimizerNonFinite(opt optim.Optimizer) string {
	st, _ := opt.State()
	names := make([]string, 0, len(st))
	for k := range st {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if i := firstNonFinite(st[k]); i >= 0 {
			return fmt.Sprintf("optimizer state %s holds %v", k, st[k][i])
		}
	}
	return ""
}

// buffersNonFinite names the first non-finite batch-norm running
// statistic, or returns "".
func buffersNonFinite(m *models.Model) string {
	for _, b := range m.BNs {
		for _, v := range []struct {
			name string
			v    []float32
		}{{"running_mean", b.RunningMean}, {"running_var", b.RunningVar}} {
			if i := firstNonFinite(v.v); i >= 0 {
				return fmt.Sprintf("buffer %s.%s holds %v", b.Prefix, v.name, v.v[i])
			}
		}
	}
	return ""
}

// stateNonFinite is this rank's check before a save: the strategy's
// (StateChecker) or the model's flat parameters, and the batch-norm
// buffers.
func stateNonFinite(strat Strategy, m *models.Model) string {
	var what string
	if sc, ok := strat.(StateChecker); ok {
		what = sc.NonFinite()
	} else if m.Flat != nil {
		what = ParamsNonFinite(m, m.Flat.Value, 0)
	}
	if what == "" {
		what = buffersNonFinite(m)
	}
	return what
}

// tensorsNonFinite names the first float32 tensor of ts with a NaN or
// infinite value, or returns "".
func tensorsNonFinite(ts []checkpoint.Tensor) string {
	for _, t := range ts {
		if t.DType != "F32" {
			continue
		}
		v, err := t.Float32s()
		if err != nil {
			continue
		}
		if i := firstNonFinite(v); i >= 0 {
			return fmt.Sprintf("tensor %s holds %v", t.Name, v[i])
		}
	}
	return ""
}

// divergedError is the error of a run stopped at step because rank's
// state or loss is not finite (what: this rank's finding, or "" for
// another rank's); it says what became of the checkpoint at save.
func divergedError(step int64, rank int, what, save string) error {
	if what != "" {
		what = " (" + what + ")"
	}
	return fmt.Errorf("%w at step %d: rank %d's %s%s; lower -lr (or check the data). %s",
		ErrDiverged, step, rank, "state is not finite", what, lastCheckpointNote(save, step))
}

// lastCheckpointNote says, after a divergence at step, that nothing was
// saved from it on and where the last checkpoint at save is.
func lastCheckpointNote(save string, step int64) string {
	if save == "" {
		return "Nothing was saved (no -save)"
	}
	meta, err := readMeta(save)
	switch {
	case err != nil:
		return fmt.Sprintf("Nothing was saved at or after step %d; there is no checkpoint at %s", step, save)
	case meta["step"] != "":
		if s, err := strconv.ParseInt(meta["step"], 10, 64); err == nil && s < step {
			return fmt.Sprintf("Nothing was saved at or after step %d: %s still holds step %d, from before the divergence (go on from it with a lower -lr and -resume auto)", step, save, s)
		}
	}
	return fmt.Sprintf("Nothing was saved at or after step %d: the checkpoint at %s stays as it was", step, save)
}

// checkFinite makes every rank agree, before a save at step, that the
// state each would write is finite (what: this rank's finding, "" when
// finite); otherwise every rank returns the same ErrDiverged naming the
// first bad rank. Collective: one small all-reduce.
func checkFinite(ctx context.Context, c comm.Comm, what string, step int64, save string) error {
	bad := []int32{int32(c.Size())}
	if what != "" {
		bad[0] = int32(c.Rank())
	}
	if err := comm.Run(ctx)(c.AllReduce(ctx, comm.FromSlice(bad), comm.Min)); err != nil {
		return fmt.Errorf("train: step %d: checking the state before saving: %w", step, err)
	}
	if int(bad[0]) == c.Size() {
		return nil
	}
	if int(bad[0]) != c.Rank() {
		what = ""
	}
	return divergedError(step, int(bad[0]), what, save)
}
