package flat_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gdist/gdist/checkpoint"
	"github.com/gdist/gdist/flat"
	"github.com/gdist/gdist/internal/plaintest"
	"gorgonia.org/tensor"
)

// TestParamsCheckpoint: float32 and float64 learnables go to a
// safetensors file (F32, F64) by name and come back into another model's
// own tensors bit for bit; a missing tensor or another shape is an error
// naming it that changes nothing.
func TestParamsCheckpoint(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		src, err := flat.BindValues(plaintest.Values(plaintest.Params(dt, 1)), 0)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "m.safetensors")
		if err := checkpoint.Write(path, src.Tensors(), nil); err != nil {
			t.Fatal(err)
		}
		ts, _, err := checkpoint.Read(path)
		if err != nil {
			t.Fatal(err)
		}
		want := map[tensor.Dtype]string{tensor.Float32: "F32", tensor.Float64: "F64"}[dt]
		if got := ts["w_rec"].DType; got != want {
			t.Fatalf("%v learnables saved as %s, want %s", dt, got, want)
		}
		kept := plaintest.Params(dt, 2)
		dst, err := flat.BindValues(plaintest.Values(kept), 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := dst.Load(ts); err != nil {
			t.Fatal(err)
		}
		if err := plaintest.Compare(kept, plaintest.Params(dt, 1), 0); err != nil {
			t.Fatalf("%v: the model's tensors after Load: %v", dt, err)
		}
		delete(ts, "b_in")
		if err := dst.Load(ts); !errors.Is(err, flat.ErrInvalid) || !strings.Contains(err.Error(), `no tensor "b_in"`) {
			t.Fatalf("a missing tensor: got %v", err)
		}
		ts["b_in"] = checkpoint.F32("b_in", []int{3}, []float32{1, 2, 3})
		if err := dst.Load(ts); err == nil || !strings.Contains(err.Error(), `"b_in" has shape [3]`) {
			t.Fatalf("another shape: got %v", err)
		}
		if err := plaintest.Compare(kept, plaintest.Params(dt, 1), 0); err != nil {
			t.Fatalf("%v: a failed Load changed the tensors: %v", dt, err)
		}
	}
}
