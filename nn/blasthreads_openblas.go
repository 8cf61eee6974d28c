//go:build cgo && !noblas

package nn

// #cgo LDFLAGS: -lopenblas
// void openblas_set_num_threads(int);
// int openblas_get_num_threads(void);
import "C"

// SetBLASThreads sets the number of threads OpenBLAS uses in this process
// (for every rank in it: ranks as goroutines share one OpenBLAS). Call it
// before heavy BLAS use, from the process that does it (each worker, not
// a launcher). It returns the count in effect afterwards; n < 1 changes
// nothing.
func SetBLASThreads(n int) int {
	if n >= 1 {
		C.openblas_set_num_threads(C.int(n))
	}
	return BLASThreads()
}

// BLASThreads is the number of threads OpenBLAS uses in this process.
func BLASThreads() int { return int(C.openblas_get_num_threads()) }
