package tcp

import (
	"testing"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/commtest"
	"github.com/gdist/gdist/comm/rendezvous"
)

// tcpWorld builds n Comms through the registered "tcp" backend.
var tcpWorld = commtest.RegistryWorld("tcp", commtest.OneStore(func() comm.Store { return rendezvous.NewMemStore() }),
	comm.Config{Token: token, Logf: func(string, ...any) {}})

func TestConformance(t *testing.T) {
	// World sizes up to 4 (every rank is a full mesh of sockets in this
	// one process); in -short mode (the -race run) fewer, and the suite
	// shrinks its large count.
	cfg := commtest.Config{Sizes: []int{1, 2, 3, 4}}
	if testing.Short() {
		cfg.Sizes = []int{1, 3}
	}
	commtest.Suite(t, tcpWorld, cfg)
}
