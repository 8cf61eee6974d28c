package zero_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/internal/plaintest"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/zero"
	"gorgonia.org/tensor"
)

// TestAddGradMisuse: AddGrad (float32 gradients by index) on a float64
// Engine, or with an index past the learnables, panics naming the
// problem; it dropped the gradient silently before.
func TestAddGradMisuse(t *testing.T) {
	err := commtest.RunRanks(context.Background(), world(t, 1), time.Minute, func(ctx context.Context, c comm.Comm) error {
		ps := plaintest.Params(tensor.Float64, 1)
		e, err := zero.WrapValues(ctx, c, plaintest.Values(ps), zero.Options{Stage: 2, Optim: optim.Config{Name: "sgd", LR: 0.1}})
		if err != nil {
			return err
		}
		defer e.Close()
		for _, tc := range []struct {
			i    int
			want string
		}{{0, "use AddGrads"}, {len(ps), "use AddGrads"}} {
			func() {
				defer func() {
					r, _ := recover().(string)
					if !strings.Contains(r, tc.want) {
						t.Errorf("AddGrad(%d) on a float64 Engine: panic %q, want one that says %q", tc.i, r, tc.want)
					}
				}()
				e.AddGrad(tc.i, make([]float32, 4))
			}()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
