package devmodel

import (
	"fmt"

	"github.com/gdist/gdist/optim"
)

// deviceOptim refuses a configuration optim refuses, and an optimizer
// the device has no kernels for: they are PyTorch's SGD and Adam/AdamW;
// optim's other optimizers (gorgonia's solvers: rmsprop, adagrad,
// momentum, vanilla) run on the CPU only.
func deviceOptim(model string, c optim.Config) error {
	if _, err := optim.New(c, 0); err != nil {
		return fmt.Errorf("devmodel: %s: %w", model, err)
	}
	switch c.Name {
	case "sgd", "adam", "adamw":
		return nil
	}
	return fmt.Errorf("devmodel: %s: optimizer %q has no device kernels (sgd, adam, adamw): train with it on the CPU", model, c.Name)
}
