package pipeline

// Internals the external tests (package pipeline_test, which may import
// the zoo: nn imports pipeline) check directly.
var (
	CheckBoundaries = checkBoundaries
	TopSplits       = topSplits
)
