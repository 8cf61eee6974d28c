package cudafake_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gdist/gdist/gpu/cudafake"
)

// fatalTB stops a helper at its Fatalf, keeping the message.
type fatalTB struct {
	testing.TB
	msg string
}

type stopped struct{}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(stopped{})
}

// A delay the fake cannot give (it counts whole milliseconds) fails the
// test rather than silently giving none, which would let a missing
// cross-stream wait pass.
func TestDelayUnderAMillisecond(t *testing.T) {
	cudafake.RequireFake(t)
	for _, set := range []struct {
		name string
		f    func(testing.TB, time.Duration)
	}{
		{"KernelDelay", cudafake.KernelDelay},
		{"NCCLDelay", cudafake.NCCLDelay},
		{"StreamDelay", func(tb testing.TB, d time.Duration) { cudafake.StreamDelay(tb, nil, d) }},
	} {
		for _, d := range []time.Duration{500 * time.Microsecond, -time.Millisecond} {
			tb := &fatalTB{TB: t}
			func() {
				defer func() {
					if r := recover(); r != nil && r != (stopped{}) {
						panic(r)
					}
				}()
				set.f(tb, d)
			}()
			if !strings.Contains(tb.msg, set.name) || !strings.Contains(tb.msg, "1ms or more") {
				t.Errorf("%s(%v): %q, want it refused", set.name, d, tb.msg)
			}
		}
	}
}
