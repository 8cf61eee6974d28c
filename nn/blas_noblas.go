//go:build !cgo || noblas

package nn

// BLAS names the matrix-multiply implementation in use.
const BLAS = "gonum (pure Go)"
