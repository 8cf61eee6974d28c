package data

import (
	"fmt"
	"sync"
)

// Sampler splits each epoch's samples among data-parallel ranks, like
// PyTorch's DistributedSampler followed by a BatchSampler.
//
// Every rank uses the same N, World, Batch, Seed and Pad, and its own Rank.
// Each epoch has one global permutation of [0, N), fixed by (Seed, epoch).
// Global batch k is perm[k*World*Batch : (k+1)*World*Batch]; rank r's k-th
// batch holds the elements at positions k*World*Batch + r + j*World for j in
// [0, Batch). So the union of the ranks' k-th batches is exactly global
// batch k, and one rank with Batch = World*B sees the same global batches as
// World ranks with Batch = B.
//
// When World*Batch does not divide N, Pad=false (the default) drops the
// incomplete last global batch, so an index appears at most once per epoch;
// Pad=true completes it with the first elements of the permutation, so
// every index appears at least once per epoch.
//
// The method that returns a rank's batch is Indices, not Batch: Go forbids
// a field and a method with the same name.
//
// A Sampler is a plain value: copy it freely. Its methods are safe for
// concurrent use. Each epoch's permutation is computed once and kept in a
// small cache shared by the package (the last few (N, Seed, epoch)
// triples), so ranks that run as goroutines of one process share it and
// no batch recomputes it.
type Sampler struct {
	N     int   // number of samples in the dataset
	World int   // number of ranks
	Rank  int   // this rank, in [0, World)
	Batch int   // samples per rank per batch
	Seed  int64 // same on every rank
	Pad   bool  // complete the last global batch instead of dropping it
}

// MaxSamplerN bounds the dataset size of a Sampler (its permutation holds N
// ints).
const MaxSamplerN = 1 << 31

// Validate reports whether the configuration is usable: World >= 1,
// 0 <= Rank < World, Batch >= 1, World*Batch <= N <= MaxSamplerN. The error wraps
// ErrInvalidArgument.
func (s *Sampler) Validate() error {
	switch {
	case s.World < 1:
		return fmt.Errorf("%w: sampler world size %d, must be at least 1", ErrInvalidArgument, s.World)
	case s.Rank < 0 || s.Rank >= s.World:
		return fmt.Errorf("%w: sampler rank %d is outside [0, %d) for world size %d", ErrInvalidArgument, s.Rank, s.World, s.World)
	case s.Batch < 1:
		return fmt.Errorf("%w: sampler batch %d per rank, must be at least 1", ErrInvalidArgument, s.Batch)
	case s.N < 0:
		return fmt.Errorf("%w: sampler dataset size %d is negative", ErrInvalidArgument, s.N)
	case s.N > MaxSamplerN:
		return fmt.Errorf("%w: sampler dataset size %d is larger than the limit %d", ErrInvalidArgument, s.N, MaxSamplerN)
	case s.Batch > s.N/s.World: // N < World*Batch, without overflow
		return fmt.Errorf("%w: batch %d x %d ranks = %d is larger than the %d samples of the dataset",
			ErrInvalidArgument, s.Batch, s.World, s.Batch*s.World, s.N)
	}
	return nil
}

// NumBatches returns the number of batches per epoch (the same on every
// rank): floor(N / (World*Batch)), or the ceiling with Pad. It returns 0 if
// the configuration is invalid (see Validate).
func (s *Sampler) NumBatches() int {
	if s.Validate() != nil {
		return 0
	}
	g := s.World * s.Batch
	if s.Pad {
		return (s.N + g - 1) / g
	}
	return s.N / g
}

// Indices returns this rank's Batch sample indices for batch k of epoch,
// in the order given by the permutation. The result is written into dst if
// its capacity is at least Batch (and aliases it), otherwise a new slice is
// allocated. It returns nil if the configuration is invalid or k is not in
// [0, NumBatches()).
func (s *Sampler) Indices(epoch, k int, dst []int) []int {
	if k < 0 || k >= s.NumBatches() {
		return nil
	}
	if cap(dst) >= s.Batch {
		dst = dst[:s.Batch]
	} else {
		dst = make([]int, s.Batch)
	}
	perm := cachedPerm(s.N, s.Seed, epoch)
	base := k * s.World * s.Batch
	for j := range dst {
		dst[j] = perm[(base+s.Rank+j*s.World)%s.N]
	}
	return dst
}

// GlobalBatch returns the World*Batch indices of global batch k of epoch
// (the union of every rank's k-th batch, in permutation order) in a new
// slice. It returns nil if the configuration is invalid or k is not in
// [0, NumBatches()).
func (s *Sampler) GlobalBatch(epoch, k int) []int {
	if k < 0 || k >= s.NumBatches() {
		return nil
	}
	g := s.World * s.Batch
	out := make([]int, g)
	perm := cachedPerm(s.N, s.Seed, epoch)
	for t := range out {
		out[t] = perm[(k*g+t)%s.N]
	}
	return out
}

// permCacheSize is how many permutations the package keeps: enough for a
// training and an evaluation sampler around an epoch boundary.
const permCacheSize = 4

type permEntry struct {
	n     int
	seed  int64
	epoch int
	perm  []int // never modified once cached
}

// permComputed counts the permutations computed (for tests).
var permComputed int

var permCache struct {
	sync.Mutex
	entries []permEntry // most recently used first
}

// cachedPerm returns the permutation of [0, n) for (seed, epoch), computing
// it only if it is not among the last few used. The result is shared:
// callers must not modify it.
func cachedPerm(n int, seed int64, epoch int) []int {
	permCache.Lock()
	defer permCache.Unlock()
	es := permCache.entries
	for i, e := range es {
		if e.n == n && e.seed == seed && e.epoch == epoch {
			copy(es[1:i+1], es[:i])
			es[0] = e
			return e.perm
		}
	}
	permComputed++
	e := permEntry{n: n, seed: seed, epoch: epoch, perm: make([]int, n)}
	newRNG(uint64(seed), uint64(epoch)).permutation(e.perm)
	if len(es) < permCacheSize {
		es = append(es, permEntry{})
	}
	copy(es[1:], es[:len(es)-1])
	es[0] = e
	permCache.entries = es
	return e.perm
}

// Permutation returns a new slice holding the global permutation of [0, n)
// used for epoch by every Sampler with this seed, or nil if n is not in
// [1, MaxSamplerN].
func Permutation(n int, seed int64, epoch int) []int {
	if n <= 0 || n > MaxSamplerN {
		return nil
	}
	p := make([]int, n)
	newRNG(uint64(seed), uint64(epoch)).permutation(p)
	return p
}
