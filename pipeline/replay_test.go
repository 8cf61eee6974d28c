package pipeline

import (
	"strings"
	"testing"
	"time"
)

// uniform gives every op of stage s of k its time: forward f, backward b
// (with recomputation) and, on the last stage, the fused pass f+b.
func uniform(ops [][]Op, f, b time.Duration) [][]time.Duration {
	d := make([][]time.Duration, len(ops))
	for s, so := range ops {
		for _, o := range so {
			switch {
			case s == len(ops)-1:
				d[s] = append(d[s], f+b)
			case o.Backward:
				d[s] = append(d[s], b)
			default:
				d[s] = append(d[s], f)
			}
		}
	}
	return d
}

func schedules(t *testing.T, sched string, k, m int) [][]Op {
	t.Helper()
	ops := make([][]Op, k)
	for s := range ops {
		var err error
		if ops[s], err = Ops(sched, k, s, m); err != nil {
			t.Fatal(err)
		}
	}
	return ops
}

// With equal stage times both schedules take (M+K-1) stage periods: the
// bubble is exactly (K-1)/(M+K-1).
func TestReplayMatchesTheory(t *testing.T) {
	for _, sched := range []string{GPipe, OneFOneB} {
		for k := 1; k <= 4; k++ {
			for m := 1; m <= 9; m++ {
				ops := schedules(t, sched, k, m)
				span, busy, err := Replay(ops, uniform(ops, time.Millisecond, 2*time.Millisecond))
				if err != nil {
					t.Fatalf("%s k=%d m=%d: %v", sched, k, m, err)
				}
				if want := time.Duration(m+k-1) * 3 * time.Millisecond; span != want {
					t.Errorf("%s k=%d m=%d: span %v, want %v", sched, k, m, span, want)
				}
				for s, b := range busy {
					if b != time.Duration(m)*3*time.Millisecond {
						t.Errorf("%s k=%d m=%d: stage %d busy %v", sched, k, m, s, b)
					}
				}
			}
		}
	}
}

// A slow backward on stage 0 delays the last stage in 1F1B's zero-slack
// steady state (its next input comes after that backward), while GPipe
// has already sent every forward and absorbs it.
func TestReplayJitter(t *testing.T) {
	for _, c := range []struct {
		sched string
		want  time.Duration
	}{
		// 1F1B, stage 0 runs F0 F1 B0 F2 B1 B2, with B0 slowed to 4:
		// F0 0-1, F1 1-2, S0 1-4, B0 4-8, S1 4-7, F2 8-9, S2 9-12,
		// B1 9-11, B2 12-14 (12 with B0 at 2).
		{OneFOneB, 14},
		// GPipe: F0 0-1, F1 1-2, F2 2-3, S0 1-4, S1 4-7, S2 7-10,
		// B0 4-8, B1 8-10, B2 10-12.
		{GPipe, 12},
	} {
		ops := schedules(t, c.sched, 2, 3)
		d := uniform(ops, time.Millisecond, 2*time.Millisecond)
		for j, o := range ops[0] {
			if o == (Op{Backward: true, Micro: 0}) {
				d[0][j] = 4 * time.Millisecond
			}
		}
		span, _, err := Replay(ops, d)
		if err != nil || span != c.want*time.Millisecond {
			t.Errorf("%s: span %v (%v), want %vms", c.sched, span, err, int64(c.want))
		}
	}
}

func TestReplayDeadlock(t *testing.T) {
	ops := [][]Op{{{Backward: true}, {}}, {{}}}
	d := [][]time.Duration{{1, 1}, {1}}
	if _, _, err := Replay(ops, d); err == nil || !strings.Contains(err.Error(), "deadlock") {
		t.Fatalf("got %v, want a deadlock error", err)
	}
	if _, _, err := Replay(ops, d[:1]); err == nil {
		t.Fatal("mismatched durations accepted")
	}
}
