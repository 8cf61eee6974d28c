// Package data loads training data and splits it among data-parallel ranks.
//
// A Dataset holds a whole split in memory as normalized float32 images and
// int32 labels. Load reads Fashion-MNIST from its IDX files (plain or
// gzipped), as installed by the Debian package dataset-fashion-mnist under
// DefaultDir; Synthetic builds a small learnable stand-in for tests.
//
// A Sampler is the DistributedSampler of this module: every rank builds one
// with the same N, World, Batch and Seed and its own Rank. Each epoch has one
// global permutation of the samples, computed with a PRNG written here
// (splitmix64 plus Fisher-Yates) so that it never depends on math/rand. The
// global batches are consecutive runs of World*Batch elements of that
// permutation, and rank r takes the elements r, r+World, r+2*World, ... of
// each: the union of the ranks' k-th batches is exactly the k-th global
// batch, so N ranks at batch B see the same global batches as one rank at
// batch N*B (the basis of the DDP equivalence tests).
//
// Errors wrap ErrNotFound (missing directory or file), ErrCorrupt (a file
// that is not valid IDX) or ErrInvalidArgument (a bad argument), and name
// the file or the value at fault.
package data
