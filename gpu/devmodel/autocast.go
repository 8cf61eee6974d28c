package devmodel

import "github.com/gdist/gdist/gpu/gemm"

// bf16 autocast's weight cache (package gemm): the products' engine
// keeps a bf16 copy of the parameters it is given (Engine.Weights), cast
// once per change, which the model announces wherever its parameters
// are written: Update, CopyFromHost, and a Stage's likewise. A strategy
// that writes Params itself (a gather or broadcast into them) calls
// ParamsChanged. With Config.ShardParams (ZeRO-3) nothing is registered:
// the products read each unit's gathered block, gathered again before
// backward, which is cast as it is read (the cache would save nothing).

// cacheWeights registers the parameter buffer at p (n float32s, an
// allocation of the model's) with the engine.
func (d *Model) cacheWeights(p uintptr, n int) {
	if d.h != nil && !d.cfg.ShardParams {
		d.h.Weights(p, n)
	}
}

// ParamsChanged tells the matrix products that the parameters were
// written by other means than the model's own methods (which say so
// themselves): an all-gather or broadcast into Params, a copy into them.
// Call it once the write is queued (or done), before the next step or
// evaluation; under bf16 autocast the products would otherwise go on
// reading the bf16 copies of the old values. Cheap; a no-op in fp32 and
// tf32.
func (d *Model) ParamsChanged() {
	if d.h != nil {
		d.h.WeightsChanged()
	}
}

// Casts counts the values the model's matrix products have cast to bf16
// so far (bf16 autocast through cuBLAS; zero otherwise), by kind: the
// difference of two readings is a step's (gemm.CastStats).
func (d *Model) Casts() gemm.CastStats {
	if d.h == nil {
		return gemm.CastStats{}
	}
	return d.h.CastStats()
}

// Casts counts the values the stage's matrix products have cast to bf16
// so far, as Model.Casts.
func (s *Stage) Casts() gemm.CastStats { return s.d.Casts() }
