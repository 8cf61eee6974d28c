package flat_test

import (
	"errors"
	"testing"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/flat"
	"gorgonia.org/tensor"
)

func TestFromDense(t *testing.T) {
	back := []float32{1, 2, 3, 4, 5, 6}
	d := tensor.New(tensor.WithShape(2, 3), tensor.WithBacking(back))
	b, err := flat.FromDense(d)
	if err != nil {
		t.Fatal(err)
	}
	if b.Len() != 6 || b.DType() != comm.Float32 {
		t.Fatalf("got %v", b)
	}
	s, _ := comm.AsSlice[float32](b)
	s[4] = 42 // no copy: the tensor sees it
	if back[4] != 42 {
		t.Fatal("FromDense copied the data")
	}
	i64 := tensor.New(tensor.WithShape(3), tensor.WithBacking([]int64{1, 2, 3}))
	if b, err := flat.FromDense(i64); err != nil || b.DType() != comm.Int64 {
		t.Fatalf("int64 tensor: %v %v", b, err)
	}
	c := tensor.New(tensor.WithShape(2), tensor.WithBacking([]complex64{1, 2}))
	if _, err := flat.FromDense(c); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Fatalf("complex tensor: %v", err)
	}
	if _, err := flat.FromDense(nil); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Fatalf("nil tensor: %v", err)
	}
}
