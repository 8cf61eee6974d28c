//go:build !cgo || noblas

package nn

// BLAS names the matrix-multiply implementation in use.
const BLAS = "gonum (pure Go)"

// installBLAS is UseBLAS's: gonum's pure-Go BLAS, the default of gorgonia
// and blas32, is already in place.
func installBLAS() {}
