package pp

import (
	"strings"
	"testing"

	"github.com/gdist/gdist/train"
)

// TestCheck: the pipeline's Check fills in the defaults, says how many
// replicas the ranks make (every -stages ranks; one without -stages) and
// refuses what it cannot run.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		o            Options
		world, batch int
		replicas     int
		err          string
	}{
		{Options{}, 4, 8, 1, ""},
		{Options{Stages: 2}, 4, 8, 2, ""},
		{Options{Stages: 2}, 0, 8, 0, ""}, // world unknown
		{Options{Stages: 3}, 4, 8, 0, "-stages 3 does not divide the 4 ranks"},
		{Options{Microbatches: 9}, 2, 8, 0, "-microbatches 9 is more than the batch of 8"},
		{Options{Schedule: "zb"}, 2, 8, 0, `-schedule "zb"`},
		{Options{Balance: "flops"}, 2, 8, 0, `-balance "flops"`},
	} {
		cfg := train.Config{Model: "mlp", Batch: tc.batch, World: tc.world, Options: &tc.o}
		n, err := check(&cfg)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v on %d ranks: %v, want %q", tc.o, tc.world, err, tc.err)
			}
			continue
		}
		if err != nil || n != tc.replicas || tc.o.Schedule != "1f1b" || tc.o.Balance != "params" {
			t.Errorf("%+v on %d ranks: %d replicas, %v; want %d", tc.o, tc.world, n, err, tc.replicas)
		}
	}
	cfg := train.Config{Model: "cnn-bn", Batch: 8, Options: NewOptions()}
	if _, err := check(&cfg); err == nil || !strings.Contains(err.Error(), "batch norm") {
		t.Errorf("cnn-bn: %v", err)
	}
}

// TestSummaryText: the summary's text line.
func TestSummaryText(t *testing.T) {
	s := &Summary{Stages: 2, Replicas: 1, Microbatches: 4, Schedule: "1f1b", Boundaries: []int{0, 2, 5}, Bubble: 0.25, BubbleTheory: 0.2}
	want := "pipeline: 2 stage(s) x 1 replica(s), layers [0 2 5], 4 micro-batches (1f1b): bubble 0.250, theory (K-1)/(M+K-1) 0.200, with instant messages 0.000 (0.000 at mean op times)"
	if got := s.Text(); got != want {
		t.Errorf("%s\nwant %s", got, want)
	}
}
