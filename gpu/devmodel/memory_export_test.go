package devmodel

// SetShareMemory switches the training plans' sharing of memory between
// buffers whose lives do not meet (memory.go) for the plans compiled
// until restore is called: off, every buffer is held the whole step.
func SetShareMemory(on bool) (restore func()) {
	was := shareMemory
	shareMemory = on
	return func() { shareMemory = was }
}

// BlockBytes is what the pool held for a request of n bytes (the plans'
// blocks before the region).
func BlockBytes(n int64) int64 { return blockBytes(int(n)) }
