package algo_test

import (
	"fmt"
	"time"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/algo"
	"github.com/gdist/gdist/comm/inproc"
)

// A wrapper that waits for something of its own on an operation's behalf
// (comm/staging waits for a CUDA event before copying) bounds that wait
// as the wrapped Comm bounds the operation: OpTimeout, from its Options
// (comm.DefaultTimeout when they say nothing, 0 for none).
func ExampleComm_OpTimeout() {
	for _, o := range []comm.Options{{}, {Timeout: 5 * time.Second}, {Timeout: -1}} {
		comms, err := inproc.New(1, o)
		if err != nil {
			panic(err)
		}
		c := comms[0].(*algo.Comm) // the host backends' Comms are algo's
		fmt.Println(c.OpTimeout())
		comms[0].Close()
	}
	// Output:
	// 30m0s
	// 5s
	// 0s
}
