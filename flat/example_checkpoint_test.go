package flat_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/gdist/gdist/checkpoint"
	"github.com/gdist/gdist/flat"
	"gorgonia.org/tensor"
)

// A model's own float64 tensors, bound once (as ddp.WrapValues does),
// saved by name and loaded back into them.
func ExampleParams_Tensors() {
	w := tensor.New(tensor.WithShape(2), tensor.WithBacking([]float64{0.25, -1}))
	p, err := flat.BindValues([]flat.Value{{Name: "w", T: w}}, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	dir, _ := os.MkdirTemp("", "flat")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "model.safetensors")
	if err := checkpoint.Write(path, p.Tensors(), nil); err != nil {
		fmt.Println(err)
		return
	}
	w.Data().([]float64)[0] = 7 // training goes on ...
	ts, _, err := checkpoint.Read(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := p.Load(ts); err != nil { // ... and resumes from the file
		fmt.Println(err)
		return
	}
	fmt.Println(ts["w"].DType, w.Data())
	// Output: F64 [0.25 -1]
}
