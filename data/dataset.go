package data

import (
	"errors"
	"fmt"

	"github.com/gdist/gdist/internal/hugepage"
)

// Sentinel errors; every error of this package wraps one of them.
var (
	// ErrNotFound: the data directory or one of its files does not exist.
	ErrNotFound = errors.New("data: not found")
	// ErrCorrupt: a data file is malformed (bad magic, wrong size, bad label).
	ErrCorrupt = errors.New("data: corrupt file")
	// ErrInvalidArgument: a bad argument (an index out of range, a buffer of
	// the wrong size, an impossible sampler configuration).
	ErrInvalidArgument = errors.New("data: invalid argument")
)

// Normalization constants of Fashion-MNIST (mean and standard deviation of
// the training pixels scaled to [0,1]). Pixels are stored as (p/255-Mean)/Std.
const (
	FashionMNISTMean = 0.2860
	FashionMNISTStd  = 0.3530
)

// Dataset is one split held in memory.
//
// Images holds N*Rows*Cols values, sample after sample, row-major; each is
// pixel/255 normalized with the dataset's fixed mean and std (for
// Fashion-MNIST FashionMNISTMean and FashionMNISTStd). Labels holds N values
// in [0, Classes). A Dataset is read-only after it is built and then safe
// for concurrent use.
type Dataset struct {
	Name                   string
	N, Rows, Cols, Classes int
	Images                 []float32
	Labels                 []int32
}

// SampleSize is the number of values of one image (Rows*Cols).
func (d *Dataset) SampleSize() int { return d.Rows * d.Cols }

// Len is the number of samples (N).
func (d *Dataset) Len() int { return d.N }

// LabelsPerSample is 1: one class label per image.
func (d *Dataset) LabelsPerSample() int { return 1 }

// Batch copies the samples at idx into x (len(idx)*Rows*Cols values, sample
// after sample) and their labels into y (len(idx) values). x and y must be
// at least that long; longer buffers are filled from the start. It returns
// an error wrapping ErrInvalidArgument, and copies nothing, if a buffer is
// too short, an index is outside [0, N) or the Dataset's fields disagree.
func (d *Dataset) Batch(idx []int, x []float32, y []int32) error {
	sz := d.Rows * d.Cols
	if d.N < 0 || d.Rows < 0 || d.Cols < 0 || len(d.Images) < d.N*sz || len(d.Labels) < d.N {
		return fmt.Errorf("%w: dataset %q is inconsistent: N=%d, %dx%d, but %d image values and %d labels",
			ErrInvalidArgument, d.Name, d.N, d.Rows, d.Cols, len(d.Images), len(d.Labels))
	}
	if len(x) < len(idx)*sz {
		return fmt.Errorf("%w: batch of %d samples needs %d image values (%d x %d x %d), buffer has %d",
			ErrInvalidArgument, len(idx), len(idx)*sz, len(idx), d.Rows, d.Cols, len(x))
	}
	if len(y) < len(idx) {
		return fmt.Errorf("%w: batch of %d samples needs %d labels, buffer has %d",
			ErrInvalidArgument, len(idx), len(idx), len(y))
	}
	for i, s := range idx {
		if s < 0 || s >= d.N {
			return fmt.Errorf("%w: index %d (position %d in the batch) is outside the %d samples of dataset %q",
				ErrInvalidArgument, s, i, d.N, d.Name)
		}
	}
	for i, s := range idx {
		copy(x[i*sz:(i+1)*sz], d.Images[s*sz:(s+1)*sz])
		y[i] = d.Labels[s]
	}
	return nil
}

// Limit returns a Dataset of the first n samples, sharing memory with d.
// n <= 0 or n >= d.N means all of them (d itself is returned).
func (d *Dataset) Limit(n int) *Dataset {
	if n <= 0 || n >= d.N {
		return d
	}
	sz := d.Rows * d.Cols
	out := *d
	out.N = n
	out.Images = d.Images[: n*sz : n*sz]
	out.Labels = d.Labels[:n:n]
	return &out
}

// Synthetic parameters: 28x28 images, 10 classes, like Fashion-MNIST.
const (
	synthSide    = 28
	synthClasses = 10
	synthNoise   = 0.35 // amplitude of the uniform noise added to a prototype
)

// Synthetic returns a deterministic, learnable stand-in for Fashion-MNIST:
// n samples of 28x28 pixels in 10 classes. Each class has a fixed random
// prototype image (derived from seed); a sample is its class's prototype
// plus uniform noise, clamped to [0,1], then normalized with the
// Fashion-MNIST mean and std. Labels are drawn uniformly from the 10
// classes. The same (n, seed) always gives the same data, and the first m
// samples of Synthetic(n, seed) do not depend on n. n < 0 is taken as 0.
func Synthetic(n int, seed int64) *Dataset {
	if n < 0 {
		n = 0
	}
	const sz = synthSide * synthSide
	rng := newRNG(uint64(seed), 0x5eed_da7a)
	protos := make([]float32, synthClasses*sz)
	for i := range protos {
		// Two-level prototypes (dark background, bright strokes) with some
		// grey: far apart in pixel space, yet overlapping with the noise.
		u := rng.float32()
		switch {
		case u < 0.55:
			protos[i] = 0.1 * rng.float32()
		case u < 0.8:
			protos[i] = 0.3 + 0.4*rng.float32()
		default:
			protos[i] = 0.8 + 0.2*rng.float32()
		}
	}
	d := &Dataset{
		Name: "synthetic", N: n, Rows: synthSide, Cols: synthSide, Classes: synthClasses,
		Images: hugepage.Float32s(n * sz),
		Labels: make([]int32, n),
	}
	for s := 0; s < n; s++ {
		c := int(rng.intn(synthClasses))
		d.Labels[s] = int32(c)
		p := protos[c*sz : (c+1)*sz]
		img := d.Images[s*sz : (s+1)*sz]
		for i := range img {
			v := p[i] + synthNoise*(2*rng.float32()-1)
			v = min(max(v, 0), 1)
			img[i] = (v - FashionMNISTMean) / FashionMNISTStd
		}
	}
	return d
}
