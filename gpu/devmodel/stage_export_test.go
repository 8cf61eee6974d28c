package devmodel

// StagePlanBytes sums the stage's training plans (one a micro-batch
// size): their regions' bytes as laid out, and what the pool's blocks of
// their buffers would hold (a block each, a power of two: the layout
// before the region). Both are 0 where the plans took pool blocks.
func StagePlanBytes(s *Stage) (region, blocks int64) {
	for _, p := range s.plans {
		if p.mem == nil {
			continue
		}
		region += int64(p.regionBytes)
		for _, b := range p.mem.bufs {
			blocks += blockBytes(b.bytes)
		}
	}
	return region, blocks
}
