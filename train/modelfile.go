package train

import (
	"fmt"
	"os"

	"github.com/gdist/gdist/checkpoint"
	"github.com/gdist/gdist/models"
)

// LoadModel reads the model saved at path, the model file of a checkpoint
// of either format (any strategy writes the whole model there, with
// PyTorch's names), for inference: it builds the model its metadata
// names ("model", which every save records) and loads the parameters. name,
// when not empty, is the model to expect (an error if the metadata names
// another), or, for a file without that metadata (one saved by PyTorch,
// say), the model to build. Errors wrap ErrCheckpoint.
func LoadModel(path, name string) (*models.Model, map[string]string, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	ts, meta, err := checkpoint.Read(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	saved := meta["model"]
	switch {
	case saved == "" && name == "":
		return nil, nil, fmt.Errorf("%w: %s names no model in its metadata: say which it is (e.g. -model %s)", ErrCheckpoint, path, models.GPTSmall.Name())
	case saved != "" && name != "" && saved != name:
		return nil, nil, fmt.Errorf("%w: %s holds a %q model, not %q", ErrCheckpoint, path, saved, name)
	case saved != "":
		name = saved
	}
	m, err := models.New(name, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrCheckpoint, path, err)
	}
	if err := LoadModelTensors(m, ts, path); err != nil {
		return nil, nil, err
	}
	return m, meta, nil
}
