package nn

import (
	"strings"
	"testing"

	"gorgonia.org/tensor"
)

// TestEmbeddingGradShape: the embedding's gradient op sums dy's rows into
// the ids' rows of dW, and refuses a dy whose size is not one row of
// width Dim per id (too short or too long: a shape mismatch, which would
// otherwise give a wrong dW without an error), naming both sizes.
func TestEmbeddingGradShape(t *testing.T) {
	op := &embedOp{baseOp: baseOp{nextID(), "embedding'"}, num: 3, dim: 2, dims: 1, back: true}
	ids := tensor.New(tensor.WithShape(2), tensor.WithBacking([]float32{2, 2}))
	dy := tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]float32{1, 2, 10, 20}))
	got, err := op.Do(ids, dy)
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{0, 0, 0, 0, 11, 22}
	for i, v := range got.(*tensor.Dense).Data().([]float32) {
		if v != want[i] {
			t.Fatalf("dW = %v, want %v", got.(*tensor.Dense).Data(), want)
		}
	}
	for _, n := range []int{3, 5, 6} {
		bad := tensor.New(tensor.WithShape(n), tensor.WithBacking(make([]float32, n)))
		if _, err := op.Do(ids, bad); err == nil || !strings.Contains(err.Error(), "want 4") {
			t.Errorf("dy of %d values for 2 ids of width 2: error %v, want one asking for 4", n, err)
		} else {
			t.Log(err)
		}
	}
}
