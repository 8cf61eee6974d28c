package devmodel

// SetPlanRegion switches the training plans' region (memory.go) for the
// plans compiled until restore is called: off, each buffer is a pool
// block of its own, held the whole step (the layout before the region).
func SetPlanRegion(on bool) (restore func()) {
	was := planRegion
	planRegion = on
	return func() { planRegion = was }
}

// BlockBytes is what the pool held for a request of n bytes (the plans'
// blocks before the region).
func BlockBytes(n int64) int64 { return blockBytes(int(n)) }
