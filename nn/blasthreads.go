package nn

import (
	"strconv"
	"strings"
)

// BLASThreadEnv lists the environment variables that set OpenBLAS's
// thread count, in OpenBLAS's own order of precedence.
var BLASThreadEnv = []string{"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"}

// ChooseBLASThreads picks the number of BLAS threads for one rank of a job
// that runs localWorld ranks on a host with cores cores. It is a pure
// function of its inputs:
//
//   - flag > 0 (cmd/train's -blas-threads) wins;
//   - else the first of BLASThreadEnv that getenv returns as a positive
//     integer: the user's choice, which OpenBLAS has already applied;
//   - else max(1, cores/localWorld), so that the ranks of one host do not
//     start more BLAS threads than there are cores (OpenBLAS alone starts
//     one per core in every process: 2 ranks on 2 cores would run 4).
//
// from names where the number came from: "-blas-threads", the
// variable's name, or "default". getenv may be nil (no environment);
// cores and localWorld below 1 count as 1.
func ChooseBLASThreads(cores, localWorld, flag int, getenv func(string) string) (n int, from string) {
	if flag > 0 {
		return flag, "-blas-threads"
	}
	if getenv != nil {
		for _, k := range BLASThreadEnv {
			if v, err := strconv.Atoi(strings.TrimSpace(getenv(k))); err == nil && v > 0 {
				return v, k
			}
		}
	}
	return max(1, max(cores, 1)/max(localWorld, 1)), "default"
}
