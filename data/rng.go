package data

import "math/bits"

// rng is a splitmix64 generator (Steele, Lea and Flood 2014). It is written
// here, not taken from math/rand, so that permutations and synthetic data
// are fixed by this file alone and never change with the Go release.
type rng struct{ state uint64 }

const golden = 0x9e3779b97f4a7c15

// mix64 is the splitmix64 output function (a bijection on uint64).
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// newRNG derives a generator from a seed and a stream number (the epoch for
// the sampler), so that nearby (seed, stream) pairs give unrelated streams.
func newRNG(seed, stream uint64) *rng {
	return &rng{state: mix64(seed+golden) ^ mix64(stream^0x632be59bd9b4e019)}
}

func (r *rng) next() uint64 {
	r.state += golden
	return mix64(r.state)
}

// intn returns a uniform value in [0, n) for n > 0, without modulo bias
// (Lemire's multiply-and-reject method).
func (r *rng) intn(n uint64) uint64 {
	hi, lo := bits.Mul64(r.next(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(r.next(), n)
		}
	}
	return hi
}

// float32 returns a uniform value in [0, 1).
func (r *rng) float32() float32 {
	return float32(r.next()>>40) / (1 << 24)
}

// permutation fills p (len n) with a uniform random permutation of [0, n)
// (Fisher-Yates).
func (r *rng) permutation(p []int) {
	for i := range p {
		p[i] = i
	}
	for i := len(p) - 1; i > 0; i-- {
		j := int(r.intn(uint64(i + 1)))
		p[i], p[j] = p[j], p[i]
	}
}
