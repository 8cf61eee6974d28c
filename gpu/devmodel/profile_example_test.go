package devmodel_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/gdist/gdist/gpu/cudafake"
	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
)

// A gpt's device time by layer kind: GDIST_DEVICE_PROFILE names the file
// the profile goes to when the model is closed (1: a table on stderr);
// Model.Profile reads it before. The first ProfileWarmup steps are left
// out of the means.
func ExampleModel_Profile() {
	if cudafake.Mode() == "none" { // no CUDA here: what it prints with one
		fmt.Println("steps 3, kinds [attention embedding gaps gelu layernorm linear loss optimizer residual]")
		return
	}
	file := filepath.Join(os.TempDir(), "gdist-example-profile.json")
	defer os.Remove(file)
	os.Setenv(devmodel.EnvProfile, file)
	defer os.Unsetenv(devmodel.EnvProfile)
	m, err := models.New("gpt-L1-D16-H2-T8", 1)
	if err != nil {
		panic(err)
	}
	d, err := devmodel.Place(m, devmodel.Config{Device: 0, Batch: 2, Optim: optim.Config{Name: "adamw", LR: 1e-3}})
	if err != nil {
		panic(err)
	}
	defer d.Close() // writes the file
	for i := 0; i < 5; i++ {
		x, y := text(i, 2, 8)
		if _, err := d.Step(x, y); err != nil {
			panic(err)
		}
	}
	p, err := d.Profile()
	if err != nil {
		panic(err)
	}
	var kinds []string
	for _, k := range p.Kinds {
		kinds = append(kinds, k.Kind)
	}
	sort.Strings(kinds)
	fmt.Printf("steps %d, kinds %v\n", p.Steps, kinds)
	// Output:
	// steps 3, kinds [attention embedding gaps gelu layernorm linear loss optimizer residual]
}
