package flat

import "sync"

var buildMu sync.Mutex

// Build runs fn holding the process-wide graph-building lock. gorgonia's
// graph construction and differentiation touch unsynchronised global state
// (package-level constant nodes that cache their hash on first use, and a
// plain counter behind Conv2d, MaxPool2D and Rectify), so goroutines that
// build graphs at the same time (ranks as goroutines, the inproc backend)
// must build them one at a time: every node constructor, ApplyOp, Grad,
// and NewTapeMachine for good measure. Running machines (RunAll, Reset,
// Close) needs no lock, concurrently with building too, as long as each
// machine and graph is used by one goroutine. nn models (nn.New, NewGraph) take
// this lock themselves: do not build them inside fn (the lock is not
// reentrant).
func Build(fn func() error) error {
	buildMu.Lock()
	defer buildMu.Unlock()
	return fn()
}
