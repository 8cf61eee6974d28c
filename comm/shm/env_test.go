//go:build linux

package shm

import (
	"testing"
	"time"

	"github.com/gdist/gdist/comm"
)

// The waits come from $GDIST_SHM_SPIN_US (and its siblings) as documented
// where Options leaves them zero; an explicit value wins.
func TestEnvWaits(t *testing.T) {
	cfg := comm.Config{Size: 1}
	for v, want := range map[string]time.Duration{"": 50 * time.Microsecond, "7": 7 * time.Microsecond, "0": 0, "-1": 50 * time.Microsecond, "x": 50 * time.Microsecond} {
		t.Setenv("GDIST_SHM_SPIN_US", v)
		o, err := Options{}.withDefaults(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if o.SpinFor != want {
			t.Errorf("%q: %v, want %v", v, o.SpinFor, want)
		}
		if o.PollFor != 20*time.Microsecond || o.ActiveFor != time.Millisecond {
			t.Errorf("%q: poll %v, active %v: want the defaults", v, o.PollFor, o.ActiveFor)
		}
	}
	t.Setenv("GDIST_SHM_SPIN_US", "7")
	for in, want := range map[time.Duration]time.Duration{3 * time.Microsecond: 3 * time.Microsecond, -1: 0} {
		if o, _ := (Options{SpinFor: in}).withDefaults(cfg); o.SpinFor != want {
			t.Errorf("Options.SpinFor %v: %v, want %v", in, o.SpinFor, want)
		}
	}
}

// The sizes come from the environment where Options leaves them zero;
// GDIST_SHM_AREA_BYTES=0 means no area, a size that is not an integer is
// an error.
func TestEnvSizes(t *testing.T) {
	cfg := comm.Config{Size: 1}
	t.Setenv("GDIST_SHM_DIR", "/tmp/x")
	t.Setenv("GDIST_SHM_RING_BYTES", "131072")
	t.Setenv("GDIST_SHM_AREA_BYTES", "0")
	o, err := Options{}.withDefaults(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if o.Dir != "/tmp/x" || o.RingBytes != 131072 || o.AreaBytes != 0 || o.FrameBytes != DefaultFrameBytes {
		t.Errorf("got Dir %q, RingBytes %d, AreaBytes %d, FrameBytes %d", o.Dir, o.RingBytes, o.AreaBytes, o.FrameBytes)
	}
	if o, _ := (Options{Dir: "/d", RingBytes: 1 << 20}).withDefaults(cfg); o.Dir != "/d" || o.RingBytes != 1<<20 {
		t.Errorf("explicit options lost: Dir %q, RingBytes %d", o.Dir, o.RingBytes)
	}
	t.Setenv("GDIST_SHM_FRAME_BYTES", "big")
	if _, err := (Options{}).withDefaults(cfg); err == nil {
		t.Error("GDIST_SHM_FRAME_BYTES=big accepted")
	}
}
