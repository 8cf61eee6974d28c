// Package hugepage allocates large buffers backed by transparent huge
// pages where the kernel gives them only on request (THP in "madvise"
// mode, a common default, and Go's runtime has not asked for them since
// Go 1.21.1). The first touch of memory costs a page fault per page; on
// virtual machines a 4 KiB fault can cost about 10 us (measured here: the
// first copy into a fresh 147 MB buffer took 0.4-1.7 s, into one advised
// for 2 MiB pages 18-28 ms, against 8 ms into memory already touched).
// Datasets, flat parameter and gradient buffers, optimizer state and
// checkpoint snapshots are such buffers.
package hugepage

// MinBytes is the size from which Float32s asks for huge pages: smaller
// buffers do not span a whole aligned 2 MiB page worth advising.
const MinBytes = 4 << 20

// Float32s returns a zeroed slice of n float32s; from MinBytes up, its
// memory is advised for transparent huge pages before anything touches it
// (Linux; elsewhere, and where the kernel refuses, a plain slice).
func Float32s(n int) []float32 {
	b := make([]float32, n)
	if n*4 >= MinBytes {
		advise(b)
	}
	return b
}
