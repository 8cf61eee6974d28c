//go:build !cgo || noblas

package nn

// SetBLASThreads does nothing without OpenBLAS (the pure-Go BLAS has no
// thread setting) and returns 0.
func SetBLASThreads(n int) int { return 0 }

// BLASThreads is 0 without OpenBLAS: the pure-Go BLAS has no thread count.
func BLASThreads() int { return 0 }
