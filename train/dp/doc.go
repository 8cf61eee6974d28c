// Package dp registers train's data-parallel strategies, each in a file:
// "ddp" (ddp.go: every rank holds the whole model; gradients are averaged
// in buckets during backward, package ddp) and "zero1", "zero2", "zero3"
// (zero.go: ZeRO stages 1-3, package zero, sharding the optimizer state,
// then the gradients, then the parameters). Import it for its
// registration:
//
//	import _ "github.com/gdist/gdist/train/dp"
//
// Their options (DDPOptions, ZeroOptions) are train.Options: the
// -bucket-mb and -first-bucket-mb caps they share (Buckets, whose
// defaults are package ddp's), and DDP's -no-overlap, -compress and
// -debug. Both kinds of strategy checkpoint with train's helpers
// (train.SaveFull, train.SaveZero and their snapshots) and load any
// checkpoint with train.LoadCheckpoint.
package dp
