package flat

// Store supplies a model's parameters when no rank holds all of them (ZeRO
// stage 3 keeps a shard per rank). Layers written for it fetch their
// parameters inside their forward op and again inside their backward op,
// release them right after, and hand their gradients to the store, so a
// rank holds full parameters only for the layer at work (and what the
// store prefetches).
//
// Calls come from the goroutine running the graph, in graph order, which
// is the same on every rank. Indices are span indices.
type Store interface {
	// Fetch returns the full values of the listed parameters (in span
	// layout), valid until Release. backward says which pass asks.
	Fetch(params []int, backward bool) ([][]float32, error)
	Release(params []int)
	// AddGrad takes parameter i's gradient from this backward pass. The
	// store owns g from then on (the layers allocate it for each call).
	AddGrad(i int, g []float32) error
}
