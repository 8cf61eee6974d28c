package dp

import (
	"flag"
	"testing"
)

// TestNoOverlapDefault: DDP overlaps communication with backward unless
// the ranks fill the host's cores; -no-overlap either way wins.
func TestNoOverlapDefault(t *testing.T) {
	for _, c := range []struct {
		name         string
		flags        []string
		local, cores int
		want         bool
	}{
		{"2 ranks on 2 cores", nil, 2, 2, true},
		{"4 ranks on 2 cores", nil, 4, 2, true},
		{"1 rank on 2 cores", nil, 1, 2, false},
		{"2 ranks on 16 cores", nil, 2, 16, false},
		{"1 rank on 1 core", nil, 1, 1, true},
		{"unknown ranks", nil, 0, 2, false},
		{"-no-overlap=false", []string{"-no-overlap=false"}, 2, 2, false},
		{"-no-overlap", []string{"-no-overlap"}, 1, 16, true},
	} {
		o := NewDDPOptions()
		fs := flag.NewFlagSet("", flag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(c.flags); err != nil {
			t.Fatal(err)
		}
		if got := o.noOverlap(c.local, c.cores); got != c.want {
			t.Errorf("%s: noOverlap = %v, want %v", c.name, got, c.want)
		}
	}
}
