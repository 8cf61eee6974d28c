//go:build !cgo || noblas

package models

// BLAS names the matrix-multiply implementation in use.
const BLAS = "gonum (pure Go)"
