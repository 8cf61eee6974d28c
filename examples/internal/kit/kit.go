// Package kit holds what the examples' tests share (the examples start
// their ranks with the public launch.Ranks): comparing a distributed
// run's final parameters with a one-process run's, and running a test
// binary as the example itself (so the launcher's children,
// re-executions of the binary, are the example).
package kit

import (
	"encoding/binary"
	"math"
	"os"
	"strings"
	"testing"
)

// MainIf runs main and exits when the environment variable env is "1",
// with the test flags removed from os.Args. Call it first in TestMain.
func MainIf(env string, main func()) {
	if os.Getenv(env) != "1" {
		return
	}
	var args []string
	for _, a := range os.Args[1:] {
		if !strings.HasPrefix(a, "-test.") {
			args = append(args, a)
		}
	}
	os.Args = append([]string{os.Args[0]}, args...)
	main()
	os.Exit(0)
}

// Write stores params as little-endian float32.
func Write(path string, params []float32) error {
	b := make([]byte, 4*len(params))
	for i, v := range params {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return os.WriteFile(path, b, 0o644)
}

// Read loads what Write stored.
func Read(t testing.TB, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]float32, len(b)/4)
	for i := range p {
		p[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return p
}

// Same fails t unless got equals want within tol relative, element by
// element, tensor by tensor (sizes: the tensors' lengths, in order).
// Elements much smaller than their tensor's RMS are compared at the RMS:
// float32 rounding of the sums is relative to the tensor's scale, not to
// an element that happens to cross zero. It also fails if want is within
// 1e-2 of init everywhere: a run that did not train would pass anything.
func Same(t testing.TB, name string, got, want, init []float32, sizes []int, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d parameters, want %d", name, len(got), len(want))
	}
	off := 0
	for _, n := range sizes {
		var rms float64
		for _, v := range want[off : off+n] {
			rms += float64(v) * float64(v)
		}
		rms = math.Sqrt(rms / float64(n))
		for i := off; i < off+n; i++ {
			d := math.Abs(float64(got[i]) - float64(want[i]))
			if d > tol*math.Max(math.Abs(float64(want[i])), rms) {
				t.Fatalf("%s: parameter %d is %v, the one-process run has %v", name, i, got[i], want[i])
			}
		}
		off += n
	}
	if off != len(want) {
		t.Fatalf("%s: tensor sizes cover %d of %d parameters", name, off, len(want))
	}
	moved := 0.0
	for i, v := range init {
		moved = math.Max(moved, math.Abs(float64(v-want[i])))
	}
	if moved < 1e-2 {
		t.Fatalf("%s: the reference barely trained (max change %v)", name, moved)
	}
}
