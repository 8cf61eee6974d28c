package commtest

import (
	"context"

	"github.com/gdist/gdist/comm"
)

// Check is one named part of the conformance suite that each rank runs on
// its own Comm (see RankChecks).
type Check struct {
	Name string
	Run  func(ctx context.Context, c comm.Comm) error
}

// RankChecks returns the parts of Suite that need nothing but each rank's
// own Comm, at the given element counts: every collective with every dtype
// and op, send/recv, barrier, ordering, split, sub-groups, objects and bad
// arguments. Ranks that are processes (on several hosts, say) run them in
// order, each on its own Comm; a rank's error names what went wrong. Avg
// is checked as the host backends compute it (AvgDivide).
func RankChecks(counts []int) []Check { return RankChecksRule(counts, AvgDivide) }

// RankChecksRule is RankChecks with Avg checked by rule (AvgPreMultiply for
// NCCL).
func RankChecksRule(counts []int, rule AvgRule) []Check {
	return []Check{
		{"AllReduce", allReduceAll(counts, rule)},
		{"Broadcast", broadcastAll(counts)},
		{"Reduce", reduceAll(counts, rule)},
		{"AllGather", allGatherAll(counts)},
		{"Gather", gatherAll(counts)},
		{"Scatter", scatterAll(counts)},
		{"ReduceScatter", reduceScatterAll(counts, rule)},
		{"AllToAll", allToAllAll(counts)},
		{"SendRecv", sendRecvAll(counts)},
		{"Barrier", barrierAll},
		{"AsyncOrder", asyncOrder},
		{"Split", splitAll},
		{"SubGroupIndependent", subGroupIndependent},
		{"Objects", objects},
		{"BadArguments", badArguments},
	}
}
