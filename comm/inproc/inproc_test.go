package inproc_test

import (
	"testing"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/inproc"
)

func world(t testing.TB, n int) []comm.Comm {
	cs, err := inproc.New(n, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return cs
}

func TestConformance(t *testing.T) {
	commtest.Suite(t, world, commtest.Config{})
}
