package pipeline

import "github.com/gdist/gdist/flat"

// Layers is what splitting a sequential model by parameter count needs:
// its layers in order and where each keeps its parameters.
type Layers interface {
	// NumLayers is the number of layers a stage boundary may fall
	// between.
	NumLayers() int
	// LayerParamRange is layer i's first parameter index, its parameter
	// count and its number of scalars.
	LayerParamRange(i int) (first, count, scalars int)
}

// Model is what the pipeline needs of a sequential model: its layers in
// order, where each range of layers keeps its parameters, and a compiled
// graph for any range. Every rank holds the whole model (built from the
// same seed) and runs only its stage's range.
//
// S is the model's own stage type, so that a model need not know this
// package: nn.Model, whose NewStage returns *nn.StageGraph, is a
// Model[*nn.StageGraph], and every function here that takes a Model
// infers S from the argument (pipeline.New(ctx, c, m, cfg, batch) with m
// an *nn.Model). A model that returns Stage itself is a Model[Stage].
type Model[S Stage] interface {
	Layers
	// StageRange is the range [off, off+n) of the flat buffers holding
	// the parameters of layers [from, to).
	StageRange(from, to int) (off, n int)
	// InputSize is the number of floats per sample.
	InputSize() int
	FlatParams() *flat.Params
	// NewStage compiles layers [from, to) for micro-batches of batch
	// samples; last adds the loss.
	NewStage(from, to, batch int, last bool) (S, error)
}

// Sampler is implemented by a Model whose input or labels are not
// arbitrary (token ids for an embedding, a label per position for a
// language model). Sample returns n samples of valid input and their
// labels, drawn from seed. Balancing by time (ProfileLayers,
// MeasureStages, Split with ByTime) profiles the first and the last layer
// on them; without it, the first layer gets uniform floats in [-0.5, 0.5)
// and the last one label 0 per sample. nn.Model implements it.
type Sampler interface {
	Sample(n int, seed uint64) (x []float32, y []int32)
}

// Stage is a compiled range of layers for one micro-batch size. Its
// parameter gradients are added into the model's flat gradient buffer.
type Stage interface {
	// Forward runs the layers on x and returns their output.
	Forward(x []float32) ([]float32, error)
	// Backward recomputes the forward pass from x, back-propagates
	// gradOut and returns the gradient with respect to x.
	Backward(x, gradOut []float32) ([]float32, error)
	// Step (last stage) runs forward, loss and backward, returning the
	// mean loss and the gradient with respect to x.
	Step(x []float32, y []int32) (float32, []float32, error)
	InSize() int
	OutSize() int
	// SetScale multiplies the loss before differentiation (the share of
	// the batch in a micro-batch).
	SetScale(s float32)
	// DropGrads makes the stage discard parameter gradients (profiling).
	DropGrads()
	Close() error
}

// model is a Model with its stage type erased: what the rest of the
// package works on.
type model interface {
	Layers
	StageRange(from, to int) (off, n int)
	InputSize() int
	FlatParams() *flat.Params
	newStage(from, to, batch int, last bool) (Stage, error)
	sampler() (Sampler, bool)
}

// erased adapts a Model[S] to model.
type erased[S Stage] struct{ Model[S] }

func erase[S Stage](m Model[S]) model { return erased[S]{m} }

func (e erased[S]) newStage(from, to, batch int, last bool) (Stage, error) {
	s, err := e.NewStage(from, to, batch, last)
	if err != nil {
		return nil, err // not a typed nil in a Stage
	}
	return s, nil
}

func (e erased[S]) sampler() (Sampler, bool) {
	s, ok := e.Model.(Sampler)
	return s, ok
}
