//go:build !unix

package main

import "time"

// cpuTime is not measured here: rows report no CPU time.
func cpuTime() time.Duration { return 0 }
