//go:build cgo && !noblas

package nn

// The default build multiplies matrices with OpenBLAS through gonum's netlib
// bindings (about 15x faster than gonum's pure-Go BLAS on this project's
// machines). It needs the OpenBLAS development files at build time (Debian:
// apt-get install libopenblas-dev). Build with -tags noblas (or
// CGO_ENABLED=0) for the pure-Go fallback. Nothing is installed at import:
// UseBLAS does it, at the first graph build.

// #cgo LDFLAGS: -lopenblas
import "C"

import (
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/netlib/blas/netlib"
	G "gorgonia.org/gorgonia"
)

// BLAS names the matrix-multiply implementation in use.
const BLAS = "openblas"

// installBLAS is UseBLAS's: OpenBLAS for gorgonia and for blas32.
func installBLAS() { G.Use(netlib.Implementation{}); blas32.Use(netlib.Implementation{}) }
