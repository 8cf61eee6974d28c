package data

import (
	"errors"
	"strings"
	"testing"
)

func TestDatasetBatch(t *testing.T) {
	d := Synthetic(20, 1)
	sz := d.SampleSize()
	idx := []int{3, 0, 19, 3}
	x := make([]float32, len(idx)*sz+5)
	y := make([]int32, len(idx))
	if err := d.Batch(idx, x, y); err != nil {
		t.Fatal(err)
	}
	for i, s := range idx {
		if y[i] != d.Labels[s] {
			t.Fatalf("y[%d] = %d, want %d", i, y[i], d.Labels[s])
		}
		for p := 0; p < sz; p++ {
			if x[i*sz+p] != d.Images[s*sz+p] {
				t.Fatalf("x[%d] pixel %d differs", i, p)
			}
		}
	}
	bad := *d
	bad.N = 21
	if err := bad.Batch([]int{0}, x, y); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "inconsistent") {
		t.Errorf("inconsistent dataset: err = %v", err)
	}
	for _, c := range []struct {
		idx  []int
		x    []float32
		y    []int32
		want string
	}{
		{[]int{20}, make([]float32, sz), make([]int32, 1), "index 20 (position 0 in the batch) is outside the 20 samples"},
		{[]int{0, -1}, make([]float32, 2*sz), make([]int32, 2), "index -1"},
		{[]int{0, 1}, make([]float32, 2*sz-1), make([]int32, 2), "needs 1568 image values"},
		{[]int{0, 1}, make([]float32, 2*sz), make([]int32, 1), "needs 2 labels"},
	} {
		err := d.Batch(c.idx, c.x, c.y)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Batch(%v): err = %v, want ErrInvalidArgument saying %q", c.idx, err, c.want)
		}
	}
}

func TestLimit(t *testing.T) {
	d := Synthetic(10, 2)
	l := d.Limit(4)
	if l.N != 4 || len(l.Labels) != 4 || len(l.Images) != 4*784 || l.Rows != 28 {
		t.Fatalf("Limit(4): N=%d labels %d images %d", l.N, len(l.Labels), len(l.Images))
	}
	if &l.Images[0] != &d.Images[0] || &l.Labels[0] != &d.Labels[0] {
		t.Error("Limit copied the data")
	}
	if err := l.Batch([]int{4}, make([]float32, 784), make([]int32, 1)); err == nil {
		t.Error("Limit(4) allows index 4")
	}
	for _, n := range []int{0, -1, 10, 11} {
		if d.Limit(n) != d {
			t.Errorf("Limit(%d) is not the whole dataset", n)
		}
	}
}

func TestSyntheticDeterministic(t *testing.T) {
	a, b := Synthetic(50, 7), Synthetic(80, 7)
	for i := range a.Images {
		if a.Images[i] != b.Images[i] {
			t.Fatalf("pixel %d differs between Synthetic(50, 7) and Synthetic(80, 7)", i)
		}
	}
	for i := range a.Labels {
		if a.Labels[i] != b.Labels[i] {
			t.Fatalf("label %d differs", i)
		}
	}
	c := Synthetic(50, 8)
	same := 0
	for i := range a.Labels {
		if a.Labels[i] == c.Labels[i] {
			same++
		}
	}
	if same == len(a.Labels) {
		t.Error("seeds 7 and 8 give the same labels")
	}
	if d := Synthetic(-3, 1); d.N != 0 || len(d.Images) != 0 {
		t.Errorf("Synthetic(-3) has N=%d", d.N)
	}
	lo, hi := float32(-FashionMNISTMean/FashionMNISTStd), float32((1-FashionMNISTMean)/FashionMNISTStd)
	for i, v := range b.Images {
		if v < lo-1e-6 || v > hi+1e-6 {
			t.Fatalf("pixel %d = %v outside the normalized range [%v, %v]", i, v, lo, hi)
		}
	}
	for i, l := range b.Labels {
		if l < 0 || l >= 10 {
			t.Fatalf("label %d = %d", i, l)
		}
	}
}

// A nearest-class-mean classifier fitted on one sample set must do well on
// another: the data is learnable.
func TestSyntheticLearnable(t *testing.T) {
	d := Synthetic(3000, 3)
	train, sz := d.Limit(2000), d.SampleSize()
	means := make([]float64, 10*sz)
	var count [10]int
	for s := 0; s < train.N; s++ {
		c := int(train.Labels[s])
		count[c]++
		for p := 0; p < sz; p++ {
			means[c*sz+p] += float64(train.Images[s*sz+p])
		}
	}
	for c := range 10 {
		if count[c] < 100 {
			t.Fatalf("class %d has only %d of 2000 samples", c, count[c])
		}
		for p := 0; p < sz; p++ {
			means[c*sz+p] /= float64(count[c])
		}
	}
	correct := 0
	for s := 2000; s < d.N; s++ {
		best, bestDist := -1, 0.0
		for c := range 10 {
			dist := 0.0
			for p := 0; p < sz; p++ {
				e := float64(d.Images[s*sz+p]) - means[c*sz+p]
				dist += e * e
			}
			if best < 0 || dist < bestDist {
				best, bestDist = c, dist
			}
		}
		if best == int(d.Labels[s]) {
			correct++
		}
	}
	if acc := float64(correct) / 1000; acc < 0.95 {
		t.Errorf("nearest-mean accuracy %.3f, want at least 0.95", acc)
	}
}
