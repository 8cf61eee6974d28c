// Package pp registers train's pipeline-parallel strategy, "pipeline"
// (pipeline.go): K pipeline stages (package pipeline) times D
// data-parallel replicas on K*D ranks. Import it for its registration:
//
//	import _ "github.com/gdist/gdist/train/pp"
//
// Its options (Options: -stages, -microbatches, -schedule, -balance) are
// a train.Options; its Check says how many replicas the ranks make. Its
// checkpoints are DDP's files (train.SaveFull), written after gathering
// the stages' parameters and optimizer state into the whole model, so
// they resume with any strategy; its part of the summary is a Summary
// (train.Summary.Pipeline).
package pp
