package nn

import "sync"

var blasOnce sync.Once

// UseBLAS installs this build's matrix multiply (BLAS, named by the
// constant BLAS: OpenBLAS by default, gonum's pure Go with -tags noblas or
// without cgo) process-wide, for gorgonia's ops and gonum's blas32, once;
// later calls do nothing. Importing nn changes nothing: nn calls UseBLAS
// itself before it builds its first graph (NewGraph, NewStage), so every
// graph of a Model, and any gorgonia op inside one, multiplies with it. A
// program that multiplies with gorgonia or blas32 before it builds an nn
// graph, and wants the same implementation there, calls UseBLAS first.
// It is safe for concurrent use.
func UseBLAS() { blasOnce.Do(installBLAS) }
