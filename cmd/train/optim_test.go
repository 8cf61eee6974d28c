package main

import (
	"math"
	"testing"
)

// TestOptimizerNames: every -optimizer name trains from the command line
// with the other flags at their defaults (rmsprop refused -momentum's
// default 0.9 before df4ce4f) and ends with a finite eval loss below the
// starting one (a 10-class problem starts near ln 10).
func TestOptimizerNames(t *testing.T) {
	for _, o := range []string{"sgd", "adam", "adamw", "rmsprop", "adagrad", "momentum", "vanilla"} {
		t.Run(o, func(t *testing.T) {
			out, errOut, err := trainCmd(t, "-nproc", "1", "-model", "mlp", "-data", "synthetic", "-limit", "256",
				"-epochs", "2", "-batch", "32", "-seed", "3", "-optimizer", o, "-json", "-progress=false")
			if err != nil {
				t.Fatalf("-optimizer %s: %v\n%s", o, err, errOut)
			}
			s := summary(t, out)
			if math.IsNaN(s.EvalLoss) || s.EvalLoss >= math.Log(10) {
				t.Errorf("-optimizer %s: eval loss %v, want finite and below ln 10", o, s.EvalLoss)
			}
		})
	}
}
