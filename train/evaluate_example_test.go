package train_test

import (
	"context"
	"fmt"
	"math"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/train"
)

// EvaluateBatches with an evaluation of one's own (a strategy's
// BatchEvaluator evaluates on its device so): here a uniform guess over
// the 10 classes, whose loss is ln 10, always answering class 0. Each
// rank evaluates its share of the set; the sums are all-reduced.
func ExampleEvaluateBatches() {
	ctx := context.Background()
	comms, err := inproc.New(1, comm.Options{})
	if err != nil {
		panic(err)
	}
	defer comms[0].Close()
	m, err := models.New("mlp", 1)
	if err != nil {
		panic(err)
	}
	_, test, err := train.LoadData(train.Config{Model: "mlp", DataDir: "synthetic"})
	if err != nil {
		panic(err)
	}
	zeros := 0 // labels 0 in the set
	guess := func(x []float32, y []int32) (float64, int, error) {
		n := 0
		for _, l := range y {
			if l == 0 {
				n++
			}
		}
		zeros += n
		return math.Log(10), n, nil
	}
	loss, acc, err := train.EvaluateBatches(ctx, comms[0], m, 100, test, guess)
	if err != nil {
		panic(err)
	}
	fmt.Printf("loss %.4f (ln 10), accuracy == share of class 0: %v\n", loss, acc == float64(zeros)/float64(test.Len()))
	// Output: loss 2.3026 (ln 10), accuracy == share of class 0: true
}
