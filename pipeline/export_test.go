package pipeline

// Internals the external tests (package pipeline_test, which may import
// the zoo) check directly.
var (
	CheckBoundaries = checkBoundaries
	TopSplits       = topSplits
)

// SetMeasureBudget sets MeasureStages' memory budget and returns the old one.
func SetMeasureBudget(b uint64) uint64 {
	old := measureBudget
	measureBudget = b
	return old
}
