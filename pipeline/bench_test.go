package pipeline_test

import (
	"context"
	"fmt"
	"github.com/gdist/gdist/pipeline"
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/inproc"
	"github.com/gdist/gdist/models"
)

// BenchmarkSchedule times pipeline steps of the mlp (K = 3, M = 6, batch 60)
// and reports each schedule's bubble: idle/(busy+idle) averaged over the
// stages, and the first stage's peak held input bytes.
func BenchmarkSchedule(b *testing.B) {
	const k, micro, batch = 3, 6, 60
	for _, sched := range []string{pipeline.GPipe, pipeline.OneFOneB} {
		b.Run(sched, func(b *testing.B) {
			cs, err := inproc.New(k, comm.Options{})
			if err != nil {
				b.Fatal(err)
			}
			ds := batches(batch / testBatch)
			x, y := ds.Images[:batch*784], ds.Labels[:batch]
			stats := make([]pipeline.Stats, k)
			b.ResetTimer()
			err = commtest.RunRanks(context.Background(), cs, 10*time.Minute, func(ctx context.Context, c comm.Comm) error {
				defer c.Close()
				m, _ := models.New("mlp", 1)
				p, err := pipeline.New(context.Background(), c, m, pipeline.Config{Micro: micro, Schedule: sched}, batch)
				if err != nil {
					return err
				}
				defer p.Close()
				for i := 0; i < b.N; i++ {
					if _, err := p.Step(ctx, x, y); err != nil {
						return err
					}
					clear(p.Grads())
				}
				stats[c.Rank()] = p.Stats()
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			var bubble float64
			for _, s := range stats {
				bubble += float64(s.Idle) / float64(s.Busy+s.Idle) / k
			}
			b.ReportMetric(bubble, "bubble")
			b.ReportMetric(float64(stats[0].PeakHeldBytes), "held-B/stage0")
		})
	}
}

// Example_ops prints each stage's 1F1B schedule for 3 stages and 5
// micro-batches.
func Example_ops() {
	for s := 0; s < 3; s++ {
		ops, _ := pipeline.Ops(pipeline.OneFOneB, 3, s, 5)
		fmt.Println(s, ops, pipeline.MaxHeld(ops, s == 2))
	}
	// Output:
	// 0 [F0 F1 F2 B0 F3 B1 F4 B2 B3 B4] 3
	// 1 [F0 F1 B0 F2 B1 F3 B2 F4 B3 B4] 2
	// 2 [F0 F1 F2 F3 F4] 1
}

// ExampleSplitBatch splits a batch of 10 samples into 4 micro-batches.
func ExampleSplitBatch() {
	sizes, starts := pipeline.SplitBatch(10, 4)
	fmt.Println(sizes, starts)
	// Output:
	// [3 3 2 2] [0 3 6 8]
}
