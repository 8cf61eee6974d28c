//go:build !linux

package main

import "fmt"

func bindToCPU(rank int) (int, error) {
	return -1, fmt.Errorf("-bind needs Linux (sched_setaffinity)")
}

func fitGOMAXPROCS() {}
